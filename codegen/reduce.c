/* reduce.c — row reductions (tile.reduce: max and sum) across a row's
 * lanes and warps, and nv.lane_sum, which makes whole the row sums the
 * lanes kept in pieces (nv.partial). */
#include "codegen/lower.h"

#include <math.h>
#include <string.h>

/* the reduction's identity: what a column past the row's end adds */
static double identity(const char *kind) {
    return strcmp(kind, "sum") == 0 ? 0 : strcmp(kind, "max") == 0 ? -INFINITY : INFINITY;
}

static LLVMValueRef combine(Cg *cg, const char *kind, ScalarKind k, LLVMValueRef x, LLVMValueRef y) {
    if (strcmp(kind, "sum") == 0) {
        LLVMValueRef r = LLVMBuildFAdd(cg->b, to_f32(cg, x), to_f32(cg, y), "");
        return round_f32(cg, r, k);
    }
    return fmaxmin(cg, strcmp(kind, "max") == 0, x, y);
}

/* v combined across the lanes that share its row (the accumulator layout). */
static LLVMValueRef across_row_lanes(Cg *cg, const char *kind, ScalarKind k, LLVMValueRef v) {
    for (int bit = 1; bit < 32; bit <<= 1)
        if (cg->acc.row_lanes & bit)
            v = combine(cg, kind, k, v, shfl_xor(cg, v, bit));
    return v;
}

/* nv.lane_sum: each lane held the sum of its own columns of the row (a
 * tile.reduce with nv.partial, carried through a key loop); add them. */
void emit_lane_sum(Cg *cg, const Op *op) {
    const Type *t = op->results[0]->type;
    if (cg->lay != LAY_ACC) {
        cg_err(cg, op, "internal error: nv.lane_sum outside the accumulator layout", NULL);
        return;
    }
    Dist *x = as_dist(cg, op, op->operands[0]);
    if (!x)
        return;
    Dist *r = dist_new(cg, t->elem, t->dims[0].size, 1);
    for (int s = 0; s < r->n; s++)
        r->v[s] = x->v[s] ? across_row_lanes(cg, "sum", t->elem, x->v[s]) : NULL;
    cv_put(cg, op->results[0], cv_dist(cg, r));
}

void emit_reduce(Cg *cg, const Op *op) {
    const char *kind = op_attr(op, "kind")->s;
    if (strcmp(kind, "sum") && strcmp(kind, "max") && strcmp(kind, "min")) {
        cg_err(cg, op, "reduction '%s' is not supported", kind);
        return;
    }
    const Type *xt = op->operands[0]->type, *rt = op->results[0]->type;
    int64_t rows = xt->dims[0].size, cols = xt->dims[1].size;
    if (!shape_ok(cg, op, rows, cols))
        return;
    Dist *x = as_dist(cg, op, op->operands[0]);
    Dist *r = dist_new(cg, rt->elem, rows, 1);
    if (cols == 1) {   /* already one per row */
        for (int k = 0; k < r->n; k++)
            r->v[k] = x->v[k] ? cg_cast(cg, x->v[k], x->elem, rt->elem) : NULL;
        cv_put(cg, op->results[0], cv_dist(cg, r));
        return;
    }
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    bool partial = op_attr(op, "nv.partial") != NULL;
    if (partial && (cg->lay != LAY_ACC || strcmp(kind, "sum") != 0)) {
        cg_err(cg, op, "internal error: nv.partial on a reduction other than a sum in the accumulator layout", NULL);
        return;
    }
    if (cg->lay == LAY_ACC) {
        if (cg->wcols > 1) {
            cg_err(cg, op, "internal error: a row reduction in a grid of warps (nv.warp_cols): a row spans warps", NULL);
            return;
        }
        /* in-thread over the row's elements, then across the lanes sharing
         * the row (nv.partial: later, at an nv.lane_sum) */
        LLVMValueRef *acc = NEW_ARRAY(cg->a, LLVMValueRef, cg->mrep * 8);
        for (int k = 0; k < n; k++) {
            int s = ps[k].a * 8 + (ps[k].i & cg->acc.row_bits);
            LLVMValueRef v = cg_cast(cg, dist_get(cg, x, ps[k]), x->elem, rt->elem);
            acc[s] = acc[s] ? combine(cg, kind, rt->elem, acc[s], v) : v;
        }
        for (int s = 0; s < cg->mrep * 8; s++) {
            if (!acc[s])
                continue;
            r->v[s] = partial ? acc[s] : across_row_lanes(cg, kind, rt->elem, acc[s]);
        }
        cv_put(cg, op->results[0], cv_dist(cg, r));
        return;
    }
    if (cg->row_threads < cg->threads) {
        /* BLOCKED, rows in groups of a warp or less: per thread, then
         * across the group's lanes */
        for (int64_t a = 0; a < r->n; a++) {
            LLVMValueRef v = NULL;
            for (int k = 0; k < n; k++) {
                if (ps[k].a != a)
                    continue;
                LLVMValueRef e = cg_cast(cg, dist_get(cg, x, ps[k]), x->elem, SK_F32);
                LLVMValueRef row, col;
                coords(cg, ps[k], rows, cols, &row, &col);
                if ((ps[k].b + 1) * (int64_t)cg->row_threads * cg->row_vec > cols)   /* may be past the row's end */
                    e = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntULT, col, ci64(cg, cols), ""), e,
                                        fconst(cg, SK_F32, identity(kind)), "");
                v = v ? combine(cg, kind, SK_F32, v, e) : e;
            }
            for (int m = cg->row_threads / 2; m >= 1; m /= 2)
                v = combine(cg, kind, SK_F32, v, shfl_xor(cg, v, m));
            r->v[a] = cg_cast(cg, v, SK_F32, rt->elem);
        }
        cv_put(cg, op->results[0], cv_dist(cg, r));
        return;
    }
    /* BLOCKED, every thread on each row: per thread, per warp, then across
     * warps through shared memory */
    LLVMValueRef scratch = smem_alloc(cg, (int64_t)rows * cg->nwarps * 4);
    for (int64_t row = 0; row < rows; row++) {
        LLVMValueRef v = NULL;
        for (int64_t j = 0; j < cslots(cg, cols); j++) {
            LLVMValueRef e = cg_cast(cg, dist_get(cg, x, (Pos){(int)row, (int)j, 0}), x->elem, SK_F32);
            if ((j + 1) * cg->threads > cols) {   /* past the row's end: the identity */
                LLVMValueRef col = add(cg, ci64(cg, j * cg->threads), zext64(cg, cg->tid));
                e = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntULT, col, ci64(cg, cols), ""), e,
                                    fconst(cg, SK_F32, identity(kind)), "");
            }
            v = v ? combine(cg, kind, SK_F32, v, e) : e;
        }
        for (int m = 16; m >= 1; m /= 2)
            v = combine(cg, kind, SK_F32, v, shfl_xor(cg, v, m));
        LLVMBasicBlockRef join = if_begin(cg, LLVMBuildICmp(cg->b, LLVMIntEQ, cg->lane, ci32(cg, 0), ""));
        LLVMValueRef slot = add(cg, mul(cg, zext64(cg, cg->warp), ci64(cg, rows)), ci64(cg, row));
        LLVMBuildStore(cg->b, v, gep(cg, SK_F32, scratch, slot));
        if_end(cg, join);
    }
    cg_barrier(cg);
    for (int64_t row = 0; row < rows; row++) {
        LLVMValueRef v = NULL;
        for (int w = 0; w < cg->nwarps; w++) {
            LLVMValueRef e = LLVMBuildLoad2(cg->b, cg->f32, gep(cg, SK_F32, scratch, ci64(cg, w * rows + row)), "");
            v = v ? combine(cg, kind, SK_F32, v, e) : e;
        }
        r->v[row] = cg_cast(cg, v, SK_F32, rt->elem);
    }
    cg_barrier(cg);
    cv_put(cg, op->results[0], cv_dist(cg, r));
}
