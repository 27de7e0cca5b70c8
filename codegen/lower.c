/* lower.c — the ops of a kernel (tile IR) in LLVM IR, and the kernel
 * skeleton; target hooks (CgTarget) do the MMA and the async copies. */
#include "codegen/lower.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- ops ---------------------------------------------------------------------- */


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

static void emit_elementwise(Cg *cg, const Op *op) {
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

/* Memref coordinates of a tile element: the op's base indices plus the tile
 * coordinates along the memref dims `dims` names. */
void mem_coords(Cg *cg, const Op *op, const Mem *m, int first, LLVMValueRef row, LLVMValueRef col,
                       LLVMValueRef *co) {
    Attr *dims = op_attr(op, "dims");
    for (int d = 0; d < m->rank; d++)
        co[d] = as_scalar(cg, op, op->operands[first + d]);
    LLVMValueRef t[2] = {row, col};
    for (int a = 0; a < dims->n && a < 2; a++)
        if (dims->elems[a]->i >= 0)
            co[dims->elems[a]->i] = add(cg, co[dims->elems[a]->i], t[a]);
}

/* Offset of the coordinates, and whether they are inside the memref. */
LLVMValueRef mem_offset(Cg *cg, const Mem *m, LLVMValueRef *co, LLVMValueRef *inside) {
    LLVMValueRef off = ci64(cg, 0), in = LLVMConstInt(cg->i1, 1, 0);
    for (int d = 0; d < m->rank; d++) {
        /* unsigned compare: negative coordinates are outside too */
        in = LLVMBuildAnd(cg->b, in, LLVMBuildICmp(cg->b, LLVMIntULT, co[d], m->dims[d], ""), "");
        off = add(cg, off, mul(cg, co[d], m->strides[d]));
    }
    *inside = in;
    return off;
}

/* The memref offset of position p of a rows×cols tile at the op's indices
 * (operands from `first`), and whether it is inside the memref. */
static LLVMValueRef tile_offset(Cg *cg, const Op *op, const Mem *m, int first, Pos p, int64_t rows, int64_t cols,
                                LLVMValueRef *inside) {
    LLVMValueRef r, c, co[8];
    coords(cg, p, rows, cols, &r, &c);
    mem_coords(cg, op, m, first, r, c, co);
    return mem_offset(cg, m, co, inside);
}

/* Loads one element at off if inside, else gives fill (no branch: the address
 * is clamped to element 0). */
static LLVMValueRef guarded_load(Cg *cg, const Mem *m, LLVMValueRef off, LLVMValueRef inside, LLVMValueRef fill) {
    LLVMValueRef safe = LLVMBuildSelect(cg->b, inside, off, ci64(cg, 0), "");
    LLVMValueRef v = load_elem(cg, m->elem, gep(cg, m->elem, m->ptr, safe));
    return LLVMBuildSelect(cg->b, inside, v, fill, "");
}

/* Whether a tile's columns run along m's innermost dim with stride 1: then
 * the element right of (r, c) is the next one in memory. */
static bool columns_contiguous(const Op *op, const Mem *m) {
    Attr *dims = op_attr(op, "dims");
    LLVMValueRef s = m->strides[m->rank - 1];
    return dims->n >= 2 && dims->elems[1]->i == m->rank - 1 && LLVMIsAConstantInt(s) &&
           LLVMConstIntGetSExtValue(s) == 1;
}

/* Whether a 16-bit tile in the accumulator layout is stored two elements
 * at a time (store_pair): its pairs (pos_pair) adjacent in memory. Loads
 * stay 16-bit: ptxas hoists 32-bit ones above a whole epilogue's stores
 * (SwiGLU's down projection with its residual spilled) where it
 * interleaves these. */
static bool stores_pairs(const Cg *cg, const Op *op, const Mem *m) {
    return cg->target->pair_stores && cg->lay == LAY_ACC && esize(m->elem) == 2 && columns_contiguous(op, m);
}

/* Every memref starts 16-byte aligned (libattnrt's checks, smem_alloc): a
 * pair of 16-bit elements is 4-byte aligned when its element offset is even,
 * which LLVM can often prove from the offset's known bits. */
static LLVMValueRef pair_aligned(Cg *cg, LLVMValueRef off0) {
    return LLVMBuildICmp(cg->b, LLVMIntEQ, LLVMBuildAnd(cg->b, off0, ci64(cg, 1), ""), ci64(cg, 0), "");
}

static void emit_load(Cg *cg, const Op *op) {
    Mem *m = as_mem(cg, op, op->operands[0]);
    if (!m)
        return;
    const Type *rt = op->results[0]->type;
    int64_t rows = rt->dims[0].size, cols = rt->dims[1].size;
    if (op_attr(op, "nv.operand")) {   /* sm70-layout: the dots read it from shared memory */
        View *w = NEW(cg->a, View);
        w->rows = rows;
        w->cols = cols;
        if (m->shared) {   /* a stage of a shared buffer: the dot reads it in place */
            LLVMValueRef co[8], inside;
            mem_coords(cg, op, m, 1, ci64(cg, 0), ci64(cg, 0), co);
            w->base = gep(cg, m->elem, m->ptr, mem_offset(cg, m, co, &inside));
            w->stride = m->cstrides[m->rank - 2];
            w->swizzle = m->swizzle;
            w->panel_rows = m->cdims[m->rank - 2];
            if (m->swizzle && (rows != w->panel_rows || cols != m->cdims[m->rank - 1])) {
                cg_err(cg, op, "a swizzled shared tile is read whole (one stage)", NULL);
                return;
            }
        } else {
            emit_view_copy(cg, op, m, w);
            Attr *how = op_attr(op, "nv.operand");
            if (strcmp(how->s, "fragments") == 0) {
                if (!cg->target->preload_a) {
                    cg_err(cg, op, "internal error: nv.operand \"fragments\" on a target without them", NULL);
                    return;
                }
                cg->target->preload_a(cg, w, m->elem);
            }
        }
        Cv *c = NEW(cg->a, Cv);
        c->kind = CV_VIEW;
        c->view = w;
        cv_put(cg, op->results[0], c);
        return;
    }
    if (!shape_ok(cg, op, rows, cols))
        return;
    Attr *pad = op_attr(op, "pad");
    double padv = pad ? (pad->kind == AT_FLOAT ? pad->f : (double)pad->i) : 0;
    LLVMValueRef fill = scalar_is_float(rt->elem) ? fconst(cg, rt->elem, padv)
                                                  : LLVMConstInt(lty(cg, rt->elem), (unsigned long long)padv, 1);
    Dist *d = dist_new(cg, rt->elem, rows, cols);
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    for (int k = 0; k < n; k++) {
        LLVMValueRef inside, off = tile_offset(cg, op, m, 1, ps[k], rows, cols, &inside);
        dist_set(cg, d, ps[k], guarded_load(cg, m, off, inside, fill));
    }
    cv_put(cg, op->results[0], cv_dist(cg, d));
}

/* Positions p, q (pos_pair, stores_pairs) of a 16-bit tile.store: one
 * 32-bit store where both are inside and the pair is aligned, else each
 * element on its own. Where LLVM proves the pair aligned and q inside
 * whenever p is, only the 32-bit store is left. */
static void store_pair(Cg *cg, const Op *op, Mem *m, Dist *d, Pos p, Pos q, int64_t rows, int64_t cols,
                       LLVMValueRef own) {
    LLVMValueRef in0, in1;
    LLVMValueRef off0 = tile_offset(cg, op, m, 2, p, rows, cols, &in0);
    tile_offset(cg, op, m, 2, q, rows, cols, &in1);
    LLVMValueRef off1 = add(cg, off0, ci64(cg, 1));
    LLVMValueRef v0 = cg_cast(cg, dist_get(cg, d, p), d->elem, m->elem);
    LLVMValueRef v1 = cg_cast(cg, dist_get(cg, d, q), d->elem, m->elem);
    LLVMValueRef a0 = gep(cg, m->elem, m->ptr, off0), a1 = gep(cg, m->elem, m->ptr, off1);
    LLVMValueRef both = LLVMBuildAnd(cg->b, LLVMBuildAnd(cg->b, in0, in1, ""), own, "");
    LLVMValueRef fast = LLVMBuildAnd(cg->b, both, pair_aligned(cg, off0), "");
    LLVMValueRef word = LLVMBuildBitCast(cg->b, pack2(cg, v0, v1), cg->i32, "");
    if (m->shared) {
        LLVMBasicBlockRef join = if_begin(cg, fast);
        store_elem(cg, SK_I32, word, a0);
        if_end(cg, join);
    } else {
        /* a predicated store, not a branch: LLVM would sink the pair's
         * arithmetic into the branch, keeping the whole accumulator alive
         * through the loads ptxas hoists above all stores (a residual's) */
        LLVMValueRef args[3] = {LLVMBuildPtrToInt(cg->b, a0, cg->i64, ""), word, LLVMBuildZExt(cg->b, fast, cg->i32, "")};
        cg_asm(cg, "{\n.reg .pred p;\nsetp.ne.b32 p, $2, 0;\n@p st.global.b32 [$0], $1;\n}", "l,r,r,~{memory}",
               LLVMVoidTypeInContext(cg->ctx), args, 3);
    }
    LLVMValueRef slow = LLVMBuildAnd(cg->b, LLVMBuildNot(cg->b, fast, ""), own, "");
    LLVMBasicBlockRef join = if_begin(cg, LLVMBuildAnd(cg->b, slow, in0, ""));
    store_elem(cg, m->elem, v0, a0);
    if_end(cg, join);
    join = if_begin(cg, LLVMBuildAnd(cg->b, slow, in1, ""));
    store_elem(cg, m->elem, v1, a1);
    if_end(cg, join);
}

/* tile.store, and tile.atomic_add: each element added into global f32
 * memory (atomicrmw fadd: red.global.add where the result is unused);
 * elements outside the memref are skipped. */
static void emit_store(Cg *cg, const Op *op) {
    Attr *how = op_attr(op, "nv.store");
    if (how && strcmp(how->s, "tma") == 0) {
        tma_store(cg, op);
        return;
    }
    Mem *m = as_mem(cg, op, op->operands[0]);
    if (!m)
        return;
    const Type *t = op->operands[1]->type;
    int64_t rows = t->dims[0].size, cols = t->dims[1].size;
    Dist *d = as_dist(cg, op, op->operands[1]);
    if (cg->failed)
        return;
    bool atomic = op->kind == OP_ATOMIC_ADD;
    if (atomic && (m->elem != SK_F32 || m->shared)) {
        cg_err(cg, op, "tile.atomic_add adds into global f32 memory only", NULL);
        return;
    }
    LLVMValueRef own = tile_owner(cg, rows, cols);
    bool pairs = !atomic && stores_pairs(cg, op, m);
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    for (int k = 0; k < n; k++) {
        if (pairs && pos_pair(ps, k, n)) {
            store_pair(cg, op, m, d, ps[k], ps[k + 1], rows, cols, own);
            k++;
            continue;
        }
        LLVMValueRef inside, off = tile_offset(cg, op, m, 2, ps[k], rows, cols, &inside);
        LLVMBasicBlockRef join = if_begin(cg, LLVMBuildAnd(cg->b, inside, own, ""));
        LLVMValueRef v = cg_cast(cg, dist_get(cg, d, ps[k]), d->elem, m->elem);
        if (atomic)
            LLVMBuildAtomicRMW(cg->b, LLVMAtomicRMWBinOpFAdd, gep(cg, m->elem, m->ptr, off), v,
                               LLVMAtomicOrderingMonotonic, false);
        else
            store_elem(cg, m->elem, v, gep(cg, m->elem, m->ptr, off));
        if_end(cg, join);
    }
}

static void emit_gather(Cg *cg, const Op *op) {
    Mem *m = as_mem(cg, op, op->operands[0]);
    if (!m)
        return;
    const Type *rt = op->results[0]->type;
    if (rt->kind == TY_SCALAR) {   /* every index a scalar: one load, the same in all threads */
        LLVMValueRef co[8], inside;
        for (int i = 0; i < m->rank; i++)
            co[i] = cg_cast(cg, as_scalar(cg, op, op->operands[1 + i]), elem_of(op->operands[1 + i]), SK_INDEX);
        LLVMValueRef off = mem_offset(cg, m, co, &inside);
        cv_put(cg, op->results[0], cv_scalar(cg, guarded_load(cg, m, off, inside, LLVMConstNull(lty(cg, m->elem)))));
        return;
    }
    int64_t rows = rt->dims[0].size, cols = rt->dims[1].size;
    if (!shape_ok(cg, op, rows, cols))
        return;
    Dist *ix[8];
    for (int i = 0; i < m->rank; i++)
        ix[i] = as_dist(cg, op, op->operands[1 + i]);
    Dist *d = dist_new(cg, rt->elem, rows, cols);
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    for (int k = 0; k < n; k++) {
        LLVMValueRef co[8], inside;
        for (int i = 0; i < m->rank; i++)
            co[i] = cg_cast(cg, dist_get(cg, ix[i], ps[k]), ix[i]->elem, SK_INDEX);
        LLVMValueRef off = mem_offset(cg, m, co, &inside);
        dist_set(cg, d, ps[k], guarded_load(cg, m, off, inside, LLVMConstNull(lty(cg, m->elem))));
    }
    cv_put(cg, op->results[0], cv_dist(cg, d));
}

static void emit_splat_iota(Cg *cg, const Op *op) {
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
static void emit_lane_sum(Cg *cg, const Op *op) {
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

static void emit_reduce(Cg *cg, const Op *op) {
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
    /* BLOCKED: per thread, per warp, then across warps through shared memory */
    LLVMValueRef scratch = smem_alloc(cg, (int64_t)rows * cg->nwarps * 4);
    for (int64_t row = 0; row < rows; row++) {
        LLVMValueRef v = NULL;
        for (int64_t j = 0; j < cslots(cg, cols); j++) {
            LLVMValueRef e = cg_cast(cg, dist_get(cg, x, (Pos){(int)row, (int)j, 0}), x->elem, SK_F32);
            if ((j + 1) * cg->threads > cols) {   /* past the row's end: the identity */
                double id = strcmp(kind, "sum") == 0 ? 0 : strcmp(kind, "max") == 0 ? -INFINITY : INFINITY;
                LLVMValueRef col = add(cg, ci64(cg, j * cg->threads), zext64(cg, cg->tid));
                e = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntULT, col, ci64(cg, cols), ""), e,
                                    fconst(cg, SK_F32, id), "");
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


bool dot_fits(Cg *cg, const Op *op) {
    const Type *at = op->operands[0]->type, *bt = op->operands[1]->type, *rt = op->results[0]->type;
    int64_t M = at->dims[0].size, K = at->dims[1].size, N = bt->dims[1].size;
    if ((rt->elem == SK_F16) != cg->acc16)
        return cg_err(cg, op, "all tile.dot ops of a kernel must accumulate in one type", NULL);
    if (M != cg->R || K % 16 || N % (16 * cg->wcols))
        return cg_err(cg, op, "%s", arena_printf(cg->a, "a %lldx%lldx%lld dot does not fit the kernel's warp tiling",
                                                  (long long)M, (long long)K, (long long)N));
    return true;
}

Dist *dot_a_in_registers(Cg *cg, const Op *op) {
    Dist *p = as_dist(cg, op, op->operands[0]);
    if (cg->failed)
        return NULL;
    if (p->rows != cg->R || p->cols != op->operands[0]->type->dims[1].size) {
        cg_err(cg, op, "operand A of tile.dot must be a full tile", NULL);
        return NULL;
    }
    return p;
}

bool copy_operands(Cg *cg, const Op *op, const char *how, Mem **src, Mem **dst) {
    *src = as_mem(cg, op, op->operands[0]);
    *dst = as_mem(cg, op, op->operands[1]);
    if (!*src || !*dst)
        return false;
    Attr *copy = op_attr(op, "nv.copy");
    if (!copy || strcmp(copy->s, how) != 0)
        return cg_err(cg, op, "%s",
                      arena_printf(cg->a, "internal error: tile.copy_async has no nv.copy = \"%s\" (run %s)", how,
                                   cg->info->lowering));
    return true;
}

const Token *wait_token(Cg *cg, const Op *op) {
    Cv *c = cv_get(cg, op->operands[0]);
    if (!c || c->kind != CV_TOKEN) {
        cg_err(cg, op, "tile.wait needs a token of tile.copy_async", NULL);
        return NULL;
    }
    return c->tok;
}

/* A computed tile (registers) that dots read transposed (nv.operand on the
 * tile.trans): stored row-major into a shared buffer of its own, which the
 * dots then read as a View. The barrier before the stores lets the previous
 * loop iteration's readers finish; the one after publishes them. */
static View *registers_to_view(Cg *cg, const Op *op, const Dist *d) {
    Attr *sw = op_attr(op, "nv.swizzle"), *rs = op_attr(op, "nv.row_stride");
    int swizzle = sw ? (int)sw->i : 0;
    View *w = NEW(cg->a, View);
    w->rows = d->rows, w->cols = d->cols;
    w->stride = swizzle ? d->cols : rs->i;
    w->swizzle = swizzle;
    w->panel_rows = d->rows;
    cg->owner = op->results[0];
    w->base = smem_alloc_aligned(cg, d->rows * w->stride * esize(d->elem), swizzle ? 1024 : 16);
    cg->owner = NULL;
    cg_barrier(cg);
    Pos *ps;
    int n = positions(cg, d->rows, d->cols, &ps);
    LLVMValueRef own = tile_owner(cg, d->rows, d->cols);
    for (int k = 0; k < n; k++) {
        LLVMValueRef row, col;
        coords(cg, ps[k], d->rows, d->cols, &row, &col);
        LLVMValueRef off = smem_offset(cg, row, col, w->stride, w->panel_rows, swizzle);
        LLVMBasicBlockRef join = if_begin(cg, own);
        store_elem(cg, d->elem, dist_get(cg, d, ps[k]), gep(cg, d->elem, w->base, off));
        if_end(cg, join);
    }
    proxy_fence(cg);
    cg_barrier(cg);
    return w;
}

static void emit_trans(Cg *cg, const Op *op) {
    Cv *c = cv_get(cg, op->operands[0]);
    View *from = c && c->kind == CV_VIEW ? c->view : NULL;
    if (c && c->kind == CV_DIST && op_attr(op, "nv.operand") && c->d->rows == op->operands[0]->type->dims[0].size &&
        c->d->cols == op->operands[0]->type->dims[1].size)
        from = registers_to_view(cg, op, c->d);
    if (!from) {
        cg_err(cg, op, "tile.trans is supported on loaded tiles, and on computed tiles only dots read", NULL);
        return;
    }
    View *w = NEW(cg->a, View);
    *w = *from;
    w->trans = !w->trans;
    int64_t t = w->rows;
    w->rows = w->cols;
    w->cols = t;
    Cv *r = NEW(cg->a, Cv);
    r->kind = CV_VIEW;
    r->view = w;
    cv_put(cg, op->results[0], r);
}

/* ---- control flow --------------------------------------------------------------- */

/* Loop-carried state: a phi per stored slot of a tile, per register of a
 * token, or one for a scalar. */
typedef struct Carried {
    Cv *cv;
    int n;
    LLVMValueRef *phis;
} Carried;

static Cv *make_phis(Cg *cg, const Op *op, const Value *arg, Cv *init, Carried *c) {
    Cv *cv = NEW(cg->a, Cv);
    const Type *t = arg->type;
    if (t->kind == TY_TILE) {
        int64_t rows = t->dims[0].size, cols = t->dims[1].size;
        Dist *d = dist_new(cg, t->elem, rows, cols);
        Pos *ps;
        int n = positions(cg, rows, cols, &ps);
        c->phis = NEW_ARRAY(cg->a, LLVMValueRef, d->n);
        for (int k = 0; k < n; k++) {
            LLVMValueRef p = LLVMBuildPhi(cg->b, lty(cg, t->elem), "");
            dist_set(cg, d, ps[k], p);
        }
        for (int s = 0; s < d->n; s++)
            c->phis[s] = d->v[s];
        c->n = d->n;
        cv->kind = CV_DIST;
        cv->d = d;
    } else if (t->kind == TY_TOKEN) {
        if (!init || init->kind != CV_TOKEN) {
            cg_err(cg, op, "a loop-carried token must come from tile.copy_async", NULL);
            return cv;
        }
        Token *tok = NEW(cg->a, Token);
        *tok = *init->tok;
        tok->regs = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)tok->nregs);
        c->n = tok->nregs + 1;
        c->phis = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)c->n);
        for (int j = 0; j < tok->nregs; j++)
            c->phis[j] = tok->regs[j] = LLVMBuildPhi(cg->b, LLVMTypeOf(init->tok->regs[j]), "");
        c->phis[tok->nregs] = tok->stage = LLVMBuildPhi(cg->b, cg->i64, "");
        cv->kind = CV_TOKEN;
        cv->tok = tok;
    } else {
        c->n = 1;
        c->phis = NEW_ARRAY(cg->a, LLVMValueRef, 1);
        c->phis[0] = LLVMBuildPhi(cg->b, lty(cg, t->elem), "");
        cv->kind = CV_SCALAR;
        cv->s = c->phis[0];
    }
    c->cv = cv;
    return cv;
}

static void incoming(Cg *cg, const Op *op, Carried *c, const Value *src_val, Cv *src, LLVMBasicBlockRef bb) {
    if (c->cv->kind == CV_DIST) {
        Dist *d = c->cv->d;
        Dist *s = src->kind == CV_DIST ? src->d : as_dist(cg, op, src_val);
        Pos *ps;
        int n = positions(cg, d->rows, d->cols, &ps);
        for (int k = 0; k < n; k++) {
            LLVMValueRef v = cg_cast(cg, dist_get(cg, s, ps[k]), s->elem, d->elem);
            LLVMValueRef phi = dist_get(cg, d, ps[k]);
            LLVMAddIncoming(phi, &v, &bb, 1);
        }
    } else if (c->cv->kind == CV_TOKEN) {
        if (src->kind != CV_TOKEN || src->tok->nregs != c->cv->tok->nregs || src->tok->dst != c->cv->tok->dst) {
            cg_err(cg, op, "the tokens a loop carries must copy into the same buffer", NULL);
            return;
        }
        for (int j = 0; j < src->tok->nregs; j++)
            LLVMAddIncoming(c->phis[j], &src->tok->regs[j], &bb, 1);
        LLVMAddIncoming(c->phis[c->n - 1], &src->tok->stage, &bb, 1);
    } else {
        LLVMValueRef v = src->kind == CV_SCALAR ? src->s : LLVMGetUndef(LLVMTypeOf(c->phis[0]));
        LLVMAddIncoming(c->phis[0], &v, &bb, 1);
    }
}

static void emit_for(Cg *cg, const Op *op) {
    LLVMValueRef lb = as_scalar(cg, op, op->operands[0]), ub = as_scalar(cg, op, op->operands[1]),
                 step = as_scalar(cg, op, op->operands[2]);
    int ncarry = op->noperands - 3;
    const Block *body = op->regions[0].blocks[0];
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(cg->b);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "loop");
    LLVMBasicBlockRef bodybb = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "body");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "exit");
    /* values of the inits, as seen from the preheader */
    Cv **init = NEW_ARRAY(cg->a, Cv *, ncarry + 1);
    for (int i = 0; i < ncarry; i++)
        init[i] = cv_get(cg, op->operands[3 + i]);
    /* the producer carries no tiles (it computes none) */
    bool *skip = NEW_ARRAY(cg->a, bool, ncarry + 1);
    for (int i = 0; i < ncarry; i++)
        skip[i] = cg->hopper.role == ROLE_PRODUCER && body->args[1 + i]->type->kind == TY_TILE;
    /* make sure tile inits are tiles before leaving the preheader */
    for (int i = 0; i < ncarry; i++)
        if (!skip[i] && body->args[1 + i]->type->kind == TY_TILE && init[i] && init[i]->kind == CV_VIEW)
            as_dist(cg, op, op->operands[3 + i]);
    LLVMBuildBr(cg->b, head);
    LLVMPositionBuilderAtEnd(cg->b, head);
    LLVMValueRef iv = LLVMBuildPhi(cg->b, cg->i64, "iv");
    LLVMAddIncoming(iv, &lb, &pre, 1);
    Carried *car = NEW_ARRAY(cg->a, Carried, ncarry + 1);
    for (int i = 0; i < ncarry; i++)
        if (!skip[i])
            cv_put(cg, body->args[1 + i], make_phis(cg, op, body->args[1 + i], init[i], &car[i]));
    if (cg->failed)
        return;
    /* incoming from the preheader: build any conversions there */
    LLVMBasicBlockRef save = LLVMGetInsertBlock(cg->b);
    LLVMPositionBuilderBefore(cg->b, LLVMGetBasicBlockTerminator(pre));
    for (int i = 0; i < ncarry; i++)
        if (!skip[i])
            incoming(cg, op, &car[i], op->operands[3 + i], init[i], pre);
    LLVMPositionBuilderAtEnd(cg->b, save);
    cv_put(cg, body->args[0], cv_scalar(cg, iv));
    LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntSLT, iv, ub, ""), bodybb, exit);
    LLVMPositionBuilderAtEnd(cg->b, bodybb);
    const Value **yv = NEW_ARRAY(cg->a, const Value *, ncarry + 1);
    Cv **ys = NEW_ARRAY(cg->a, Cv *, ncarry + 1);
    emit_block(cg, body, yv, ys);
    if (cg->failed)
        return;
    LLVMValueRef next = LLVMBuildAdd(cg->b, iv, step, "");
    for (int i = 0; i < ncarry; i++) {
        if (!skip[i] && ys[i] && ys[i]->kind == CV_VIEW)
            as_dist(cg, op, yv[i]);
    }
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(cg->b);
    for (int i = 0; i < ncarry; i++)
        if (!skip[i])
            incoming(cg, op, &car[i], yv[i], ys[i], latch);
    LLVMAddIncoming(iv, &next, &latch, 1);
    LLVMBuildBr(cg->b, head);
    LLVMPositionBuilderAtEnd(cg->b, exit);
    for (int i = 0; i < ncarry; i++)
        if (!skip[i])
            cv_put(cg, op->results[i], car[i].cv);
}

static void emit_op(Cg *cg, const Op *op) {
    switch (op->kind) {
    case OP_CONSTANT: {
        const Type *t = op->results[0]->type;
        Attr *v = op_attr(op, "value");
        double x = v->kind == AT_FLOAT ? v->f : (double)v->i;
        LLVMValueRef c = scalar_is_float(t->elem) ? fconst(cg, t->elem, x)
                                                  : LLVMConstInt(lty(cg, t->elem), (unsigned long long)v->i, 1);
        cv_put(cg, op->results[0], cv_scalar(cg, c));
        return;
    }
    case OP_DIM: {
        const char *name = op_attr(op, "name")->s;
        for (int i = 0; i < cg->spec->ndims; i++)
            if (strcmp(cg->spec->dims[i], name) == 0) {
                cv_put(cg, op->results[0],
                       cv_scalar(cg, LLVMGetParam(cg->fn, (unsigned)(cg->spec->launch->noperands - 3 +
                                                                     cg->spec->launch->nresults + i))));
                return;
            }
        cg_err(cg, op, "unknown dim '%s'", name);
        return;
    }
    case OP_LOAD: emit_load(cg, op); return;
    case OP_STORE: emit_store(cg, op); return;
    case OP_ATOMIC_ADD: emit_store(cg, op); return;
    case OP_GATHER: emit_gather(cg, op); return;
    case OP_SPLAT: case OP_IOTA: emit_splat_iota(cg, op); return;
    case OP_TILE_REDUCE: emit_reduce(cg, op); return;
    case OP_LANE_SUM: emit_lane_sum(cg, op); return;
    case OP_DOT: cg->target->dot(cg, op); return;
    case OP_TRANS: emit_trans(cg, op); return;
    case OP_ALLOC: emit_alloc(cg, op); return;
    case OP_COPY_ASYNC: cg->target->copy_async(cg, op); return;
    case OP_WAIT: cg->target->wait(cg, op); return;
    case OP_FOR: emit_for(cg, op); return;
    default: break;
    }
    const char *name = op_info[op->kind].name;
    if (op_kind_has(op->kind, OPF_ELEMENTWISE)) {   /* (bf16 where the target has none: refused by its layout pass) */
        emit_elementwise(cg, op);
        return;
    }
    cg_err(cg, op, "%s", arena_printf(cg->a, "'%s' cannot be lowered for %s", name, cg->info->name));
}

/* ---- warp roles (the producer's ops and the stage releases: warp-roles) ----------- */

/* Consumer: where in blk each waited stage is free again, as the
 * warp-roles pass decided (nv.free_after: that many ops after the wait). */
static void plan_releases(Cg *cg, const Block *blk) {
    for (const Op *w = blk->first; w; w = w->next) {
        Attr *after = w->kind == OP_WAIT ? op_attr(w, "nv.free_after") : NULL;
        if (!after)
            continue;
        const Op *last = w;
        for (int64_t k = 0; k < after->i && last->next; k++)
            last = last->next;
        PtrVec *v = map_get(&cg->hopper.releases, last);
        if (!v) {
            v = NEW(cg->a, PtrVec);
            map_put(cg->a, &cg->hopper.releases, last, v);
        }
        vec_push(cg->a, v, (void *)w);
    }
}

/* The ops the producer warpgroup runs (warp-roles' nv.producer). */
static bool producer_runs(const Op *op) { return op_attr(op, "nv.producer") != NULL; }

void release_stages(Cg *cg, const Op *op) {
    PtrVec *free = cg->hopper.role == ROLE_CONSUMER ? map_get(&cg->hopper.releases, op) : NULL;
    for (int i = 0; free && i < free->len && !cg->failed; i++) {
        const Token *t = map_get(&cg->hopper.wait_tok, free->items[i]);
        if (t && t->ring)
            tma_release(cg, t);
    }
}

static struct InFlight *in_flight(Cg *cg, const Op *op) {
    for (int i = 0; i < cg->hopper.nin_flight; i++)
        if (cg->hopper.in_flight[i].op == op)
            return &cg->hopper.in_flight[i];
    return NULL;
}

/* The dot a tile.dot marked nv.pair is emitted with: the next one in its
 * block (the layout pass checked that only waits and loads stand between). */
const Op *paired_dot(const Op *d1) {
    if (!op_attr(d1, "nv.pair"))
        return NULL;
    for (const Op *x = d1->next; x; x = x->next)
        if (x->kind == OP_DOT)
            return x;
    return NULL;
}

void emit_block(Cg *cg, const Block *blk, const Value **yv, Cv **ys) {
    int index = 0;
    if (cg->hopper.role == ROLE_CONSUMER)
        plan_releases(cg, blk);
    for (const Op *op = blk->first; op && !cg->failed; op = op->next, index++) {
        /* the dots in flight that op needs complete first; at the top level
         * (outside loops) and at the end of a loop body every one does:
         * nothing there overlaps with them, shared memory is reused at the
         * top, and no dot stays in flight across a back edge */
        if (cg->target->complete && cg->hopper.role != ROLE_PRODUCER)
            cg->target->complete(cg, blk == cg->top || op->kind == OP_TILE_YIELD ? NULL : op);
        /* (a persistent kernel's next tile reuses every buffer: no reuse
         * within the tile, which the producer may already be filling) */
        if (blk == cg->top && index > 0 && cg->hopper.role != ROLE_PRODUCER && !cg->hopper.persistent)
            smem_release(cg, index - 1);
        if (op->kind == OP_TILE_YIELD) {
            for (int i = 0; i < op->noperands; i++) {
                if (yv)
                    yv[i] = op->operands[i];
                if (ys)
                    ys[i] = cv_get(cg, op->operands[i]);
            }
            continue;
        }
        if (cg->hopper.role == ROLE_PRODUCER && !producer_runs(op))
            continue;
        if (op->kind == OP_ALLOC && cv_get(cg, op->results[0]))   /* a TMA buffer, made before the roles split */
            continue;
        const Op *pair = op->kind == OP_DOT ? paired_dot(op) : NULL;
        if (pair && !cg->target->dot_pair) {
            cg_err(cg, op, "internal error: nv.pair on a target that emits dots one by one", NULL);
            return;
        }
        if (pair) {
            for (const Op *x = op->next; x != pair && !cg->failed; x = x->next, index++) {
                emit_op(cg, x);
                release_stages(cg, x);
            }
            cg->target->dot_pair(cg, op, pair);
            release_stages(cg, op);
            release_stages(cg, pair);
            op = pair;
            index++;
            continue;
        }
        emit_op(cg, op);
        struct InFlight *f = in_flight(cg, op);
        if (f)
            f->deferred = true;
        else
            release_stages(cg, op);
    }
}


/* ---- the kernel ----------------------------------------------------------------- */

bool emit_kernel(const CgTarget *target, Arena *a, Diag *d, LLVMContextRef ctx, LLVMModuleRef mod, const KernelSpec *k,
                 KernelInfo *info) {
    Cg cgs = {.a = a, .d = d, .ctx = ctx, .mod = mod, .spec = k, .target = target, .info = target->target};
    cgs.short_shared = cgs.info->short_shared;
    Cg *cg = &cgs;
    map_init(&cg->vals, false);
    cg->i1 = LLVMInt1TypeInContext(ctx);
    cg->i16 = LLVMInt16TypeInContext(ctx);
    cg->i32 = LLVMInt32TypeInContext(ctx);
    cg->i64 = LLVMInt64TypeInContext(ctx);
    cg->f16 = LLVMHalfTypeInContext(ctx);
    cg->bf16 = LLVMBFloatTypeInContext(ctx);
    cg->f32 = LLVMFloatTypeInContext(ctx);
    cg->v2f16 = LLVMVectorType(cg->f16, 2);
    cg->p1 = LLVMPointerTypeInContext(ctx, 1);
    const Op *launch = k->launch;
    const Block *body = launch->regions[0].blocks[0];

    /* the layout the target's lowering pass chose */
    Attr *lay = op_attr(launch, "nv.layout"), *rows = op_attr(launch, "nv.rows"),
         *warps = op_attr(launch, "nv.warps"), *blocks = op_attr(launch, "nv.row_blocks");
    if (!lay || !rows || !warps || !blocks)
        return cg_err(cg, launch, "internal error: the launch has no nv.layout (run %s first)", cg->info->lowering);
    cg->lay = strcmp(lay->s, "blocked") == 0 ? LAY_BLOCKED : LAY_ACC;
    cg->acc16 = strcmp(lay->s, "acc.f16") == 0;
    cg->acc = target->acc_layout(cg->acc16);
    cg->R = rows->i;
    cg->nwarps = (int)warps->i;
    cg->mrep = (int)blocks->i;
    Attr *wcols = op_attr(launch, "nv.warp_cols");
    cg->wcols = wcols ? (int)wcols->i : 1;
    if (cg->wcols < 1 || (cg->wcols > 1 && (!target->warp_grid || cg->lay != LAY_ACC || cg->nwarps % cg->wcols ||
                                            cg->R != 16 * cg->mrep * (cg->nwarps / cg->wcols))))
        return cg_err(cg, launch, "internal error: nv.warps, nv.warp_cols and nv.row_blocks do not tile the rows "
                                  "(a grid of warps needs the accumulator layout, on sm_80)", NULL);
    cg->threads = 32 * cg->nwarps;   /* the threads that compute (the consumers) */
    Attr *overlap = op_attr(launch, "nv.overlap");
    cg->hopper.lazy_dots = overlap && overlap->i;
    if (!read_skeleton(cg, launch))
        return false;
    int launch_threads = cg->threads + 32 * cg->hopper.producer_warps;
    map_init(&cg->hopper.releases, false);
    map_init(&cg->hopper.wait_tok, false);

    /* the function: memref pointers, the block's dims, the first y of this
     * launch (below), then the tensor maps of its TMA copies (sm_90a) */
    map_init(&cg->hopper.tma_bufs, false);
    if (!tma_collect(cg, body))
        return false;
    int nmem = launch->noperands - 3 + launch->nresults;
    int y_param = nmem + k->ndims, tmap0 = y_param + 1 + (cg->hopper.persistent ? 3 : 0), nparams = tmap0 + cg->hopper.ntmaps;
    LLVMTypeRef *pt = NEW_ARRAY(a, LLVMTypeRef, nparams + 1);
    for (int i = 0; i < nparams; i++)
        pt[i] = i < nmem ? cg->p1 : i < y_param ? cg->i64 : i == y_param ? cg->i32
                : i >= tmap0 ? LLVMPointerTypeInContext(ctx, 0) : i < y_param + 3 ? cg->i64 : cg->p1;
    LLVMTypeRef ft = LLVMFunctionType(LLVMVoidTypeInContext(ctx), pt, (unsigned)nparams, false);
    cg->fn = LLVMAddFunction(mod, k->name, ft);
    LLVMSetFunctionCallConv(cg->fn, 71 /* ptx_kernel */);
    for (int i = 0; i < nmem; i++) {
        LLVMValueRef p = LLVMGetParam(cg->fn, (unsigned)i);
        unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
        LLVMAddAttributeAtIndex(cg->fn, (unsigned)(i + 1), LLVMCreateEnumAttribute(ctx, noalias, 0));
        LLVMSetValueName2(p, body->args[3 + i]->name ? body->args[3 + i]->name : "mem",
                          strlen(body->args[3 + i]->name ? body->args[3 + i]->name : "mem"));
    }
    for (int i = 0; i < k->ndims; i++)
        LLVMSetValueName2(LLVMGetParam(cg->fn, (unsigned)(nmem + i)), k->dims[i], strlen(k->dims[i]));
    LLVMSetValueName2(LLVMGetParam(cg->fn, (unsigned)y_param), "y_offset", 8);
    if (cg->hopper.persistent) {
        cg->hopper.tiles_x = LLVMGetParam(cg->fn, (unsigned)y_param + 1);
        cg->hopper.tiles_y = LLVMGetParam(cg->fn, (unsigned)y_param + 2);
        cg->hopper.tile_counter = LLVMGetParam(cg->fn, (unsigned)y_param + 3);
        LLVMSetValueName2(cg->hopper.tiles_x, "tiles_x", 7);
        LLVMSetValueName2(cg->hopper.tiles_y, "tiles_y", 7);
        LLVMSetValueName2(cg->hopper.tile_counter, "tile_counter", 12);
    }
    /* A CUtensorMap (128 bytes) by value: byval, 64-byte aligned, and
     * grid_constant, so that its address is the parameter's own (cvta.param,
     * what TMA reads) instead of a copy in local memory. */
    LLVMMetadataRef gc[8];
    for (int j = 0; j < cg->hopper.ntmaps; j++) {
        unsigned at = (unsigned)(tmap0 + j);
        LLVMValueRef p = cg->hopper.tmap_param[j] = LLVMGetParam(cg->fn, at);
        LLVMTypeRef map = LLVMArrayType(LLVMInt8TypeInContext(ctx), 128);
        unsigned byval = LLVMGetEnumAttributeKindForName("byval", 5), align = LLVMGetEnumAttributeKindForName("align", 5);
        LLVMAddAttributeAtIndex(cg->fn, at + 1, LLVMCreateTypeAttribute(ctx, byval, map));
        LLVMAddAttributeAtIndex(cg->fn, at + 1, LLVMCreateEnumAttribute(ctx, align, 64));
        const char *src = body->args[3 + cg->hopper.tmaps[j].arg]->name;
        const char *nm = arena_printf(a, "tmap_%s", src ? src : "mem");
        LLVMSetValueName2(p, nm, strlen(nm));
        gc[j] = LLVMValueAsMetadata(ci32(cg, at + 1));   /* 1-based */
    }
    if (cg->hopper.ntmaps) {
        LLVMMetadataRef ann[3] = {LLVMValueAsMetadata(cg->fn), LLVMMDStringInContext2(ctx, "grid_constant", 13),
                                  LLVMMDNodeInContext2(ctx, gc, (size_t)cg->hopper.ntmaps)};
        LLVMAddNamedMetadataOperand(mod, "nvvm.annotations",
                                    LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, ann, 3)));
    }
    cg->smem = LLVMGetNamedGlobal(mod, "attnc_smem");
    if (!cg->smem) {
        LLVMTypeRef at = LLVMArrayType(LLVMInt8TypeInContext(ctx), 0);
        cg->smem = LLVMAddGlobalInAddressSpace(mod, at, "attnc_smem", 3);
        LLVMSetLinkage(cg->smem, LLVMExternalLinkage);
        LLVMSetAlignment(cg->smem, (unsigned)(target->smem_align ? target->smem_align : 16));
    }
    cg->b = LLVMCreateBuilderInContext(ctx);
    LLVMPositionBuilderAtEnd(cg->b, LLVMAppendBasicBlockInContext(ctx, cg->fn, "entry"));
    cg->tid = sreg(cg, "tid.x");
    cg->lane = LLVMBuildAnd(cg->b, cg->tid, ci32(cg, 31), "lane");
    cg->warp = LLVMBuildLShr(cg->b, cg->tid, ci32(cg, 5), "warp");
    cg->warp_row = cg->warp;
    cg->warp_col = ci32(cg, 0);
    if (cg->wcols > 1) {
        cg->warp_row = LLVMBuildUDiv(cg->b, cg->warp, ci32(cg, cg->wcols), "warp_row");
        cg->warp_col = LLVMBuildURem(cg->b, cg->warp, ci32(cg, cg->wcols), "warp_col");
    }
    static const char *pids[3] = {"ctaid.x", "ctaid.y", "ctaid.z"};
    for (int i = 0; i < 3; i++)
        cv_put(cg, body->args[i], cv_scalar(cg, zext64(cg, sreg(cg, pids[i]))));
    /* grid.y is at most 65,535, and attention puts B·H there (a decode
     * batch, B = 4096 and H = 32, has 131,072): the runtime launches the
     * kernel once per 65,535 rows of y, passing each launch's first y as
     * the last parameter (manifest ysplit=1). ctaid.y and a parameter are
     * both re-read by ptxas at no register cost (a z split folded back here,
     * with a bounds test, made sm_70 spill). */
    cv_put(cg, body->args[1], cv_scalar(cg, zext64(cg, LLVMBuildAdd(cg->b, sreg(cg, "ctaid.y"),
                                                                    LLVMGetParam(cg->fn, (unsigned)y_param), ""))));

    /* memrefs: row-major, strides from the dims */
    for (int i = 0; i < nmem; i++) {
        const Value *arg = body->args[3 + i];
        const Type *t = arg->type;
        Mem *m = NEW(a, Mem);
        m->elem = t->elem;
        m->rank = t->rank;
        m->ptr = LLVMGetParam(cg->fn, (unsigned)i);
        for (int dd = 0; dd < t->rank; dd++) {
            if (t->dims[dd].sym) {
                m->dims[dd] = NULL;
                for (int j = 0; j < k->ndims; j++)
                    if (strcmp(k->dims[j], t->dims[dd].sym) == 0)
                        m->dims[dd] = LLVMGetParam(cg->fn, (unsigned)(nmem + j));
                if (!m->dims[dd])
                    return cg_err(cg, launch, "unknown dim '%s'", t->dims[dd].sym);
            } else {
                m->dims[dd] = ci64(cg, t->dims[dd].size);
            }
        }
        LLVMValueRef s = ci64(cg, 1);
        for (int dd = t->rank - 1; dd >= 0; dd--) {
            m->strides[dd] = s;
            s = mul(cg, s, m->dims[dd]);
        }
        Cv *c = NEW(a, Cv);
        c->kind = CV_MEM;
        c->mem = m;
        cv_put(cg, arg, c);
    }
    cg->top = body;
    map_init(&cg->last_use, false);
    int index = 0;
    for (const Op *o = body->first; o; o = o->next)
        note_uses(cg, o, index++);
    if (!cg->hopper.producer_warps) {
        emit_block(cg, body, NULL, NULL);
        if (!cg->failed && target->complete)
            target->complete(cg, NULL);
        if (!cg->failed && target->drain)
            target->drain(cg);
    } else {
        emit_specialised(cg, body);
    }
    if (!cg->failed)
        LLVMBuildRetVoid(cg->b);
    LLVMDisposeBuilder(cg->b);
    if (cg->failed)
        return false;

    /* launch bounds: exactly `threads` per block (and, for setmaxnreg to
     * take effect, at least one block per SM, or nv.blocks_per_sm; see
     * min_blocks) */
    LLVMMetadataRef ann[3] = {
        LLVMValueAsMetadata(cg->fn),
        LLVMMDStringInContext2(ctx, "maxntidx", 8),
        LLVMValueAsMetadata(ci32(cg, launch_threads)),
    };
    LLVMAddNamedMetadataOperand(mod, "nvvm.annotations",
                                LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, ann, 3)));
    /* as the passes decided (nv.blocks_per_sm: sm90a-layout under warp
     * specialisation, softmax-overlap for plain kernels it rotated); a
     * warp-specialised kernel always says, for setmaxnreg */
    int min_blocks = cg->hopper.producer_warps || cg->hopper.blocks_per_sm > 1 ? cg->hopper.blocks_per_sm : 0;
    if (min_blocks) {
        LLVMMetadataRef min[3] = {LLVMValueAsMetadata(cg->fn), LLVMMDStringInContext2(ctx, "minctasm", 8),
                                  LLVMValueAsMetadata(ci32(cg, min_blocks))};
        LLVMAddNamedMetadataOperand(mod, "nvvm.annotations",
                                    LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, min, 3)));
    }
    if (cg->smem_bytes > cg->info->smem_limit)   /* the most a block can opt in to */
        return cg_err(cg, launch, "%s",
                      arena_printf(a, "the kernel needs %lld bytes of shared memory; %s has %lld",
                                   (long long)cg->smem_bytes, cg->info->name, (long long)cg->info->smem_limit));
    info->threads = launch_threads;
    info->persistent = cg->hopper.persistent;
    info->ntmaps = cg->hopper.ntmaps;
    memcpy(info->tmaps, cg->hopper.tmaps, sizeof cg->hopper.tmaps);
    info->smem_bytes = (cg->smem_bytes + 15) & ~(int64_t)15;
    return true;
}

