/* tiling_backward.c — attn.attention_backward as its kernels: the
 * preprocess, the key-block kernel (dK, dV; dQ by atomics or its own
 * kernel), the postprocess (the tiling pass: tiling.c). */
#include "passes/tiling.h"

#include <math.h>
#include <string.h>

/* ---- the attention backward ----------------------------------------------------------
 * attn.attention_backward becomes three kernels (FlashAttention-2's plan,
 * doc/backward.md):
 *
 *   preprocess  a program per query tile of one (batch, head):
 *               D = rowsum(do ∘ o), f32 [B, Hq, Nq], or with lse·log2(e)
 *               a row per query tile (RowVectors)
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

/* Entry `name` of op's band (mask-analysis: "lo", "hi", "exact"), or NULL. */
static Attr *band_attr(const Op *op, const char *name) {
    Attr *band = op_attr(op, "band");
    return band ? attrs_get(band->entries, band->n, name) : NULL;
}

/* Whether a band bound moves one key per query row, i + K (causal, windows). */
static bool per_row(const Attr *bound) { return attrs_get(bound->entries, bound->n, "i")->i == 1; }

/* The query rows [start, end) that can see a key of [j0, j0 + BN): with
 * hi(i) = i + Kh, a query sees key j0 only from i = j0 − Kh on; with lo(i) =
 * i + Kl, no query past j0 + BN − 1 − Kl sees the tile. Bounds with another
 * slope leave the range whole (masked elementwise, still right). start is
 * rounded down to a query tile. */
static void query_range(Builder *b, const Op *op, Value *j0, int64_t BM, int64_t BN, Value *nq, Value **start,
                        Value **end) {
    Attr *lo = band_attr(op, "lo"), *hi = band_attr(op, "hi");
    Value *zero = b_index(b, 0);
    *start = zero, *end = nq;
    if (hi && per_row(hi)) {   /* band_at(hi, 0) = Kh */
        Value *first = b_bin(b, OP_MAX, zero, b_bin(b, OP_SUB, j0, band_at(b, hi, zero)));
        *start = b_bin(b, OP_MUL, b_bin(b, OP_FLOORDIV, first, b_index(b, BM)), b_index(b, BM));
        *start = b_bin(b, OP_MIN, *start, nq);
    }
    if (lo && per_row(lo)) {
        Value *last = b_bin(b, OP_SUB, b_bin(b, OP_ADD, j0, b_index(b, BN)), band_at(b, lo, zero));
        *end = b_bin(b, OP_MAX, *start, b_bin(b, OP_MIN, nq, last));
    }
}

static Type *tensor4(Arena *a, ScalarKind k, Dim d0, Dim d1, Dim d2, Dim d3) {
    Dim d[4] = {d0, d1, d2, d3};
    return type_shaped(a, TY_TENSOR, k, 4, d);
}

/* Packed sequences (attn.pad of every operand; doc/dsl.md): the kernels
 * take the packed tensors, q, o, do [Tq, Hq, D] and k, v [Tk, Hkv, D],
 * lse and D [Hq, Tq], and make packed gradients. The row kernels
 * (preprocess, postprocess, kv_kernel) run over the packed rows whatever
 * their sequence; the key-tile kernel and the deterministic dQ kernel
 * make a program per tile of every sequence (sequence_of_tile), whose rows
 * past the sequence's end are another sequence's or no sequence's: masked
 * as queries past Nq are, and their lse and D (anything there, NaN too:
 * the forward writes no row of no sequence) made 0, so that their P and dS
 * are 0. */
typedef struct Seqs {
    const Type *q, *k;    /* the packed q and k */
    Value *cu_q, *cu_k;   /* the offsets (side tensors of the kernels) */
} Seqs;

/* RowVectors: where the kernels read lse and D. Tiled, where the target
 * copies f32 rows (target.h copies_f32_rows: sm_90a's TMA) and the
 * sequences are not packed: the preprocess writes each query tile's BM
 * values of D and of lse·log2(e) as one row of [B, Hq, QT, BM], QT =
 * max(1, ceil(Nq / BM)) (a let dim), rows past Nq 0 — rows of a static
 * length, which double-buffer pipelines with Q and dO (TMA's strides are
 * multiples of 16 bytes whatever Nq is), as FlashAttention-3's preprocess
 * pads its LSE and dPsum buffers. Else by query rows: the forward's lse
 * [B, Hq, Nq] and D [B, Hq, Nq] (packed: [Hq, Tq], where a sequence's
 * query tile starts anywhere), loaded in the loop. */

/* The packed tensor operand i of op is a view of. */
static Value *packed(const Op *op, int i) { return padded(op, i)->operands[0]; }

/* One score tile of the backward, in either orientation (i and j are index
 * tiles along the tile's query and key axes): from the product `dot` (in
 * acc) times `scale`, the score hook, then the tile's bounds (j < nk, and i < nq when
 * nq is given; nk NULL: an interior tile, no mask) and the mask hiding
 * scores; P = exp(S' − lse), as exp2 (backward_p). dS is made
 * by backward_ds once dP is known. `zeros` (an f32 tile of 0 of the tile's
 * shape) broadcasts what a hook yields to the full tile. */
typedef struct BwdScores {
    Value *pre, *p;   /* the scores before the hook (for its derivative); P in f32 */
    Value *valid;     /* the scores the bounds and the mask leave visible, or NULL: every one */
} BwdScores;

static const double log2e = 1.4426950408889634;

/* lse·log2(e), with lse = −inf (a row that sees no key) read as 0, so that
 * P = exp2(… − it) is 0, not NaN: in the key-tile loop (by rows), or once
 * in the preprocess (RowVectors tiled). */
static Value *lse_log2e(Builder *b, Value *lse) {
    Value *l2 = b_bin(b, OP_MUL, lse, b_float(b, SK_F32, log2e));
    return b_select(b, b_cmp(b, "eq", lse, b_float(b, SK_F32, -INFINITY)), b_float(b, SK_F32, 0), l2);
}

static BwdScores backward_p(Builder *b, const Op *op, Map *memrefs, Value *dot, double scale, Value *bi, Value *h,
                            Value *i, Value *j, Value *nk, Value *nq, Value *lse, bool lse_log2, Value *zeros) {
    ScalarKind acc = dot->type->elem;
    Value *s = b_bin(b, OP_MUL, dot, b_float(b, acc, scale));
    bool hooked = op->regions[0].nblocks;
    BwdScores r = {s, NULL, NULL};
    if (hooked) {
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
    r.valid = valid;
    /* P = exp2(x·k − lse·log2(e)), one fma a score (FlashAttention-3's
     * form): with no hook between, x is the product and k = scale·log2(e),
     * else x is S' and k = log2(e). A hidden score's exponent is −inf: the
     * product is finite, so the mask selects +inf for what is subtracted,
     * leaving x·k to the subtraction alone (LLVM turns a select of x, or of
     * the product, into one between the product and the subtraction, which
     * keeps them apart; after the subtraction, the tile's predicates live
     * longer: sm_80's key-tile kernel spilled). A hook's x may be ±inf or
     * NaN where hidden (s / temp[j] past temp's end): the mask selects x.
     * An f16 product is scaled in f32, as online-softmax does, so the
     * exponent keeps its precision. */
    bool fold = !hooked && acc == SK_F32 && scale > 0;
    Value *x = fold ? dot : b_cast(b, s, SK_F32), *inf = b_float(b, SK_F32, INFINITY);
    if (valid && !fold)
        x = b_select(b, valid, x, b_float(b, SK_F32, -INFINITY));
    Value *s2 = b_bin(b, OP_MUL, x, b_float(b, SK_F32, fold ? scale * log2e : log2e));
    /* lse·log2(e) (lse_log2e; with lse_log2 the preprocess formed it),
     * formed after the scores' product, not where lse loads: the code
     * generators keep this order, and ptxas, given the compare first, waited for the load before
     * issuing the product (10 % of the sm_90a key-tile kernel's issue slots
     * at head dim 64, ncu on the H100). */
    Value *lse2 = lse_log2 ? lse : lse_log2e(b, lse);
    if (valid && fold)
        lse2 = b_select(b, valid, lse2, inf);
    r.p = b_unary(b, OP_EXP2, b_bin(b, OP_SUB, s2, lse2));
    return r;
}

/* dS = P ∘ (dP − D) ∘ score'(S before the hook), in f32. A hidden score
 * (past Nk or Nq, or masked) has P = 0 but its hook's derivative may be
 * infinite there (s / temp[j] with temp read as 0 past its end, sqrt(|s|)
 * at s = 0), and 0 · ∞ is NaN: its dS is selected to 0, not multiplied. */
static Value *backward_ds(Builder *b, const Op *op, Map *memrefs, BwdScores sc, Value *dp, Value *delta, Value *bi,
                          Value *h, Value *i, Value *j, Value *zeros) {
    Value *ds = b_bin(b, OP_MUL, sc.p, b_bin(b, OP_SUB, dp, delta));
    if (op->regions[1].nblocks) {
        Value *hargs[5] = {b_cast(b, sc.pre, SK_F32), bi, h, i, j};
        ds = b_bin(b, OP_MUL, ds, b_bin(b, OP_ADD, vectorise(b, op->regions[1].blocks[0], hargs, memrefs), zeros));
        if (sc.valid)
            ds = b_select(b, sc.valid, ds, b_float(b, SK_F32, 0));
    }
    return ds;
}

/* The deterministic dQ kernel (schedule `deterministic;`): a program per BM
 * query rows of one (batch, head), which recomputes P and dP over the key
 * tiles its rows can see (the forward's key segments) and sums dS·K in its
 * own registers, in a fixed order: no atomics, the same bits every run
 * (Triton's and FlexAttention's plan: two more products than the atomics). */
static Op *dq_kernel(PassContext *ctx, Builder *outer, Op *op, Value **grid, Op *pre, PtrVec *side, int64_t BM,
                     int64_t BN, const Seqs *sq, bool tiled) {
    Arena *a = ctx->arena;
    const Type *qt = op->operands[0]->type, *kt = op->operands[1]->type, *vt = op->operands[2]->type;
    const int64_t D = qt->dims[3].size, DV = vt->dims[3].size;
    ScalarKind acc = op_attr(op, "acc")->type->elem, dt = qt->elem, F = SK_F32;
    double scale = op_attr(op, "scale")->f;
    /* (packed sequences: rows along dim 0 of [T, H, D]; lse and D: RowVectors) */
    const int rows_cols[2] = {sq ? 0 : 2, sq ? 2 : 3}, row_vec[2] = {sq ? 1 : tiled ? 3 : 2, -1};
    int nin = 6 + side->len;
    Value **inputs = NEW_ARRAY(a, Value *, nin), **args;
    Value *in6[6] = {op->operands[0], op->operands[1], op->operands[2], tiled ? pre->results[1] : op->operands[4],
                     op->operands[5], pre->results[0]};
    for (int i = 0; sq && i < 5; i++)
        in6[i] = packed(op, i < 3 ? i : i + 1);
    memcpy(inputs, in6, sizeof in6);
    for (int i = 0; i < side->len; i++)
        inputs[6 + i] = side->items[i];
    Type *dq_t = sq ? (Type *)sq->q : (Type *)qt;
    Op *l = make_launch(outer, op->loc, grid, nin, inputs, 1, &dq_t, (const char *[]){op->results[0]->name}, &args);
    Builder b = {a, l->regions[0].blocks[0], NULL, op->loc};
    Map memrefs;
    map_init(&memrefs, false);
    for (int i = 0; i < side->len; i++)
        map_put(a, &memrefs, side->items[i], args[9 + i]);
    Value *H = b_dim(&b, qt->dims[1]), *HK = b_dim(&b, kt->dims[1]), *zero = b_index(&b, 0);
    Value *bi = b_bin(&b, OP_FLOORDIV, args[1], H), *h = b_bin(&b, OP_REM, args[1], H), *kh = NULL, *r0 = NULL;
    Value *nk = NULL, *k_start = NULL, *q_end = NULL;
    if (!sq) {
        kh = b_bin(&b, OP_FLOORDIV, h, b_bin(&b, OP_FLOORDIV, H, HK));
        r0 = b_bin(&b, OP_MUL, args[0], b_index(&b, BM));
    }
    Value *qi[4] = {bi, h, r0, zero}, *li[4] = {bi, h, tiled ? args[0] : r0, zero};
    if (sq) {   /* query tile r0 of sequence bi, its rows from q_start, its keys from k_start */
        h = args[1];
        QueryTile t = sequence_query_tile(&b, args[0], map_get(&memrefs, sq->cu_q), map_get(&memrefs, sq->cu_k),
                                          b_dim(&b, qt->dims[0]), BM);
        bi = t.seq, r0 = t.r0, k_start = t.k_start, nk = t.nk, q_end = t.q_end;
        Value *row = b_bin(&b, OP_ADD, t.q_start, r0);
        qi[0] = row, qi[1] = h, qi[2] = zero;
        li[0] = h, li[1] = row;
        kh = b_bin(&b, OP_FLOORDIV, h, b_bin(&b, OP_FLOORDIV, H, HK));
    }
    Value *q = t_load(&b, args[3], qi, rows_cols, b_tile_type(&b, dt, BM, D), 0);
    Value *dout = t_load(&b, args[7], qi, rows_cols, b_tile_type(&b, dt, BM, DV), 0);
    Value *lse = t_load(&b, args[6], li, row_vec, b_tile_type(&b, F, BM, 1), 0);
    Value *delta = t_load(&b, args[8], li, row_vec, b_tile_type(&b, F, BM, 1), 0);
    Value *i = b_bin(&b, OP_ADD, b_iota(&b, 0, BM, 1), r0);
    if (!sq)
        nk = b_dim(&b, kt->dims[2]);
    Segment seg[3];
    int nseg = key_segments(&b, op, 2, r0, BM, BN, nk, seg);
    Value *dq = b_splat(&b, b_float(&b, acc, 0), BM, D), *zeros = b_splat(&b, b_float(&b, F, 0), BM, BN);
    for (int k = 0; k < nseg; k++) {
        Builder body;
        Value *j0, **c;
        Op *loop = new_for(&b, seg[k].start, seg[k].end, b_index(&b, BN), 1, &dq, &body, &j0, &c);
        Value *ki[4] = {bi, kh, j0, b_index(&body, 0)};
        if (sq)
            ki[0] = b_bin(&body, OP_ADD, k_start, j0), ki[1] = kh, ki[2] = b_index(&body, 0);
        Value *ktile = t_load(&body, args[4], ki, rows_cols, b_tile_type(&body, dt, BN, D), 0);
        Value *vtile = t_load(&body, args[5], ki, rows_cols, b_tile_type(&body, dt, BN, DV), 0);
        Value *j = b_bin(&body, OP_ADD, b_iota(&body, 1, 1, BN), j0);
        Value *kT = b_emit(&body, OP_TRANS, b_tile_type(&body, dt, D, BN), 1, &ktile);
        Value *s_ops[3] = {q, kT, b_splat(&body, b_float(&body, acc, 0), BM, BN)};
        Value *st = b_emit(&body, OP_DOT, b_tile_type(&body, acc, BM, BN), 3, s_ops);
        BwdScores sc = backward_p(&body, op, &memrefs, st, scale, bi, h, i, j, seg[k].masked ? nk : NULL, NULL, lse, tiled,
                                  zeros);
        Value *vT = b_emit(&body, OP_TRANS, b_tile_type(&body, dt, DV, BN), 1, &vtile);
        Value *dp_ops[3] = {dout, vT, b_splat(&body, b_float(&body, acc, 0), BM, BN)};
        Value *dp = b_cast(&body, b_emit(&body, OP_DOT, b_tile_type(&body, acc, BM, BN), 3, dp_ops), F);
        Value *ds = backward_ds(&body, op, &memrefs, sc, dp, delta, bi, h, i, j, zeros);
        Value *dq_ops[3] = {b_cast(&body, ds, dt), ktile, c[0]};
        Value *next = b_emit(&body, OP_DOT, c[0]->type, 3, dq_ops);
        t_yield(&body, 1, &next);
        dq = loop->results[0];
    }
    Value *dqf = b_cast(&b, b_bin(&b, OP_MUL, b_cast(&b, dq, F), b_float(&b, F, scale)), dt);
    if (sq)   /* not past the sequence's rows: the next sequence's */
        t_store_bounded(&b, args[3 + nin], dqf, qi, rows_cols, 0, q_end);
    else
        t_store(&b, args[3 + nin], dqf, qi, rows_cols);
    t_yield(&b, 0, NULL);
    return l;
}

/* Where a row kernel's program reads and writes its `rows` rows: (b, h, r0,
 * 0) of [B, H, N, D] tensors, dims 2 and 3, and its row vector (b, h, r0)
 * of [B, H, N] along dim 2 (grid [ceil(N / rows), B·H]); of packed
 * sequences, (r0, h, 0) of [T, H, D], dims 0 and 2, and (h, r0) of [H, T]
 * along dim 1 (grid [ceil(T / rows), H]). */
typedef struct RowBox {
    Value *idx[4], *vidx[3];
    int dims[2], vdims[2];
} RowBox;

static RowBox row_box(Builder *b, Value **args, Dim heads, int64_t rows, bool seqs) {
    Value *H = b_dim(b, heads), *zero = b_index(b, 0);
    if (seqs) {
        Value *r0 = b_bin(b, OP_MUL, args[0], b_index(b, rows));
        return (RowBox){{r0, args[1], zero}, {args[1], r0}, {0, 2}, {1, -1}};
    }
    Value *bi = b_bin(b, OP_FLOORDIV, args[1], H), *h = b_bin(b, OP_REM, args[1], H);
    Value *r0 = b_bin(b, OP_MUL, args[0], b_index(b, rows));
    return (RowBox){{bi, h, r0, zero}, {bi, h, r0}, {2, 3}, {2, -1}};
}

/* The grid of a row kernel over t (the [B, H, N, D] view, or with seqs
 * its packed [T, H, D]), `rows` rows a program (row_box). */
static void row_grid(Builder *b, const Type *t, int64_t rows, bool seqs, Value **grid) {
    grid[0] = b_ceildiv(b, b_dim(b, t->dims[seqs ? 0 : 2]), rows);
    grid[1] = seqs ? b_dim(b, t->dims[1]) : b_bin(b, OP_MUL, b_dim(b, t->dims[0]), b_dim(b, t->dims[1]));
    grid[2] = b_index(b, 1);
}

/* preprocess: D = rowsum(dO ∘ O), a query tile a block (grid qgrid,
 * `rows` rows a block), as RowVectors says: by rows, D [B, Hq, Nq] or
 * packed [Hq, Tq]; tiled (qtiles.sym, QT), D and lse·log2(e) (−inf, a row
 * that sees no key, made 0 so that P = 0, not NaN) one row each of
 * [B, Hq, QT, rows], rows past Nq 0. */
static Op *preprocess_kernel(Builder *outer, const Op *op, Value **qgrid, int64_t rows, const Seqs *sq, Dim qtiles) {
    bool tiled = qtiles.sym != NULL;
    Arena *a = outer->a;
    const Type *qt = op->operands[0]->type, *vt = op->operands[2]->type;
    const int64_t DV = vt->dims[3].size;
    ScalarKind dt = qt->elem, F = SK_F32;
    Dim Bd = qt->dims[0], Hq = qt->dims[1];
    Value **args;
    Value *pre_in[3] = {sq ? packed(op, 3) : op->operands[3], sq ? packed(op, 5) : op->operands[5], op->operands[4]};
    Type *row_t = sq      ? type_shaped(a, TY_TENSOR, F, 2, (Dim[2]){Hq, sq->q->dims[0]})
                  : tiled ? tensor4(a, F, Bd, Hq, qtiles, (Dim){NULL, rows})
                          : type_shaped(a, TY_TENSOR, F, 3, (Dim[3]){Bd, Hq, qt->dims[2]});
    Type *out_t[2] = {row_t, row_t};
    Op *pre = make_launch(outer, op->loc, qgrid, tiled ? 3 : 2, pre_in, tiled ? 2 : 1, out_t,
                          (const char *[]){"delta", "lse_log2"}, &args);
    {
        Builder b = {a, pre->regions[0].blocks[0], NULL, op->loc};
        RowBox box = row_box(&b, args, Hq, rows, sq);
        Value *o = t_load(&b, args[3], box.idx, box.dims, b_tile_type(&b, dt, rows, DV), 0);
        Value *dout = t_load(&b, args[4], box.idx, box.dims, b_tile_type(&b, dt, rows, DV), 0);
        Value *d = b_row_reduce(&b, "sum", b_bin(&b, OP_MUL, b_cast(&b, dout, F), b_cast(&b, o, F)));
        if (!tiled) {
            t_store(&b, args[5], d, box.vidx, box.vdims);
        } else {
            Value *lse = t_load(&b, args[5], box.vidx, box.vdims, b_tile_type(&b, F, rows, 1), 0);
            Value *lse2 = lse_log2e(&b, lse);
            Value *at[4] = {box.idx[0], box.idx[1], args[0], b_index(&b, 0)};
            const int along[2] = {3, -1};
            t_store(&b, args[6], d, at, along);
            t_store(&b, args[7], lse2, at, along);
        }
        t_yield(&b, 0, NULL);
    }
    return pre;
}

/* main: dK and dV per key tile (a block per key tile and kv head, over the
 * group's query heads and their query tiles); dQ accumulated into an f32
 * tensor by atomics, or (deterministic) left to dq_kernel. */
/* Whether the key-tile kernel fits in shared memory with its query loop
 * pipelined: two stages of the 16-bit Q and dO tiles (as double-buffer
 * makes them) beside K, V, dSᵀ's scratch copy and an f32 dQ tile (sm_90a's
 * slab for its bulk reduce-add): sm_70 at head dim 128 does not (136 KB
 * of its 96). */
static bool pipelined_fits(int64_t BM, int64_t BN, int64_t D, int64_t DV, int64_t smem_limit) {
    return 2 * (2 * BM * (D + DV) + BN * (D + DV) + BN * BM) + 4 * BM * D <= smem_limit;
}

/* How the key-tile kernel covers a kv head's group of query heads. */
typedef enum {
    GROUP_LOOP,    /* a block per kv head loops over the group's heads, then their query tiles */
    ONE_HEAD,      /* one query head per kv head (MHA): the query loop is the block's own */
    HEAD_BLOCKS,   /* a block per query head; dK and dV added into f32 accumulators */
} GroupCover;

/* One query head per kv head, or else a block per query head (GQA), puts
 * the query loop at the kernel's top level, where double-buffer pipelines
 * it; HEAD_BLOCKS's additions come in no fixed order, so the deterministic
 * schedule keeps the group loop, as does a kernel whose stages would not
 * fit. */
static GroupCover group_cover(const Op *op, bool deterministic, int64_t BM, int64_t BN, int64_t smem_limit) {
    const Type *qt = op->operands[0]->type, *kt = op->operands[1]->type, *vt = op->operands[2]->type;
    Dim Hq = qt->dims[1], Hk = kt->dims[1];
    if (!pipelined_fits(BM, BN, qt->dims[3].size, vt->dims[3].size, smem_limit))
        return GROUP_LOOP;
    if (!Hq.sym && !Hk.sym && Hq.size == Hk.size)
        return ONE_HEAD;
    return deterministic ? GROUP_LOOP : HEAD_BLOCKS;
}

/* One step of the key-tile kernel's query loop: query tile m0 against the
 * block's key tile, its dK and dV added into mc (next: the sums), dQ's
 * share added into dQacc. */
typedef struct QueryStep {
    const Op *op;
    Map *memrefs;
    Value *Q, *DO, *LSE, *DELTA, *DQ;        /* DQ NULL: deterministic (dq_kernel makes dQ) */
    Value *bi, *h, *q_start, *ktile, *vtile, *j, *nq, *nk;
    int64_t BM, BN, D, DV;
    ScalarKind dt, acc;
    double scale;
    const int *rows_cols, *col_vec;
    bool tiled;
    bool dq_first;   /* target.h bwd_dq_first */
    const Seqs *sq;
} QueryStep;

static void query_step(const QueryStep *s, Builder *mb, Value *m0, Value **mc, Value **next) {
    const Op *op = s->op;
    Value *Q = s->Q, *DO = s->DO, *LSE = s->LSE, *DELTA = s->DELTA, *DQ = s->DQ, *bi = s->bi, *h = s->h;
    Value *q_start = s->q_start, *ktile = s->ktile, *vtile = s->vtile, *j = s->j, *nq = s->nq;
    Value *nk = s->nk;
    const int64_t BM = s->BM, BN = s->BN, D = s->D, DV = s->DV;
    const ScalarKind dt = s->dt, acc = s->acc, F = SK_F32;
    const double scale = s->scale;
    const int *rows_cols = s->rows_cols, *col_vec = s->col_vec;
    const bool tiled = s->tiled;
    const Seqs *sq = s->sq;
    /* lse and D: query tile m0 / BM's row (tiled), or by rows from m0, or
       with packed sequences from the sequence's q_start + m0 */
    Value *qi[4] = {bi, h, m0, b_index(mb, 0)};
    Value *li[4] = {bi, h, tiled ? b_bin(mb, OP_FLOORDIV, m0, b_index(mb, BM)) : m0, b_index(mb, 0)};
    if (sq) {
        Value *row = b_bin(mb, OP_ADD, q_start, m0);
        qi[0] = row, qi[1] = h, qi[2] = b_index(mb, 0);
        li[0] = h, li[1] = row;
    }
    Value *q = t_load(mb, Q, qi, rows_cols, b_tile_type(mb, dt, BM, D), 0);
    Value *dout = t_load(mb, DO, qi, rows_cols, b_tile_type(mb, dt, BM, DV), 0);
    Value *lse = t_load(mb, LSE, li, col_vec, b_tile_type(mb, F, 1, BM), 0);
    /* D: tiled, loaded by its use (with lse, 32 f32 registers a thread at
       BM = 64 from the stage, it made sm_90a spill in the loop) */
    Value *delta = tiled ? NULL : t_load(mb, DELTA, li, col_vec, b_tile_type(mb, F, 1, BM), 0);
    Value *i = b_bin(mb, OP_ADD, b_iota(mb, 1, 1, BM), m0);   /* queries across */
    if (sq) {   /* rows past the sequence's end: lse and D of another sequence, or of none
                   (anything, NaN too), made 0, so that their P and dS are 0 (P is masked; D
                   multiplies it) */
        Value *mine = b_cmp(mb, "lt", i, nq), *fz = b_float(mb, F, 0);
        lse = b_select(mb, mine, lse, fz);
        delta = b_select(mb, mine, delta, fz);
    }
    Value *qT = b_emit(mb, OP_TRANS, b_tile_type(mb, dt, D, BM), 1, &q);
    Value *ops[3] = {ktile, qT, b_splat(mb, b_float(mb, acc, 0), BN, BM)};
    Value *st = b_emit(mb, OP_DOT, b_tile_type(mb, acc, BN, BM), 3, ops);
    Value *zeros = b_splat(mb, b_float(mb, F, 0), BN, BM);
    BwdScores sc = backward_p(mb, op, s->memrefs, st, scale, bi, h, i, j, nk, nq, lse, tiled, zeros);
    Value *p = sc.p;
    Value *pc = b_cast(mb, p, dt);
    Value *dv_ops[3] = {pc, dout, mc[1]};
    Value *dv = b_emit(mb, OP_DOT, mc[1]->type, 3, dv_ops);
    Value *doT = b_emit(mb, OP_TRANS, b_tile_type(mb, dt, DV, BM), 1, &dout);
    Value *dp_ops[3] = {vtile, doT, b_splat(mb, b_float(mb, acc, 0), BN, BM)};
    Value *dp = b_cast(mb, b_emit(mb, OP_DOT, b_tile_type(mb, acc, BN, BM), 3, dp_ops), F);
    if (tiled)
        delta = t_load(mb, DELTA, li, col_vec, b_tile_type(mb, F, 1, BM), 0);
    Value *ds = backward_ds(mb, op, s->memrefs, sc, dp, delta, bi, h, i, j, zeros);
    Value *dsc = b_cast(mb, ds, dt);
    Value *dk_ops[3] = {dsc, q, mc[0]};
    bool dk_after_dq = s->dq_first && DQ;
    Value *dk = dk_after_dq ? NULL : b_emit(mb, OP_DOT, mc[0]->type, 3, dk_ops);
    if (DQ) {
        /* dQ = dS·K: dSᵀ's transpose through shared memory (the
         * scratch copy); with more keys than queries a step (BN = D,
         * backward_tile), dQᵀ = Kᵀ·dSᵀ instead, D rows like every other
         * tile's BN, added into dQacc transposed */
        Value *ds_by_query = b_emit(mb, OP_TRANS, b_tile_type(mb, dt, BM, BN), 1, &dsc);
        Value *dq;
        if (BM == BN) {
            Value *dq_ops[3] = {ds_by_query, ktile, b_splat(mb, b_float(mb, acc, 0), BM, D)};
            dq = b_emit(mb, OP_DOT, b_tile_type(mb, acc, BM, D), 3, dq_ops);
        } else {
            Value *kT = b_emit(mb, OP_TRANS, b_tile_type(mb, dt, D, BN), 1, &ktile);
            Value *dsT = b_emit(mb, OP_TRANS, b_tile_type(mb, dt, BN, BM), 1, &ds_by_query);
            Value *dq_ops[3] = {kT, dsT, b_splat(mb, b_float(mb, acc, 0), D, BM)};
            dq = b_emit(mb, OP_DOT, b_tile_type(mb, acc, D, BM), 3, dq_ops);
        }
        if (dk_after_dq)   /* dK's product in flight while dQ's result is stored */
            dk = b_emit(mb, OP_DOT, mc[0]->type, 3, dk_ops);
        /* (packed sequences: rows past the sequence's end add their dS of 0) */
        const int dq_dims[2] = {rows_cols[BM != BN], rows_cols[BM == BN]};   /* (dQᵀ: its rows along the columns) */
        t_atomic_add(mb, DQ, b_cast(mb, dq, F), qi, dq_dims);
    }
    next[0] = dk, next[1] = dv;
}

/* Whether the key-tile kernel's blocks go out longest first: under a
 * band whose upper bound moves with the query row (causal), key tile j0
 * sees the query tiles from j0 on, fewer the further it lies, and blocks
 * started (batch, head) by (batch, head) leave the last head's longest
 * tiles to start last, with the GPU emptying around them. */
static bool longest_first(const Op *op) {
    Attr *hi = band_attr(op, "hi");
    return hi && per_row(hi);
}

/* The blocks of a section (BWD_SECTION_BLOCKS key tiles' worth of heads)
 * read their heads' Q, dO and dQ accumulator while they run: at 256 blocks
 * of 128 keys, 2 heads at N = 16k and head dim 128, 32 MB, which L2 keeps
 * (the forward's persistent scheduler's sections, warp_roles.c). */
enum { BWD_SECTION_BLOCKS = 256 };

/* Block (x, y) of grid [X, Y] — started in the order L = y·X + x — in
 * sections of S = max(1, BWD_SECTION_BLOCKS / X) (batch, head)s, each
 * section longest first: every head's first key tile, then every head's
 * second. *x, *y: the key tile and (batch, head) it takes. */
static void block_order(Builder *b, Value **grid, Value **x, Value **y) {
    Value *X = grid[0], *Y = grid[1], *one = b_index(b, 1);
    Value *S = b_bin(b, OP_MAX, b_bin(b, OP_FLOORDIV, b_index(b, BWD_SECTION_BLOCKS), X), one);
    Value *L = b_bin(b, OP_ADD, b_bin(b, OP_MUL, *y, X), *x);
    Value *first = b_bin(b, OP_MUL, b_bin(b, OP_FLOORDIV, L, b_bin(b, OP_MUL, S, X)), S);   /* the section's first head */
    Value *heads = b_bin(b, OP_MIN, S, b_bin(b, OP_SUB, Y, first));
    Value *r = b_bin(b, OP_SUB, L, b_bin(b, OP_MUL, first, X));
    *x = b_bin(b, OP_FLOORDIV, r, heads);
    *y = b_bin(b, OP_ADD, first, b_bin(b, OP_REM, r, heads));
}

static Op *key_tile_kernel(Builder *outer, Op *op, Op *pre, PtrVec *side, bool deterministic, int64_t BM,
                           int64_t BN, GroupCover cover, const Seqs *sq, bool tiled, bool dq_first) {
    Arena *a = outer->a;
    const Type *qt = op->operands[0]->type, *kt = op->operands[1]->type, *vt = op->operands[2]->type;
    const int64_t D = qt->dims[3].size, DV = vt->dims[3].size;
    ScalarKind dt = qt->elem, F = SK_F32;
    Dim Bd = qt->dims[0], Hq = qt->dims[1], Hk = kt->dims[1], Nq = qt->dims[2], Nk = kt->dims[2];
    /* (packed sequences: rows along dim 0 of [T, H, D]; lse and D: RowVectors) */
    const int rows_cols[2] = {sq ? 0 : 2, sq ? 2 : 3}, col_vec[2] = {tiled ? 2 : -1, sq ? 1 : tiled ? 3 : 2};
    Value **args;
    ScalarKind acc = op_attr(op, "acc")->type->elem;
    double scale = op_attr(op, "scale")->f;
    int nin = 6 + side->len;
    Value **inputs = NEW_ARRAY(a, Value *, nin);
    Value *main_in[6] = {op->operands[0], op->operands[1], op->operands[2],
                         tiled ? pre->results[1] : op->operands[4], op->operands[5], pre->results[0]};
    for (int i = 0; sq && i < 5; i++)
        main_in[i] = packed(op, i < 3 ? i : i + 1);
    memcpy(inputs, main_in, sizeof main_in);
    for (int i = 0; i < side->len; i++)
        inputs[6 + i] = side->items[i];
    bool head_blocks = cover == HEAD_BLOCKS, flat = cover != GROUP_LOOP;
    /* dk, dv (HEAD_BLOCKS: their f32 accumulators) [, the dQ accumulator] */
    Type *main_t[3] = {head_blocks ? tensor4(a, F, Bd, Hk, Nk, kt->dims[3]) : (Type *)kt,
                       head_blocks ? tensor4(a, F, Bd, Hk, Nk, vt->dims[3]) : (Type *)vt,
                       tensor4(a, F, Bd, Hq, Nq, qt->dims[3])};
    if (sq)
        for (int i = 0; i < 3; i++) {
            const Type *t = i == 2 ? sq->q : packed(op, 1 + i)->type;
            main_t[i] = i < 2 && !head_blocks ? (Type *)t : type_with_elem(a, t, F);
        }
    int nmain = deterministic ? 2 : 3;
    Value *kgrid[3] = {b_ceildiv(outer, b_dim(outer, Nk), BN),
                       b_bin(outer, OP_MUL, b_dim(outer, Bd), b_dim(outer, head_blocks ? Hq : Hk)), b_index(outer, 1)};
    if (sq) {   /* every sequence's key tiles: at most ceil(Tk / BN) + B (sequence_of_tile) */
        kgrid[0] = b_bin(outer, OP_ADD, b_ceildiv(outer, b_dim(outer, sq->k->dims[0]), BN), b_dim(outer, Bd));
        kgrid[1] = b_dim(outer, head_blocks ? Hq : Hk);
    }
    Op *mainl = make_launch(outer, op->loc, kgrid, nin, inputs, nmain, main_t,
                            head_blocks ? (const char *[]){"dk_acc", "dv_acc", "dq_acc"}
                                        : (const char *[]){op->results[1]->name, op->results[2]->name, "dq_acc"},
                            &args);
    if (head_blocks)
        op_set_attr(a, mainl, "zeroed", attr_array(a, 3, (Attr *[]){attr_int(a, 0), attr_int(a, 1), attr_int(a, 2)}));
    else if (!deterministic)
        op_set_attr(a, mainl, "zeroed", attr_array(a, 1, (Attr *[]){attr_int(a, 2)}));
    {
        Builder b = {a, mainl->regions[0].blocks[0], NULL, op->loc};
        Value *Q = args[3], *K = args[4], *V = args[5], *LSE = args[6], *DO = args[7], *DELTA = args[8];
        Value *DK = args[3 + nin], *DV_ = args[4 + nin], *DQ = deterministic ? NULL : args[5 + nin];
        Map memrefs;
        map_init(&memrefs, false);
        for (int i = 0; i < side->len; i++)
            map_put(a, &memrefs, side->items[i], args[9 + i]);
        Value *HK = b_dim(&b, Hk), *G = b_bin(&b, OP_FLOORDIV, b_dim(&b, Hq), HK), *zero = b_index(&b, 0);
        Value *HY = head_blocks ? b_dim(&b, Hq) : HK;   /* the heads along grid y */
        Value *tile_x = args[0], *head_y = args[1];
        if (!sq && longest_first(op)) {
            Value *grid[2] = {b_ceildiv(&b, b_dim(&b, Nk), BN), b_bin(&b, OP_MUL, b_dim(&b, Bd), HY)};
            block_order(&b, grid, &tile_x, &head_y);
        }
        Value *bi = b_bin(&b, OP_FLOORDIV, head_y, HY), *hy = b_bin(&b, OP_REM, head_y, HY);
        Value *j0 = NULL, *nq = NULL, *nk = NULL, *q_start = NULL, *k_start = NULL, *k_end = NULL;
        if (sq) {   /* key tile j0 of sequence bi, its keys from row k_start of k, its queries from q_start */
            Value *cu_q = map_get(&memrefs, sq->cu_q), *cu_k = map_get(&memrefs, sq->cu_k), *one = b_index(&b, 1);
            hy = args[1];
            bi = sequence_of_tile(&b, args[0], cu_k, b_dim(&b, Bd), BN, &j0);
            Value *after = b_bin(&b, OP_ADD, bi, one);
            q_start = read_index(&b, cu_q, 1, &bi), k_start = read_index(&b, cu_k, 1, &bi);
            k_end = b_bin(&b, OP_MAX, read_index(&b, cu_k, 1, &after), k_start);
            nk = b_bin(&b, OP_SUB, k_end, k_start);
            nq = b_bin(&b, OP_MAX, b_bin(&b, OP_SUB, read_index(&b, cu_q, 1, &after), q_start), zero);
        }
        Value *kh = head_blocks ? b_bin(&b, OP_FLOORDIV, hy, G) : hy;
        if (!sq)
            j0 = b_bin(&b, OP_MUL, tile_x, b_index(&b, BN));
        Value *ki[4] = {bi, kh, j0, zero};
        if (sq)
            ki[0] = b_bin(&b, OP_ADD, k_start, j0), ki[1] = kh, ki[2] = zero;
        Value *ktile = t_load(&b, K, ki, rows_cols, b_tile_type(&b, dt, BN, D), 0);
        Value *vtile = t_load(&b, V, ki, rows_cols, b_tile_type(&b, dt, BN, DV), 0);
        Value *j = b_bin(&b, OP_ADD, b_iota(&b, 0, BN, 1), j0);   /* keys down the rows */
        if (!sq)
            nq = b_dim(&b, Nq), nk = b_dim(&b, Nk);
        Value *fzero = b_float(&b, acc, 0);
        /* dK and dV: with an f16 accumulator, each query head's sum is its
         * own (in f16, as the unfused matmul's) and the group's heads are
         * added in f32, as attn.sum_heads does; with f32, one accumulator */
        bool per_head = acc == SK_F16;
        Value *f32zero = b_float(&b, F, 0);
        Value *init[2] = {b_splat(&b, per_head ? f32zero : fzero, BN, D), b_splat(&b, per_head ? f32zero : fzero, BN, DV)};
        /* the query loop, inside a loop over the group's heads (GROUP_LOOP)
         * or the block's own (group_cover) */
        Builder gb = b, mb;
        Value *g, *m0, **gc = init, **mc;
        Op *gl = flat ? NULL : new_for(&b, zero, G, b_index(&b, 1), 2, init, &gb, &g, &gc);
        Value *h = flat ? hy : b_bin(&gb, OP_ADD, b_bin(&gb, OP_MUL, kh, G), g);
        Value *m_start, *m_end;
        query_range(&gb, op, j0, BM, BN, nq, &m_start, &m_end);
        Value *head_init[2] = {b_splat(&gb, b_float(&gb, acc, 0), BN, D), b_splat(&gb, b_float(&gb, acc, 0), BN, DV)};
        QueryStep step = {op, &memrefs, Q, DO, LSE, DELTA, DQ, bi, h, q_start, ktile, vtile, j, nq, nk,
                          BM, BN, D, DV, dt, acc, scale, rows_cols, col_vec, tiled, dq_first, sq};
        Value *gnext[2];
        Op *ml = new_for(&gb, m_start, m_end, b_index(&gb, BM), 2, per_head ? head_init : gc, &mb, &m0, &mc);
        query_step(&step, &mb, m0, mc, gnext);
        t_yield(&mb, 2, gnext);
        gnext[0] = ml->results[0], gnext[1] = ml->results[1];
        if (per_head && !flat)
            for (int x = 0; x < 2; x++)
                gnext[x] = b_bin(&gb, OP_ADD, gc[x], b_cast(&gb, gnext[x], F));
        if (!flat)
            t_yield(&gb, 2, gnext);
        Value *sums[2] = {flat ? gnext[0] : gl->results[0], flat ? gnext[1] : gl->results[1]};
        if (head_blocks) {   /* this head's share, in f32 (kv_kernel scales and rounds the sum; packed
                                sequences: rows past the sequence's end add their 0) */
            t_atomic_add(&b, DK, b_cast(&b, sums[0], F), ki, rows_cols);
            t_atomic_add(&b, DV_, b_cast(&b, sums[1], F), ki, rows_cols);
        } else {
            /* (packed sequences: not past the sequence's keys, the next sequence's rows) */
            Value *dkf = b_cast(&b, b_bin(&b, OP_MUL, b_cast(&b, sums[0], F), b_float(&b, F, scale)), dt);
            if (sq)
                t_store_bounded(&b, DK, dkf, ki, rows_cols, 0, k_end);
            else
                t_store(&b, DK, dkf, ki, rows_cols);
            Value *dvf = b_cast(&b, b_cast(&b, sums[1], F), dt);
            if (sq)
                t_store_bounded(&b, DV_, dvf, ki, rows_cols, 0, k_end);
            else
                t_store(&b, DV_, dvf, ki, rows_cols);
        }
        t_yield(&b, 0, NULL);
    }
    return mainl;
}

/* HEAD_BLOCKS's postprocess: dK = scale · dKacc and dV = dVacc, rounded
 * to their types, a key tile of a kv head a block. */
static Op *kv_kernel(Builder *outer, const Op *op, Op *mainl, int64_t BN, const Seqs *sq) {
    Arena *a = outer->a;
    const Type *kt = op->operands[1]->type, *vt = op->operands[2]->type;
    const int64_t D = kt->dims[3].size, DV = vt->dims[3].size;
    ScalarKind F = SK_F32;
    double scale = op_attr(op, "scale")->f;
    Value **args;
    Value *grid[3];
    row_grid(outer, sq ? sq->k : kt, BN, sq, grid);
    Value *in[2] = {mainl->results[0], mainl->results[1]};
    Type *out_t[2] = {sq ? packed(op, 1)->type : (Type *)kt, sq ? packed(op, 2)->type : (Type *)vt};
    Op *kv = make_launch(outer, op->loc, grid, 2, in, 2, out_t,
                         (const char *[]){op->results[1]->name, op->results[2]->name}, &args);
    Builder b = {a, kv->regions[0].blocks[0], NULL, op->loc};
    RowBox box = row_box(&b, args, kt->dims[1], BN, sq);
    Value *dk = t_load(&b, args[3], box.idx, box.dims, b_tile_type(&b, F, BN, D), 0);
    Value *dv = t_load(&b, args[4], box.idx, box.dims, b_tile_type(&b, F, BN, DV), 0);
    t_store(&b, args[5], b_cast(&b, b_bin(&b, OP_MUL, dk, b_float(&b, F, scale)), kt->elem), box.idx, box.dims);
    t_store(&b, args[6], b_cast(&b, dv, vt->elem), box.idx, box.dims);
    t_yield(&b, 0, NULL);
    return kv;
}

/* postprocess: dQ = scale · dQacc, a query tile a block. */
static Op *postprocess_kernel(Builder *outer, const Op *op, Op *mainl, Value **qgrid, int64_t BM, const Seqs *sq) {
    Arena *a = outer->a;
    const Type *qt = op->operands[0]->type;
    const int64_t D = qt->dims[3].size;
    ScalarKind dt = qt->elem, F = SK_F32;
    double scale = op_attr(op, "scale")->f;
    Value **args;
    Op *post;
    Value *post_in[1] = {mainl->results[2]};
    Type *dq_t = sq ? (Type *)sq->q : (Type *)qt;
    post = make_launch(outer, op->loc, qgrid, 1, post_in, 1, &dq_t, (const char *[]){op->results[0]->name}, &args);
    {
        Builder b = {a, post->regions[0].blocks[0], NULL, op->loc};
        RowBox box = row_box(&b, args, qt->dims[1], BM, sq);
        Value *x = t_load(&b, args[3], box.idx, box.dims, b_tile_type(&b, F, BM, D), 0);
        t_store(&b, args[4], b_cast(&b, b_bin(&b, OP_MUL, x, b_float(&b, F, scale)), dt), box.idx, box.dims);
        t_yield(&b, 0, NULL);
    }
    return post;
}

/* The key-tile kernel's query rows and key rows: the schedule's
 * backward_tile, else the target's default for the head dim and mask
 * (over every key, no band, head dim 64 has a tile of its own). Whether
 * the kernel issues dPᵀ = V·dOᵀ during the exponentials (dot-hoist): the
 * schedule's overlap(0|1), else the target's default, off in that tile of
 * its own (it spills with). */
static void backward_tile(const PassContext *ctx, const Op *func, const Op *op, int64_t D, bool packed_seqs,
                          int64_t *BM, int64_t *BN, bool *hoist) {
    Attr *tile = schedule_directive(func, ctx->arch, SCHED_BACKWARD_TILE);
    Attr *overlap = schedule_directive(func, ctx->arch, SCHED_OVERLAP);
    const Target *t = target_lookup(ctx->arch);
    bool full = D <= 64 && t->bwd_tile_d64_full[0] && !op_attr(op, "band") && !packed_seqs;
    const int64_t *def = full                              ? t->bwd_tile_d64_full
                         : D <= 64 && t->bwd_tile_d64[0]   ? t->bwd_tile_d64
                         : D == 128 && t->bwd_tile_d128[0] ? t->bwd_tile_d128
                                                           : t->bwd_tile;
    *BM = tile ? tile->elems[0]->i : def[0];
    *BN = tile ? tile->elems[1]->i : def[1];
    *hoist = overlap ? overlap->i != 0 : t->bwd_overlap && !(full && !tile);
}

/* The preprocess's and postprocess's query rows a program: row kernels,
 * each row's D or dQ independent of the key-tile kernel's tiles. */
enum { ROW_KERNEL_ROWS = 64 };

bool tile_attention_backward(PassContext *ctx, Op *func, Op *op) {
    bool deterministic = schedule_directive(func, ctx->arch, SCHED_DETERMINISTIC) != NULL;
    const Type *qt = op->operands[0]->type, *vt = op->operands[2]->type;
    if (qt->dims[3].sym || vt->dims[3].sym)
        return true;   /* symbolic head dims: the frontend never makes these */
    Arena *a = ctx->arena;
    const int64_t D = qt->dims[3].size, DV = vt->dims[3].size;
    int64_t BM, BN;
    bool hoist;
    backward_tile(ctx, func, op, D > DV ? D : DV, padded(op, 0) != NULL, &BM, &BN, &hoist);
    Builder outer = {a, NULL, NULL, op->loc};
    Block tmp = {0};
    outer.blk = &tmp;
    PtrVec side = {0};
    Seqs seqs, *sq = NULL;
    if (padded(op, 0)) {   /* packed sequences: the kernels read the offsets; the key-count conjunct is theirs */
        sq = &seqs;
        seqs = (Seqs){packed(op, 0)->type, packed(op, 1)->type, padded(op, 0)->operands[1], padded(op, 1)->operands[1]};
        drop_key_count(a, op, 2);
    }
    collect_side_tensors(op, a, &side);
    for (int i = 0; sq && i < 2; i++)
        add_side_tensor(a, &side, i ? seqs.cu_k : seqs.cu_q);
    Value *rgrid[3], *pgrid[3];
    row_grid(&outer, sq ? sq->q : qt, ROW_KERNEL_ROWS, sq, rgrid);
    bool tiled = !sq && target_lookup(ctx->arch)->copies_f32_rows;
    Op *pre;
    if (!tiled) {
        pre = preprocess_kernel(&outer, op, rgrid, ROW_KERNEL_ROWS, sq, (Dim){0});
    } else {   /* a row of lse and D per query tile of the key-tile kernel: QT = max(1, ceil(Nq / BM)) */
        Dim qtiles = {fresh_dim_name(a, func, "QTILES"), 0};
        Value *count = b_bin(&outer, OP_MAX, b_ceildiv(&outer, b_dim(&outer, qt->dims[2]), BM), b_index(&outer, 1));
        define_dim(ctx, &outer, op, qtiles.sym, count);
        row_grid(&outer, qt, BM, false, pgrid);
        pre = preprocess_kernel(&outer, op, pgrid, BM, NULL, qtiles);
    }
    block_append(&tmp, pre);
    GroupCover cover = group_cover(op, deterministic, BM, BN, target_lookup(ctx->arch)->smem_limit);
    Op *mainl = key_tile_kernel(&outer, op, pre, &side, deterministic, BM, BN, cover, sq, tiled,
                                target_lookup(ctx->arch)->bwd_dq_first);
    block_append(&tmp, mainl);
    /* dot-hoist's switch */
    if (hoist || schedule_directive(func, ctx->arch, SCHED_OVERLAP))
        op_set_attr(a, mainl, schedule_launch_attr(SCHED_OVERLAP), attr_int(a, hoist));
    /* warp specialisation: the schedule's producer(0|1), else the target
     * lowering's default (doc/backward.md) */
    Attr *producer = schedule_directive(func, ctx->arch, SCHED_PRODUCER);
    if (producer)
        op_set_attr(a, mainl, schedule_launch_attr(SCHED_PRODUCER), attr_int(a, producer->i));
    Op *kv = cover == HEAD_BLOCKS ? kv_kernel(&outer, op, mainl, ROW_KERNEL_ROWS, sq) : mainl;   /* (dk, dv its results 0, 1) */
    if (kv != mainl)
        block_append(&tmp, kv);
    Op *post;
    if (deterministic) {
        /* 16-bit Q and dO tiles, and K and V tiles per key segment (up to
         * three loops): half the keys where they would not fit (sm_70 at
         * head dim 128) */
        int64_t smem = 2 * (BM * (D + DV) + 3 * BN * (D + DV));
        int64_t dq_bn = smem > target_lookup(ctx->arch)->smem_limit ? BN / 2 : BN;
        Value *dgrid[3];
        row_grid(&outer, qt, BM, false, dgrid);
        if (sq) {   /* every sequence's query tiles: at most ceil(Tq / BM) + B (sequence_of_tile) */
            dgrid[0] = b_bin(&outer, OP_ADD, b_ceildiv(&outer, b_dim(&outer, sq->q->dims[0]), BM), b_dim(&outer, qt->dims[0]));
            dgrid[1] = b_dim(&outer, qt->dims[1]);
        }
        post = dq_kernel(ctx, &outer, op, dgrid, pre, &side, BM, dq_bn, sq, tiled);
    } else {
        post = postprocess_kernel(&outer, op, mainl, rgrid, ROW_KERNEL_ROWS, sq);
    }
    block_append(&tmp, post);
    replace_with(ctx, op, &tmp, (Value *[]){post->results[0], kv->results[0], kv->results[1]});
    return true;
}
