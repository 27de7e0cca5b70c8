/* tiling_attention.c — attn.attention as a tile.launch: a program per query
 * tile, its key loops over segments the mask bounds, and the short-row
 * variant (the tiling pass: tiling.c). */
#include "passes/tiling.h"

#include <math.h>
#include <string.h>

typedef struct AttnTile {
    Builder *b;
    const Op *att;
    Value *Q, *K, *V, *bi, *h, *kh, *r0, *q, *i_rows;
    Map memrefs;
    ScalarKind acc, dt;
    int64_t BM, BN, D, DV;
    double scale;
    Value *nk;
    /* a paged cache (attn.pages): the block table's memref, the page size
     * (at least BN: a key tile never crosses a page) */
    Value *table;
    int64_t page_size;
    /* packed sequences (attn.pad): this program's rows of q start at
     * q_start, its keys at k_start, of [T, H, D] tensors */
    Value *q_start, *k_start;
} AttnTile;

/* The attn.pages k (or v) of att is read through, or NULL: a paged cache. */
static const Op *paged(const Op *att, int operand) {
    const Value *x = att->operands[operand];
    return x->def && x->def->kind == OP_PAGES ? x->def : NULL;
}

const Op *padded(const Op *att, int operand) {
    const Value *x = att->operands[operand];
    return x->def && x->def->kind == OP_PAD ? x->def : NULL;
}

Value *read_index(Builder *b, Value *mem, int n, Value **idx) {
    Value **ops = NEW_ARRAY(b->a, Value *, n + 1);
    ops[0] = mem;
    memcpy(ops + 1, idx, sizeof(Value *) * (size_t)n);
    return b_cast(b, b_emit(b, OP_GATHER, type_scalar(b->a, SK_I32), n + 1, ops), SK_INDEX);
}

/* The key tile at j0 of K or V (mem): [BN, cols] of kv head kh, from its
 * rows of a paged cache [pages, page_size, Hkv, D] (page table[b, j0 //
 * page_size], from row j0 % page_size) or of [B, Hkv, Nk, D]. */
static Value *key_tile(AttnTile *t, Builder *b, Value *mem, Value *j0, int64_t cols) {
    Value *zero = b_index(b, 0);
    Type *ty = b_tile_type(b, t->dt, t->BN, cols);
    if (t->k_start) {   /* rows k_start + j0 of [Tk, Hkv, D] */
        const int rows_cols[2] = {0, 2};
        return t_load(b, mem, (Value *[]){b_bin(b, OP_ADD, t->k_start, j0), t->kh, zero}, rows_cols, ty, 0);
    }
    if (!t->table) {
        const int rows_cols[2] = {2, 3};
        return t_load(b, mem, (Value *[]){t->bi, t->kh, j0, zero}, rows_cols, ty, 0);
    }
    Value *ps = b_index(b, t->page_size);
    Value *at[2] = {t->bi, b_bin(b, OP_FLOORDIV, j0, ps)};
    Value *page = read_index(b, t->table, 2, at);
    if (tiling_pages_in_order)   /* the broken twin */
        page = b_bin(b, OP_ADD, b_bin(b, OP_MUL, t->bi, b_dim(b, t->table->type->dims[1])), at[1]);
    const int page_rows_cols[2] = {1, 3};
    return t_load(b, mem, (Value *[]){page, b_bin(b, OP_REM, j0, ps), t->kh, zero}, page_rows_cols, ty, 0);
}

/* The scores of key tile j0, as the unfused program computes them; with
 * `masked`, keys past Nk and keys the mask hides are -inf (an interior tile,
 * entirely inside the mask's band and Nk, needs neither). */
static Value *scores(AttnTile *t, Builder *b, Value *j0, bool masked) {
    Value *kt = key_tile(t, b, t->K, j0, t->D);
    Value *ktt = b_emit(b, OP_TRANS, b_tile_type(b, t->dt, t->D, t->BN), 1, &kt);
    Value *ops[3] = {t->q, ktt, b_splat(b, b_float(b, t->acc, 0), t->BM, t->BN)};
    Value *s = b_emit(b, OP_DOT, b_tile_type(b, t->acc, t->BM, t->BN), 3, ops);
    s = b_bin(b, OP_MUL, s, b_float(b, t->acc, t->scale));
    Value *j = b_bin(b, OP_ADD, b_iota(b, 1, 1, t->BN), j0);
    if (t->att->regions[0].nblocks) {
        Value *args[5] = {b_cast(b, s, SK_F32), t->bi, t->h, t->i_rows, j};
        Value *x = vectorise(b, t->att->regions[0].blocks[0], args, &t->memrefs);
        x = b_bin(b, OP_ADD, x, b_splat(b, b_float(b, SK_F32, 0), t->BM, t->BN));   /* full shape */
        s = b_cast(b, x, t->acc);
    }
    if (!masked)
        return s;
    Value *valid = b_cmp(b, "lt", j, t->nk);
    if (t->att->regions[1].nblocks) {
        Value *args[4] = {t->bi, t->h, t->i_rows, j};
        valid = b_bin(b, OP_AND, valid, vectorise(b, t->att->regions[1].blocks[0], args, &t->memrefs));
    }
    return b_select(b, valid, s, b_float(b, t->acc, -INFINITY));
}

void add_side_tensor(Arena *a, PtrVec *side, Value *x) {
    for (int i = 0; i < side->len; i++)
        if (side->items[i] == x)
            return;
    vec_push(a, side, x);
}

/* Func-level tensors the hooks read: they become launch inputs. */
void collect_side_tensors(const Op *att, Arena *a, PtrVec *out) {
    for (int r = 0; r < att->nregions; r++)
        for (int bi = 0; bi < att->regions[r].nblocks; bi++)
            for_each_op(op, att->regions[r].blocks[bi])
                if (op->kind == OP_EXTRACT)
                    add_side_tensor(a, out, op->operands[0]);
}

/* Whether v (in a hook's region) is computed from the region's argument x. */
static bool uses_arg(const Value *v, const Value *x) {
    if (v == x)
        return true;
    for (int i = 0; v->def && i < v->def->noperands; i++)
        if (uses_arg(v->def->operands[i], x))
            return true;
    return false;
}

/* Whether a hook (mask, score) reads a tensor at an index computed from the
 * key j, its region's last argument: per key, as doc[b, j] or bias[h, i, j]. */
static bool gathers_per_key(const Op *att) {
    for (int r = 0; r < att->nregions; r++)
        for (int bi = 0; bi < att->regions[r].nblocks; bi++) {
            const Block *blk = att->regions[r].blocks[bi];
            for_each_op(op, blk)
                for (int i = 1; op->kind == OP_EXTRACT && blk->nargs && i < op->noperands; i++)
                    if (uses_arg(op->operands[i], blk->args[blk->nargs - 1]))
                        return true;
        }
    return false;
}

/* The value of a band bound (mask-analysis) at row `i`: c + k·i + Σ dims. */
Value *band_at(Builder *b, const Attr *bound, Value *i) {
    Value *v = b_bin(b, OP_MUL, i, b_index(b, attrs_get(bound->entries, bound->n, "i")->i));
    v = b_bin(b, OP_ADD, v, b_index(b, attrs_get(bound->entries, bound->n, "c")->i));
    const Attr *dims = attrs_get(bound->entries, bound->n, "dims");
    for (int d = 0; d < dims->n; d++)
        v = b_bin(b, OP_ADD, v, b_bin(b, OP_MUL, b_dim(b, (Dim){dims->entries[d].name, 0}),
                                  b_index(b, dims->entries[d].value->i)));
    return v;
}


static int key_segments_rows(Builder *b, const Op *att, int mask_region, Value *r0, Value *last, int64_t BN,
                             Value *nk, Segment *seg);

int key_segments(Builder *b, const Op *att, int mask_region, Value *r0, int64_t BM, int64_t BN, Value *nk,
                        Segment *seg) {
    return key_segments_rows(b, att, mask_region, r0, b_bin(b, OP_ADD, r0, b_index(b, BM - 1)), BN, nk, seg);
}

/* key_segments of the query rows r0 to last. */
static int key_segments_rows(Builder *b, const Op *att, int mask_region, Value *r0, Value *last, int64_t BN,
                             Value *nk, Segment *seg) {
    Attr *band = op_attr(att, "band");
    Attr *lo = band ? attrs_get(band->entries, band->n, "lo") : NULL;
    Attr *hi = band ? attrs_get(band->entries, band->n, "hi") : NULL;
    Value *bn = b_index(b, BN);
    Value *start = b_index(b, 0), *end = nk;
    /* the widest range any row sees, and the range every row sees */
    Value *all_lo = start, *all_hi = nk;
    if (hi) {
        bool up = attrs_get(hi->entries, hi->n, "i")->i >= 0;
        end = b_bin(b, OP_MIN, nk, b_bin(b, OP_ADD, band_at(b, hi, up ? last : r0), b_index(b, 1)));
        all_hi = b_bin(b, OP_MIN, nk, b_bin(b, OP_ADD, band_at(b, hi, up ? r0 : last), b_index(b, 1)));
    }
    if (lo) {
        bool up = attrs_get(lo->entries, lo->n, "i")->i >= 0;
        start = b_bin(b, OP_MUL, b_bin(b, OP_FLOORDIV, b_bin(b, OP_MAX, start, band_at(b, lo, up ? r0 : last)), bn), bn);
        all_lo = b_bin(b, OP_MAX, start, band_at(b, lo, up ? last : r0));
    }
    Attr *exact = band ? attrs_get(band->entries, band->n, "exact") : NULL;
    /* without a mask only Nk bounds the keys: every tile but the last is
     * whole and needs no masking */
    bool unmasked = att->regions[mask_region].nblocks == 0;
    if (!unmasked && (!exact || !exact->i)) {
        seg[0] = (Segment){start, end, true};
        return 1;
    }
    /* interior: whole tiles in [all_lo, all_hi), clamped into [start, end] */
    Value *in_lo = b_bin(b, OP_MIN, b_bin(b, OP_MUL, b_ceildiv(b, all_lo, BN), bn), end);
    in_lo = b_bin(b, OP_MAX, in_lo, start);
    Value *in_hi = b_bin(b, OP_MUL, b_bin(b, OP_FLOORDIV, all_hi, bn), bn);
    in_hi = b_bin(b, OP_MIN, b_bin(b, OP_MAX, in_hi, in_lo), end);
    int n = 0;
    if (lo)   /* with no lower bound every row sees key 0: no leading edge */
        seg[n++] = (Segment){start, in_lo, true};
    seg[n++] = (Segment){in_lo, in_hi, false};
    seg[n++] = (Segment){in_hi, end, true};
    return n;
}

/* A launch that splits the keys: the split count's dim and, where the
 * group's query heads share the query tile (GQA packing: one query row,
 * the decode step, or a few rows a head: speculative decoding), the group
 * G (0: not packed). */
typedef struct KeySplit {
    const char *dim;
    int64_t group;
    bool rows;   /* packed with Nq >= 2 query rows a head (G·Nq at most the tile's rows), not one */
} KeySplit;

/* lse = m + log(l) of rows with max m and sum l, in f32 (-inf where no
 * key was seen: m = -inf, l = 0). */
static Value *row_lse(Builder *b, Value *m, Value *l) {
    return b_bin(b, OP_ADD, b_cast(b, m, SK_F32), b_unary(b, OP_LOG, b_cast(b, l, SK_F32)));
}

/* The partial results of a split over keys: O (f32, each split's rows
 * normalised by its own sum) [S, B, H, Nq, DV] and lse [S, B, H, Nq];
 * packed, a kv head's G query heads are the rows: [S, B, Hkv, G, DV] and
 * [S, B, Hkv, G]. */
static void split_types(Arena *a, const Op *att, const KeySplit *split, Type **types) {
    const Type *o = att->results[0]->type, *kt = att->operands[1]->type;
    Dim d[5] = {{split->dim, 0}, o->dims[0], o->dims[1], o->dims[2], o->dims[3]};
    if (split->group && !split->rows)
        d[2] = kt->dims[1], d[3] = (Dim){NULL, split->group};
    types[0] = type_shaped(a, TY_TENSOR, SK_F32, 5, d);
    types[1] = type_shaped(a, TY_TENSOR, SK_F32, 4, d);
}

/* Packed rows of a few query rows a head: head g of the group, kh·G + g,
 * and the query row its first tile row holds, r0 − g·Nq (its rows shifted
 * into place for Q's box, back for O's and lse's). */
static void packed_head(Builder *b, const AttnTile *t, int64_t G, int64_t g, Value *nq, Value **head,
                        Value **shift) {
    *head = b_bin(b, OP_ADD, b_bin(b, OP_MUL, t->kh, b_index(b, G)), b_index(b, g));
    *shift = b_bin(b, OP_SUB, t->r0, b_bin(b, OP_MUL, nq, b_index(b, g)));
}

/* The launch of attention op `att` in BM x BN tiles (its grid computed in
 * `outer`): a program per BM query rows of one (batch, head). With
 * `split`, a program per BM rows and split z of the S (split->dim) over
 * its share of the key tiles its rows see, writing split_types' partial O
 * and lse; packed (split->group G), a program per (batch, kv head) and
 * split whose rows are the group's G query heads at query row 0 (Nq = 1):
 * K and V are read once for the group, not once a head; with
 * split->rows, its rows are the G heads' Nq query rows each, head g's at
 * packed rows [g·Nq, (g + 1)·Nq), ceil(G·Nq / BM) programs a kv head. */
/* Packed sequences (attn.pad): a program per tile of every sequence,
 * program p the p-th in sequence order (FlashAttention-3's varlen scheduler
 * counts alike). Its sequence and tile come from a scan of the offsets, B
 * entries; past the last tile, sequence B: no rows, no keys (the offsets
 * past the end read 0). */
Value *sequence_of_tile(Builder *b, Value *p, Value *cu, Value *B, int64_t rows, Value **r0) {
    Value *zero = b_index(b, 0), *one = b_index(b, 1);
    Value *init[3] = {B, zero, zero}, *s, **c;   /* sequence, its tile, tiles before s */
    Builder body;
    Op *scan = new_for(b, zero, B, one, 3, init, &body, &s, &c);
    Value *len = b_bin(&body, OP_MAX, b_bin(&body, OP_SUB, read_index(&body, cu, 1, (Value *[]){b_bin(&body, OP_ADD, s, one)}),
                                              read_index(&body, cu, 1, &s)), zero);
    Value *upto = b_bin(&body, OP_ADD, c[2], b_ceildiv(&body, len, rows));
    Value *hit = b_bin(&body, OP_AND, b_cmp(&body, "le", c[2], p), b_cmp(&body, "lt", p, upto));
    Value *next[3] = {b_select(&body, hit, s, c[0]), b_select(&body, hit, b_bin(&body, OP_SUB, p, c[2]), c[1]), upto};
    t_yield(&body, 3, next);
    *r0 = b_bin(b, OP_MUL, scan->results[1], b_index(b, rows));
    return scan->results[0];
}

QueryTile sequence_query_tile(Builder *b, Value *p, Value *cu_q, Value *cu_k, Value *B, int64_t rows) {
    Value *zero = b_index(b, 0), *one = b_index(b, 1);
    QueryTile t;
    t.seq = sequence_of_tile(b, p, cu_q, B, rows, &t.r0);
    Value *after = b_bin(b, OP_ADD, t.seq, one);
    t.q_start = read_index(b, cu_q, 1, &t.seq);
    t.k_start = read_index(b, cu_k, 1, &t.seq);
    t.nk = b_bin(b, OP_MAX, b_bin(b, OP_SUB, read_index(b, cu_k, 1, &after), t.k_start), zero);
    t.q_end = b_bin(b, OP_MAX, read_index(b, cu_q, 1, &after), t.q_start);
    return t;
}

/* The forward's query tile p: sets t's batch, rows and starts and its key
 * count; returns the end of its sequence's rows in q (stores stop there). */
static Value *sequence_tile(AttnTile *t, Builder *b, Value *p, Value *cu_q, Value *cu_k, Value *B) {
    QueryTile qt = sequence_query_tile(b, p, cu_q, cu_k, B, t->BM);
    t->bi = qt.seq, t->r0 = qt.r0, t->q_start = qt.q_start, t->k_start = qt.k_start, t->nk = qt.nk;
    return qt.q_end;
}

/* The attn.unpad of v in func (packed sequences' outputs), or NULL. */
static Op *unpad_of(Op *func, const Value *v) {
    for_each_op(op, op_body(func))
        if (op->kind == OP_UNPAD && op->operands[0] == v)
            return op;
    return NULL;
}

static Op *attention_launch(PassContext *ctx, Op *func, Op *att, int64_t BM, int64_t BN, Builder *outer,
                            const PtrVec *side, const KeySplit *split) {
    const char *splits = split ? split->dim : NULL;
    int64_t G = split ? split->group : 0;
    const Type *qt = att->operands[0]->type, *kt = att->operands[1]->type, *vt = att->operands[2]->type;
    AttnTile t = {0};
    t.BM = BM;
    t.BN = BN;
    t.acc = op_attr(att, "acc")->type->elem;
    t.dt = qt->elem;
    t.scale = op_attr(att, "scale")->f;
    t.att = att;
    t.D = qt->dims[3].size;
    t.DV = vt->dims[3].size;
    int nin = 3 + side->len;
    Value **inputs = NEW_ARRAY(ctx->arena, Value *, nin);
    memcpy(inputs, att->operands, sizeof(Value *) * 3);
    const Op *pk = paged(att, 1), *pv = paged(att, 2), *sq = padded(att, 0);
    if (sq)   /* the packed tensors themselves (tile_attention added the offsets to the side tensors) */
        for (int i = 0; i < 3; i++)
            inputs[i] = padded(att, i)->operands[0];
    if (pk) {   /* the caches themselves, not their [B, Hkv, Nk, D] views (tile_attention added the table
                   and lengths to the side tensors) */
        inputs[1] = pk->operands[0];
        inputs[2] = pv->operands[0];
        t.page_size = op_attr(pk, "page_size")->i;
    }
    for (int i = 0; i < side->len; i++)
        inputs[3 + i] = side->items[i];
    Value *nq = b_dim(outer, qt->dims[2]);
    Value *grid[3] = {tiling_rows_round_down ? b_bin(outer, OP_FLOORDIV, nq, b_index(outer, t.BM)) : b_ceildiv(outer, nq, t.BM),
                      b_bin(outer, OP_MUL, b_dim(outer, qt->dims[0]), b_dim(outer, qt->dims[1])),
                      splits ? b_dim(outer, (Dim){splits, 0}) : b_index(outer, 1)};
    if (G) {   /* programs of G rows (or G·Nq: ceil(G·Nq / BM)) per (batch, kv head) */
        grid[0] = split->rows ? b_ceildiv(outer, b_bin(outer, OP_MUL, nq, b_index(outer, G)), t.BM) : b_index(outer, 1);
        grid[1] = b_bin(outer, OP_MUL, b_dim(outer, qt->dims[0]), b_dim(outer, kt->dims[1]));
    }
    if (sq) {   /* every sequence's query tiles: at most ceil(Tq / BM) + B (sequence_tile) */
        grid[0] = b_bin(outer, OP_ADD, b_ceildiv(outer, b_dim(outer, inputs[0]->type->dims[0]), t.BM),
                        b_dim(outer, qt->dims[0]));
        grid[1] = b_dim(outer, qt->dims[1]);
    }
    Value **args;
    Op *l;
    if (sq) {   /* the results packed, as attn.unpad makes them */
        Type **types = NEW_ARRAY(ctx->arena, Type *, att->nresults);
        const char **names = NEW_ARRAY(ctx->arena, const char *, att->nresults);
        for (int i = 0; i < att->nresults; i++) {
            Op *u = unpad_of(func, att->results[i]);
            types[i] = u->results[0]->type;
            names[i] = u->results[0]->name;
        }
        l = make_launch(outer, att->loc, grid, nin, inputs, att->nresults, types, names, &args);
    } else if (splits) {
        Type *types[2];
        split_types(ctx->arena, att, split, types);
        l = make_launch(outer, att->loc, grid, nin, inputs, 2, types, (const char *[]){"o_split", "lse_split"}, &args);
    } else {
        l = new_launch(outer, att, grid, nin, inputs, &args);
    }
    schedule_on_launch(ctx, func, l);
    Builder b = {ctx->arena, l->regions[0].blocks[0], NULL, att->loc};
    t.b = &b;
    t.Q = args[3], t.K = args[4], t.V = args[5];
    map_init(&t.memrefs, false);
    for (int i = 0; i < side->len; i++)
        map_put(ctx->arena, &t.memrefs, side->items[i], args[6 + i]);
    /* which (batch, head, kv head) and rows this program owns */
    Value *H = b_dim(&b, qt->dims[1]), *HK = b_dim(&b, kt->dims[1]);
    Value *nq_in = G && split->rows ? b_dim(&b, qt->dims[2]) : NULL;
    Value *group_rows = NULL;   /* split->rows: each row's head in the group */
    if (G) {   /* a program of (batch, kv head) */
        t.bi = b_bin(&b, OP_FLOORDIV, args[1], HK);
        t.kh = b_bin(&b, OP_REM, args[1], HK);
        if (split->rows) {   /* packed row R = r0 + r: head kh·G + R / Nq, query row R mod Nq; rows past G·Nq
                                are never stored */
            t.r0 = b_bin(&b, OP_MUL, args[0], b_index(&b, t.BM));
            Value *r = b_bin(&b, OP_ADD, b_iota(&b, 0, t.BM, 1), t.r0);
            group_rows = b_bin(&b, OP_FLOORDIV, r, nq_in);
            t.h = b_bin(&b, OP_ADD, group_rows, b_bin(&b, OP_MUL, t.kh, b_index(&b, G)));
            t.i_rows = b_bin(&b, OP_SUB, r, b_bin(&b, OP_MUL, group_rows, nq_in));
        } else {   /* rows: the heads kh·G + r at query row 0; rows past G (other groups' heads) are never stored */
            t.h = b_bin(&b, OP_ADD, b_iota(&b, 0, t.BM, 1), b_bin(&b, OP_MUL, t.kh, b_index(&b, G)));
            t.r0 = b_index(&b, 0);
            t.i_rows = b_splat(&b, t.r0, t.BM, 1);
        }
    } else if (sq) {   /* a program of (tile of a sequence, head) */
        t.h = args[1];
        t.kh = b_bin(&b, OP_FLOORDIV, t.h, b_bin(&b, OP_FLOORDIV, H, HK));
    } else {
        t.bi = b_bin(&b, OP_FLOORDIV, args[1], H);
        t.h = b_bin(&b, OP_REM, args[1], H);
        t.kh = b_bin(&b, OP_FLOORDIV, t.h, b_bin(&b, OP_FLOORDIV, H, HK));
        t.r0 = b_bin(&b, OP_MUL, args[0], b_index(&b, t.BM));
        t.i_rows = b_bin(&b, OP_ADD, b_iota(&b, 0, t.BM, 1), t.r0);
    }
    t.nk = b_dim(&b, kt->dims[2]);
    Value *q_end = NULL;   /* packed sequences: where this sequence's rows of q end */
    if (sq) {
        q_end = sequence_tile(&t, &b, args[0], map_get(&t.memrefs, sq->operands[1]),
                              map_get(&t.memrefs, padded(att, 1)->operands[1]), b_dim(&b, qt->dims[0]));
        t.i_rows = b_bin(&b, OP_ADD, b_iota(&b, 0, t.BM, 1), t.r0);
    }
    if (pk) {   /* batch bi's keys: the first lens[bi] */
        t.table = map_get(&t.memrefs, pk->operands[1]);
        t.nk = b_bin(&b, OP_MIN, t.nk, read_index(&b, map_get(&t.memrefs, pk->operands[2]), 1, &t.bi));
    }
    Value *zero = b_index(&b, 0), *step = b_index(&b, t.BN);
    Segment seg[3];
    int nseg = G && split->rows ? key_segments_rows(&b, att, 1, zero, b_bin(&b, OP_SUB, nq_in, b_index(&b, 1)),
                                                    t.BN, t.nk, seg)   /* (a tile may hold any query row) */
                                : key_segments(&b, att, 1, t.r0, G ? 1 : t.BM, t.BN, t.nk, seg);
    if (splits) {   /* this split's share of the key tiles the rows see (the segments' span, whose start
                       is a whole tile): the tiles stay whole, each segment's masking as it was */
        Value *S = b_dim(&b, (Dim){splits, 0}), *first = seg[0].start;
        Value *tiles = b_ceildiv(&b, b_bin(&b, OP_MAX, b_bin(&b, OP_SUB, seg[nseg - 1].end, first), zero), t.BN);
        Value *per = tiling_split_round_down ? b_bin(&b, OP_FLOORDIV, tiles, S)
                                             : b_bin(&b, OP_FLOORDIV, b_bin(&b, OP_SUB, b_bin(&b, OP_ADD, tiles, S), b_index(&b, 1)), S);
        Value *lo = b_bin(&b, OP_ADD, first, b_bin(&b, OP_MUL, b_bin(&b, OP_MUL, args[2], per), step));
        Value *hi = b_bin(&b, OP_ADD, lo, b_bin(&b, OP_MUL, per, step));
        for (int k = 0; k < nseg; k++) {
            seg[k].start = b_bin(&b, OP_MIN, b_bin(&b, OP_MAX, seg[k].start, lo), hi);
            seg[k].end = b_bin(&b, OP_MAX, b_bin(&b, OP_MIN, seg[k].end, hi), seg[k].start);
        }
    }
    const int rows_cols[2] = {2, 3}, heads_cols[2] = {1, 3};
    Value *qi[4] = {t.bi, t.h, t.r0, zero};
    if (G && split->rows) {   /* head g's rows from a box of its own shifted to rows g·Nq, selected */
        t.q = b_splat(&b, b_float(&b, t.dt, 0), t.BM, t.D);
        for (int64_t g = 0; g < G; g++) {
            Value *hg, *shift;
            packed_head(&b, &t, G, g, nq_in, &hg, &shift);
            Value *qg = t_load(&b, t.Q, (Value *[]){t.bi, hg, shift, zero}, rows_cols, b_tile_type(&b, t.dt, t.BM, t.D), 0);
            t.q = b_select(&b, b_cmp(&b, "eq", group_rows, b_index(&b, g)), qg, t.q);
        }
    } else if (sq) {   /* rows q_start + r0 of [Tq, H, D] */
        const int packed_rows_cols[2] = {0, 2};
        t.q = t_load(&b, t.Q, (Value *[]){b_bin(&b, OP_ADD, t.q_start, t.r0), t.h, zero}, packed_rows_cols,
                     b_tile_type(&b, t.dt, t.BM, t.D), 0);
    } else if (G) {   /* the group's heads' row 0 */
        t.q = t_load(&b, t.Q, (Value *[]){t.bi, b_bin(&b, OP_MUL, t.kh, b_index(&b, G)), zero, zero}, heads_cols,
                     b_tile_type(&b, t.dt, t.BM, t.D), 0);
    } else {
        t.q = t_load(&b, t.Q, qi, rows_cols, b_tile_type(&b, t.dt, t.BM, t.D), 0);
    }
    Value *ninf = b_float(&b, t.acc, -INFINITY), *fzero = b_float(&b, t.acc, 0);
    Builder body;
    Value *j0, **c;
    /* loops 1: the row max, over each segment in turn */
    Value *m = b_splat(&b, ninf, t.BM, 1);
    for (int k = 0; k < nseg; k++) {
        Op *l1 = new_for(&b, seg[k].start, seg[k].end, step, 1, &m, &body, &j0, &c);
        op_set_attr(b.a, l1, "softmax", attr_str(b.a, "max"));
        Value *s = scores(&t, &body, j0, seg[k].masked);
        Value *mx = b_emit(&body, OP_TILE_REDUCE, b_tile_type(&body, t.acc, t.BM, 1), 1, &s);
        op_set_attr(body.a, mx->def, "kind", attr_str(body.a, "max"));
        Value *m1 = b_bin(&body, OP_MAX, c[0], mx);
        t_yield(&body, 1, &m1);
        m = l1->results[0];
    }
    Value *msafe = b_select(&b, b_cmp(&b, "eq", m, ninf), fzero, m);
    /* loops 2: the row sum of exp(s - m) */
    Value *lsum = b_splat(&b, fzero, t.BM, 1);
    for (int k = 0; k < nseg; k++) {
        Op *l2 = new_for(&b, seg[k].start, seg[k].end, step, 1, &lsum, &body, &j0, &c);
        op_set_attr(b.a, l2, "softmax", attr_str(b.a, "sum"));
        Value *s = scores(&t, &body, j0, seg[k].masked);
        Value *e = b_unary(&body, OP_EXP, b_bin(&body, OP_SUB, s, msafe));
        Value *rs = b_emit(&body, OP_TILE_REDUCE, b_tile_type(&body, t.acc, t.BM, 1), 1, &e);
        op_set_attr(body.a, rs->def, "kind", attr_str(body.a, "sum"));
        Value *l_next = b_bin(&body, OP_ADD, c[0], rs);
        t_yield(&body, 1, &l_next);
        lsum = l2->results[0];
    }
    Value *lsafe = b_select(&b, b_cmp(&b, "eq", lsum, fzero), b_float(&b, t.acc, 1), lsum);
    /* loops 3: O = Σ softmax(s) · V, P rounded to the input type */
    Value *acc = b_splat(&b, fzero, t.BM, t.DV);
    for (int k = 0; k < nseg; k++) {
        Op *l3 = new_for(&b, seg[k].start, seg[k].end, step, 1, &acc, &body, &j0, &c);
        op_set_attr(b.a, l3, "softmax", attr_str(b.a, "pv"));
        Value *s = scores(&t, &body, j0, seg[k].masked);
        Value *p = b_bin(&body, OP_DIV, b_unary(&body, OP_EXP, b_bin(&body, OP_SUB, s, msafe)), lsafe);
        Value *vtile = key_tile(&t, &body, t.V, j0, t.DV);
        Value *ops[3] = {b_cast(&body, p, t.dt), vtile, c[0]};
        Value *o_next = b_emit(&body, OP_DOT, c[0]->type, 3, ops);
        t_yield(&body, 1, &o_next);
        acc = l3->results[0];
    }
    if (G && split->rows) {   /* head g's rows, shifted back: every other row lands outside [0, Nq) */
        const int o_dims[2] = {3, 4}, lse_dims[2] = {3, -1};
        Value *of = b_cast(&b, acc, SK_F32), *lse = row_lse(&b, m, lsum);
        for (int64_t g = 0; g < G; g++) {
            Value *hg, *shift;
            packed_head(&b, &t, G, g, nq_in, &hg, &shift);
            Value *oi[5] = {args[2], t.bi, hg, shift, zero};
            t_store(&b, args[3 + nin], of, oi, o_dims);
            t_store(&b, args[3 + nin + 1], lse, oi, lse_dims);
        }
    } else if (splits) {   /* rows that saw no key: O = 0, lse = -inf, which the combine weighs 0 */
        const int o_dims[2] = {3, 4}, lse_dims[2] = {3, -1};
        Value *oi[5] = {args[2], t.bi, G ? t.kh : t.h, t.r0, zero};
        t_store(&b, args[3 + nin], b_cast(&b, acc, SK_F32), oi, o_dims);
        t_store(&b, args[3 + nin + 1], row_lse(&b, m, lsum), oi, lse_dims);
    } else if (sq) {   /* rows q_start + r0 of [Tq, H, Dv] and of lse [H, Tq], not past the sequence's end */
        Value *row = b_bin(&b, OP_ADD, t.q_start, t.r0);
        const int o_dims[2] = {0, 2}, lse_dims[2] = {1, -1};
        t_store_bounded(&b, args[3 + nin], b_cast(&b, acc, t.dt), (Value *[]){row, t.h, zero}, o_dims, 0, q_end);
        if (att->nresults == 2)
            t_store_bounded(&b, args[3 + nin + 1], row_lse(&b, m, lsum), (Value *[]){t.h, row}, lse_dims, 1, q_end);
    } else {
        t_store(&b, args[3 + nin], b_cast(&b, acc, t.dt), qi, rows_cols);
        if (att->nresults == 2) {
            const int lse_dims[2] = {2, -1};
            Value *li[3] = {t.bi, t.h, t.r0};
            t_store(&b, args[3 + nin + 1], row_lse(&b, m, lsum), li, lse_dims);
        }
    }
    t_yield(&b, 0, NULL);
    return l;
}

/* The combine of a split over keys (FlashAttention's flash_fwd_combine):
 * per row lse = log Σ_z exp(lse_z) and O = Σ_z exp(lse_z − lse)·O_z over
 * the S splits, a program per COMBINE_ROWS query rows of one (batch,
 * head). A row no split saw a key of gets O = 0, lse = −inf. */
enum { COMBINE_ROWS = 16, COMBINE_UNROLL = 4 };

static Op *combine_launch(Builder *outer, const Op *att, Op *split, const KeySplit *ks) {
    const char *splits = ks->dim;
    const Type *ot = att->results[0]->type;
    const int64_t R = COMBINE_ROWS, DV = ot->dims[3].size;
    Value *grid[3] = {b_ceildiv(outer, b_dim(outer, ot->dims[2]), R),
                      b_bin(outer, OP_MUL, b_dim(outer, ot->dims[0]), b_dim(outer, ot->dims[1])), b_index(outer, 1)};
    Value **args;
    Op *l = new_launch(outer, att, grid, 2, split->results, &args);
    Builder b = {outer->a, l->regions[0].blocks[0], NULL, att->loc};
    Value *H = b_dim(&b, ot->dims[1]), *zero = b_index(&b, 0);
    Value *bi = b_bin(&b, OP_FLOORDIV, args[1], H), *h = b_bin(&b, OP_REM, args[1], H);
    Value *r0 = b_bin(&b, OP_MUL, args[0], b_index(&b, R)), *S = b_dim(&b, (Dim){splits, 0});
    const int o_dims[2] = {3, 4}, lse_dims[2] = {3, -1};
    /* where this program's rows are in the partials: packed (one query
     * row), head h is row h mod G of kv head h / G; the tile's other rows,
     * other heads', are read but never stored (o has one row) */
    Value *ph = h, *pr = r0;
    if (ks->group && !ks->rows) {
        ph = b_bin(&b, OP_FLOORDIV, h, b_index(&b, ks->group));
        pr = b_bin(&b, OP_ADD, r0, b_bin(&b, OP_REM, h, b_index(&b, ks->group)));
    }
    /* one pass, merged online as the forward's softmax is (m the largest
     * lse so far, l and acc scaled by exp(m_old − m)); COMBINE_UNROLL
     * splits a step, their loads issued together (splits past S read lse
     * −inf, weight 0): the loads' latency, not the arithmetic, is the
     * combine's time */
    Value *ninf = b_float(&b, SK_F32, -INFINITY), *fzero = b_float(&b, SK_F32, 0);
    Builder body;
    Value *z, **c;
    Value *init[3] = {b_splat(&b, ninf, R, 1), b_splat(&b, fzero, R, 1), b_splat(&b, fzero, R, DV)};
    Op *loop = new_for(&b, zero, S, b_index(&b, COMBINE_UNROLL), 3, init, &body, &z, &c);
    Value *lz[COMBINE_UNROLL], *oz[COMBINE_UNROLL];
    for (int u = 0; u < COMBINE_UNROLL; u++) {
        Value *zu = b_bin(&body, OP_ADD, z, b_index(&body, u));
        lz[u] = t_load(&body, args[3 + 1], (Value *[]){zu, bi, ph, pr}, lse_dims, b_tile_type(&body, SK_F32, R, 1),
                       -INFINITY);
        oz[u] = t_load(&body, args[3], (Value *[]){zu, bi, ph, pr, zero}, o_dims, b_tile_type(&body, SK_F32, R, DV), 0);
    }
    Value *mx = c[0];
    for (int u = 0; u < COMBINE_UNROLL; u++)
        mx = b_bin(&body, OP_MAX, mx, lz[u]);
    Value *ms = b_select(&body, b_cmp(&body, "eq", mx, ninf), fzero, mx);
    Value *rescale = b_unary(&body, OP_EXP, b_bin(&body, OP_SUB, c[0], ms));
    Value *sum = b_bin(&body, OP_MUL, c[1], rescale), *acc = b_bin(&body, OP_MUL, c[2], rescale);
    for (int u = 0; u < COMBINE_UNROLL; u++) {
        Value *w = b_unary(&body, OP_EXP, b_bin(&body, OP_SUB, lz[u], ms));
        sum = b_bin(&body, OP_ADD, sum, w);
        acc = b_bin(&body, OP_ADD, acc, b_bin(&body, OP_MUL, oz[u], w));
    }
    t_yield(&body, 3, (Value *[]){mx, sum, acc});
    Value *m = loop->results[0];
    sum = loop->results[1];
    acc = loop->results[2];
    Value *msafe = b_select(&b, b_cmp(&b, "eq", m, ninf), fzero, m);
    Value *o = b_bin(&b, OP_DIV, acc, b_select(&b, b_cmp(&b, "eq", sum, fzero), b_float(&b, SK_F32, 1), sum));
    const int rows_cols[2] = {2, 3};
    t_store(&b, args[3 + 2], b_cast(&b, o, ot->elem), (Value *[]){bi, h, r0, zero}, rows_cols);
    if (att->nresults == 2)
        t_store(&b, args[3 + 3], row_lse(&b, msafe, sum), (Value *[]){bi, h, r0}, (const int[]){2, -1});
    t_yield(&b, 0, NULL);
    return l;
}

/* How attention splits its keys (flash-decoding): 0 not at all, else the
 * schedule's fixed count, or -1 for a count the runtime picks (a split
 * variant beside the plain launch): where the target has a split tile, the
 * block's schedule for the target (which describes the one kernel) says
 * nothing else, the keys' length is not the queries' (decode, cross
 * attention: self-attention has as many query rows as keys, programs
 * enough) and may span more than 4 split tiles. */
static int64_t split_policy(const Op *func, const char *arch, const Type *qt, const Type *kt) {
    Attr *fixed = schedule_directive(func, arch, SCHED_SPLITS);
    if (fixed)
        return fixed->i > 1 ? fixed->i : 0;
    Attr *all = op_attr(func, "schedule");
    const Target *t = target_lookup(arch);
    if ((all && attrs_get(all->entries, all->n, arch)) || !t->attn_split_tile[0])
        return 0;
    if (dim_equal(qt->dims[2], kt->dims[2]))   /* self-attention: as many query rows as keys */
        return 0;
    return kt->dims[2].sym || kt->dims[2].size > 4 * t->attn_split_tile[1] ? -1 : 0;
}

/* The split count the runtime picks (FlashAttention-3's rule, simplified,
 * in one place): none where the programs without a split already give
 * every SM one (B·H·ceil(Nq / BM) of them; packed, B·Hkv) or the keys are
 * at most 4 tiles;
 * else as many splits as make one block an SM, at most one a key tile and
 * at most 128. */
static Value *split_count(Builder *b, const Type *qt, const Type *kt, int64_t BM, int64_t BN, bool packed) {
    Value *programs = packed ? b_bin(b, OP_MUL, b_dim(b, qt->dims[0]), b_dim(b, kt->dims[1]))
                             : b_bin(b, OP_MUL, b_bin(b, OP_MUL, b_dim(b, qt->dims[0]), b_dim(b, qt->dims[1])),
                                     b_ceildiv(b, b_dim(b, qt->dims[2]), BM));
    Value *tiles = b_ceildiv(b, b_dim(b, kt->dims[2]), BN);
    Value *per_sm = b_bin(b, OP_FLOORDIV, b_emit(b, OP_NUM_SMS, type_scalar(b->a, SK_INDEX), 0, NULL),
                          b_bin(b, OP_MAX, programs, b_index(b, 1)));
    /* (tiles − 4)·128 is at most 0 where there are at most 4 key tiles: 1 */
    Value *most = b_bin(b, OP_MIN, b_bin(b, OP_MIN, tiles, b_index(b, 128)),
                        b_bin(b, OP_MUL, b_bin(b, OP_SUB, tiles, b_index(b, 4)), b_index(b, 128)));
    return b_bin(b, OP_MAX, b_index(b, 1), b_bin(b, OP_MIN, per_sm, most));
}

/* The short-rows variant of the target for this attention (head dim D,
 * keys of class `keys`), or NULL: none, or the block has a schedule for
 * the target (it describes the one kernel: its tile, warps, producer...). */
static const AttnShortTile *short_tile(const Op *func, const char *arch, int64_t D, KeyShape keys) {
    Attr *all = op_attr(func, "schedule");
    if ((all && attrs_get(all->entries, all->n, arch)) || keys == KEYS_GATHERED)
        return NULL;
    const Target *t = target_lookup(arch);
    for (size_t i = 0; i < sizeof t->attn_short / sizeof *t->attn_short; i++) {
        const AttnShortTile *v = &t->attn_short[i];
        if (v->max_n && D <= v->max_d)
            return !v->band_only || keys == KEYS_FOLLOW_ROW ? v : NULL;
    }
    return NULL;
}

/* Into outer's block: the split launch in SM x SN tiles over ks->dim splits
 * (defined before) and its combine (*comb). */
static void split_launches(PassContext *ctx, Op *func, Op *att, Builder *outer, const PtrVec *side, const KeySplit *ks,
                           int64_t SM, int64_t SN, Op **comb) {
    Op *split = attention_launch(ctx, func, att, SM, SN, outer, side, ks);
    block_append(outer->blk, split);
    *comb = combine_launch(outer, att, split, ks);
    block_append(outer->blk, *comb);
}

/* The mask's `j < (a batch's key count)` of a paged cache or packed
 * sequences (the frontend's, marked key_count): every program here ends
 * its keys at that count (t.nk) and masks the tile it falls in, so the
 * conjunct is true wherever the tiles read it; made so, its gathers are
 * not held across the key loops. */
void drop_key_count(Arena *a, Op *att, int mask_region) {
    if (!att->regions[mask_region].nblocks)
        return;
    Block *hook = att->regions[mask_region].blocks[0];
    for (Op *op = hook->first; op; op = op->next) {
        Attr *count = op_attr(op, "key_count");
        if (op->kind != OP_CMP || !count || !count->i)
            continue;
        Op *yes = op_create(a, OP_CONSTANT, 0, NULL, 1, &op->results[0]->type, 0);
        op_set_attr(a, yes, "value", attr_bool(a, true));
        yes->loc = op->loc;
        op_insert_before(op, yes);
        replace_all_uses(att, op->results[0], yes->results[0]);
    }
}

bool tile_attention(PassContext *ctx, Op *func, Op *att) {
    const Type *qt = att->operands[0]->type, *kt = att->operands[1]->type, *vt = att->operands[2]->type;
    drop_key_count(ctx->arena, att, 1);
    int64_t D = qt->dims[3].sym ? 0 : qt->dims[3].size;
    if (qt->dims[3].sym || vt->dims[3].sym)
        return true;   /* symbolic head dims: the frontend never makes these */
    /* an exact band (the mask is nothing but it) that follows the row:
     * causal, sliding windows; not a document mask */
    Attr *band = op_attr(att, "band");
    Attr *exact = band ? attrs_get(band->entries, band->n, "exact") : NULL;
    KeyShape keys = gathers_per_key(att) ? KEYS_GATHERED : KEYS_ALL;
    for (int i = 0; exact && exact->i && i < 2; i++) {
        Attr *bound = attrs_get(band->entries, band->n, i ? "lo" : "hi");
        Attr *k = bound ? attrs_get(bound->entries, bound->n, "i") : NULL;
        if (k && k->i)
            keys = KEYS_FOLLOW_ROW;
    }
    /* lean: nothing but the scores and the output in registers (f32
     * accumulation, no score hook), what the band's wider tile needs */
    bool lean = op_attr(att, "acc")->type->elem == SK_F32 && !att->regions[0].nblocks;
    int64_t BM = schedule_tile(func, ctx->arch, 0, default_tile(ctx->arch, true, 0, D, keys, lean));
    int64_t BN = schedule_tile(func, ctx->arch, 1,
                               fit_keys(ctx->arch, func, BM, default_tile(ctx->arch, true, 1, D, keys, lean), D));
    const AttnShortTile *sh = short_tile(func, ctx->arch, D, keys);
    if (sh && !qt->dims[2].sym) {   /* the query length is known: the variant for it, now */
        if (qt->dims[2].size <= sh->max_n)
            BM = sh->rows, BN = sh->keys;
        sh = NULL;
    }
    PtrVec side = {0};
    collect_side_tensors(att, ctx->arena, &side);
    const Op *pages = paged(att, 1);
    int64_t page_size = INT64_MAX;
    if (pages) {   /* the table and lengths are read by the kernels; a key tile stays inside a page */
        for (int i = 1; i < 3; i++)
            add_side_tensor(ctx->arena, &side, pages->operands[i]);
        page_size = op_attr(pages, "page_size")->i;
        BN = BN < page_size ? BN : page_size;
        if (sh && sh->keys > page_size)
            sh = NULL;
    }
    bool packed_seqs = padded(att, 0) != NULL;
    if (packed_seqs) {   /* the offsets are read by the kernels; Tq is all the sequences' rows, not one's: no
                            short-rows variant */
        for (int i = 0; i < 2; i++)   /* q's offsets, and k's (v's are k's) */
            add_side_tensor(ctx->arena, &side, padded(att, i)->operands[1]);
        sh = NULL;
    }
    Builder outer = {ctx->arena, NULL, NULL, att->loc};
    Block tmp = {0};
    outer.blk = &tmp;
    if (!dim_equal(qt->dims[1], kt->dims[1]) && (qt->dims[1].sym || kt->dims[1].sym)) {
        /* GQA with symbolic heads: the grouping needs Hq % Hkv == 0 */
        Value *r = b_bin(&outer, OP_REM, b_dim(&outer, qt->dims[1]), b_dim(&outer, kt->dims[1]));
        Op *check = op_create(ctx->arena, OP_ASSERT, 1, (Value *[]){b_cmp(&outer, "eq", r, b_index(&outer, 0))}, 0, NULL, 0);
        check->loc = att->loc;
        op_set_attr(ctx->arena, check, "message",
                    attr_str(ctx->arena, "query heads are not a multiple of kv heads"));
        block_append(&tmp, check);
    }
    int64_t splits = packed_seqs ? 0 : split_policy(func, ctx->arch, qt, kt);   /* (prefill: no split) */
    const int64_t *st = target_lookup(ctx->arch)->attn_split_tile;
    int64_t SM = schedule_tile(func, ctx->arch, 0, st[0]), SN = schedule_tile(func, ctx->arch, 1, st[1]);
    SN = SN < page_size ? SN : page_size;
    /* GQA packing where a call may have few query rows: the group (numeric,
     * 2 to SM heads) fills the split's tile, at one query row (the head box)
     * or, where G·Nq fits the tile, at Nq rows a head; the runtime takes
     * the first where Nq = 1, the second where 2 <= Nq and G·Nq <= SM (a
     * numeric Nq: the one that fits, alone) */
    int64_t G = qt->dims[1].sym || kt->dims[1].sym ? 0 : qt->dims[1].size / kt->dims[1].size;
    bool sym_nq = qt->dims[2].sym;
    int64_t nq = qt->dims[2].size;
    bool pack_one = splits && G >= 2 && G <= SM && (sym_nq || nq == 1);
    bool pack_rows = splits && target_lookup(ctx->arch)->attn_pack_rows && G >= 2 && 2 * G <= SM &&
                     (sym_nq || (nq >= 2 && G * nq <= SM));
    Op *packed_one = NULL, *packed_rows = NULL, *comb = NULL;
    if (pack_one || pack_rows) {   /* both count B·Hkv programs: one split count */
        const char *gdim = fresh_dim_name(ctx->arena, func, "KV_SPLITS_G");
        define_dim(ctx, &outer, att, gdim,
                   splits > 0 ? b_index(&outer, splits) : split_count(&outer, qt, kt, SM, SN, true));
        if (pack_one)
            split_launches(ctx, func, att, &outer, &side, &(KeySplit){gdim, G, false}, SM, SN, &packed_one);
        if (pack_rows)
            split_launches(ctx, func, att, &outer, &side, &(KeySplit){gdim, G, true}, SM, SN, &packed_rows);
        if (!sym_nq) {   /* (split_launches appended it) */
            replace_with(ctx, att, &tmp, (packed_one ? packed_one : packed_rows)->results);
            return true;
        }
    }
    Value *is_split = NULL;
    if (splits) {
        KeySplit ks = {fresh_dim_name(ctx->arena, func, "KV_SPLITS"), 0, false};
        define_dim(ctx, &outer, att, ks.dim,
                   splits > 0 ? b_index(&outer, splits) : split_count(&outer, qt, kt, SM, SN, false));
        split_launches(ctx, func, att, &outer, &side, &ks, SM, SN, &comb);
        if (splits < 0)
            is_split = b_cmp(&outer, "gt", b_dim(&outer, (Dim){ks.dim, 0}), b_index(&outer, 1));
    }
    Value **picks = NEW_ARRAY(ctx->arena, Value *, att->nresults);
    if (splits > 0) {   /* the schedule's count: always split */
        for (int i = 0; i < att->nresults; i++)
            picks[i] = comb->results[i];
    } else {
        Op *l = attention_launch(ctx, func, att, BM, BN, &outer, &side, NULL);
        if (!sh && !is_split && !packed_one && !packed_rows) {   /* one launch */
            replace_with_launch(ctx, att, &tmp, l);
            return true;
        }
        block_append(&tmp, l);
        /* short rows (the query length at most sh->max_n) in the variant's
         * tiles, the rest in the default's: both launches, and each result
         * chosen by the length (the runtime launches one; doc/passes.md);
         * of the launch for few rows, where the runtime picks more than one
         * split, the split's combine instead */
        Op *ls = l;
        if (sh) {
            ls = attention_launch(ctx, func, att, sh->rows, sh->keys, &outer, &side, NULL);
            block_append(&tmp, ls);
        }
        Value *is_short = sh ? b_cmp(&outer, "le", b_dim(&outer, qt->dims[2]), b_index(&outer, sh->max_n)) : NULL;
        for (int i = 0; i < att->nresults; i++) {
            Value *few = ls->results[i];
            if (is_split)
                few = b_emit(&outer, OP_CHOOSE, att->results[i]->type, 3, (Value *[]){is_split, comb->results[i], few});
            picks[i] = !sh ? few
                           : b_emit(&outer, OP_CHOOSE, att->results[i]->type, 3, (Value *[]){is_short, few, l->results[i]});
        }
    }
    if (packed_rows) {   /* a few query rows a head whose group's fit the tile: that packed split's */
        Value *fits = b_cmp(&outer, "le", b_bin(&outer, OP_MUL, b_dim(&outer, qt->dims[2]), b_index(&outer, G)),
                            b_index(&outer, SM));
        for (int i = 0; i < att->nresults; i++)
            picks[i] = b_emit(&outer, OP_CHOOSE, att->results[i]->type, 3, (Value *[]){fits, packed_rows->results[i], picks[i]});
    }
    if (packed_one) {   /* one query row: the head box's */
        Value *one = b_cmp(&outer, "eq", b_dim(&outer, qt->dims[2]), b_index(&outer, 1));
        for (int i = 0; i < att->nresults; i++)
            picks[i] = b_emit(&outer, OP_CHOOSE, att->results[i]->type, 3, (Value *[]){one, packed_one->results[i], picks[i]});
    }
    replace_with(ctx, att, &tmp, picks);
    return true;
}
