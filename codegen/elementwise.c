/* elementwise.c — elementwise ops on tiles and scalars (scalar.c says
 * what each computes), and the index tiles of masks: iotas and splats
 * kept as base + var + k so that a mask's compares are 32-bit, with an
 * immediate an element. */
#include "codegen/lower.h"

/* ---- index tiles: mask arithmetic in 32 bits ----------------------------------------
 *
 * A mask compares positions, as i64 (index) values: j <= i is j0 + c <= i0 +
 * r for the tile's key and query offsets j0, i0 and the element's column and
 * row c, r. In i64 each element costs several instructions (a pair of
 * 32-bit compares, carries), and on the causal diagonal ptxas parked the
 * 64 predicates a thread holds in registers. So an index tile made of
 * iotas and uniform scalars is also kept as base + var + k: base one i64
 * for the whole tile (i0, j0), var a 32-bit value of the thread's lane and
 * warp, k a constant, both per element (the layout's coordinates are lane
 * terms plus constants). Then c <= r + i0 − j0 is, per element,
 * var_c − var_r − (i0 − j0) <= k_r − k_c: the left side one value for the
 * whole tile (the var terms agree across elements), and one 32-bit
 * compare with an immediate an element, which holds no extra registers.
 * The i0 − j0 is clamped into 32 bits first, which keeps the order since
 * the other terms are small. The i64 values are still made for any other
 * use (LLVM drops those nobody reads). */
enum { AFFINE_BOUND = 1 << 24 };   /* |var + k| stays below this; 2^30 clamps the base */

typedef struct Affine {
    const Dist *var, *k;   /* i32 values (NULL entries: 0) and i32 constants; NULL: all 0 */
    LLVMValueRef base;     /* i64 */
    int64_t bound;
} Affine;

/* The affine form of an index operand: a uniform scalar or an affine tile. */
static bool affine_of(Cg *cg, const Value *v, Affine *f) {
    Cv *c = cv_get(cg, v);
    if (!c || elem_of(v) != SK_INDEX)
        return false;
    if (c->kind == CV_SCALAR) {
        *f = (Affine){NULL, NULL, c->s, 0};
        return true;
    }
    if (c->kind != CV_DIST || !c->d->affine)
        return false;
    *f = (Affine){c->d->var, c->d->k, c->d->base, c->d->bound};
    return true;
}

static LLVMValueRef var_get(Cg *cg, const Affine *f, Pos p) { return f->var ? dist_get(cg, f->var, p) : NULL; }
static int64_t k_get(Cg *cg, const Affine *f, Pos p) {
    return f->k ? LLVMConstIntGetSExtValue(dist_get(cg, f->k, p)) : 0;
}

/* x ± y of var terms (NULL: 0) */
static LLVMValueRef var_combine(Cg *cg, LLVMValueRef x, LLVMValueRef y, bool sub) {
    if (!y)
        return x;
    if (!x)
        return sub ? LLVMBuildNSWNeg(cg->b, y, "") : y;
    return sub ? LLVMBuildNSWSub(cg->b, x, y, "") : LLVMBuildNSWAdd(cg->b, x, y, "");
}

/* A coordinate (i64, made of lane terms and constants by adds) as var + k. */
static LLVMValueRef split_const(Cg *cg, LLVMValueRef v, int64_t *k) {
    if (LLVMIsAConstantInt(v)) {
        *k = LLVMConstIntGetSExtValue(v);
        return NULL;
    }
    if (LLVMIsAInstruction(v) && LLVMGetInstructionOpcode(v) == LLVMAdd) {
        int64_t k0, k1;
        LLVMValueRef x = split_const(cg, LLVMGetOperand(v, 0), &k0), y = split_const(cg, LLVMGetOperand(v, 1), &k1);
        *k = k0 + k1;
        return var_combine(cg, x, y, false);
    }
    *k = 0;
    return LLVMBuildTrunc(cg->b, v, cg->i32, "");
}

/* add/sub of two affine index operands: r (made by the caller, i64) gets
 * the affine form too. */
static void affine_add(Cg *cg, const Op *op, Dist *r, const Pos *ps, int n) {
    Affine a, b;
    if (!affine_of(cg, op->operands[0], &a) || !affine_of(cg, op->operands[1], &b) ||
        a.bound + b.bound >= AFFINE_BOUND)
        return;
    bool sub = op->kind == OP_SUB;
    r->affine = true;
    r->bound = a.bound + b.bound;
    r->base = sub ? LLVMBuildSub(cg->b, a.base, b.base, "") : add(cg, a.base, b.base);
    if (!a.var && !b.var && !a.k && !b.k)
        return;
    r->var = dist_new(cg, SK_I32, r->rows, r->cols);
    r->k = dist_new(cg, SK_I32, r->rows, r->cols);
    for (int i = 0; i < n; i++) {
        dist_set(cg, r->var, ps[i], var_combine(cg, var_get(cg, &a, ps[i]), var_get(cg, &b, ps[i]), sub));
        int64_t k = sub ? k_get(cg, &a, ps[i]) - k_get(cg, &b, ps[i]) : k_get(cg, &a, ps[i]) + k_get(cg, &b, ps[i]);
        dist_set(cg, r->k, ps[i], ci32(cg, (int)k));
    }
}

/* cmp of two affine index operands into r (i1): false if either is not. */
static bool index_cmp(Cg *cg, const Op *op, Dist *r, const Pos *ps, int n) {
    Affine a, b;
    if (!affine_of(cg, op->operands[0], &a) || !affine_of(cg, op->operands[1], &b) ||
        a.bound + b.bound >= AFFINE_BOUND)
        return false;
    int pred = cmp_pred(op);
    if (pred < 0)
        return false;
    /* ba + va + ka <pred> bb + vb + kb  <=>  va − vb − (bb − ba) <pred> kb − ka */
    LLVMValueRef d = LLVMBuildSub(cg->b, b.base, a.base, "");
    LLVMValueRef hi = ci64(cg, (int64_t)1 << 30), lo = ci64(cg, -((int64_t)1 << 30));
    d = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntSGT, d, hi, ""), hi, d, "");
    d = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntSLT, d, lo, ""), lo, d, "");
    d = LLVMBuildTrunc(cg->b, d, cg->i32, "");
    for (int i = 0; i < n; i++) {
        LLVMValueRef v = var_combine(cg, var_combine(cg, var_get(cg, &a, ps[i]), var_get(cg, &b, ps[i]), true), d, true);
        int64_t k = k_get(cg, &b, ps[i]) - k_get(cg, &a, ps[i]);
        dist_set(cg, r, ps[i], LLVMBuildICmp(cg->b, int_preds[pred], v, ci32(cg, (int)k), ""));
    }
    return true;
}

/* O·α, the online softmax's rescale of the accumulator by a row vector
 * in a key loop: when no row of the warp moved its max (every α is 1: in
 * almost every key tile, as online-softmax moves the max lazily), the
 * product is O itself, so a warp-uniform branch skips the multiplies (64
 * FMUL a key tile at head dim 128 on sm_90a, 128 on sm_80). Same values
 * either way. The target decides where (may_skip_unit_scale): sm_90a in
 * softmax-overlap launches, sm_80 except where P·V is at the register limit
 * (doc/codegen.md). */
static bool skips_unit_scale(Cg *cg, const Op *op) {
    if (!op_attr(op, "rescale") || !cg->target->may_skip_unit_scale)   /* online-softmax's O·α */
        return false;
    return op->parent != cg->top && op->results[0]->type->elem == SK_F32 && cg->target->may_skip_unit_scale(cg, op);
}

static void scale_unless_unit(Cg *cg, const Op *op, Dist **ops, const ScalarKind *ks, Dist *r, const Pos *ps, int n) {
    ScalarKind rk = op->results[0]->type->elem;
    LLVMValueRef *x = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)n), *a = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)n);
    LLVMValueRef unit = LLVMConstInt(cg->i1, 1, 0);
    for (int k = 0; k < n; k++) {
        x[k] = dist_get(cg, ops[0], ps[k]);
        a[k] = dist_get(cg, ops[1], ps[k]);
    }
    for (int s = 0; s < ops[1]->n; s++)
        if (ops[1]->v[s])
            unit = LLVMBuildAnd(cg->b, unit,
                                LLVMBuildFCmp(cg->b, LLVMRealOEQ, cg_cast(cg, ops[1]->v[s], ops[1]->elem, SK_F32),
                                              fconst(cg, SK_F32, 1), ""), "");
    LLVMValueRef args[2] = {ci32(cg, -1), unit};
    LLVMValueRef all = cg_call(cg, "llvm.nvvm.vote.all.sync", cg->i1, args, 2);
    LLVMBasicBlockRef from = LLVMGetInsertBlock(cg->b);
    LLVMBasicBlockRef scale = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "scale");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "scaled");
    LLVMBuildCondBr(cg->b, all, join, scale);
    LLVMPositionBuilderAtEnd(cg->b, scale);
    LLVMValueRef *y = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)n);
    for (int k = 0; k < n; k++) {
        LLVMValueRef xa[2] = {x[k], a[k]};
        y[k] = scalar_op(cg, op, rk, xa, ks);
    }
    LLVMBasicBlockRef scaled = LLVMGetInsertBlock(cg->b);
    LLVMBuildBr(cg->b, join);
    LLVMPositionBuilderAtEnd(cg->b, join);
    for (int k = 0; k < n; k++) {
        LLVMValueRef phi = LLVMBuildPhi(cg->b, LLVMTypeOf(y[k]), "");
        LLVMValueRef in[2] = {x[k], y[k]};
        LLVMBasicBlockRef bb[2] = {from, scaled};
        LLVMAddIncoming(phi, in, bb, 2);
        dist_set(cg, r, ps[k], phi);
    }
    cv_put(cg, op->results[0], cv_dist(cg, r));
}

void emit_elementwise(Cg *cg, const Op *op) {
    const Type *rt = op->results[0]->type;
    if (rt->kind == TY_SCALAR) {
        LLVMValueRef x[3];
        ScalarKind ks[3];
        for (int i = 0; i < op->noperands; i++) {
            x[i] = as_scalar(cg, op, op->operands[i]);
            ks[i] = elem_of(op->operands[i]);
        }
        cv_put(cg, op->results[0], cv_scalar(cg, scalar_op(cg, op, rt->elem, x, ks)));
        return;
    }
    int64_t rows = rt->dims[0].size, cols = rt->dims[1].size;
    if (!shape_ok(cg, op, rows, cols))
        return;
    Dist *ops[3];
    ScalarKind ks[3];
    for (int i = 0; i < op->noperands; i++) {
        ops[i] = as_dist(cg, op, op->operands[i]);
        ks[i] = elem_of(op->operands[i]);
    }
    Dist *r = dist_new(cg, rt->elem, rows, cols);
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    if (op->kind == OP_CMP && index_cmp(cg, op, r, ps, n)) {
        cv_put(cg, op->results[0], cv_dist(cg, r));
        return;
    }
    if (skips_unit_scale(cg, op)) {
        scale_unless_unit(cg, op, ops, ks, r, ps, n);
        return;
    }
    for (int k = 0; k < n; k++) {
        LLVMValueRef x[3];
        for (int i = 0; i < op->noperands; i++)
            x[i] = dist_get(cg, ops[i], ps[k]);
        dist_set(cg, r, ps[k], scalar_op(cg, op, rt->elem, x, ks));
    }
    if ((op->kind == OP_ADD || op->kind == OP_SUB) && rt->elem == SK_INDEX)
        affine_add(cg, op, r, ps, n);
    cv_put(cg, op->results[0], cv_dist(cg, r));
}

void emit_splat_iota(Cg *cg, const Op *op) {
    const Type *rt = op->results[0]->type;
    int64_t rows = rt->dims[0].size, cols = rt->dims[1].size;
    if (!shape_ok(cg, op, rows, cols))
        return;
    if (op->kind == OP_SPLAT) {
        Dist *d = dist_new(cg, rt->elem, 1, 1);
        d->v[0] = as_scalar(cg, op, op->operands[0]);
        if (rt->elem == SK_INDEX)   /* base alone */
            d->affine = true, d->base = d->v[0];
        cv_put(cg, op->results[0], cv_dist(cg, d));
        return;
    }
    int axis = (int)op_attr(op, "axis")->i;
    Dist *d = dist_new(cg, rt->elem, rows, cols);
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    for (int k = 0; k < n; k++) {
        LLVMValueRef r, c;
        coords(cg, ps[k], rows, cols, &r, &c);
        dist_set(cg, d, ps[k], cg_cast(cg, axis == 0 ? r : c, SK_INDEX, rt->elem));
    }
    if (rt->elem == SK_INDEX && (axis == 0 ? rows : cols) < AFFINE_BOUND) {   /* var + k alone */
        d->affine = true;
        d->base = ci64(cg, 0);
        d->bound = axis == 0 ? rows : cols;
        d->var = dist_new(cg, SK_I32, rows, cols);
        d->k = dist_new(cg, SK_I32, rows, cols);
        for (int i = 0; i < n; i++) {
            int64_t k;
            dist_set(cg, d->var, ps[i], split_const(cg, dist_get(cg, d, ps[i]), &k));
            dist_set(cg, d->k, ps[i], ci32(cg, (int)k));
        }
    }
    cv_put(cg, op->results[0], cv_dist(cg, d));
}
