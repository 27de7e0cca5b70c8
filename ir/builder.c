/* builder.c — see builder.h. */
#include "ir/builder.h"

Op *b_emit_op(Builder *b, OpKind k, int nres, Type **types, int n, Value **ops) {
    Op *op = op_create(b->a, k, n, ops, nres, types, 0);
    op->loc = b->loc;
    if (b->before)
        op_insert_before(b->before, op);
    else
        block_append(b->blk, op);
    return op;
}

Value *b_emit(Builder *b, OpKind k, Type *t, int n, Value **ops) {
    Op *op = b_emit_op(b, k, t ? 1 : 0, &t, n, ops);
    return t ? op->results[0] : NULL;
}

Value *b_index(Builder *b, int64_t v) {
    Value *r = b_emit(b, OP_CONSTANT, type_scalar(b->a, SK_INDEX), 0, NULL);
    op_set_attr(b->a, r->def, "value", attr_int(b->a, v));
    return r;
}

Value *b_float(Builder *b, ScalarKind k, double v) {
    Value *r = b_emit(b, OP_CONSTANT, type_scalar(b->a, k), 0, NULL);
    op_set_attr(b->a, r->def, "value", attr_float(b->a, v));
    return r;
}

Value *b_dim(Builder *b, Dim d) {
    if (!d.sym)
        return b_index(b, d.size);
    Value *r = b_emit(b, OP_DIM, type_scalar(b->a, SK_INDEX), 0, NULL);
    op_set_attr(b->a, r->def, "name", attr_str(b->a, d.sym));
    return r;
}

Type *b_tile_type(Builder *b, ScalarKind k, int64_t rows, int64_t cols) {
    Dim d[2] = {{NULL, rows}, {NULL, cols}};
    return type_shaped(b->a, TY_TILE, k, 2, d);
}

Type *b_bcast(Builder *b, const Type *x, const Type *y, ScalarKind k) {
    if (x->kind == TY_SCALAR && y->kind == TY_SCALAR)
        return type_scalar(b->a, k);
    const Type *t = x->kind == TY_SCALAR ? y : x;
    int64_t r = t->dims[0].size, c = t->dims[1].size;
    if (x->kind != TY_SCALAR && y->kind != TY_SCALAR) {
        r = x->dims[0].size > y->dims[0].size ? x->dims[0].size : y->dims[0].size;
        c = x->dims[1].size > y->dims[1].size ? x->dims[1].size : y->dims[1].size;
    }
    return b_tile_type(b, k, r, c);
}

Value *b_bin(Builder *b, OpKind k, Value *x, Value *y) {
    Value *ops[2] = {x, y};
    ScalarKind e = k == OP_CMP || k == OP_AND || k == OP_OR ? SK_I1 : x->type->elem;
    return b_emit(b, k, b_bcast(b, x->type, y->type, e), 2, ops);
}

Value *b_cmp(Builder *b, const char *pred, Value *x, Value *y) {
    Value *r = b_bin(b, OP_CMP, x, y);
    op_set_attr(b->a, r->def, "pred", attr_str(b->a, pred));
    return r;
}

Value *b_unary(Builder *b, OpKind k, Value *x) { return b_emit(b, k, x->type, 1, &x); }

Value *b_cast(Builder *b, Value *x, ScalarKind k) {
    return x->type->elem == k ? x : b_emit(b, OP_CAST, type_with_elem(b->a, x->type, k), 1, &x);
}

Value *b_select(Builder *b, Value *c, Value *x, Value *y) {
    Value *ops[3] = {c, x, y};
    Type *t = b_bcast(b, c->type, b_bcast(b, x->type, y->type, x->type->elem), x->type->elem);
    return b_emit(b, OP_SELECT, t, 3, ops);
}

Value *b_splat(Builder *b, Value *scalar, int64_t rows, int64_t cols) {
    return b_emit(b, OP_SPLAT, b_tile_type(b, scalar->type->elem, rows, cols), 1, &scalar);
}

Value *b_iota(Builder *b, int axis, int64_t rows, int64_t cols) {
    Value *v = b_emit(b, OP_IOTA, b_tile_type(b, SK_INDEX, rows, cols), 0, NULL);
    op_set_attr(b->a, v->def, "axis", attr_int(b->a, axis));
    return v;
}

Value *b_row_reduce(Builder *b, const char *kind, Value *x) {
    Value *r = b_emit(b, OP_TILE_REDUCE, b_tile_type(b, x->type->elem, x->type->dims[0].size, 1), 1, &x);
    op_set_attr(b->a, r->def, "kind", attr_str(b->a, kind));
    return r;
}

Value *b_ceildiv(Builder *b, Value *x, int64_t d) {
    return b_bin(b, OP_FLOORDIV, b_bin(b, OP_ADD, x, b_index(b, d - 1)), b_index(b, d));
}
