/* tiling.c — fused ops become tile kernels: a grid of programs, each owning
 * a tile of the output, with loops over the reduction.
 *
 * attn.fused_gemm (A [M, K] by weights [K, N]): a program per BM x BN output
 * tile; a loop over K in steps of BK accumulating one tile per product; the
 * epilogue region applied to whole tiles; one store.
 *
 *   %y = attn.fused_gemm(%x, %w, %b) ({...})   ==>
 *   %gx = ... ceil(N / BN) ...; %y = tile.launch(%gx, %gy, %c1, %x, %w, %b) ({
 *   ^bb0(%px: index, %py: index, %pz: index, %X: memref<...>, ..., %Y: memref<...>):
 *     %acc = tile.for(%c0, %K, %BK, %zero) ({ load A, load W, tile.dot ... })
 *     ... the epilogue on tiles ...; tile.store(%Y, %out, %m0, %n0) {dims = [0, 1]}
 *   })
 *
 * attn.attention: a program per BM query rows of one (batch, head); the
 * softmax over the tiled key axis is computed exactly as written, in three
 * loops over BN-key tiles (row max; row sum of exp; P·V with P normalised),
 * recomputing the scores in each, tagged {softmax = "max" | "sum" | "pv"};
 * each loop may come as a chain of segments (masked edge, unmasked interior,
 * masked edge) when mask-analysis found an exact band.
 * The online-softmax pass fuses the three into one. Key columns past the end are masked to -inf, rows past the end
 * are computed and not stored; a row with no visible key gives 0 and -inf.
 *
 * With a band from mask-analysis, each program's key loops run only over
 * the tiles its rows can see (a causal mask halves the work).
 *
 * Any other elementwise op, reduction or softmax over the last axis (on rank
 * 1 or 2 tensors with a numeric last dimension, as in an RMSNorm) becomes a
 * row kernel: a program per 16 rows holding whole rows.
 *
 * Tile sizes: the block's schedule for the target, else the target's default.
 * Requires: fused ops (passes/fusion.c); fused_gemm with a rank-2 A (others
 * stay as they are). Guarantees: the same values up to the order of the
 * softmax's additions (checked by the interpreter).
 */
#include "ir/builder.h"
#include "passes/passes.h"
#include "target/schedule.h"
#include "target/target.h"

#include <math.h>
#include <string.h>

/* tile.load / tile.store of a box at `index` (one per memref dim); dims[a]
 * is the memref dim of tile axis a, -1 for a broadcast axis of size 1. */
static Value *load(Builder *b, Value *mem, Value **index, const int *dims, Type *t, double pad) {
    int n = mem->type->rank;
    Value **ops = NEW_ARRAY(b->a, Value *, n + 1);
    ops[0] = mem;
    memcpy(ops + 1, index, sizeof(Value *) * (size_t)n);
    Value *r = b_emit(b, OP_LOAD, t, n + 1, ops);
    Attr *d[2] = {attr_int(b->a, dims[0]), attr_int(b->a, dims[1])};
    op_set_attr(b->a, r->def, "dims", attr_array(b->a, 2, d));
    if (pad != 0)
        op_set_attr(b->a, r->def, "pad", attr_float(b->a, pad));
    return r;
}

static void store(Builder *b, Value *mem, Value *tile, Value **index, const int *dims) {
    int n = mem->type->rank;
    Value **ops = NEW_ARRAY(b->a, Value *, n + 2);
    ops[0] = mem;
    ops[1] = tile;
    memcpy(ops + 2, index, sizeof(Value *) * (size_t)n);
    Op *op = op_create(b->a, OP_STORE, n + 2, ops, 0, NULL, 0);
    op->loc = b->loc;
    Attr *d[2] = {attr_int(b->a, dims[0]), attr_int(b->a, dims[1])};
    op_set_attr(b->a, op, "dims", attr_array(b->a, 2, d));
    block_append(b->blk, op);
}

static void yield(Builder *b, int n, Value **vals) {
    Op *y = op_create(b->a, OP_TILE_YIELD, n, vals, 0, NULL, 0);
    y->loc = b->loc;
    block_append(b->blk, y);
}

static Type *memref_of(Arena *a, const Type *t) {
    Type *m = type_shaped(a, TY_MEMREF, t->elem, t->rank, t->dims);
    m->space = AS_GLOBAL;
    return m;
}

/* A tile.launch with its grid, inputs and result types (names: of the
 * results, may be NULL); its body's block arguments are returned in *args
 * (3 program ids, inputs, outputs). */
static Op *make_launch(Builder *outer, SrcLoc loc, Value **grid, int nin, Value **inputs, int nres, Type **types,
                       const char **names, Value ***args) {
    Value **ops = NEW_ARRAY(outer->a, Value *, 3 + nin);
    memcpy(ops, grid, sizeof(Value *) * 3);
    memcpy(ops + 3, inputs, sizeof(Value *) * (size_t)nin);
    Op *l = op_create(outer->a, OP_LAUNCH, 3 + nin, ops, nres, types, 1);
    l->loc = loc;
    Block *body = region_add_block(outer->a, &l->regions[0]);
    static const char *const pid_names[3] = {"pid_x", "pid_y", "pid_z"};
    *args = NEW_ARRAY(outer->a, Value *, 3 + nin + nres);
    for (int i = 0; i < 3; i++)
        (*args)[i] = block_add_arg(outer->a, body, type_scalar(outer->a, SK_INDEX), pid_names[i]);
    for (int i = 0; i < nin; i++)
        (*args)[3 + i] = block_add_arg(outer->a, body, memref_of(outer->a, inputs[i]->type), inputs[i]->name);
    for (int i = 0; i < nres; i++) {
        const char *name = names ? names[i] : NULL;
        (*args)[3 + nin + i] = block_add_arg(outer->a, body, memref_of(outer->a, types[i]),
                                             name ? arena_printf(outer->a, "%s_out", name) : NULL);
        l->results[i]->name = name;
    }
    return l;
}

/* A tile.launch replacing `op`, with its results' types and names. */
static Op *new_launch(Builder *outer, const Op *op, Value **grid, int nin, Value **inputs, Value ***args) {
    Type **types = NEW_ARRAY(outer->a, Type *, op->nresults + 1);
    const char **names = NEW_ARRAY(outer->a, const char *, op->nresults + 1);
    for (int i = 0; i < op->nresults; i++)
        types[i] = op->results[i]->type, names[i] = op->results[i]->name;
    return make_launch(outer, op->loc, grid, nin, inputs, op->nresults, types, names, args);
}

/* A tile.for from lb to ub by step carrying `init`; *body gets a builder
 * for the loop body, *iv and *carried its arguments. */
static Op *new_for(Builder *b, Value *lb, Value *ub, Value *step, int n, Value **init, Builder *body, Value **iv,
                   Value ***carried) {
    Value **ops = NEW_ARRAY(b->a, Value *, 3 + n);
    ops[0] = lb, ops[1] = ub, ops[2] = step;
    memcpy(ops + 3, init, sizeof(Value *) * (size_t)n);
    Type **types = NEW_ARRAY(b->a, Type *, n + 1);
    for (int i = 0; i < n; i++)
        types[i] = init[i]->type;
    Op *f = op_create(b->a, OP_FOR, 3 + n, ops, n, types, 1);
    f->loc = b->loc;
    block_append(b->blk, f);
    Block *blk = region_add_block(b->a, &f->regions[0]);
    *body = (Builder){b->a, blk, NULL, b->loc};
    *iv = block_add_arg(b->a, blk, type_scalar(b->a, SK_INDEX), NULL);
    *carried = NEW_ARRAY(b->a, Value *, n + 1);
    for (int i = 0; i < n; i++)
        (*carried)[i] = block_add_arg(b->a, blk, types[i], NULL);
    return f;
}

/* ---- vectorising a scalar region onto tiles --------------------------------- */

/* Clones the scalar ops of `region` into b, with its arguments bound to
 * `args` (scalars or tiles); each op's type becomes the broadcast of its
 * operands'. attn.extract of a tensor becomes tile.gather of its memref
 * (`memrefs` maps tensors to the launch's memrefs). Returns the yielded value. */
static Value *vectorise(Builder *b, const Block *region, Value **args, const Map *memrefs) {
    Map map;
    map_init(&map, false);
    for (int i = 0; i < region->nargs; i++)
        map_put(b->a, &map, region->args[i], args[i]);
    for_each_op(op, region) {
        if (op->kind == OP_YIELD)
            return map_get(&map, op->operands[0]);
        Value *ops[8];
        int n = op->noperands < 8 ? op->noperands : 8;
        for (int i = 0; i < n; i++) {
            ops[i] = map_get(&map, op->operands[i]);
            if (!ops[i] && op->kind == OP_EXTRACT && i == 0)
                ops[i] = map_get(memrefs, op->operands[i]);
            if (!ops[i])
                die("tiling: a region value from outside the region");
        }
        Type *t;
        OpKind k = op->kind;
        if (k == OP_CONSTANT || k == OP_DIM) {
            t = op->results[0]->type;
        } else if (k == OP_EXTRACT) {
            k = OP_GATHER;
            t = type_scalar(b->a, op->results[0]->type->elem);
            for (int i = 1; i < n; i++)
                t = b_bcast(b, t, ops[i]->type, t->elem);
        } else {
            t = type_scalar(b->a, op->results[0]->type->elem);
            for (int i = 0; i < n; i++)
                t = b_bcast(b, t, ops[i]->type, t->elem);
        }
        Value *r = b_emit(b, k, t, n, ops);
        r->def->attrs = op->attrs;
        r->def->nattrs = op->nattrs;
        r->def->loc = op->loc;
        map_put(b->a, &map, op->results[0], r);
    }
    die("tiling: a region without a yield");
}

/* op's results -> the launch's, for the ops after it: pass_tiling redirects
 * each op's uses as it reaches it (redirect), not by a walk of the whole
 * function per launch, which made tiling quadratic (3 s for 1,600 ops). */
static Map replaced;
/* The broken twin's mistake (test-tiling-rows-round-down): attention's query
 * tiles counted by floor(N / BM), so a ragged last tile has no program. */
static bool rows_round_down;

/* Puts the ops built in `tmp` (grid computations, launches) where `op`
 * was, and `results` in place of op's. */
static void replace_with(PassContext *ctx, Op *op, Block *tmp, Value **results) {
    for (Op *o = tmp->first, *next_op; o; o = next_op) {
        next_op = o->next;
        op_insert_before(op, o);
    }
    for (int i = 0; i < op->nresults; i++)
        map_put(ctx->arena, &replaced, op->results[i], results[i]);
    op_unlink(op);
}

/* The grid computation (built in `tmp`) and the launch where `op` was. */
static void replace_with_launch(PassContext *ctx, Op *op, Block *tmp, Op *l) {
    block_append(tmp, l);
    replace_with(ctx, op, tmp, l->results);
}

static void redirect(Op *op) {
    for (int i = 0; i < op->noperands; i++) {
        Value *to = map_get(&replaced, op->operands[i]);
        if (to)
            op->operands[i] = to;
    }
    for (int r = 0; r < op->nregions; r++)
        for (int b = 0; b < op->regions[r].nblocks; b++)
            for_each_op(o, op->regions[r].blocks[b]) redirect(o);
}

/* ---- tile sizes ------------------------------------------------------------- */

static int64_t schedule_tile(const Op *func, const char *arch, int axis, int64_t fallback) {
    Attr *tile = schedule_directive(func, arch, SCHED_TILE);
    return tile && tile->kind == AT_ARRAY && axis < tile->n ? tile->elems[axis]->i : fallback;
}

/* The directives the target lowering decides by (warps, and sm_90a's
 * producer, pingpong, overlap, persistent: schedule.def's SD_ON_LAUNCH),
 * recorded on the launch as schedule.NAME for sm90a-layout and
 * softmax-overlap (which check them: warps(N) must split the row tile into
 * 16-row blocks). */
static void schedule_on_launch(PassContext *ctx, const Op *func, Op *launch) {
    for (int i = 0; i < SCHED__COUNT; i++) {
        Attr *v = schedule_info[i].flags & SD_ON_LAUNCH ? schedule_directive(func, ctx->arch, (ScheduleId)i) : NULL;
        if (v)
            op_set_attr(ctx->arena, launch, schedule_launch_attr((ScheduleId)i), attr_int(ctx->arena, v->i));
    }
}

/* What the default attention tile depends on besides the head dim: whether
 * the keys a row sees follow the row (an exact band from mask-analysis with
 * a row term: causal, windows), and else whether the hooks read a tensor
 * per key. */
typedef enum { KEYS_ALL, KEYS_GATHERED, KEYS_FOLLOW_ROW } KeyShape;

/* Defaults per target: query rows x key rows for attention, M x N x K for
 * GEMMs. */
static int64_t default_tile(const char *arch, bool attention, int axis, int64_t D, KeyShape keys, bool lean) {
    const Target *t = target_lookup(arch);
    const int64_t *d64 = keys == KEYS_ALL ? t->attn_tile_d64 : keys == KEYS_GATHERED ? t->attn_tile_d64_gathers : NULL;
    if (attention && axis < 2 && D <= 64 && d64 && d64[axis])
        return d64[axis];
    if (attention && axis < 2 && D > 64 && D <= 128 && keys == KEYS_FOLLOW_ROW && lean && t->attn_tile_d128_band[axis])
        return t->attn_tile_d128_band[axis];
    if (attention && axis < 2 && D > 64 && D <= 128 && keys != KEYS_GATHERED && t->attn_tile_d128[axis])
        return t->attn_tile_d128[axis];
    return attention ? t->attn_tile[axis] : t->gemm_tile[axis];
}

/* The default key rows, halved while Q's tile and the K and V stages (16-bit)
 * would not fit the target's shared memory (head dim 256: 128 × 64 on
 * sm_90a, 64 KiB of Q and 128 of K/V). A schedule's tile is taken as it is
 * (too large a one is the code generator's clear error). */
static int64_t fit_keys(const char *arch, const Op *func, int64_t BM, int64_t BN, int64_t D) {
    const Target *t = target_lookup(arch);
    Attr *st = schedule_directive(func, arch, SCHED_STAGES);
    int64_t stages = st && st->i >= 2 ? st->i : t->stages ? t->stages : 2;
    while (BN > 16 && 2 * (BM * D + 2 * stages * BN * D) > t->smem_limit - 4096)   /* 4 KiB: barriers, row vectors */
        BN /= 2;
    return BN;
}

/* ---- fused_gemm ---------------------------------------------------------------- */

/* The output tile (row tile *mt, column tile *nt) of program (px, py) of a
 * GEMM whose result rt is cut into BM x BN tiles. The GPU starts programs x
 * first; taken plainly, the programs running at once share one row tile of A and
 * read every column tile of the weights, which then come from DRAM again
 * for each row tile when they do not fit in L2 (SwiGLU's 235 MB of gate and
 * up weights: 7.5 GB read at T 4096). In groups of `group` row tiles
 * (Triton's GROUP_M ordering) the programs running at once cover a few
 * column tiles of `group` row tiles, so each weight tile is read from DRAM
 * once a group and A's strip stays in L2. group 1 is the plain order. */
static void gemm_tile_of(Builder *b, Value *px, Value *py, const Type *rt, int64_t BM, int64_t BN, int64_t group,
                         Value **mt, Value **nt) {
    if (group <= 1) {
        *mt = py;
        *nt = px;
        return;
    }
    /* the grid's sizes again: a launch body sees only its own values */
    Value *gx = b_ceildiv(b, b_dim(b, rt->dims[1]), BN), *gy = b_ceildiv(b, b_dim(b, rt->dims[0]), BM);
    Value *g = b_index(b, group);
    Value *pid = b_bin(b, OP_ADD, b_bin(b, OP_MUL, py, gx), px);
    Value *per_group = b_bin(b, OP_MUL, gx, g);
    Value *first = b_bin(b, OP_MUL, b_bin(b, OP_FLOORDIV, pid, per_group), g);
    Value *rows = b_bin(b, OP_MIN, b_bin(b, OP_SUB, gy, first), g);   /* the last group may be short */
    Value *in = b_bin(b, OP_REM, pid, per_group);
    *mt = b_bin(b, OP_ADD, first, b_bin(b, OP_REM, in, rows));
    *nt = b_bin(b, OP_FLOORDIV, in, rows);
}

static bool tile_gemm(PassContext *ctx, Op *func, Op *g) {
    const Type *a = g->operands[0]->type, *rt = g->results[0]->type;
    if (a->rank != 2)
        return true;   /* batched A: left as it is */
    int64_t BM = schedule_tile(func, ctx->arch, 0, default_tile(ctx->arch, false, 0, 0, KEYS_ALL, false));
    int64_t BN = schedule_tile(func, ctx->arch, 1, default_tile(ctx->arch, false, 1, 0, KEYS_ALL, false));
    int64_t BK = schedule_tile(func, ctx->arch, 2, default_tile(ctx->arch, false, 2, 0, KEYS_ALL, false));
    int n = (int)op_attr(g, "num_b")->i, nin = g->noperands;
    ScalarKind acc = op_attr(g, "acc")->type->elem;
    const Block *epi = g->regions[0].blocks[0];
    Builder outer = {ctx->arena, NULL, NULL, g->loc};
    Block tmp = {0};
    outer.blk = &tmp;
    Value *grid[3] = {b_ceildiv(&outer, b_dim(&outer, rt->dims[1]), BN),
                      b_ceildiv(&outer, b_dim(&outer, rt->dims[0]), BM), b_index(&outer, 1)};
    Value **args;
    Op *l = new_launch(&outer, g, grid, nin, g->operands, &args);
    schedule_on_launch(ctx, func, l);
    Builder b = {ctx->arena, l->regions[0].blocks[0], NULL, g->loc};
    Value *A = args[3], *out = args[3 + nin];
    Attr *group = schedule_directive(func, ctx->arch, SCHED_GROUP);
    Value *mt, *nt;
    gemm_tile_of(&b, args[0], args[1], rt, BM, BN, group ? group->i : target_lookup(ctx->arch)->gemm_group, &mt, &nt);
    Value *m0 = b_bin(&b, OP_MUL, mt, b_index(&b, BM)), *n0 = b_bin(&b, OP_MUL, nt, b_index(&b, BN));
    Value *zero = b_index(&b, 0);
    Value **init = NEW_ARRAY(b.a, Value *, n);
    for (int i = 0; i < n; i++)
        init[i] = b_splat(&b, b_float(&b, acc, 0), BM, BN);
    Builder body;
    Value *k0, **accs;
    Op *loop = new_for(&b, zero, b_dim(&b, a->dims[1]), b_index(&b, BK), n, init, &body, &k0, &accs);
    const int rows_cols[2] = {0, 1};
    Value *ai[2] = {m0, k0};
    Value *at = load(&body, A, ai, rows_cols, b_tile_type(&body, a->elem, BM, BK), 0);
    Value **next = NEW_ARRAY(b.a, Value *, n);
    for (int i = 0; i < n; i++) {
        Value *wi[2] = {k0, n0};
        Value *wt = load(&body, args[4 + i], wi, rows_cols, b_tile_type(&body, a->elem, BK, BN), 0);
        Value *ops[3] = {at, wt, accs[i]};
        next[i] = b_emit(&body, OP_DOT, accs[i]->type, 3, ops);
    }
    yield(&body, n, next);
    /* the epilogue on whole tiles: products rounded as the matmul rounds them */
    Value **eargs = NEW_ARRAY(b.a, Value *, nin);
    for (int i = 0; i < n; i++)
        eargs[i] = b_cast(&b, loop->results[i], epi->args[i]->type->elem);
    for (int i = 0; i < nin - 1 - n; i++) {
        Value *e = args[4 + n + i];
        int r = e->type->rank, dims[2];
        Value *idx[2];
        int64_t shape[2];
        for (int ax = 0; ax < 2; ax++) {
            int d = ax - (2 - r);
            bool broadcast = d < 0 || (!e->type->dims[d].sym && e->type->dims[d].size == 1);
            dims[ax] = d < 0 ? -1 : d;
            shape[ax] = broadcast ? 1 : ax == 0 ? BM : BN;
            if (d >= 0)
                idx[d] = broadcast ? zero : ax == 0 ? m0 : n0;
        }
        eargs[n + i] = load(&b, e, idx, dims, b_tile_type(&b, e->type->elem, shape[0], shape[1]), 0);
    }
    Value *y = vectorise(&b, epi, eargs, NULL);
    if (y->type->kind == TY_SCALAR)
        y = b_splat(&b, y, BM, BN);
    Value *oi[2] = {m0, n0};
    store(&b, out, y, oi, rows_cols);
    yield(&b, 0, NULL);
    /* the grid computation goes before the op, then the launch replaces it */
    replace_with_launch(ctx, g, &tmp, l);
    return true;
}

/* ---- attention ------------------------------------------------------------------ */

typedef struct AttnTile {
    Builder *b;
    const Op *att;
    Value *Q, *K, *V, *bi, *h, *kh, *r0, *q, *i_rows;
    Map memrefs;
    ScalarKind acc, dt;
    int64_t BM, BN, D, DV;
    double scale;
    Value *nk;
} AttnTile;

/* The scores of key tile j0, as the unfused program computes them; with
 * `masked`, keys past Nk and keys the mask hides are -inf (an interior tile,
 * entirely inside the mask's band and Nk, needs neither). */
static Value *scores(AttnTile *t, Builder *b, Value *j0, bool masked) {
    const int rows_cols[2] = {2, 3};
    Value *zero = b_index(b, 0);
    Value *ki[4] = {t->bi, t->kh, j0, zero};
    Value *kt = load(b, t->K, ki, rows_cols, b_tile_type(b, t->dt, t->BN, t->D), 0);
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

static int index_of_value(PtrVec *v, const Value *x) {
    for (int i = 0; i < v->len; i++)
        if (v->items[i] == x)
            return i;
    return -1;
}

/* Func-level tensors the hooks read: they become launch inputs. */
static void collect_side_tensors(const Op *att, Arena *a, PtrVec *out) {
    for (int r = 0; r < att->nregions; r++)
        for (int bi = 0; bi < att->regions[r].nblocks; bi++)
            for_each_op(op, att->regions[r].blocks[bi])
                if (op->kind == OP_EXTRACT && index_of_value(out, op->operands[0]) < 0)
                    vec_push(a, out, op->operands[0]);
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
static Value *band_at(Builder *b, const Attr *bound, Value *i) {
    Value *v = b_bin(b, OP_MUL, i, b_index(b, attrs_get(bound->entries, bound->n, "i")->i));
    v = b_bin(b, OP_ADD, v, b_index(b, attrs_get(bound->entries, bound->n, "c")->i));
    const Attr *dims = attrs_get(bound->entries, bound->n, "dims");
    for (int d = 0; d < dims->n; d++)
        v = b_bin(b, OP_ADD, v, b_bin(b, OP_MUL, b_dim(b, (Dim){dims->entries[d].name, 0}),
                                  b_index(b, dims->entries[d].value->i)));
    return v;
}

/* The key tiles a program's rows [r0, r0 + BM) visit, as segments of
 * [start, end): without a band, all of [0, Nk), masked. With one, only the
 * range its rows can see (start rounded down to a tile); with an exact band,
 * split into a masked edge, an unmasked interior (tiles every row sees
 * entirely, inside Nk) and a masked edge. Tiles outside are never visited. */
typedef struct Segment {
    Value *start, *end;
    bool masked;
} Segment;

static int key_segments(Builder *b, const Op *att, int mask_region, Value *r0, int64_t BM, int64_t BN, Value *nk,
                        Segment *seg) {
    Attr *band = op_attr(att, "band");
    Attr *lo = band ? attrs_get(band->entries, band->n, "lo") : NULL;
    Attr *hi = band ? attrs_get(band->entries, band->n, "hi") : NULL;
    Value *last = b_bin(b, OP_ADD, r0, b_index(b, BM - 1)), *bn = b_index(b, BN);
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

/* The launch of attention op `att` in BM x BN tiles (its grid computed in
 * `outer`): a program per BM query rows of one (batch, head). */
static Op *attention_launch(PassContext *ctx, Op *func, Op *att, int64_t BM, int64_t BN, Builder *outer,
                            const PtrVec *side) {
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
    for (int i = 0; i < side->len; i++)
        inputs[3 + i] = side->items[i];
    Value *nq = b_dim(outer, qt->dims[2]);
    Value *grid[3] = {rows_round_down ? b_bin(outer, OP_FLOORDIV, nq, b_index(outer, t.BM)) : b_ceildiv(outer, nq, t.BM),
                      b_bin(outer, OP_MUL, b_dim(outer, qt->dims[0]), b_dim(outer, qt->dims[1])),
                      b_index(outer, 1)};
    Value **args;
    Op *l = new_launch(outer, att, grid, nin, inputs, &args);
    schedule_on_launch(ctx, func, l);
    Builder b = {ctx->arena, l->regions[0].blocks[0], NULL, att->loc};
    t.b = &b;
    t.Q = args[3], t.K = args[4], t.V = args[5];
    map_init(&t.memrefs, false);
    for (int i = 0; i < side->len; i++)
        map_put(ctx->arena, &t.memrefs, side->items[i], args[6 + i]);
    /* which (batch, head, kv head) and rows this program owns */
    Value *H = b_dim(&b, qt->dims[1]), *HK = b_dim(&b, kt->dims[1]);
    t.bi = b_bin(&b, OP_FLOORDIV, args[1], H);
    t.h = b_bin(&b, OP_REM, args[1], H);
    t.kh = b_bin(&b, OP_FLOORDIV, t.h, b_bin(&b, OP_FLOORDIV, H, HK));
    t.r0 = b_bin(&b, OP_MUL, args[0], b_index(&b, t.BM));
    t.i_rows = b_bin(&b, OP_ADD, b_iota(&b, 0, t.BM, 1), t.r0);
    t.nk = b_dim(&b, kt->dims[2]);
    Value *zero = b_index(&b, 0), *step = b_index(&b, t.BN);
    Segment seg[3];
    int nseg = key_segments(&b, att, 1, t.r0, t.BM, t.BN, t.nk, seg);
    const int rows_cols[2] = {2, 3};
    Value *qi[4] = {t.bi, t.h, t.r0, zero};
    t.q = load(&b, t.Q, qi, rows_cols, b_tile_type(&b, t.dt, t.BM, t.D), 0);
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
        yield(&body, 1, &m1);
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
        yield(&body, 1, &l_next);
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
        Value *vi[4] = {t.bi, t.kh, j0, b_index(&body, 0)};
        Value *vtile = load(&body, t.V, vi, rows_cols, b_tile_type(&body, t.dt, t.BN, t.DV), 0);
        Value *ops[3] = {b_cast(&body, p, t.dt), vtile, c[0]};
        Value *o_next = b_emit(&body, OP_DOT, c[0]->type, 3, ops);
        yield(&body, 1, &o_next);
        acc = l3->results[0];
    }
    store(&b, args[3 + nin], b_cast(&b, acc, t.dt), qi, rows_cols);
    if (att->nresults == 2) {
        Value *lse = b_bin(&b, OP_ADD, b_cast(&b, m, SK_F32), b_unary(&b, OP_LOG, b_cast(&b, lsum, SK_F32)));
        const int lse_dims[2] = {2, -1};
        Value *li[3] = {t.bi, t.h, t.r0};
        store(&b, args[3 + nin + 1], lse, li, lse_dims);
    }
    yield(&b, 0, NULL);
    return l;
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

static bool tile_attention(PassContext *ctx, Op *func, Op *att) {
    const Type *qt = att->operands[0]->type, *kt = att->operands[1]->type, *vt = att->operands[2]->type;
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
    Op *l = attention_launch(ctx, func, att, BM, BN, &outer, &side);
    if (!sh) {
        replace_with_launch(ctx, att, &tmp, l);
        return true;
    }
    /* short rows (the query length at most sh->max_n) in the variant's
     * tiles, the rest in the default's: both launches, and each result
     * chosen by the length (the runtime launches one; doc/passes.md) */
    block_append(&tmp, l);
    Op *ls = attention_launch(ctx, func, att, sh->rows, sh->keys, &outer, &side);
    block_append(&tmp, ls);
    Value *is_short = b_cmp(&outer, "le", b_dim(&outer, qt->dims[2]), b_index(&outer, sh->max_n));
    Value **picks = NEW_ARRAY(ctx->arena, Value *, att->nresults);
    for (int i = 0; i < att->nresults; i++)
        picks[i] = b_emit(&outer, OP_CHOOSE, att->results[i]->type, 3,
                          (Value *[]){is_short, ls->results[i], l->results[i]});
    replace_with(ctx, att, &tmp, picks);
    return true;
}

/* ---- the attention backward ----------------------------------------------------------
 * attn.attention_backward becomes three kernels (FlashAttention-2's plan,
 * doc/backward.md):
 *
 *   preprocess  a program per BM query rows of one (batch, head):
 *               D = rowsum(do ∘ o), f32 [B, Hq, Nq]
 *   main        a program per BN keys of one (batch, kv head), holding dK and
 *               dV tiles: for each query head of the group, for each BM-row
 *               query tile, Sᵀ = K·Qᵀ (keys down, queries across, so lse and
 *               D are row vectors), Pᵀ = exp(Sᵀ' − lse), dV += Pᵀ·dO,
 *               dPᵀ = V·dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − D) ∘ score'(Sᵀ), dK += dSᵀ·Q,
 *               and dSᵀᵀ·K added into an f32 dQ accumulator (tile.atomic_add;
 *               the launch's `zeroed` output starts at 0)
 *   postprocess dq = scale · dQacc, rounded to q's type
 *
 * Keys past Nk and queries past Nq are masked like the mask's hidden
 * scores (P = 0, so dS = 0). With a band from mask-analysis whose bounds
 * move one key per query row (causal, windows, bottom-right causal), each
 * key tile visits only the query tiles that see one of its keys: the band
 * inverted (query_range). */

/* The query rows [start, end) that can see a key of [j0, j0 + BN): with
 * hi(i) = i + Kh, a query sees key j0 only from i = j0 − Kh on; with lo(i) =
 * i + Kl, no query past j0 + BN − 1 − Kl sees the tile. Bounds with another
 * slope leave the range whole (masked elementwise, still right). start is
 * rounded down to a query tile. */
static void query_range(Builder *b, const Op *op, Value *j0, int64_t BM, int64_t BN, Value *nq, Value **start,
                        Value **end) {
    Attr *band = op_attr(op, "band");
    Attr *lo = band ? attrs_get(band->entries, band->n, "lo") : NULL;
    Attr *hi = band ? attrs_get(band->entries, band->n, "hi") : NULL;
    Value *zero = b_index(b, 0);
    *start = zero, *end = nq;
    if (hi && attrs_get(hi->entries, hi->n, "i")->i == 1) {   /* band_at(hi, 0) = Kh */
        Value *first = b_bin(b, OP_MAX, zero, b_bin(b, OP_SUB, j0, band_at(b, hi, zero)));
        *start = b_bin(b, OP_MUL, b_bin(b, OP_FLOORDIV, first, b_index(b, BM)), b_index(b, BM));
        *start = b_bin(b, OP_MIN, *start, nq);
    }
    if (lo && attrs_get(lo->entries, lo->n, "i")->i == 1) {
        Value *last = b_bin(b, OP_SUB, b_bin(b, OP_ADD, j0, b_index(b, BN)), band_at(b, lo, zero));
        *end = b_bin(b, OP_MAX, *start, b_bin(b, OP_MIN, nq, last));
    }
}

static Type *tensor4(Arena *a, ScalarKind k, Dim d0, Dim d1, Dim d2, Dim d3) {
    Dim d[4] = {d0, d1, d2, d3};
    return type_shaped(a, TY_TENSOR, k, 4, d);
}

/* One score tile of the backward, in either orientation (i and j are index
 * tiles along the tile's query and key axes): from the scaled scores `s`
 * (in acc), the score hook, then the tile's bounds (j < nk, and i < nq when
 * nq is given; nk NULL: an interior tile, no mask) and the mask hiding
 * scores; P = exp(S' − lse). dS is made
 * by backward_ds once dP is known. `zeros` (an f32 tile of 0 of the tile's
 * shape) broadcasts what a hook yields to the full tile. */
typedef struct BwdScores {
    Value *pre, *p;   /* the scores before the hook (for its derivative); P in f32 */
} BwdScores;

static BwdScores backward_p(Builder *b, const Op *op, Map *memrefs, Value *s, Value *bi, Value *h, Value *i,
                            Value *j, Value *nk, Value *nq, Value *lse, Value *zeros) {
    ScalarKind acc = s->type->elem;
    BwdScores r = {s, NULL};
    if (op->regions[0].nblocks) {
        Value *hargs[5] = {b_cast(b, s, SK_F32), bi, h, i, j};
        s = b_cast(b, b_bin(b, OP_ADD, vectorise(b, op->regions[0].blocks[0], hargs, memrefs), zeros), acc);
    }
    Value *valid = NULL;
    if (nk) {
        valid = b_cmp(b, "lt", j, nk);
        if (nq)
            valid = b_bin(b, OP_AND, valid, b_cmp(b, "lt", i, nq));
    }
    if (valid && op->regions[2].nblocks) {
        Value *margs[4] = {bi, h, i, j};
        valid = b_bin(b, OP_AND, valid, vectorise(b, op->regions[2].blocks[0], margs, memrefs));
    }
    if (valid)
        s = b_select(b, valid, s, b_float(b, acc, -INFINITY));
    r.p = b_unary(b, OP_EXP, b_bin(b, OP_SUB, b_cast(b, s, SK_F32), lse));
    return r;
}

/* dS = P ∘ (dP − D) ∘ score'(S before the hook), in f32. */
static Value *backward_ds(Builder *b, const Op *op, Map *memrefs, BwdScores sc, Value *dp, Value *delta, Value *bi,
                          Value *h, Value *i, Value *j, Value *zeros) {
    Value *ds = b_bin(b, OP_MUL, sc.p, b_bin(b, OP_SUB, dp, delta));
    if (op->regions[1].nblocks) {
        Value *hargs[5] = {b_cast(b, sc.pre, SK_F32), bi, h, i, j};
        ds = b_bin(b, OP_MUL, ds, b_bin(b, OP_ADD, vectorise(b, op->regions[1].blocks[0], hargs, memrefs), zeros));
    }
    return ds;
}

/* The deterministic dQ kernel (schedule `deterministic;`): a program per BM
 * query rows of one (batch, head), which recomputes P and dP over the key
 * tiles its rows can see (the forward's key segments) and sums dS·K in its
 * own registers, in a fixed order: no atomics, the same bits every run
 * (Triton's and FlexAttention's plan: two more products than the atomics). */
static Op *dq_kernel(PassContext *ctx, Builder *outer, Op *op, Value **grid, Value *delta_in, PtrVec *side, int64_t BM,
                     int64_t BN) {
    Arena *a = ctx->arena;
    const Type *qt = op->operands[0]->type, *kt = op->operands[1]->type, *vt = op->operands[2]->type;
    const int64_t D = qt->dims[3].size, DV = vt->dims[3].size;
    ScalarKind acc = op_attr(op, "acc")->type->elem, dt = qt->elem, F = SK_F32;
    double scale = op_attr(op, "scale")->f;
    const int rows_cols[2] = {2, 3}, row_vec[2] = {2, -1};
    int nin = 6 + side->len;
    Value **inputs = NEW_ARRAY(a, Value *, nin), **args;
    Value *in6[6] = {op->operands[0], op->operands[1], op->operands[2], op->operands[4], op->operands[5], delta_in};
    memcpy(inputs, in6, sizeof in6);
    for (int i = 0; i < side->len; i++)
        inputs[6 + i] = side->items[i];
    Type *dq_t = (Type *)qt;
    Op *l = make_launch(outer, op->loc, grid, nin, inputs, 1, &dq_t, (const char *[]){op->results[0]->name}, &args);
    Builder b = {a, l->regions[0].blocks[0], NULL, op->loc};
    Map memrefs;
    map_init(&memrefs, false);
    for (int i = 0; i < side->len; i++)
        map_put(a, &memrefs, side->items[i], args[9 + i]);
    Value *H = b_dim(&b, qt->dims[1]), *HK = b_dim(&b, kt->dims[1]), *zero = b_index(&b, 0);
    Value *bi = b_bin(&b, OP_FLOORDIV, args[1], H), *h = b_bin(&b, OP_REM, args[1], H);
    Value *kh = b_bin(&b, OP_FLOORDIV, h, b_bin(&b, OP_FLOORDIV, H, HK));
    Value *r0 = b_bin(&b, OP_MUL, args[0], b_index(&b, BM));
    Value *qi[4] = {bi, h, r0, zero}, *li[3] = {bi, h, r0};
    Value *q = load(&b, args[3], qi, rows_cols, b_tile_type(&b, dt, BM, D), 0);
    Value *dout = load(&b, args[7], qi, rows_cols, b_tile_type(&b, dt, BM, DV), 0);
    Value *lse = load(&b, args[6], li, row_vec, b_tile_type(&b, F, BM, 1), 0);
    lse = b_select(&b, b_cmp(&b, "eq", lse, b_float(&b, F, -INFINITY)), b_float(&b, F, 0), lse);
    Value *delta = load(&b, args[8], li, row_vec, b_tile_type(&b, F, BM, 1), 0);
    Value *i = b_bin(&b, OP_ADD, b_iota(&b, 0, BM, 1), r0), *nk = b_dim(&b, kt->dims[2]);
    Segment seg[3];
    int nseg = key_segments(&b, op, 2, r0, BM, BN, nk, seg);
    Value *dq = b_splat(&b, b_float(&b, acc, 0), BM, D), *zeros = b_splat(&b, b_float(&b, F, 0), BM, BN);
    for (int k = 0; k < nseg; k++) {
        Builder body;
        Value *j0, **c;
        Op *loop = new_for(&b, seg[k].start, seg[k].end, b_index(&b, BN), 1, &dq, &body, &j0, &c);
        Value *ki[4] = {bi, kh, j0, b_index(&body, 0)};
        Value *ktile = load(&body, args[4], ki, rows_cols, b_tile_type(&body, dt, BN, D), 0);
        Value *vtile = load(&body, args[5], ki, rows_cols, b_tile_type(&body, dt, BN, DV), 0);
        Value *j = b_bin(&body, OP_ADD, b_iota(&body, 1, 1, BN), j0);
        Value *kT = b_emit(&body, OP_TRANS, b_tile_type(&body, dt, D, BN), 1, &ktile);
        Value *s_ops[3] = {q, kT, b_splat(&body, b_float(&body, acc, 0), BM, BN)};
        Value *st = b_bin(&body, OP_MUL, b_emit(&body, OP_DOT, b_tile_type(&body, acc, BM, BN), 3, s_ops),
                          b_float(&body, acc, scale));
        BwdScores sc = backward_p(&body, op, &memrefs, st, bi, h, i, j, seg[k].masked ? nk : NULL, NULL, lse, zeros);
        Value *vT = b_emit(&body, OP_TRANS, b_tile_type(&body, dt, DV, BN), 1, &vtile);
        Value *dp_ops[3] = {dout, vT, b_splat(&body, b_float(&body, acc, 0), BM, BN)};
        Value *dp = b_cast(&body, b_emit(&body, OP_DOT, b_tile_type(&body, acc, BM, BN), 3, dp_ops), F);
        Value *ds = backward_ds(&body, op, &memrefs, sc, dp, delta, bi, h, i, j, zeros);
        Value *dq_ops[3] = {b_cast(&body, ds, dt), ktile, c[0]};
        Value *next = b_emit(&body, OP_DOT, c[0]->type, 3, dq_ops);
        yield(&body, 1, &next);
        dq = loop->results[0];
    }
    store(&b, args[3 + nin], b_cast(&b, b_bin(&b, OP_MUL, b_cast(&b, dq, F), b_float(&b, F, scale)), dt), qi, rows_cols);
    yield(&b, 0, NULL);
    return l;
}

/* The index of a program's BM query rows of one (batch, head), for the
 * backward's per-query-tile kernels (grid [ceil(Nq/BM), B·Hq]): (b, h, r0, 0). */
static void query_tile_index(Builder *b, Value **args, Dim Hq, int64_t BM, Value **idx) {
    Value *H = b_dim(b, Hq), *zero = b_index(b, 0);
    Value *bi = b_bin(b, OP_FLOORDIV, args[1], H), *h = b_bin(b, OP_REM, args[1], H);
    idx[0] = bi, idx[1] = h, idx[2] = b_bin(b, OP_MUL, args[0], b_index(b, BM)), idx[3] = zero;
}

static bool tile_attention_backward(PassContext *ctx, Op *func, Op *op) {
    bool deterministic = schedule_directive(func, ctx->arch, SCHED_DETERMINISTIC) != NULL;
    const Type *qt = op->operands[0]->type, *kt = op->operands[1]->type, *vt = op->operands[2]->type;
    if (qt->dims[3].sym || vt->dims[3].sym)
        return true;   /* symbolic head dims: the frontend never makes these */
    Arena *a = ctx->arena;
    const int64_t BM = 64, BN = 64, D = qt->dims[3].size, DV = vt->dims[3].size;
    ScalarKind acc = op_attr(op, "acc")->type->elem, dt = qt->elem, F = SK_F32;
    double scale = op_attr(op, "scale")->f;
    Dim Bd = qt->dims[0], Hq = qt->dims[1], Hk = kt->dims[1], Nq = qt->dims[2], Nk = kt->dims[2];
    Builder outer = {a, NULL, NULL, op->loc};
    Block tmp = {0};
    outer.blk = &tmp;
    const int rows_cols[2] = {2, 3}, row_vec[2] = {2, -1}, col_vec[2] = {-1, 2};
    Value **args;

    /* preprocess: D = rowsum(do ∘ o) */
    Value *pre_in[2] = {op->operands[3], op->operands[5]};
    Type *delta_t = type_shaped(a, TY_TENSOR, F, 3, (Dim[3]){Bd, Hq, Nq});
    Value *qgrid[3] = {b_ceildiv(&outer, b_dim(&outer, Nq), BM), b_bin(&outer, OP_MUL, b_dim(&outer, Bd), b_dim(&outer, Hq)),
                       b_index(&outer, 1)};
    Op *pre = make_launch(&outer, op->loc, qgrid, 2, pre_in, 1, &delta_t, (const char *[]){"delta"}, &args);
    {
        Builder b = {a, pre->regions[0].blocks[0], NULL, op->loc};
        Value *idx[4];
        query_tile_index(&b, args, Hq, BM, idx);
        Value *o = load(&b, args[3], idx, rows_cols, b_tile_type(&b, dt, BM, DV), 0);
        Value *dout = load(&b, args[4], idx, rows_cols, b_tile_type(&b, dt, BM, DV), 0);
        Value *d = b_row_reduce(&b, "sum", b_bin(&b, OP_MUL, b_cast(&b, dout, F), b_cast(&b, o, F)));
        store(&b, args[5], d, idx, row_vec);
        yield(&b, 0, NULL);
    }
    block_append(&tmp, pre);

    /* main: dK, dV per key tile; dQ accumulated */
    PtrVec side = {0};
    collect_side_tensors(op, a, &side);
    int nin = 6 + side.len;
    Value **inputs = NEW_ARRAY(a, Value *, nin);
    Value *main_in[6] = {op->operands[0], op->operands[1], op->operands[2], op->operands[4], op->operands[5],
                         pre->results[0]};
    memcpy(inputs, main_in, sizeof main_in);
    for (int i = 0; i < side.len; i++)
        inputs[6 + i] = side.items[i];
    Type *main_t[3] = {(Type *)kt, (Type *)vt, tensor4(a, F, Bd, Hq, Nq, qt->dims[3])};
    int nmain = deterministic ? 2 : 3;   /* dk, dv [, the dQ accumulator] */
    Value *kgrid[3] = {b_ceildiv(&outer, b_dim(&outer, Nk), BN), b_bin(&outer, OP_MUL, b_dim(&outer, Bd), b_dim(&outer, Hk)),
                       b_index(&outer, 1)};
    Op *mainl = make_launch(&outer, op->loc, kgrid, nin, inputs, nmain, main_t,
                            (const char *[]){op->results[1]->name, op->results[2]->name, "dq_acc"}, &args);
    if (!deterministic)
        op_set_attr(a, mainl, "zeroed", attr_array(a, 1, (Attr *[]){attr_int(a, 2)}));
    {
        Builder b = {a, mainl->regions[0].blocks[0], NULL, op->loc};
        Value *Q = args[3], *K = args[4], *V = args[5], *LSE = args[6], *DO = args[7], *DELTA = args[8];
        Value *DK = args[3 + nin], *DV_ = args[4 + nin], *DQ = deterministic ? NULL : args[5 + nin];
        Map memrefs;
        map_init(&memrefs, false);
        for (int i = 0; i < side.len; i++)
            map_put(a, &memrefs, side.items[i], args[9 + i]);
        Value *HK = b_dim(&b, Hk), *G = b_bin(&b, OP_FLOORDIV, b_dim(&b, Hq), HK), *zero = b_index(&b, 0);
        Value *bi = b_bin(&b, OP_FLOORDIV, args[1], HK), *kh = b_bin(&b, OP_REM, args[1], HK);
        Value *j0 = b_bin(&b, OP_MUL, args[0], b_index(&b, BN));
        Value *ki[4] = {bi, kh, j0, zero};
        Value *ktile = load(&b, K, ki, rows_cols, b_tile_type(&b, dt, BN, D), 0);
        Value *vtile = load(&b, V, ki, rows_cols, b_tile_type(&b, dt, BN, DV), 0);
        Value *j = b_bin(&b, OP_ADD, b_iota(&b, 0, BN, 1), j0);   /* keys down the rows */
        Value *nq = b_dim(&b, Nq), *nk = b_dim(&b, Nk), *fzero = b_float(&b, acc, 0);
        /* dK and dV: with an f16 accumulator, each query head's sum is its
         * own (in f16, as the unfused matmul's) and the group's heads are
         * added in f32, as attn.sum_heads does; with f32, one accumulator */
        bool per_head = acc == SK_F16;
        Value *f32zero = b_float(&b, F, 0);
        Value *init[2] = {b_splat(&b, per_head ? f32zero : fzero, BN, D), b_splat(&b, per_head ? f32zero : fzero, BN, DV)};
        Builder gb, mb;
        Value *g, *m0, **gc, **mc;
        Op *gl = new_for(&b, zero, G, b_index(&b, 1), 2, init, &gb, &g, &gc);
        Value *h = b_bin(&gb, OP_ADD, b_bin(&gb, OP_MUL, kh, G), g);
        Value *m_start, *m_end;
        query_range(&gb, op, j0, BM, BN, nq, &m_start, &m_end);
        Value *head_init[2] = {b_splat(&gb, b_float(&gb, acc, 0), BN, D), b_splat(&gb, b_float(&gb, acc, 0), BN, DV)};
        Op *ml = new_for(&gb, m_start, m_end, b_index(&gb, BM), 2, per_head ? head_init : gc, &mb, &m0, &mc);
        Value *qi[4] = {bi, h, m0, b_index(&mb, 0)};
        Value *q = load(&mb, Q, qi, rows_cols, b_tile_type(&mb, dt, BM, D), 0);
        Value *dout = load(&mb, DO, qi, rows_cols, b_tile_type(&mb, dt, BM, DV), 0);
        Value *li[3] = {bi, h, m0};
        Value *lse = load(&mb, LSE, li, col_vec, b_tile_type(&mb, F, 1, BM), 0);
        Value *ninf32 = b_float(&mb, F, -INFINITY);
        lse = b_select(&mb, b_cmp(&mb, "eq", lse, ninf32), b_float(&mb, F, 0), lse);
        Value *delta = load(&mb, DELTA, li, col_vec, b_tile_type(&mb, F, 1, BM), 0);
        Value *i = b_bin(&mb, OP_ADD, b_iota(&mb, 1, 1, BM), m0);   /* queries across */
        Value *qT = b_emit(&mb, OP_TRANS, b_tile_type(&mb, dt, D, BM), 1, &q);
        Value *ops[3] = {ktile, qT, b_splat(&mb, b_float(&mb, acc, 0), BN, BM)};
        Value *st = b_bin(&mb, OP_MUL, b_emit(&mb, OP_DOT, b_tile_type(&mb, acc, BN, BM), 3, ops),
                          b_float(&mb, acc, scale));
        Value *zeros = b_splat(&mb, b_float(&mb, F, 0), BN, BM);
        BwdScores sc = backward_p(&mb, op, &memrefs, st, bi, h, i, j, nk, nq, lse, zeros);
        Value *p = sc.p;
        Value *pc = b_cast(&mb, p, dt);
        Value *dv_ops[3] = {pc, dout, mc[1]};
        Value *dv = b_emit(&mb, OP_DOT, mc[1]->type, 3, dv_ops);
        Value *doT = b_emit(&mb, OP_TRANS, b_tile_type(&mb, dt, DV, BM), 1, &dout);
        Value *dp_ops[3] = {vtile, doT, b_splat(&mb, b_float(&mb, acc, 0), BN, BM)};
        Value *dp = b_cast(&mb, b_emit(&mb, OP_DOT, b_tile_type(&mb, acc, BN, BM), 3, dp_ops), F);
        Value *ds = backward_ds(&mb, op, &memrefs, sc, dp, delta, bi, h, i, j, zeros);
        Value *dsc = b_cast(&mb, ds, dt);
        Value *dk_ops[3] = {dsc, q, mc[0]};
        Value *dk = b_emit(&mb, OP_DOT, mc[0]->type, 3, dk_ops);
        if (!deterministic) {
            Value *dsT = b_emit(&mb, OP_TRANS, b_tile_type(&mb, dt, BM, BN), 1, &dsc);
            Value *dq_ops[3] = {dsT, ktile, b_splat(&mb, b_float(&mb, acc, 0), BM, D)};
            Value *dq = b_cast(&mb, b_emit(&mb, OP_DOT, b_tile_type(&mb, acc, BM, D), 3, dq_ops), F);
            Value *aops[6] = {DQ, dq, bi, h, m0, b_index(&mb, 0)};
            Op *add = op_create(a, OP_ATOMIC_ADD, 6, aops, 0, NULL, 0);
            add->loc = op->loc;
            op_set_attr(a, add, "dims", attr_array(a, 2, (Attr *[]){attr_int(a, 2), attr_int(a, 3)}));
            block_append(mb.blk, add);
        }
        Value *next[2] = {dk, dv};
        yield(&mb, 2, next);
        Value *gnext[2] = {ml->results[0], ml->results[1]};
        if (per_head)
            for (int x = 0; x < 2; x++)
                gnext[x] = b_bin(&gb, OP_ADD, gc[x], b_cast(&gb, gnext[x], F));
        yield(&gb, 2, gnext);
        Value *dkf = b_cast(&b, b_bin(&b, OP_MUL, b_cast(&b, gl->results[0], F), b_float(&b, F, scale)), dt);
        store(&b, DK, dkf, ki, rows_cols);
        store(&b, DV_, b_cast(&b, b_cast(&b, gl->results[1], F), dt), ki, rows_cols);
        yield(&b, 0, NULL);
    }
    block_append(&tmp, mainl);
    Op *post;
    if (deterministic) {
        /* 16-bit Q and dO tiles, and K and V tiles per key segment (up to
         * three loops): 32 keys where 64 would not fit (sm_70 at head dim 128) */
        int64_t smem = 2 * (BM * (D + DV) + 3 * BN * (D + DV));
        int64_t dq_bn = smem > target_lookup(ctx->arch)->smem_limit ? BN / 2 : BN;
        post = dq_kernel(ctx, &outer, op, qgrid, pre->results[0], &side, BM, dq_bn);
        block_append(&tmp, post);
        goto placed;
    }

    /* postprocess: dq = scale · dQacc */
    Value *post_in[1] = {mainl->results[2]};
    Type *dq_t = (Type *)qt;
    post = make_launch(&outer, op->loc, qgrid, 1, post_in, 1, &dq_t, (const char *[]){op->results[0]->name}, &args);
    {
        Builder b = {a, post->regions[0].blocks[0], NULL, op->loc};
        Value *idx[4];
        query_tile_index(&b, args, Hq, BM, idx);
        Value *x = load(&b, args[3], idx, rows_cols, b_tile_type(&b, F, BM, D), 0);
        store(&b, args[4], b_cast(&b, b_bin(&b, OP_MUL, x, b_float(&b, F, scale)), dt), idx, rows_cols);
        yield(&b, 0, NULL);
    }
    block_append(&tmp, post);
placed:
    replace_with(ctx, op, &tmp, (Value *[]){post->results[0], mainl->results[0], mainl->results[1]});
    return true;
}

/* ---- everything else: row kernels ------------------------------------------------
 * An elementwise op, a reduction or a softmax over the last axis, on tensors
 * of rank 1 or 2 whose last dimension is a number, becomes a kernel with a
 * program per RB rows, each holding whole rows [RB, N] in one tile. RB is the
 * target's row_block (target.c): 2 where the code generator keeps a tile in
 * registers (2 rows of 4096 are 64 values per thread, 16 would spill).
 * Reductions and softmax compute in f32 and round once, as attn.reduce does. */

static int64_t row_block(const char *arch) { return target_lookup(arch)->row_block; }

static bool is_row_op(const Op *op) {
    bool elementwise = op_kind_has(op->kind, OPF_ELEMENTWISE) && !op_kind_has(op->kind, OPF_INDEX);
    if (!elementwise && op->kind != OP_REDUCE && op->kind != OP_SOFTMAX)
        return false;
    const Type *r = op->results[0]->type;
    if (r->kind != TY_TENSOR || r->rank < 1 || r->rank > 2)
        return false;
    for (int i = 0; i < op->noperands; i++) {
        const Type *t = op->operands[i]->type;
        if (t->kind == TY_TENSOR ? (t->rank < 1 || t->rank > 2 || t->dims[t->rank - 1].sym)
                                 : !(op->operands[i]->def && (op->operands[i]->def->kind == OP_CONSTANT ||
                                                               op->operands[i]->def->kind == OP_DIM)))
            return false;
    }
    return !r->dims[r->rank - 1].sym;
}

/* The [rows, cols] tile of a tensor of rank 1 or 2 seen as rows of a
 * program: rank 1 is one row; a dimension of 1 stays 1 (broadcast). */
static Value *row_tile_load(Builder *b, Value *mem, Value *r0, int64_t RB) {
    const Type *t = mem->type;
    int dims[2];
    Value *idx[2];
    int64_t shape[2];
    if (t->rank == 1) {
        dims[0] = -1, dims[1] = 0;
        idx[0] = b_index(b, 0);
        shape[0] = 1, shape[1] = t->dims[0].size;
    } else {
        bool one = !t->dims[0].sym && t->dims[0].size == 1;
        dims[0] = 0, dims[1] = 1;
        idx[0] = one ? b_index(b, 0) : r0;
        idx[1] = b_index(b, 0);
        shape[0] = one ? 1 : RB, shape[1] = t->dims[1].size;
    }
    return load(b, mem, idx, dims, b_tile_type(b, t->elem, shape[0], shape[1]), 0);
}


static bool tile_rows(PassContext *ctx, Op *func, Op *op) {
    const int64_t RB = row_block(ctx->arch);
    const Type *rt = op->results[0]->type;
    PtrVec tensors = {0};
    for (int i = 0; i < op->noperands; i++)
        if (op->operands[i]->type->kind == TY_TENSOR)
            vec_push(ctx->arena, &tensors, op->operands[i]);
    Builder outer = {ctx->arena, NULL, NULL, op->loc};
    Block tmp = {0};
    outer.blk = &tmp;
    Value *rows = rt->rank == 2 ? b_dim(&outer, rt->dims[0]) : b_index(&outer, 1);
    Value *grid[3] = {b_index(&outer, 1), b_ceildiv(&outer, rows, RB), b_index(&outer, 1)};
    Value **args;
    Op *l = new_launch(&outer, op, grid, tensors.len, (Value **)tensors.items, &args);
    Builder b = {ctx->arena, l->regions[0].blocks[0], NULL, op->loc};
    Value *r0 = b_bin(&b, OP_MUL, args[1], b_index(&b, RB));
    Value *x[3];
    int ti = 0;
    for (int i = 0; i < op->noperands; i++) {
        Value *v = op->operands[i];
        if (v->type->kind == TY_TENSOR) {
            x[i] = row_tile_load(&b, args[3 + ti++], r0, RB);
        } else {   /* a scalar constant or dimension, recomputed inside */
            Value *c = b_emit(&b, v->def->kind, v->type, 0, NULL);
            c->def->attrs = v->def->attrs;
            c->def->nattrs = v->def->nattrs;
            x[i] = c;
        }
    }
    Value *y;
    if (op->kind == OP_REDUCE || op->kind == OP_SOFTMAX) {
        const char *kind = op->kind == OP_SOFTMAX ? "softmax" : op_attr(op, "kind")->s;
        Value *f = b_cast(&b, x[0], SK_F32);
        int64_t n = f->type->dims[1].size;
        if (strcmp(kind, "max") == 0) {
            y = b_row_reduce(&b, "max", f);
        } else if (strcmp(kind, "sum") == 0 || strcmp(kind, "mean") == 0) {
            y = b_row_reduce(&b, "sum", f);
            if (kind[0] == 'm')
                y = b_bin(&b, OP_DIV, y, b_float(&b, SK_F32, (double)n));
        } else {   /* softmax, logsumexp: a row of -inf gives 0, -inf */
            Value *m = b_row_reduce(&b, "max", f);
            Value *ninf = b_float(&b, SK_F32, -INFINITY);
            Value *msafe = b_select(&b, b_cmp(&b, "eq", m, ninf), b_float(&b, SK_F32, 0), m);
            Value *e = b_unary(&b, OP_EXP, b_bin(&b, OP_SUB, f, msafe));
            Value *s = b_row_reduce(&b, "sum", e);
            if (strcmp(kind, "softmax") == 0)
                y = b_bin(&b, OP_DIV, e, b_select(&b, b_cmp(&b, "eq", s, b_float(&b, SK_F32, 0)), b_float(&b, SK_F32, 1), s));
            else
                y = b_bin(&b, OP_ADD, m, b_unary(&b, OP_LOG, s));
        }
        y = b_cast(&b, y, rt->elem);
    } else {
        Type *yt = type_scalar(b.a, rt->elem);
        for (int i = 0; i < op->noperands; i++)
            yt = b_bcast(&b, yt, x[i]->type, rt->elem);
        y = b_emit(&b, op->kind, yt, op->noperands, x);
        y->def->attrs = op->attrs;
        y->def->nattrs = op->nattrs;
    }
    /* store: as many rows as the result has (1 for rank 1 or a row of 1) */
    Value *out = args[3 + tensors.len];
    int dims[2] = {0, 1};
    Value *idx[2] = {r0, b_index(&b, 0)};
    if (rt->rank == 1) {
        dims[0] = -1, dims[1] = 0;
        idx[0] = b_index(&b, 0);
    }
    int64_t want_rows = rt->rank == 1 ? 1 : RB, want_cols = rt->dims[rt->rank - 1].size;
    if (y->type->kind == TY_SCALAR || y->type->dims[0].size != want_rows || y->type->dims[1].size != want_cols)
        y = b_bin(&b, OP_ADD, y, b_splat(&b, b_float(&b, rt->elem, 0), want_rows, want_cols));   /* broadcast out */
    store(&b, out, y, idx, dims);
    yield(&b, 0, NULL);
    replace_with_launch(ctx, op, &tmp, l);
    return true;
}

static bool run(Op *module, PassContext *ctx);

bool pass_tiling(Op *module, PassContext *ctx) {
    rows_round_down = false;
    return run(module, ctx);
}

bool pass_test_tiling_rows_round_down(Op *module, PassContext *ctx) {
    rows_round_down = true;
    bool ok = run(module, ctx);
    rows_round_down = false;
    return ok;
}

static bool run(Op *module, PassContext *ctx) {
    if (!ctx->arch)
        ctx->arch = target_default()->name;
    map_init(&replaced, false);
    for_each_op(func, op_body(module))
        for (Op *op = op_body(func)->first, *next; op; op = next) {
            next = op->next;
            redirect(op);   /* a value defined before op is used by op or later */
            bool ok = op->kind == OP_FUSED_GEMM ? tile_gemm(ctx, func, op)
                    : op->kind == OP_ATTENTION  ? tile_attention(ctx, func, op)
                    : op->kind == OP_ATTENTION_BWD ? tile_attention_backward(ctx, func, op)
                    : is_row_op(op)             ? tile_rows(ctx, func, op)
                                                : true;
            if (!ok)
                return false;
        }
    return true;
}
