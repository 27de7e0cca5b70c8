/* memory.c — tile.load, tile.store, tile.atomic_add and tile.gather on
 * global and shared memrefs: each element's coordinates and offset, the
 * guards of tiles that cross a memref's end, and paired stores where the
 * columns are contiguous. */
#include "codegen/lower.h"

#include <string.h>

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

/* Whether a tile.store is a whole tile in the blocked layout with slots of
 * adjacent columns along a global memref's contiguous dim (emit_store
 * stores each slot as words where it can). */
static bool stores_runs(const Cg *cg, const Op *op, const Mem *m, int64_t rows, int64_t cols) {
    return cg->lay == LAY_BLOCKED && cg->row_vec > 1 && rows > 1 && cols > 1 && !m->shared && m->elem != SK_I1 &&
           columns_contiguous(op, m);
}

/* Every memref starts 16-byte aligned (libattnrt's checks, smem_alloc): a
 * pair of 16-bit elements is 4-byte aligned when its element offset is even,
 * which LLVM can often prove from the offset's known bits. */
static LLVMValueRef pair_aligned(Cg *cg, LLVMValueRef off0) {
    return LLVMBuildICmp(cg->b, LLVMIntEQ, LLVMBuildAnd(cg->b, off0, ci64(cg, 1), ""), ci64(cg, 0), "");
}

/* The adjacent columns a thread's tile.load may read as one vector (a
 * run; load_runs), or 0: a row vector ([1, C]) in the accumulator layout,
 * whose elements come in pairs (pos_pair: lse and D across the backward's
 * query columns), and the blocked layout's row_vec columns a slot (the
 * backward's row kernels), along a global memref's contiguous dim. */
static int load_run(const Cg *cg, const Op *op, const Mem *m, int64_t rows, int64_t cols) {
    if (m->shared || m->elem == SK_I1 || cols == 1 || !columns_contiguous(op, m))
        return 0;
    if (cg->lay == LAY_ACC)
        return cg->target->pair_stores && rows == 1 ? 2 : 0;
    return cg->row_vec > 1 ? cg->row_vec : 0;
}

/* Whether positions k .. k + run − 1 are one slot's adjacent columns. */
static bool run_at(const Pos *ps, int k, int n, int run) {
    if (ps[k].i % run || k + run > n)
        return false;
    for (int j = 1; j < run; j++)
        if (ps[k + j].a != ps[k].a || ps[k + j].b != ps[k].b || ps[k + j].i != ps[k].i + j)
            return false;
    return true;
}

/* A tile whose threads hold runs of adjacent columns (load_run), at one
 * base plus constants. Where the whole tile lies inside the memref, starts
 * at a multiple of the run and (2-D) its rows are a multiple apart (every
 * memref is 16-byte aligned, so each run is then aligned for vector loads of
 * up to 16 bytes), a run is one vector load at [base + constant]; else (the
 * ragged last tile, an odd start) each element is guarded on its own. The
 * guards' clamped addresses cost about eight integer instructions an
 * element: 28 % of the sm_90a backward's issue slots at head dim 64 with
 * 128 query columns (ncu, H100). The branch is uniform across the block. */
/* Whether the tile of an op (its indices from operand `first`) lies
 * inside m, starts at a multiple of run elements and (2-D) its rows are a
 * multiple apart: uniform across the block. */
static LLVMValueRef whole_and_aligned(Cg *cg, const Op *op, const Mem *m, int first, int64_t rows, int64_t cols,
                                      int run) {
    LLVMValueRef co[8], first_in, last_in;
    mem_coords(cg, op, m, first, ci64(cg, 0), ci64(cg, 0), co);
    LLVMValueRef start = mem_offset(cg, m, co, &first_in);
    mem_coords(cg, op, m, first, ci64(cg, rows - 1), ci64(cg, cols - 1), co);
    mem_offset(cg, m, co, &last_in);
    LLVMValueRef aligned = start;
    if (rows > 1)   /* and each row's start: the rows' stride */
        aligned = LLVMBuildOr(cg->b, aligned, m->strides[op_attr(op, "dims")->elems[0]->i], "");
    aligned = LLVMBuildICmp(cg->b, LLVMIntEQ, LLVMBuildAnd(cg->b, aligned, ci64(cg, run - 1), ""), ci64(cg, 0), "");
    return LLVMBuildAnd(cg->b, LLVMBuildAnd(cg->b, first_in, last_in, ""), aligned, "");
}

/* A run's elements as 32-bit words, at most 16 bytes a vector (what
 * ld/st.global.v4.b32 take): the elements a vector holds, and its type. */
static int run_chunk(Cg *cg, ScalarKind k, int run, LLVMTypeRef *words) {
    int chunk = run * esize(k) < 16 ? run : 16 / esize(k);
    *words = chunk * esize(k) >= 4 ? LLVMVectorType(cg->i32, (unsigned)(chunk * esize(k) / 4))
                                   : LLVMVectorType(lty(cg, k), (unsigned)chunk);
    return chunk;
}

static void load_runs(Cg *cg, const Op *op, Mem *m, Dist *d, const Pos *ps, int n, int64_t rows, int64_t cols,
                      int run, LLVMValueRef fill) {
    LLVMValueRef fast = whole_and_aligned(cg, op, m, 1, rows, cols, run);
    LLVMBasicBlockRef whole = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "tile_whole");
    LLVMBasicBlockRef ragged = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "tile_ragged");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "tile_join");
    LLVMBuildCondBr(cg->b, fast, whole, ragged);

    LLVMValueRef *fv = NEW_ARRAY(cg->a, LLVMValueRef, n), *rv = NEW_ARRAY(cg->a, LLVMValueRef, n);
    LLVMTypeRef et = lty(cg, m->elem), words;
    int chunk = run_chunk(cg, m->elem, run, &words);
    LLVMPositionBuilderAtEnd(cg->b, whole);
    for (int k = 0; k < n; k++) {
        LLVMValueRef inside, off = tile_offset(cg, op, m, 1, ps[k], rows, cols, &inside);
        LLVMValueRef at = gep(cg, m->elem, m->ptr, off);
        if (!run_at(ps, k, n, run)) {
            fv[k] = load_elem(cg, m->elem, at);
            continue;
        }
        for (int j = 0; j < run; j += chunk) {
            LLVMValueRef v = LLVMBuildLoad2(cg->b, words, j ? gep(cg, m->elem, at, ci64(cg, j)) : at, "");
            LLVMSetAlignment(v, (unsigned)(chunk * esize(m->elem)));
            v = LLVMBuildBitCast(cg->b, v, LLVMVectorType(et, (unsigned)chunk), "");
            for (int e = 0; e < chunk; e++)
                fv[k + j + e] = LLVMBuildExtractElement(cg->b, v, ci32(cg, e), "");
        }
        k += run - 1;
    }
    LLVMBasicBlockRef whole_end = LLVMGetInsertBlock(cg->b);
    LLVMBuildBr(cg->b, join);
    LLVMPositionBuilderAtEnd(cg->b, ragged);
    for (int k = 0; k < n; k++) {
        LLVMValueRef inside, off = tile_offset(cg, op, m, 1, ps[k], rows, cols, &inside);
        rv[k] = guarded_load(cg, m, off, inside, fill);
    }
    LLVMBasicBlockRef ragged_end = LLVMGetInsertBlock(cg->b);
    LLVMBuildBr(cg->b, join);
    LLVMPositionBuilderAtEnd(cg->b, join);
    for (int k = 0; k < n; k++) {
        LLVMValueRef phi = LLVMBuildPhi(cg->b, et, "");
        LLVMValueRef vals[2] = {fv[k], rv[k]};
        LLVMBasicBlockRef from[2] = {whole_end, ragged_end};
        LLVMAddIncoming(phi, vals, from, 2);
        dist_set(cg, d, ps[k], phi);
    }
}

void emit_load(Cg *cg, const Op *op) {
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
    int run = load_run(cg, op, m, rows, cols);
    if (run) {
        ThreadIds ids = thread_ids_here(cg);
        load_runs(cg, op, m, d, ps, n, rows, cols, run, fill);
        thread_ids_restore(cg, ids);
        cv_put(cg, op->results[0], cv_dist(cg, d));
        return;
    }
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
    LLVMValueRef word = pack_b32(cg, v0, v1);
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
void emit_store(Cg *cg, const Op *op) {
    Attr *how = op_attr(op, "nv.store");
    if (how && strcmp(how->s, "tma") == 0) {
        tma_store(cg, op);
        return;
    }
    Mem *m = as_mem(cg, op, op->operands[0]);
    if (!m)
        return;
    Attr *bound = op_attr(op, "bound");
    Mem within;
    if (bound) {   /* the memref as far as the bound: every path's inside-test then stops there */
        within = *m;
        LLVMValueRef end = as_scalar(cg, op, op->operands[op->noperands - 1]);
        LLVMValueRef dim = within.dims[bound->i];
        end = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntSLT, end, dim, ""), end, dim, "");
        within.dims[bound->i] = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntSLT, end, ci64(cg, 0), ""),
                                                ci64(cg, 0), end, "");
        m = &within;
    }
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
    LLVMBasicBlockRef join_runs = NULL;
    if (!atomic && stores_runs(cg, op, m, rows, cols)) {
        /* the blocked layout's slots of adjacent columns (the backward's
         * row kernels): each as whole 32-bit words where the tile is whole
         * and aligned (whole_and_aligned), else element by element below */
        LLVMBasicBlockRef whole = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "store_whole");
        LLVMBasicBlockRef ragged = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "store_ragged");
        join_runs = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "store_join");
        LLVMBuildCondBr(cg->b, whole_and_aligned(cg, op, m, 2, rows, cols, cg->row_vec), whole, ragged);
        LLVMPositionBuilderAtEnd(cg->b, whole);
        LLVMTypeRef words;
        int chunk = run_chunk(cg, m->elem, cg->row_vec, &words);
        for (int k = 0; k < n; k += chunk) {
            LLVMValueRef inside, off = tile_offset(cg, op, m, 2, ps[k], rows, cols, &inside);
            LLVMValueRef v = LLVMGetUndef(LLVMVectorType(lty(cg, m->elem), (unsigned)chunk));
            for (int e = 0; e < chunk; e++)
                v = LLVMBuildInsertElement(cg->b, v, cg_cast(cg, dist_get(cg, d, ps[k + e]), d->elem, m->elem),
                                           ci32(cg, e), "");
            LLVMValueRef st = LLVMBuildStore(cg->b, LLVMBuildBitCast(cg->b, v, words, ""), gep(cg, m->elem, m->ptr, off));
            LLVMSetAlignment(st, (unsigned)(chunk * esize(m->elem)));
        }
        LLVMBuildBr(cg->b, join_runs);
        LLVMPositionBuilderAtEnd(cg->b, ragged);
    }
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
    if (join_runs) {
        LLVMBuildBr(cg->b, join_runs);
        LLVMPositionBuilderAtEnd(cg->b, join_runs);
    }
}

void emit_gather(Cg *cg, const Op *op) {
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
