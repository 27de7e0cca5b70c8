/* tiling_gemm.c — attn.fused_gemm as a tile.launch: programs over output tiles
 * in groups of row tiles, a K loop, the epilogue fused (the tiling pass: tiling.c). */
#include "passes/tiling.h"

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

bool tile_gemm(PassContext *ctx, Op *func, Op *g) {
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
    Value *at = t_load(&body, A, ai, rows_cols, b_tile_type(&body, a->elem, BM, BK), 0);
    Value **next = NEW_ARRAY(b.a, Value *, n);
    for (int i = 0; i < n; i++) {
        Value *wt;
        if (gemm_weight_transposed(g, i)) {   /* an [N, K] weight: its [BN, BK] tile, read transposed (as attention's Kᵀ) */
            Value *wi[2] = {n0, k0};
            Value *tile = t_load(&body, args[4 + i], wi, rows_cols, b_tile_type(&body, a->elem, BN, BK), 0);
            wt = b_emit(&body, OP_TRANS, b_tile_type(&body, a->elem, BK, BN), 1, &tile);
        } else {
            Value *wi[2] = {k0, n0};
            wt = t_load(&body, args[4 + i], wi, rows_cols, b_tile_type(&body, a->elem, BK, BN), 0);
        }
        Value *ops[3] = {at, wt, accs[i]};
        next[i] = b_emit(&body, OP_DOT, accs[i]->type, 3, ops);
    }
    t_yield(&body, n, next);
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
        eargs[n + i] = t_load(&b, e, idx, dims, b_tile_type(&b, e->type->elem, shape[0], shape[1]), 0);
    }
    Value *y = vectorise(&b, epi, eargs, NULL);
    if (y->type->kind == TY_SCALAR)
        y = b_splat(&b, y, BM, BN);
    Value *oi[2] = {m0, n0};
    t_store(&b, out, y, oi, rows_cols);
    t_yield(&b, 0, NULL);
    /* the grid computation goes before the op, then the launch replaces it */
    replace_with_launch(ctx, g, &tmp, l);
    return true;
}
