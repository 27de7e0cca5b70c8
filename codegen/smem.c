/* smem.c — dynamic shared memory: buffers with live ranges (reused once
 * their owner is dead), and boxes copied global -> registers -> shared. */
#include "codegen/lower.h"

#include <string.h>

/* Dynamic shared memory, 16-byte aligned, first fit among the live buffers.
 * A buffer belongs to cg->owner (a value of the launch body, freed after its
 * last use there; NULL: freed by the caller). Memory that a dead buffer used
 * is reused only after a barrier: other warps may still read it (and,
 * with asynchronous copies, after those in flight have landed). */
LLVMValueRef smem_alloc_aligned(Cg *cg, int64_t bytes, int64_t align) {
    cg->hopper.tile_smem |= cg->hopper.role == ROLE_CONSUMER;
    bytes = (bytes + 15) & ~(int64_t)15;
    int64_t off = 0;
    for (bool moved = true; moved;) {
        moved = false;
        for (int i = 0; i < cg->nlive; i++)
            if (off < cg->live[i].off + cg->live[i].size && cg->live[i].off < off + bytes) {
                off = (cg->live[i].off + cg->live[i].size + align - 1) / align * align;
                moved = true;
            }
    }
    bool reused = cg->ndead < 0;   /* too many to track: anything could be */
    for (int i = 0; i < cg->ndead; i++)
        reused |= off < cg->dead[i].off + cg->dead[i].size && cg->dead[i].off < off + bytes;
    if (reused) {
        if (cg->target->drain)
            cg->target->drain(cg);
        cg_barrier(cg);
    }
    if (off + bytes > cg->smem_bytes)
        cg->smem_bytes = off + bytes;
    if (cg->nlive < 64)
        cg->live[cg->nlive++] = (struct Live){off, bytes, cg->owner};
    LLVMValueRef o = ci64(cg, off);
    return LLVMBuildGEP2(cg->b, LLVMInt8TypeInContext(cg->ctx), cg->smem, &o, 1, "");
}

LLVMValueRef smem_alloc(Cg *cg, int64_t bytes) { return smem_alloc_aligned(cg, bytes, 16); }

/* The owner of memory no other buffer ever takes (smem_alloc_pinned). */
static const Value kernel_lifetime;

/* Memory that is the kernel's to its end, never reused: mbarriers and the
 * persistent scheduler's word. The drain before a reuse waits for the
 * fills in flight, yet a barrier's word can still change after its ring's
 * last wait: on the H100, with two blocks an SM, the backward's dK and dV
 * slabs written over the rings' barriers (offset 0, after the drain) came
 * back with NaN in exactly the barriers' upper words, and with the slabs
 * elsewhere or one block an SM never did
 * (bench/results/2026-12-07-h100-barriers/NOTES.md). CUTLASS and
 * FlashAttention-3 keep their pipelines' barriers apart from the buffers
 * an epilogue reuses, too. */
LLVMValueRef smem_alloc_pinned(Cg *cg, int64_t bytes, int64_t align) {
    const Value *owner = cg->owner;
    cg->owner = &kernel_lifetime;
    LLVMValueRef p = smem_alloc_aligned(cg, bytes, align);
    cg->owner = owner;
    return p;
}

/* Swizzle 128: the tile is cut into panels of 128 bytes a row (64 16-bit
 * columns, 32 f32 ones), each panel_rows rows, and 16-byte chunk c of row
 * r lies at chunk c ^ (r % 8) — what TMA's SWIZZLE_128B writes (and reads,
 * for a store or reduce-add) and a 128-byte-swizzle wgmma descriptor
 * reads. The XOR acts on address bits, so panels start 1024-byte aligned
 * (panel_rows a multiple of 8, the buffer aligned so). In elements. */
LLVMValueRef smem_offset_swizzled(Cg *cg, LLVMValueRef row, LLVMValueRef col, int64_t panel_rows, int elem_bytes) {
    int64_t row_elems = 128 / elem_bytes, chunk_elems = 16 / elem_bytes;
    int64_t row_shift = __builtin_ctzll((unsigned long long)row_elems), chunk_shift = __builtin_ctzll((unsigned long long)chunk_elems);
    LLVMValueRef panel = LLVMBuildLShr(cg->b, col, ci64(cg, row_shift), "");
    LLVMValueRef chunk = LLVMBuildXor(cg->b, LLVMBuildAnd(cg->b, LLVMBuildLShr(cg->b, col, ci64(cg, chunk_shift), ""), ci64(cg, 7), ""),
                                      LLVMBuildAnd(cg->b, row, ci64(cg, 7), ""), "");
    LLVMValueRef off = add(cg, mul(cg, panel, ci64(cg, panel_rows * row_elems)), mul(cg, row, ci64(cg, row_elems)));
    return add(cg, add(cg, off, LLVMBuildShl(cg->b, chunk, ci64(cg, chunk_shift), "")),
               LLVMBuildAnd(cg->b, col, ci64(cg, chunk_elems - 1), ""));
}

/* Row-major with a row stride, or (swizzle 128) 16-bit swizzled panels. */
LLVMValueRef smem_offset(Cg *cg, LLVMValueRef row, LLVMValueRef col, int64_t stride, int64_t panel_rows, int swizzle) {
    if (!swizzle)
        return add(cg, mul(cg, row, ci64(cg, stride)), col);
    return smem_offset_swizzled(cg, row, col, panel_rows, 2);
}

void proxy_fence(Cg *cg) {
    if (cg->target->async_proxy)
        cg_asm(cg, "fence.proxy.async.shared::cta;", "~{memory}", LLVMVoidTypeInContext(cg->ctx), NULL, 0);
}

/* Frees the buffers whose owners are dead after top-level op `index`
 * (owner NULL: the temporaries of one op). */
void smem_release(Cg *cg, int index) {
    int k = 0;
    for (int i = 0; i < cg->nlive; i++) {
        const Value *o = cg->live[i].owner;
        intptr_t last = o ? (intptr_t)map_get(&cg->last_use, o) : 0;
        if (o == &kernel_lifetime || (o && last > index + 1))
            cg->live[k++] = cg->live[i];
        else if (cg->ndead >= 0 && cg->ndead < 64)   /* memory some buffer used */
            cg->dead[cg->ndead++] = cg->live[i];
        else
            cg->ndead = -1;
    }
    cg->nlive = k;
}

/* The value whose memory a tile reads in place, if it is a view: a load
 * the dots read from shared memory (nv.operand "smem", "smem.trans"), or a
 * transpose of a view. Its buffer lives as long as the view. */
static const Value *viewed(const Value *v) {
    const Op *def = v->def;
    if (def && def->kind == OP_TRANS)
        return def->operands[0];
    Attr *operand = def && def->kind == OP_LOAD ? op_attr(def, "nv.operand") : NULL;
    return operand && strncmp(operand->s, "smem", 4) == 0 ? def->operands[0] : NULL;
}

/* Records, for every value used in op (and the ops inside it), that top-level
 * op `index` uses it; a view's use is its buffer's too (a K tile TMA
 * loaded once and read in the loop: its buffer is not reused by the
 * loop's scratch copies). */
void note_uses(Cg *cg, const Op *op, int index) {
    for (int i = 0; i < op->noperands; i++)
        for (const Value *v = op->operands[i]; v; v = viewed(v))
            map_put(cg->a, &cg->last_use, v, (void *)(intptr_t)(index + 1));
    for (int r = 0; r < op->nregions; r++)
        for (int b = 0; b < op->regions[r].nblocks; b++)
            for (const Op *o = op->regions[r].blocks[b]->first; o; o = o->next)
                note_uses(cg, o, index);
}

/* ---- shared memory, register prefetch -------------------------------------------- */

/* Row-major strides; f16 rows padded to `row_stride` (sm70-layout's choice),
 * others by 16 bytes; or swizzled (the strides of the last two dims are
 * then nominal: smem_offset places them). Aligned to `align` bytes. */
static Mem *shared_mem(Cg *cg, const Type *t, int64_t row_stride, int swizzle, int64_t align) {
    Mem *m = NEW(cg->a, Mem);
    m->elem = t->elem;
    m->shared = true;
    m->rank = t->rank;
    m->swizzle = swizzle;
    int64_t s = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        m->cdims[d] = t->dims[d].size;
        m->cstrides[d] = s;
        if (d == t->rank - 1 && t->rank >= 2 && !swizzle)
            s = row_stride > 0 ? row_stride : t->dims[d].size + 16 / esize(t->elem);
        else
            s *= t->dims[d].size;
    }
    for (int d = 0; d < t->rank; d++) {
        m->dims[d] = ci64(cg, m->cdims[d]);
        m->strides[d] = ci64(cg, m->cstrides[d]);
    }
    m->ptr = smem_alloc_aligned(cg, s * esize(t->elem), swizzle ? 1024 : align);
    return m;
}

void emit_alloc(Cg *cg, const Op *op) {
    const Type *t = op->results[0]->type;
    for (int d = 0; d < t->rank; d++)
        if (t->dims[d].sym) {
            cg_err(cg, op, "a shared buffer needs numeric dims", NULL);
            return;
        }
    Cv *c = NEW(cg->a, Cv);
    c->kind = CV_MEM;
    cg->owner = op->results[0];
    Attr *stride = op_attr(op, "nv.row_stride"), *swizzle = op_attr(op, "nv.swizzle");
    if (swizzle && (swizzle->i != 128 || esize(t->elem) != 2 || t->rank < 2 || t->dims[t->rank - 1].size % 64 ||
                    t->dims[t->rank - 2].size % 8)) {
        cg_err(cg, op, "internal error: nv.swizzle 128 needs 16-bit tiles of 8k rows and 64k columns", NULL);
        return;
    }
    /* a buffer TMA fills has an mbarrier per stage, living as long as it
     * (placed first: in the gap a 1024-aligned buffer leaves they would
     * reuse memory, which drains the copies in flight) */
    bool tma = map_get(&cg->hopper.tma_bufs, op->results[0]) != NULL;
    Attr *ring = op_attr(op, "nv.ring");   /* sm90a-layout: "full", or "full,empty" under warp specialisation */
    bool empty = ring && strcmp(ring->s, "full,empty") == 0;
    if (tma && (!ring || empty != (cg->hopper.producer_warps != 0))) {
        cg_err(cg, op, "internal error: a buffer TMA fills needs nv.ring, with empty barriers exactly under warp "
                       "specialisation (run sm90a-layout)", NULL);
        return;
    }
    /* TMA writes a stage at a 128-byte aligned address: an unswizzled one
     * (an f32 row, sm90a-layout's tma_copy_ok) unpadded, its stages whole
     * multiples of 128 bytes */
    int64_t cols = t->dims[t->rank - 1].size, stage_bytes = esize(t->elem);
    for (int d = 1; d < t->rank; d++)
        stage_bytes *= t->dims[d].size;
    if (tma && !swizzle && (stride || stage_bytes % 128)) {
        cg_err(cg, op, "internal error: an unswizzled buffer TMA fills needs unpadded stages of 128k bytes", NULL);
        return;
    }
    LLVMValueRef bars = tma ? smem_alloc_pinned(cg, 8 * t->dims[0].size * (empty ? 2 : 1), 8) : NULL;
    c->mem = shared_mem(cg, t, stride ? stride->i : tma ? cols : 0, swizzle ? 128 : 0, tma ? 128 : 16);
    if (tma)
        tma_ring_init(cg, op, c->mem, bars, empty);
    cg->owner = NULL;
    cv_put(cg, op->results[0], c);
}

/* Vector width of a copy of rows×cols from m: 8 f16 (16 bytes) when the tile's

 * columns run along m's innermost, numeric, dim. */
int copy_vec(const Mem *m, int64_t cols, int inner_axis_dim, int64_t inner_size) {
    if (esize(m->elem) != 2 || inner_axis_dim != m->rank - 1 || inner_size <= 0)
        return 1;
    for (int v = 8; v > 1; v /= 2)
        if (cols % v == 0 && inner_size % v == 0)
            return v;
    return 1;
}

/* Vector j of this thread in a copied box: its number f (vectors are dealt
 * out round-robin), and the (row, col) of its first element. */
LLVMValueRef box_vector(Cg *cg, const Token *t, int j, LLVMValueRef *row, LLVMValueRef *col) {
    LLVMValueRef f = add(cg, ci64(cg, (int64_t)j * cg->threads), zext64(cg, cg->tid));
    LLVMValueRef per_row = ci64(cg, t->cols / t->vec);
    *row = LLVMBuildUDiv(cg->b, f, per_row, "");
    *col = mul(cg, LLVMBuildURem(cg->b, f, per_row, ""), ci64(cg, t->vec));
    return f;
}

int64_t box_rows_apart(const Cg *cg, const Token *t) {
    int64_t per_row = t->cols / t->vec;
    if ((t->rows * per_row) % cg->threads || cg->threads % per_row)
        return 0;
    return cg->threads / per_row;
}

/* Global loads of a rows×cols box into registers, each thread a few vectors;
 * outside the memref reads 0. */
Token *prefetch(Cg *cg, const Op *op, const Mem *src, int first_index, int64_t rows, int64_t cols,
                       int64_t inner_size) {
    Attr *dims = op_attr(op, "dims");
    Token *t = NEW(cg->a, Token);
    t->rows = rows;
    t->cols = cols;
    t->elem = src->elem;
    t->vec = copy_vec(src, cols, (int)dims->elems[1]->i, inner_size);
    int64_t total = rows * cols / t->vec;
    t->nregs = (int)((total + cg->threads - 1) / cg->threads);
    t->regs = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)t->nregs);
    LLVMTypeRef vt = t->vec > 1 ? LLVMVectorType(lty(cg, src->elem), (unsigned)t->vec) : lty(cg, src->elem);
    /* Every thread's vectors at one column, rows_apart rows apart, along a
     * dim with a stride parameter: vector j is vector 0 plus j·rows_apart
     * rows (opaque_scaled), inside while that many rows remain. */
    int row_dim = (int)dims->elems[0]->i;
    int64_t rows_apart = box_rows_apart(cg, t);
    bool stepped = rows_apart && row_dim >= 0 && src->stride_param[row_dim];
    LLVMValueRef off0 = NULL, inside0 = NULL, room = NULL;
    for (int j = 0; j < t->nregs; j++) {
        LLVMValueRef f = NULL, inside, off;   /* f: the vector's number, for a box the threads do not divide */
        if (stepped && j > 0) {
            off = add(cg, off0, opaque_scaled(cg, src->stride_param[row_dim], j * rows_apart * src->stride_unit[row_dim]));
            inside = LLVMBuildAnd(cg->b, inside0, LLVMBuildICmp(cg->b, LLVMIntSGT, room, ci64(cg, j * rows_apart), ""), "");
        } else {
            LLVMValueRef row, col, co[8];
            f = box_vector(cg, t, j, &row, &col);
            mem_coords(cg, op, src, first_index, row, col, co);
            off = off0 = mem_offset(cg, src, co, &inside);
            inside0 = inside;
            if (row_dim >= 0)
                room = LLVMBuildSub(cg->b, src->dims[row_dim], co[row_dim], "");
        }
        if (total % cg->threads)
            inside = LLVMBuildAnd(cg->b, inside, LLVMBuildICmp(cg->b, LLVMIntULT, f, ci64(cg, total), ""), "");
        LLVMValueRef safe = LLVMBuildSelect(cg->b, inside, off, ci64(cg, 0), "");
        LLVMValueRef v = LLVMBuildLoad2(cg->b, vt, gep(cg, src->elem, src->ptr, safe), "");
        LLVMSetAlignment(v, (unsigned)(t->vec * esize(src->elem)));
        t->regs[j] = LLVMBuildSelect(cg->b, inside, v, LLVMConstNull(vt), "");
    }
    return t;
}

/* Stores a prefetched box into rows×cols of shared memory at base (row stride
 * `stride` elements, or swizzled: smem_offset). */
void land(Cg *cg, const Token *t, LLVMValueRef base, int64_t stride, int64_t panel_rows, int swizzle) {
    int64_t total = t->rows * t->cols / t->vec;
    for (int j = 0; j < t->nregs; j++) {
        LLVMValueRef row, col, f = box_vector(cg, t, j, &row, &col);
        LLVMValueRef off = smem_offset(cg, row, col, stride, panel_rows, swizzle);
        LLVMBasicBlockRef join = NULL;
        if (total % cg->threads)
            join = if_begin(cg, LLVMBuildICmp(cg->b, LLVMIntULT, f, ci64(cg, total), ""));
        LLVMValueRef s = LLVMBuildStore(cg->b, t->regs[j], gep(cg, t->elem, base, off));
        int64_t row_align = (stride * 2) & -(stride * 2);   /* rows start this aligned */
        LLVMSetAlignment(s, (unsigned)(row_align < t->vec * 2 ? row_align : t->vec * 2));
        if (join)
            if_end(cg, join);
    }
}

int64_t inner_size_of(const Value *mem) {
    const Type *t = mem->type;
    return t->dims[t->rank - 1].sym ? -1 : t->dims[t->rank - 1].size;
}

/* A global tile feeding a dot: copied once into a shared scratch (through
 * registers, with a barrier: the dots of every warp read it). */
void emit_view_copy(Cg *cg, const Op *op, const Mem *m, View *w) {
    Attr *sw = op_attr(op, "nv.swizzle");
    int swizzle = sw ? (int)sw->i : 0;
    int64_t stride = swizzle ? w->cols : op_attr(op, "nv.row_stride")->i;
    cg->owner = op->results[0];
    LLVMValueRef base = smem_alloc_aligned(cg, w->rows * stride * 2, swizzle ? 1024 : 16);
    cg->owner = NULL;
    Token *t = prefetch(cg, op, m, 1, w->rows, w->cols, inner_size_of(op->operands[0]));
    const Op *parent = op->parent && op->parent->parent ? op->parent->parent->parent : NULL;
    if (parent && parent->kind == OP_FOR)   /* the previous iteration's readers first */
        cg_barrier(cg);
    land(cg, t, base, stride, w->rows, swizzle);
    proxy_fence(cg);   /* the stores, before wgmma reads them */
    cg_barrier(cg);
    w->base = base;
    w->stride = stride;
    w->swizzle = swizzle;
    w->panel_rows = w->rows;
}
