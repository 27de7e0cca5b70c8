/* builder.h — making ops in passes: a Builder appends to a block, or inserts
 * before an op, and gives each new op one source location. Types of
 * elementwise results are the broadcast of their operands' (scalars, and
 * 2-D tiles of numbers). */
#ifndef ATTNC_BUILDER_H
#define ATTNC_BUILDER_H

#include "ir/ir.h"

typedef struct Builder {
    Arena *a;
    Block *blk;    /* append here ... */
    Op *before;    /* ... or, when set, insert before this op */
    SrcLoc loc;
} Builder;

Value *b_emit(Builder *b, OpKind k, Type *t, int n, Value **ops);   /* t NULL: no result */
Op *b_emit_op(Builder *b, OpKind k, int nres, Type **types, int n, Value **ops);
Value *b_index(Builder *b, int64_t v);
Value *b_float(Builder *b, ScalarKind k, double v);
Value *b_dim(Builder *b, Dim d);                 /* a number, or attn.dim */
Type *b_tile_type(Builder *b, ScalarKind k, int64_t rows, int64_t cols);
Type *b_bcast(Builder *b, const Type *x, const Type *y, ScalarKind k);
Value *b_bin(Builder *b, OpKind k, Value *x, Value *y);   /* cmp/and/or give i1 */
Value *b_cmp(Builder *b, const char *pred, Value *x, Value *y);
Value *b_unary(Builder *b, OpKind k, Value *x);
Value *b_cast(Builder *b, Value *x, ScalarKind k);
Value *b_select(Builder *b, Value *c, Value *x, Value *y);
Value *b_splat(Builder *b, Value *scalar, int64_t rows, int64_t cols);
Value *b_iota(Builder *b, int axis, int64_t rows, int64_t cols);
Value *b_row_reduce(Builder *b, const char *kind, Value *x);   /* [M, N] -> [M, 1] */
Value *b_ceildiv(Builder *b, Value *x, int64_t d);

#endif
