/* layout.c — where a tile's elements live (lower.h): positions, slots,
 * coordinates, the threads that own a broadcast value; tile values. */
#include "codegen/lower.h"

#include <string.h>

/* ---- layouts ------------------------------------------------------------------ */

int nrep_of(Cg *cg, int64_t cols) { return (int)(cols / 16 / cg->wcols); }
/* BLOCKED: a row's threads (row_threads of them) each hold row_vec
 * adjacent columns a slot, the block's row groups (threads / row_threads)
 * take the rows in turn. By default one group of every thread, one column
 * a slot: each thread holds a column of every row (wide rows, few of them).
 * Column slots per thread: the last may run past the row (col >= cols),
 * where loads read the pad, stores fall outside the memref, and reductions
 * take their identity. */
int64_t cslots(Cg *cg, int64_t cols) {
    int64_t span = (int64_t)cg->row_threads * cg->row_vec;
    return (cols + span - 1) / span;
}
/* BLOCKED: row slots per thread */
static int64_t rslots(Cg *cg, int64_t rows) { return rows / (cg->threads / cg->row_threads); }

/* Accumulator element i: which bits of i pick the row / the column. */
static int row_bits(Cg *cg) { return cg->acc.row_bits; }
static int col_bits(Cg *cg) { return cg->acc.col_bits; }

bool shape_ok(Cg *cg, const Op *op, int64_t rows, int64_t cols) {
    if (rows != 1 && rows != cg->R)
        return cg_err(cg, op, "%s", arena_printf(cg->a, "a tile of %lld rows in a kernel of %lld-row tiles",
                                               (long long)rows, (long long)cg->R));
    if (cols == 1)
        return true;
    if (cg->lay == LAY_ACC && cols % (16 * cg->wcols))
        return cg_err(cg, op, "%s", arena_printf(cg->a, "tile width %lld is not a multiple of %d (16 columns a warp)",
                                               (long long)cols, 16 * cg->wcols));
    return true;
}

static int slot_of(Cg *cg, const Dist *d, Pos p) {
    bool perrow = d->cols == 1, percol = d->rows == 1;
    if (perrow && percol)
        return 0;
    if (cg->lay == LAY_ACC) {
        if (perrow)
            return p.a * 8 + (p.i & row_bits(cg));
        if (percol)
            return p.b * 8 + (p.i & col_bits(cg));
        return (p.a * nrep_of(cg, d->cols) + p.b) * 8 + p.i;
    }
    if (perrow)
        return p.a;
    if (percol)
        return p.b * cg->row_vec + p.i;
    return (int)((p.a * cslots(cg, d->cols) + p.b) * cg->row_vec + p.i);
}

Dist *dist_new(Cg *cg, ScalarKind elem, int64_t rows, int64_t cols) {
    Dist *d = NEW(cg->a, Dist);
    d->elem = elem;
    d->rows = rows;
    d->cols = cols;
    if (cg->lay == LAY_ACC)
        d->n = (rows == 1 ? 1 : cg->mrep) * (cols == 1 ? 1 : nrep_of(cg, cols)) * 8;
    else
        d->n = (int)((rows == 1 ? 1 : rslots(cg, rows)) * (cols == 1 ? 1 : cslots(cg, cols) * cg->row_vec));
    d->v = NEW_ARRAY(cg->a, LLVMValueRef, d->n);
    return d;
}

/* The positions a tile of this shape stores, one per slot in use, in
 * *out (allocated in the arena). */
int positions(Cg *cg, int64_t rows, int64_t cols, Pos **out) {
    bool perrow = cols == 1, percol = rows == 1;
    int na = cg->lay == LAY_ACC ? (percol ? 1 : cg->mrep) : (int)(percol ? 1 : rslots(cg, rows));
    int nb = cg->lay == LAY_ACC ? (perrow ? 1 : nrep_of(cg, cols)) : (int)(perrow ? 1 : cslots(cg, cols));
    int ni = cg->lay == LAY_ACC ? 8 : perrow ? 1 : cg->row_vec;
    Pos *ps = *out = NEW_ARRAY(cg->a, Pos, (size_t)na * nb * ni + 1);
    int n = 0;
    for (int a = 0; a < na; a++)
        for (int b = 0; b < nb; b++)
            for (int i = 0; i < ni; i++) {
                if (cg->lay == LAY_ACC) {
                    if (perrow && percol ? i != 0
                                         : (perrow && (i & ~row_bits(cg))) || (percol && (i & ~col_bits(cg))))
                        continue;
                }
                ps[n++] = (Pos){a, b, i};
            }
    return n;
}

LLVMValueRef dist_get(Cg *cg, const Dist *d, Pos p) { return d->v[slot_of(cg, d, p)]; }
void dist_set(Cg *cg, Dist *d, Pos p, LLVMValueRef v) { d->v[slot_of(cg, d, p)] = v; }

/* The (row, col) of position p in a tile of the given shape, as i64. */
void coords(Cg *cg, Pos p, int64_t rows, int64_t cols, LLVMValueRef *row, LLVMValueRef *col) {
    if (cg->lay == LAY_BLOCKED) {   /* row a·groups + tid / row_threads, column (b·row_threads + tid % row_threads)·vec + i */
        int64_t groups = cg->threads / cg->row_threads;
        LLVMValueRef tid = zext64(cg, cg->tid);
        LLVMValueRef group = groups == 1 ? ci64(cg, 0) : LLVMBuildUDiv(cg->b, tid, ci64(cg, cg->row_threads), "");
        LLVMValueRef in_group = groups == 1 ? tid : LLVMBuildURem(cg->b, tid, ci64(cg, cg->row_threads), "");
        *row = rows == 1 ? ci64(cg, 0) : add(cg, ci64(cg, (int64_t)p.a * groups), group);
        *col = cols == 1 ? ci64(cg, 0)
                         : add(cg, mul(cg, add(cg, ci64(cg, (int64_t)p.b * cg->row_threads), in_group),
                                       ci64(cg, cg->row_vec)), ci64(cg, p.i));
        return;
    }
    cg->target->acc_coords(cg, p, rows, cols, row, col);
}

LLVMValueRef warp_row_base(Cg *cg, int a) {
    return mul(cg, add(cg, mul(cg, zext64(cg, cg->warp_row), ci64(cg, cg->mrep)), ci64(cg, a)), ci64(cg, 16));
}

LLVMValueRef warp_col_base(Cg *cg, int64_t cols) {
    if (cg->wcols == 1)
        return ci64(cg, 0);
    return mul(cg, zext64(cg, cg->warp_col), ci64(cg, cols / cg->wcols));
}

/* Whether this thread is the one that writes position p of a broadcast tile
 * (the others hold copies). */
LLVMValueRef tile_owner(Cg *cg, int64_t rows, int64_t cols) {
    bool perrow = cols == 1, percol = rows == 1;
    LLVMValueRef yes = LLVMConstInt(cg->i1, 1, 0);
    if (!perrow && !percol)
        return yes;
    LLVMValueRef c = yes;
    LLVMValueRef zero32 = ci32(cg, 0);
    if (cg->lay == LAY_BLOCKED) {   /* a row's first thread; a column's thread in the first row group */
        bool one_group = cg->row_threads == cg->threads;
        LLVMValueRef in_group = one_group ? cg->tid : LLVMBuildURem(cg->b, cg->tid, ci32(cg, cg->row_threads), "");
        if (perrow)
            c = LLVMBuildICmp(cg->b, LLVMIntEQ, in_group, zero32, "");
        if (percol && !one_group)
            c = LLVMBuildAnd(cg->b, c, LLVMBuildICmp(cg->b, LLVMIntULT, cg->tid, ci32(cg, cg->row_threads), ""), "");
        return c;
    }
    int mask = 0;
    if (perrow)   /* lane bits that move along a row, and the warp's column in the grid */
        mask |= cg->acc.row_lanes;
    if (percol)   /* lane bits that move along a column, and the warp's row */
        mask |= cg->acc.col_lanes;
    c = LLVMBuildICmp(cg->b, LLVMIntEQ, LLVMBuildAnd(cg->b, cg->lane, ci32(cg, mask), ""), zero32, "");
    if (percol)
        c = LLVMBuildAnd(cg->b, c, LLVMBuildICmp(cg->b, LLVMIntEQ, cg->warp_row, zero32, ""), "");
    if (perrow && cg->wcols > 1)
        c = LLVMBuildAnd(cg->b, c, LLVMBuildICmp(cg->b, LLVMIntEQ, cg->warp_col, zero32, ""), "");
    return c;
}

/* ---- values ------------------------------------------------------------------- */

Cv *cv_get(Cg *cg, const Value *v) { return map_get(&cg->vals, v); }
void cv_put(Cg *cg, const Value *v, Cv *c) { map_put(cg->a, &cg->vals, v, c); }
Cv *cv_scalar(Cg *cg, LLVMValueRef s) {
    Cv *c = NEW(cg->a, Cv);
    c->kind = CV_SCALAR;
    c->s = s;
    return c;
}
Cv *cv_dist(Cg *cg, Dist *d) {
    Cv *c = NEW(cg->a, Cv);
    c->kind = CV_DIST;
    c->d = d;
    return c;
}

ScalarKind elem_of(const Value *v) { return v->type->elem; }

/* Reads a view's elements into the kernel's layout. */
static Dist *view_to_dist(Cg *cg, const View *w, ScalarKind elem) {
    Dist *d = dist_new(cg, elem, w->rows, w->cols);
    Pos *ps;
    int n = positions(cg, w->rows, w->cols, &ps);
    for (int k = 0; k < n; k++) {
        LLVMValueRef r, c;
        coords(cg, ps[k], w->rows, w->cols, &r, &c);
        if (w->trans) {
            LLVMValueRef t = r;
            r = c;
            c = t;
        }
        LLVMValueRef off = add(cg, mul(cg, r, ci64(cg, w->stride)), c);
        dist_set(cg, d, ps[k], load_elem(cg, elem, gep(cg, elem, w->base, off)));
    }
    return d;
}

/* The value as a tile in the kernel's layout (scalars become 1×1 tiles). */
Dist *as_dist(Cg *cg, const Op *op, const Value *v) {
    Cv *c = cv_get(cg, v);
    if (!c) {
        cg_err(cg, op, "internal error: operand has no value", NULL);
        Dist *d = dist_new(cg, SK_F32, 1, 1);
        d->v[0] = LLVMGetUndef(cg->f32);
        return d;
    }
    if (c->kind == CV_DIST)
        return c->d;
    if (c->kind == CV_VIEW) {
        c->d = view_to_dist(cg, c->view, elem_of(v));
        c->kind = CV_DIST;
        return c->d;
    }
    Dist *d = dist_new(cg, elem_of(v), 1, 1);
    d->v[0] = c->kind == CV_SCALAR ? c->s : LLVMGetUndef(cg->f32);
    if (c->kind != CV_SCALAR)
        cg_err(cg, op, "a memref or token is used as a tile", NULL);
    return d;
}

LLVMValueRef as_scalar(Cg *cg, const Op *op, const Value *v) {
    Cv *c = cv_get(cg, v);
    if (!c || c->kind != CV_SCALAR) {
        cg_err(cg, op, "expected a scalar operand", NULL);
        return LLVMGetUndef(cg->i64);
    }
    return c->s;
}

Mem *as_mem(Cg *cg, const Op *op, const Value *v) {
    Cv *c = cv_get(cg, v);
    if (!c || c->kind != CV_MEM) {
        cg_err(cg, op, "expected a memref operand", NULL);
        return NULL;
    }
    return c->mem;
}
