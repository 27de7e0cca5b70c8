/* tiling_rows.c — every other op (elementwise, reductions, softmax over the
 * last axis) as row kernels (the tiling pass: tiling.c). */
#include "passes/tiling.h"

#include <math.h>
#include <string.h>

/* ---- everything else: row kernels ------------------------------------------------
 * An elementwise op (or a chain of them: attn.fused_map, its region
 * vectorised onto the tiles), a reduction or a softmax over the last axis, on tensors
 * of rank 1 or 2 whose last dimension is a number, becomes a kernel with a
 * program per RB rows, each holding whole rows [RB, N] in one tile. RB is the
 * target's row_block (target.c): 2 where the code generator keeps a tile in
 * registers (2 rows of 4096 are 64 values per thread, 16 would spill).
 * Reductions and softmax compute in f32 and round once, as attn.reduce does. */

static int64_t row_block(const char *arch) { return target_lookup(arch)->row_block; }

bool is_row_op(const Op *op) {
    bool elementwise = (op_kind_has(op->kind, OPF_ELEMENTWISE) && !op_kind_has(op->kind, OPF_INDEX)) ||
                       op->kind == OP_FUSED_MAP;
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
    return t_load(b, mem, idx, dims, b_tile_type(b, t->elem, shape[0], shape[1]), 0);
}


bool tile_rows(PassContext *ctx, Op *func, Op *op) {
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
    Value **x = NEW_ARRAY(ctx->arena, Value *, op->noperands + 1);
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
    } else if (op->kind == OP_FUSED_MAP) {   /* the region on the rows' tiles */
        Map none;
        map_init(&none, false);
        y = vectorise(&b, op->regions[0].blocks[0], x, &none);
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
    t_store(&b, out, y, idx, dims);
    t_yield(&b, 0, NULL);
    replace_with_launch(ctx, op, &tmp, l);
    return true;
}
