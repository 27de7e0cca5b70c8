/* tma.c — TMA (sm_90a): tile.copy_async {nv.copy = "tma"} as
 * cp.async.bulk.tensor over tensor maps the runtime encodes, the full and
 * empty mbarriers of each stage of the buffers TMA fills, their waits, and
 * tile.store and tile.atomic_add {nv.store = "tma"} through a swizzled
 * shared buffer (a bulk tensor store, or a bulk reduce-add). The cp.async
 * half is cp_async.c. */
#include "codegen/lower.h"

#include <string.h>

/* A copy sm90a-layout marked nv.copy "tma" is one cp.async.bulk.tensor per
 * 64-column panel, issued by one thread, over a tensor map the runtime
 * encodes (a box of [rows, 64] elements with SWIZZLE_128B, which writes
 * exactly smem_offset's layout; rows past the tensor's end are zero-filled)
 * and the kernel takes by value. Each stage of the buffer has a "full"
 * mbarrier: the issuing thread arms it with the bytes to expect
 * (mbarrier.arrive.expect_tx), the copy completes them, and a tile.wait
 * spins on the phase the fill completes (try_wait.parity). Copies and waits
 * run in the same order on every thread, so each thread keeps the parities
 * in a register: a bit per stage, flipped by each fill (fill_parity).
 *
 * Before a stage is filled again every warp must be done reading it. With
 * all warps copying and computing (ROLE_ALL), the barrier before a run of
 * copies says so and thread 0 issues; under warp specialisation (lower.c)
 * each consumer warp arrives on the stage's "empty" mbarrier after its last
 * read (tma_release), and the producer waits for that before it issues. */

enum { TMA_PANEL = 64 };   /* columns of a box: 128 bytes of 16-bit elements, the swizzle span */

/* The columns of a store's box: 128 bytes, the swizzle span (64 16-bit
 * elements, 32 f32 ones). */
static int64_t panel_cols(ScalarKind elem) { return 128 / esize(elem); }

static LLVMValueRef ptr_i32(Cg *cg, LLVMValueRef p) { return LLVMBuildPtrToInt(cg->b, p, cg->i32, ""); }

static LLVMValueRef thread0(Cg *cg) { return LLVMBuildICmp(cg->b, LLVMIntEQ, cg->tid, ci32(cg, 0), ""); }

/* An i32 alloca in the entry block (mem2reg keeps it in a register). */
static LLVMValueRef entry_alloca(Cg *cg, int64_t init) {
    LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(cg->fn);
    LLVMBuilderRef b = LLVMCreateBuilderInContext(cg->ctx);
    LLVMValueRef first = LLVMGetFirstInstruction(entry);
    if (first)
        LLVMPositionBuilderBefore(b, first);
    else
        LLVMPositionBuilderAtEnd(b, entry);
    LLVMValueRef slot = LLVMBuildAlloca(b, cg->i32, "");
    LLVMDisposeBuilder(b);
    LLVMBuildStore(cg->b, ci32(cg, init), slot);
    return slot;
}

/* Whether each warpgroup owns 64 rows of a tile of `rows` rows (wgmma's
 * accumulators) and so TMA-stores them itself; else one thread stores the
 * tile. */
static bool store_per_warpgroup(const Cg *cg, int64_t rows) {
    return cg->lay == LAY_ACC && cg->mrep == 1 && rows == 16 * cg->nwarps && rows % 64 == 0;
}

/* The slab of a TMA store (tma_store): `rows` rows along the memref's dim
 * row_dim by `cols` of its innermost dim, in 128-byte panels. trans: the
 * tile's rows run along the innermost dim (the backward's dQᵀ, dims =
 * [inner, row_dim]), so the slab holds the tile transposed, and a
 * warpgroup's 64 rows of it are 64 columns of the slab. */
typedef struct Slab {
    bool trans, per_warpgroup;
    int row_dim, col_dim;   /* the memref's dims along the slab's rows and columns (the innermost) */
    int64_t rows, cols;     /* this thread's slab: all the tile's rows, or its warpgroup's */
} Slab;

static Slab slab_of(const Cg *cg, const Op *op, int64_t tile_rows, int64_t tile_cols) {
    Attr *dims = op_attr(op, "dims");
    int inner = op->operands[0]->type->rank - 1;
    Slab s = {.trans = dims->elems[0]->i == inner, .per_warpgroup = store_per_warpgroup(cg, tile_rows)};
    s.row_dim = (int)dims->elems[s.trans ? 1 : 0]->i;
    s.col_dim = (int)dims->elems[s.trans ? 0 : 1]->i;
    int64_t own_rows = s.per_warpgroup ? 64 : tile_rows;   /* this thread's warpgroup's rows of the tile */
    s.rows = s.trans ? tile_cols : own_rows;
    s.cols = s.trans ? own_rows : tile_cols;
    return s;
}

bool tma_collect(Cg *cg, const Block *blk) {
    const Block *top = cg->spec->launch->regions[0].blocks[0];
    for (const Op *op = blk->first; op; op = op->next) {
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                if (!tma_collect(cg, op->regions[r].blocks[k]))
                    return false;
        bool store = op->kind == OP_STORE || op->kind == OP_ATOMIC_ADD;
        Attr *how = op->kind == OP_COPY_ASYNC ? op_attr(op, "nv.copy") : store ? op_attr(op, "nv.store") : NULL;
        if (!how || strcmp(how->s, "tma") != 0)
            continue;
        /* a copy's box is its stage [rows, cols]; a store's, the rows one
         * thread stores of its tile (tma_store) by a 128-byte panel */
        const Value *src = op->operands[0];
        const Type *st = src->type, *tt = op->operands[1]->type;
        Attr *dims = op_attr(op, "dims");
        int arg = -1;
        for (int i = 3; i < top->nargs; i++)
            if (top->args[i] == src)
                arg = i - 3;
        bool shaped = arg >= 0 && st->rank <= 5 && tt->rank == (store ? 2 : 3) && dims && dims->n == 2;
        Slab box = !shaped ? (Slab){0}
                   : store ? slab_of(cg, op, tt->dims[0].size, tt->dims[1].size)
                           : (Slab){.row_dim = (int)dims->elems[0]->i, .col_dim = (int)dims->elems[1]->i,
                                    .rows = tt->dims[1].size, .cols = tt->dims[2].size};
        /* an unswizzled stage (an f32 row: the backward's lse and D) is one
         * box of its columns, up to 256 */
        bool swizzled = store || op_attr(op->operands[1]->def, "nv.swizzle");
        int64_t panel = store ? panel_cols(st->elem) : swizzled ? TMA_PANEL : box.cols;
        if (!shaped || box.cols % panel || box.rows > 256 || box.col_dim != st->rank - 1 || box.row_dim < 0 ||
            box.row_dim >= box.col_dim)
            return cg_err(cg, op, "internal error: a TMA copy or store needs a box of rows of a kernel parameter's "
                                  "innermost dim, at most 256 rows of 64k columns (run sm90a-layout)", NULL),
                   false;
        KernelTmap m = {.arg = arg, .rank = st->rank, .swizzle = swizzled ? 128 : 0};
        for (int d = 0; d < st->rank; d++)
            m.box[d] = 1;
        m.box[box.row_dim] = box.rows;
        m.box[st->rank - 1] = panel;
        bool seen = false;
        for (int j = 0; j < cg->hopper.ntmaps; j++)
            seen |= memcmp(&cg->hopper.tmaps[j], &m, sizeof m) == 0;
        if (!seen) {
            if (cg->hopper.ntmaps == MANIFEST_MAX_TMAPS)
                return cg_err(cg, op, "%s",
                              arena_printf(cg->a, "a kernel takes at most %d tensor maps (the runtime's "
                                                  "MANIFEST_MAX_TMAPS)", MANIFEST_MAX_TMAPS)),
                       false;
            cg->hopper.tmap_src[cg->hopper.ntmaps] = src;
            cg->hopper.tmaps[cg->hopper.ntmaps++] = m;
        }
        if (op->kind == OP_COPY_ASYNC)
            map_put(cg->a, &cg->hopper.tma_bufs, op->operands[1], (void *)1);
    }
    return true;
}

/* The mbarriers of a buffer TMA fills: per stage a full one, armed by one
 * arrival (the expect_tx), and under warp specialisation an empty one, one
 * arrival per consumer warp; initialised by thread 0, then made visible to
 * every thread and to the TMA unit. At most 16 stages (the state's bits). */
void tma_ring_init(Cg *cg, const Op *alloc, const Mem *m, LLVMValueRef bars, bool empty) {
    if (cg->hopper.nrings == 8 || m->cdims[0] > 16) {
        cg_err(cg, alloc, "a kernel has at most 8 buffers that TMA fills, of at most 16 stages", NULL);
        return;
    }
    Ring *r = &cg->hopper.rings[cg->hopper.nrings++];
    r->buf = m;
    r->stages = (int)m->cdims[0];
    r->bars = bars;
    r->state = entry_alloca(cg, 0);
    if (empty) {   /* a fresh barrier's "previous" phase (parity 1) counts as complete: free */
        r->empty = gep(cg, SK_I64, bars, ci64(cg, r->stages));
        r->empty_phase = entry_alloca(cg, -1);
    }
    LLVMBasicBlockRef join = if_begin(cg, thread0(cg));
    for (int s = 0; s < r->stages; s++) {
        LLVMValueRef bar = ptr_i32(cg, gep(cg, SK_I64, r->bars, ci64(cg, s)));
        cg_asm(cg, "mbarrier.init.shared::cta.b64 [$0], 1;", "r,~{memory}", LLVMVoidTypeInContext(cg->ctx), &bar, 1);
        if (!r->empty)
            continue;
        LLVMValueRef args[2] = {ptr_i32(cg, gep(cg, SK_I64, r->empty, ci64(cg, s))), ci32(cg, cg->nwarps)};
        cg_asm(cg, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}", LLVMVoidTypeInContext(cg->ctx), args, 2);
    }
    cg_asm(cg, "fence.mbarrier_init.release.cluster;", "~{memory}", LLVMVoidTypeInContext(cg->ctx), NULL, 0);
    if_end(cg, join);
    cg_barrier(cg);
}

static Ring *ring_of(Cg *cg, const Op *op, const Mem *m) {
    for (int i = 0; i < cg->hopper.nrings; i++)
        if (cg->hopper.rings[i].buf == m)
            return &cg->hopper.rings[i];
    cg_err(cg, op, "internal error: a TMA copy into a buffer without mbarriers", NULL);
    return NULL;
}

static LLVMValueRef stage_bar(Cg *cg, const Ring *r, LLVMValueRef stage) {
    return ptr_i32(cg, gep(cg, SK_I64, r->bars, stage));
}


static LLVMValueRef stage_bit(Cg *cg, LLVMValueRef stage) {
    return LLVMBuildShl(cg->b, ci32(cg, 1), LLVMBuildTrunc(cg->b, stage, cg->i32, ""), "");
}

/* A box's coordinates as cp.async.bulk.tensor takes them: innermost first
 * (as the tensor map lists its dims), 32-bit, the innermost moved to the
 * panel that starts at column c0. */
static void box_coords(Cg *cg, const LLVMValueRef *co, int rank, int64_t c0, LLVMValueRef *out) {
    for (int d = 0; d < rank; d++) {
        LLVMValueRef c = co[rank - 1 - d];
        if (d == 0)
            c = add(cg, c, ci64(cg, c0));
        out[d] = LLVMBuildTrunc(cg->b, c, cg->i32, "");
    }
}

/* The tensor map of a TMA copy or store: over tensor `src`, rows per box. */
static int tmap_of(Cg *cg, const Op *op, const Value *src, int row_dim, int64_t rows) {
    for (int j = 0; j < cg->hopper.ntmaps; j++)
        if (cg->hopper.tmap_src[j] == src && cg->hopper.tmaps[j].box[row_dim] == rows)
            return j;
    cg_err(cg, op, "internal error: no tensor map for this TMA copy or store", NULL);
    return -1;
}

void tma_copy(Cg *cg, const Op *op) {
    Mem *src, *dst;
    if (!copy_operands(cg, op, "tma", &src, &dst))
        return;
    Ring *r = ring_of(cg, op, dst);
    if (!r)
        return;
    Attr *dims = op_attr(op, "dims");
    int row_dim = (int)dims->elems[0]->i, rank = src->rank;
    int64_t rows = dst->cdims[1], cols = dst->cdims[2];
    int map = tmap_of(cg, op, op->operands[0], row_dim, rows);
    if (map < 0)
        return;
    /* every warp is done with the stage this overwrites (see cp_async_copy);
     * under warp specialisation the producer waits for its empty barrier */
    if (cg->hopper.role == ROLE_ALL && (!op->prev || op->prev->kind != OP_COPY_ASYNC))
        cg_barrier(cg);
    LLVMValueRef stage = as_scalar(cg, op, op->operands[2]);
    LLVMValueRef bit = stage_bit(cg, stage);
    LLVMValueRef co[8];
    for (int d = 0; d < rank; d++)
        co[d] = as_scalar(cg, op, op->operands[3 + d]);
    /* A box that starts past the tensor's end is never read: the key loops
     * end before it (double-buffer moves the copies past a loop's end
     * there), and the tensor may be empty, its map pointing nowhere. Such
     * a copy is skipped whole, alike in every role (the same index
     * arithmetic): no fill, no parity flipped, its stage left free, so a
     * producer that runs ahead (persistent blocks) fills it with the next
     * tile's first keys instead of waiting for its release (the consumers'
     * wait for it passes at once and releases nothing: tma_wait). */
    LLVMValueRef inside = LLVMBuildICmp(cg->b, LLVMIntSLT, co[row_dim], src->dims[row_dim], "");
    LLVMValueRef bit_if = LLVMBuildSelect(cg->b, inside, bit, ci32(cg, 0), "");
    if (cg->hopper.role == ROLE_PRODUCER) {
        LLVMValueRef eph = LLVMBuildLoad2(cg->b, cg->i32, r->empty_phase, "");
        LLVMValueRef parity = LLVMBuildAnd(cg->b, LLVMBuildLShr(cg->b, eph, LLVMBuildTrunc(cg->b, stage, cg->i32, ""), ""),
                                           ci32(cg, 1), "");
        LLVMBasicBlockRef skip = if_begin(cg, inside);
        wait_phase(cg, ptr_i32(cg, gep(cg, SK_I64, r->empty, stage)), parity);
        if_end(cg, skip);
        LLVMBuildStore(cg->b, LLVMBuildXor(cg->b, eph, bit_if, ""), r->empty_phase);
    }
    LLVMValueRef bar = stage_bar(cg, r, stage);
    LLVMValueRef base = gep(cg, dst->elem, dst->ptr, mul(cg, stage, ci64(cg, dst->cstrides[0])));
    LLVMValueRef bytes = ci32(cg, rows * cols * esize(dst->elem));
    /* the issuing thread: thread 0, or the producer warpgroup's first; the
     * consumers only keep count of the fills */
    LLVMValueRef issuer = cg->hopper.role == ROLE_PRODUCER
                              ? LLVMBuildICmp(cg->b, LLVMIntEQ, cg->tid, ci32(cg, 32 * cg->nwarps), "")
                              : cg->hopper.role == ROLE_ALL ? thread0(cg) : LLVMConstInt(cg->i1, 0, false);
    LLVMBasicBlockRef join = if_begin(cg, LLVMBuildAnd(cg->b, issuer, inside, ""));
    LLVMValueRef arm[2] = {bar, bytes};
    cg_asm(cg, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r,~{memory}",
           LLVMVoidTypeInContext(cg->ctx), arm, 2);
    /* coordinates innermost first, as the tensor map lists its dims */
    StrBuf text;
    strbuf_open(&text);
    fprintf(text.f, "cp.async.bulk.tensor.%dd.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1, {", rank);
    for (int d = 0; d < rank; d++)
        fprintf(text.f, "%s$%d", d ? ", " : "", 2 + d);
    fprintf(text.f, "}], [$%d];", 2 + rank);
    const char *asm_text = strbuf_finish(&text, cg->a, NULL);
    const char *cons = rank == 1 ? "r,l,r,r,~{memory}" : rank == 2 ? "r,l,r,r,r,~{memory}"
                     : rank == 3 ? "r,l,r,r,r,r,~{memory}" : rank == 4 ? "r,l,r,r,r,r,r,~{memory}"
                                                                : "r,l,r,r,r,r,r,r,~{memory}";
    LLVMValueRef tmap = LLVMBuildPtrToInt(cg->b, cg->hopper.tmap_param[map], cg->i64, "");
    int64_t panel = dst->swizzle ? TMA_PANEL : cols;   /* (tma_collect's boxes) */
    for (int64_t c0 = 0; c0 < cols; c0 += panel) {
        LLVMValueRef args[8];
        args[0] = ptr_i32(cg, gep(cg, dst->elem, base, ci64(cg, c0 * rows)));   /* panel c0/64 */
        args[1] = tmap;
        box_coords(cg, co, rank, c0, args + 2);
        args[2 + rank] = bar;
        cg_asm(cg, asm_text, cons, LLVMVoidTypeInContext(cg->ctx), args, 3 + rank);
    }
    if_end(cg, join);
    /* the fill flips the stage's parity and is in flight */
    LLVMValueRef state = LLVMBuildLoad2(cg->b, cg->i32, r->state, "");
    LLVMBuildStore(cg->b,
                   LLVMBuildXor(cg->b, LLVMBuildOr(cg->b, state, LLVMBuildShl(cg->b, bit_if, ci32(cg, 16), ""), ""),
                                bit_if, ""),
                   r->state);
    Token *t = NEW(cg->a, Token);
    t->dst = dst;
    t->ring = r;
    t->stage = stage;
    t->rows = rows;
    t->cols = cols;
    t->elem = src->elem;
    Cv *c = NEW(cg->a, Cv);
    c->kind = CV_TOKEN;
    c->tok = t;
    cv_put(cg, op->results[0], c);
}

/* tile.store {nv.store = "tma"} (sm90a-layout; FlashAttention-3's
 * epilogue): the threads write the tile into a 128-byte-swizzled shared
 * buffer (what the map's SWIZZLE_128B reads), fence it for the async proxy
 * and meet; then one thread stores it, a cp.async.bulk.tensor per 128-byte
 * panel (64 16-bit columns; rows past the tensor's end are not written:
 * TMA clips the box), and commits the stores as a bulk group. Where each
 * warpgroup owns 64 rows of the tile (wgmma's accumulators) it does this
 * for its rows alone, in a slab of the buffer of its own, meeting on its
 * own named barrier: a warpgroup done with a tile stores its rows and goes
 * on without waiting for the others (emit_tiles). Nobody waits for the
 * store here: the warps go on (a persistent block to its next tile) while
 * TMA reads the buffer. tma_store_wait waits until it has: before the slab
 * is written again (a persistent block's next tile, or the next trip of
 * the loop the store is in, which then meets once more), before its memory
 * is reused and before the kernel returns (drain).
 *
 * tile.atomic_add {nv.store = "tma"} is the same with an f32 tile and a
 * bulk reduce-add (cp.reduce.async.bulk.tensor .add, 32-column panels):
 * the TMA unit adds the slab into global memory at L2, one instruction a
 * panel instead of an atomic a element (FlashAttention-3's dQ). */
void tma_store_wait(Cg *cg) {
    if (cg->hopper.tma_stores)   /* (a thread that committed no group passes at once) */
        cg_asm(cg, "cp.async.bulk.wait_group.read 0;", "~{memory}", LLVMVoidTypeInContext(cg->ctx), NULL, 0);
}

/* The threads a TMA store's slab is written by meet (its warpgroup, or
 * every thread that computes; every thread where no warpgroup has a named
 * barrier of its own: a launch without warp specialisation). */
static void slab_barrier(Cg *cg, bool per_warpgroup) {
    if (per_warpgroup && cg->hopper.role != ROLE_ALL)
        named_barrier(cg, "sync", NB_WARPGROUP, warpgroup_of(cg), 128);
    else
        cg_barrier(cg);
}

/* Writes this thread's elements of the tile into its slab (16-bit pairs as
 * one 32-bit store, f32 pairs as one 64-bit store: each pair lies in one
 * 16-byte chunk of the swizzle; a transposed slab's pairs lie in two rows
 * of it, stored one by one). */
static void write_slab(Cg *cg, Dist *d, ScalarKind elem, LLVMValueRef own_base, const Slab *s) {
    int64_t rows = d->rows, cols = d->cols;
    Pos *ps;
    int n = positions(cg, rows, cols, &ps);
    LLVMBasicBlockRef join = if_begin(cg, tile_owner(cg, rows, cols));
    ThreadIds ids = thread_ids_here(cg);
    for (int k = 0; k < n; k++) {
        LLVMValueRef row, col;
        coords(cg, ps[k], rows, cols, &row, &col);
        /* the tile row within this thread's warpgroup's, or the tile's */
        LLVMValueRef own_row = s->per_warpgroup ? LLVMBuildAnd(cg->b, row, ci64(cg, 63), "") : row;
        LLVMValueRef at = gep(cg, elem, own_base,
                              s->trans ? smem_offset_swizzled(cg, col, own_row, s->rows, esize(elem))
                                       : smem_offset_swizzled(cg, own_row, col, s->rows, esize(elem)));
        LLVMValueRef v = cg_cast(cg, dist_get(cg, d, ps[k]), d->elem, elem);
        bool pair = !s->trans && pos_pair(ps, k, n);
        if (pair && esize(elem) == 2) {
            LLVMValueRef v1 = cg_cast(cg, dist_get(cg, d, ps[k + 1]), d->elem, elem);
            store_elem(cg, SK_I32, pack_b32(cg, v, v1), at);
            k++;
        } else if (pair && esize(elem) == 4) {
            LLVMValueRef v1 = cg_cast(cg, dist_get(cg, d, ps[k + 1]), d->elem, elem);
            LLVMValueRef args[3] = {ptr_i32(cg, at), v, v1};
            cg_asm(cg, "st.shared.v2.f32 [$0], {$1, $2};", "r,f,f,~{memory}", LLVMVoidTypeInContext(cg->ctx), args, 3);
            k++;
        } else {
            store_elem(cg, elem, v, at);
        }
    }
    thread_ids_restore(cg, ids);
    if_end(cg, join);
}

void tma_store(Cg *cg, const Op *op) {
    Mem *m = as_mem(cg, op, op->operands[0]);
    Dist *d = m ? as_dist(cg, op, op->operands[1]) : NULL;
    if (!d)
        return;
    bool reduce = op->kind == OP_ATOMIC_ADD;
    int64_t rows = d->rows, cols = d->cols, panel = panel_cols(m->elem);
    Slab slab = slab_of(cg, op, rows, cols);
    bool per_warpgroup = slab.per_warpgroup;
    int rank = m->rank;
    int map = tmap_of(cg, op, op->operands[0], slab.row_dim, slab.rows);
    if (map < 0)
        return;
    bool tile_smem = cg->hopper.tile_smem;   /* (the slabs are this thread's warpgroup's alone) */
    LLVMValueRef base = smem_alloc_aligned(cg, rows * cols * esize(m->elem), 1024);
    cg->hopper.tile_smem = tile_smem || !per_warpgroup;
    /* this thread's slab: the tile's rows [first, first + 64) (its
     * warpgroup's) or all of them; transposed, those are slab columns,
     * whole panels of slab.rows rows */
    LLVMValueRef first = per_warpgroup ? zext64(cg, LLVMBuildMul(cg->b, warpgroup_of(cg), ci32(cg, 64), "")) : ci64(cg, 0);
    LLVMValueRef own_base = gep(cg, m->elem, base, mul(cg, first, ci64(cg, slab.trans ? slab.rows : cols)));
    /* the store this op made last (a persistent block's last tile, or the
     * last trip of the loop it is in) may still be reading the slab */
    if (cg->hopper.persistent || op->parent != cg->spec->launch->regions[0].blocks[0]) {
        cg->hopper.tma_stores = true;   /* (issued at run time, though not yet emitted) */
        tma_store_wait(cg);
        slab_barrier(cg, per_warpgroup);
    }
    write_slab(cg, d, m->elem, own_base, &slab);
    proxy_fence(cg);
    slab_barrier(cg, per_warpgroup);
    LLVMValueRef co[8];
    mem_coords(cg, op, m, 2, first, ci64(cg, 0), co);
    LLVMValueRef issuer = per_warpgroup ? LLVMBuildICmp(cg->b, LLVMIntEQ, LLVMBuildAnd(cg->b, cg->tid, ci32(cg, 127), ""),
                                                        ci32(cg, 0), "")
                                        : thread0(cg);
    LLVMBasicBlockRef join = if_begin(cg, issuer);
    LLVMValueRef tmap = LLVMBuildPtrToInt(cg->b, cg->hopper.tmap_param[map], cg->i64, "");
    StrBuf text;
    strbuf_open(&text);
    fprintf(text.f, reduce ? "cp.reduce.async.bulk.tensor.%dd.global.shared::cta.add.tile.bulk_group [$0, {"
                           : "cp.async.bulk.tensor.%dd.global.shared::cta.bulk_group [$0, {", rank);
    for (int i = 0; i < rank; i++)
        fprintf(text.f, "%s$%d", i ? ", " : "", 2 + i);
    fprintf(text.f, "}], [$1];");
    const char *asm_text = strbuf_finish(&text, cg->a, NULL);
    char cons[64] = "l,r";
    for (int i = 0; i < rank; i++)
        strcat(cons, ",r");
    strcat(cons, ",~{memory}");
    for (int64_t c0 = 0; c0 < slab.cols; c0 += panel) {
        LLVMValueRef args[7];
        args[0] = tmap;
        args[1] = ptr_i32(cg, gep(cg, m->elem, own_base, ci64(cg, c0 * slab.rows)));   /* panel c0 / panel */
        box_coords(cg, co, rank, c0, args + 2);
        cg_asm(cg, asm_text, cons, LLVMVoidTypeInContext(cg->ctx), args, 2 + rank);
    }
    cg_asm(cg, "cp.async.bulk.commit_group;", "~{memory}", LLVMVoidTypeInContext(cg->ctx), NULL, 0);
    if_end(cg, join);
    cg->hopper.tma_stores = true;
}

/* The parity of the phase the fill of stage in flight completes: the
 * stage's bit before that fill flipped it. A stage is filled again only
 * after its fill was waited for (the double-buffering pass's order), so the
 * fill a wait names is the stage's last. */
static LLVMValueRef fill_parity(Cg *cg, LLVMValueRef state, LLVMValueRef stage) {
    LLVMValueRef bit = LLVMBuildAnd(cg->b, LLVMBuildLShr(cg->b, state, LLVMBuildTrunc(cg->b, stage, cg->i32, ""), ""),
                                    ci32(cg, 1), "");
    return LLVMBuildXor(cg->b, bit, ci32(cg, 1), "");
}

/* Spins until the mbarrier at shared address bar (i32) completes the phase
 * with this parity. */
void wait_phase(Cg *cg, LLVMValueRef bar, LLVMValueRef parity) {
    LLVMBasicBlockRef spin = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "tma_wait");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "tma_ready");
    LLVMBuildBr(cg->b, spin);
    LLVMPositionBuilderAtEnd(cg->b, spin);
    LLVMValueRef args[2] = {bar, parity};
    LLVMValueRef ok = cg_asm(cg,
                             "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\n"
                             "selp.u32 $0, 1, 0, p;\n}",
                             "=r,r,r,~{memory}", cg->i32, args, 2);
    LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntNE, ok, ci32(cg, 0), ""), done, spin);
    LLVMPositionBuilderAtEnd(cg->b, done);
}

void tma_wait(Cg *cg, const Op *op) {
    const Token *t = wait_token(cg, op);
    if (!t)
        return;
    if (!t->ring) {
        cg_err(cg, op, "internal error: tile.wait on a TMA buffer waits for a copy that is not TMA's", NULL);
        return;
    }
    Ring *r = t->ring;
    LLVMValueRef state = LLVMBuildLoad2(cg->b, cg->i32, r->state, "");
    wait_phase(cg, stage_bar(cg, r, t->stage), fill_parity(cg, state, t->stage));
    LLVMValueRef landed = LLVMBuildShl(cg->b, stage_bit(cg, t->stage), ci32(cg, 16), "");
    if (cg->hopper.role == ROLE_CONSUMER) {
        /* A skipped fill (its box past the tensor's end, tma_copy) was never
         * counted by the producer: releasing its stage would put the empty
         * barrier a phase ahead, and the producer's next wait on it (a
         * persistent block's next tile) would never end. The in-flight bit
         * says whether the fill was issued. */
        Token *rel = NEW(cg->a, Token);
        *rel = *t;
        rel->issued = LLVMBuildICmp(cg->b, LLVMIntNE, LLVMBuildAnd(cg->b, state, landed, ""), ci32(cg, 0), "");
        map_put(cg->a, &cg->hopper.wait_tok, op, rel);
    }
    LLVMBuildStore(cg->b, LLVMBuildAnd(cg->b, state, LLVMBuildNot(cg->b, landed, ""), ""), r->state);
}

/* Every fill in flight lands: before the kernel returns (a CTA must not
 * exit with TMA writes to its shared memory outstanding) and before shared
 * memory is reused. A later wait for a drained fill passes at once: its
 * phase has completed (and the stage is not filled again before that wait).
 * A consumer keeps the fill's in-flight bit: that wait still releases the
 * stage (tma_wait's `issued`), else the producer would wait for it forever. */
static void drain_rings(Cg *cg, bool release) {
    for (int i = 0; i < cg->hopper.nrings; i++) {
        Ring *r = &cg->hopper.rings[i];
        for (int s = 0; s < r->stages; s++) {
            LLVMValueRef state = LLVMBuildLoad2(cg->b, cg->i32, r->state, "");
            LLVMValueRef in_flight = LLVMBuildICmp(cg->b, LLVMIntNE, LLVMBuildAnd(cg->b, state, ci32(cg, 1 << (16 + s)), ""),
                                                   ci32(cg, 0), "");
            LLVMBasicBlockRef join = if_begin(cg, in_flight);
            wait_phase(cg, stage_bar(cg, r, ci64(cg, s)), fill_parity(cg, state, ci64(cg, s)));
            if (release || cg->hopper.role != ROLE_CONSUMER)
                LLVMBuildStore(cg->b, LLVMBuildAnd(cg->b, state, ci32(cg, ~(1 << (16 + s))), ""), r->state);
            if (release && r->empty)
                tma_release(cg, &(Token){.ring = r, .stage = ci64(cg, s)});
            if_end(cg, join);
        }
    }
}

void tma_drain(Cg *cg) { drain_rings(cg, false); }
void tma_drain_release(Cg *cg) { drain_rings(cg, true); }

void tma_release(Cg *cg, const Token *t) {
    LLVMValueRef lane0 = LLVMBuildICmp(cg->b, LLVMIntEQ, cg->lane, ci32(cg, 0), "");
    LLVMBasicBlockRef join = if_begin(cg, t->issued ? LLVMBuildAnd(cg->b, lane0, t->issued, "") : lane0);
    LLVMValueRef bar = ptr_i32(cg, gep(cg, SK_I64, t->ring->empty, t->stage));
    cg_asm(cg, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", LLVMVoidTypeInContext(cg->ctx), &bar, 1);
    if_end(cg, join);
}
