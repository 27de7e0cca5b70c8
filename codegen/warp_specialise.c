/* warp_specialise.c — the skeleton of a warp-specialised sm_90a kernel
 * (FlashAttention-3's): the producer warpgroup and the consumer warpgroups,
 * setmaxnreg between them, ping-pong turns on named barriers, and for
 * persistent kernels the tile scheduler and its longest-first tile order.
 * The passes decided all of it and wrote it on the launch (sm90a-layout:
 * nv.producer_warps, nv.pingpong, nv.persistent, nv.blocks_per_sm;
 * warp-roles: the roles' registers, the named barriers, the scheduler, and
 * nv.producer, nv.free_after and nv.turn on its ops); read_skeleton reads
 * it, and lower.c emits the body once per role. */
#include "codegen/lower.h"

#include <string.h>

static int int_attr(const Op *op, const char *name, int otherwise) {
    Attr *at = op_attr(op, name);
    return at ? (int)at->i : otherwise;
}

bool read_skeleton(Cg *cg, const Op *launch) {
    Sm90State *h = &cg->hopper;
    h->producer_warps = int_attr(launch, "nv.producer_warps", 0);
    h->pingpong = int_attr(launch, "nv.pingpong", 0) != 0;
    h->persistent = int_attr(launch, "nv.persistent", 0) != 0;
    h->blocks_per_sm = int_attr(launch, "nv.blocks_per_sm", 1);
    if (h->pingpong && (!h->producer_warps || cg->nwarps < 8))
        return cg_err(cg, launch, "internal error: nv.pingpong needs warp specialisation and two consumer warpgroups",
                      NULL);
    if (h->blocks_per_sm != 1 && h->blocks_per_sm != 2)
        return cg_err(cg, launch, "internal error: nv.blocks_per_sm must be 1 or 2", NULL);
    if (h->persistent && !h->producer_warps)
        return cg_err(cg, launch, "internal error: nv.persistent needs warp specialisation (nv.producer_warps)", NULL);
    if (h->producer_warps && (h->producer_warps != 4 || cg->nwarps % 4 || !cg->target->async_proxy))
        return cg_err(cg, launch, "internal error: nv.producer_warps must be 4 (a warpgroup), after whole warpgroups "
                                  "of consumers, on sm_90a", NULL);
    static const char *const barriers[NB_COUNT] = {
        [NB_CONSUMERS] = "nv.barrier.consumers", [NB_TURN] = "nv.barrier.turn",
        [NB_SCHED_EMPTY] = "nv.barrier.sched_empty", [NB_SCHED_FULL] = "nv.barrier.sched_full",
        [NB_WARPGROUP] = "nv.barrier.warpgroup",
    };
    for (int i = 0; i < NB_COUNT; i++)
        h->barrier[i] = int_attr(launch, barriers[i], -1);
    h->producer_regs = int_attr(launch, "nv.producer_regs", 0);
    h->consumer_regs = int_attr(launch, "nv.consumer_regs", 0);
    h->section_tiles = int_attr(launch, "nv.section_tiles", 0);
    if (h->producer_warps && (!h->producer_regs || !h->consumer_regs || h->barrier[NB_CONSUMERS] < 0 ||
                              (h->pingpong && h->barrier[NB_TURN] < 0) ||
                              (h->persistent && (h->section_tiles < 1 || h->barrier[NB_SCHED_EMPTY] < 0 ||
                                                 h->barrier[NB_SCHED_FULL] < 0))))
        return cg_err(cg, launch, "internal error: a warp-specialised launch without its skeleton (run warp-roles)",
                      NULL);
    return true;
}

/* A persistent kernel's tile t (of tiles_x · tiles_y) as pid (x, y), in
 * FlashAttention-3's longest-first order (warp-roles' nv.section_tiles;
 * the interpreter's tile_order is the same): the y tiles (heads) go in
 * sections of S = max(1, section_tiles / tiles_x), and a section's tiles
 * from the last x to the first, each x over the section's heads. The
 * blocks take the tiles in this order as they become free (the tile
 * scheduler below). */

/* S, computed once before the tile loop (a division by a parameter that
 * may be 0 as far as LLVM knows, which it would not hoist). */
static LLVMValueRef section_heads(Cg *cg) {
    LLVMValueRef per = LLVMBuildUDiv(cg->b, ci64(cg, cg->hopper.section_tiles), cg->hopper.tiles_x, "");
    return LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntEQ, per, ci64(cg, 0), ""), ci64(cg, 1), per, "");
}

static void tile_order(Cg *cg, LLVMValueRef t, LLVMValueRef s, LLVMValueRef pid[2]) {
    LLVMValueRef x = cg->hopper.tiles_x, y = cg->hopper.tiles_y;
    LLVMValueRef first_y = mul(cg, LLVMBuildUDiv(cg->b, t, mul(cg, s, x), ""), s);
    LLVMValueRef left = LLVMBuildSub(cg->b, y, first_y, "");
    LLVMValueRef heads = LLVMBuildSelect(cg->b, LLVMBuildICmp(cg->b, LLVMIntULT, left, s, ""), left, s, "");
    LLVMValueRef r = LLVMBuildSub(cg->b, t, mul(cg, first_y, x), "");
    pid[0] = LLVMBuildSub(cg->b, LLVMBuildSub(cg->b, x, ci64(cg, 1), ""), LLVMBuildUDiv(cg->b, r, heads, ""), "");
    pid[1] = add(cg, first_y, LLVMBuildURem(cg->b, r, heads, ""));
}

/* ---- persistent blocks: the tile scheduler ---------------------------------------
 *
 * FlashAttention-3's dynamic scheduler. Block b starts with tile b; its
 * producer then takes the next as nctaid.x + atomicAdd(tile_counter, 1),
 * a word libattnrt zeroes before the launch, so the block that finishes
 * first takes the next tile of tile_order's longest-first order
 * (bench/tile_balance.py: the slowest block 1.00–1.03 of the mean, against
 * 1.24–1.42 taking the tiles round-robin at head dims 128 and 256). The
 * producer's copier warp works out each tile's pid (tile_order's
 * divisions, off the consumers' path) and hands it to the consumers
 * through one i64 slot in shared memory (x in the low half, y in the
 * high; all ones past the last tile) and named barriers of the consumers
 * and that warp (FlashAttention-3's): the producer writes the slot and
 * arrives at each consumer warpgroup's FULL, a warpgroup syncs at its own,
 * reads the slot and arrives at EMPTY, where the producer syncs (every
 * consumer read it) before writing the next. The end marker ends both
 * roles (the consumers then arrive no more). A FULL of its own lets each
 * warpgroup start its next tile as soon as it is done with this one: the
 * first warpgroup's first Q·Kᵀ of tile t + 1 runs on the tensor cores
 * while the last one still does tile t's last P·V and its epilogue (the
 * cross-tile overlap; each stores its own rows of O, tma.c). The
 * barriers order the slot's accesses; they are relaxed atomics (an
 * atom.shared.exch, a volatile ld.shared) because compute-sanitizer's
 * racecheck does not see bar.arrive's ordering and reported the plain
 * store and load as a race (as it did an mbarrier ring's). The load stays
 * a plain ld.shared of one address, which ptxas keeps in uniform
 * registers: an atomic read shared by shfl took the tile's index
 * arithmetic out of them and cost the key loops 22–43 instructions. */
#define SCHED_END (~0ULL)

/* Made by every thread before the roles part. */
static void sched_init(Cg *cg) { cg->hopper.sched = smem_alloc_pinned(cg, 8, 8); }

/* The producer publishes its i-th tile, `word` (lane 0 writes; the warp
 * arrives). */
static void sched_publish(Cg *cg, LLVMValueRef i, LLVMValueRef word) {
    LLVMBasicBlockRef after_first = if_begin(cg, LLVMBuildICmp(cg->b, LLVMIntNE, i, ci32(cg, 0), ""));
    named_barrier(cg, "sync", NB_SCHED_EMPTY, NULL, cg->threads + 32);
    if_end(cg, after_first);
    LLVMBasicBlockRef join = if_begin(cg, LLVMBuildICmp(cg->b, LLVMIntEQ, cg->lane, ci32(cg, 0), ""));
    LLVMBuildAtomicRMW(cg->b, LLVMAtomicRMWBinOpXchg, cg->hopper.sched, word, LLVMAtomicOrderingMonotonic, false);
    if_end(cg, join);
    for (int w = 0; w < cg->nwarps / 4; w++)
        named_barrier(cg, "arrive", NB_SCHED_FULL, ci32(cg, w), 128 + 32);
}

/* Whether a slot's word names a tile (is not the end marker). */
static LLVMValueRef sched_more(Cg *cg, LLVMValueRef word) {
    return LLVMBuildICmp(cg->b, LLVMIntNE, word, LLVMConstInt(cg->i64, SCHED_END, false), "");
}

/* The consumers take the next tile's word; they free the slot unless it
 * ends the loop (the producer has returned). */
static LLVMValueRef sched_take(Cg *cg) {
    named_barrier(cg, "sync", NB_SCHED_FULL, warpgroup_of(cg), 128 + 32);
    LLVMValueRef word = LLVMBuildLoad2(cg->b, cg->i64, cg->hopper.sched, "tile");
    LLVMSetOrdering(word, LLVMAtomicOrderingMonotonic);
    LLVMSetAlignment(word, 8);
    LLVMBasicBlockRef join = if_begin(cg, sched_more(cg, word));
    named_barrier(cg, "arrive", NB_SCHED_EMPTY, NULL, cg->threads + 32);
    if_end(cg, join);
    return word;
}

/* The producer's next tile, taken at the start of this one (the atomic's
 * latency then hides behind the copies): lane 0 asks, the warp shares. */
static LLVMValueRef sched_ask(Cg *cg) {
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(cg->b);
    LLVMBasicBlockRef join = if_begin(cg, LLVMBuildICmp(cg->b, LLVMIntEQ, cg->lane, ci32(cg, 0), ""));
    LLVMBasicBlockRef asked = LLVMGetInsertBlock(cg->b);
    LLVMValueRef got = LLVMBuildAtomicRMW(cg->b, LLVMAtomicRMWBinOpAdd, cg->hopper.tile_counter, ci32(cg, 1),
                                          LLVMAtomicOrderingMonotonic, false);
    if_end(cg, join);
    LLVMValueRef v = LLVMBuildPhi(cg->b, cg->i32, "");
    LLVMValueRef zero = ci32(cg, 0);
    LLVMAddIncoming(v, &got, &asked, 1);
    LLVMAddIncoming(v, &zero, &pre, 1);
    return v;
}

/* The launch body for this block's tiles: once (pid = ctaid), or, for a
 * persistent kernel, for each tile the scheduler gives it, with pid =
 * tile_order(t) and z = 0. A consumer warpgroup starts each tile past its
 * scheduler FULL barrier, not waiting for the others, and ends it with no
 * dot in flight and every stage released. That is right only while no
 * consumer writes shared memory another warpgroup reads (O's store writes
 * the warpgroup's own slab and waits for its last one itself, tma.c): a
 * kernel where one does is refused. */
static void emit_tiles(Cg *cg, const Block *body) {
    if (!cg->hopper.persistent) {
        emit_block(cg, body, NULL, NULL);
        return;
    }
    bool producer = cg->hopper.role == ROLE_PRODUCER;
    LLVMValueRef first = NULL, grid = NULL, total = NULL, s = NULL;   /* (the producer's) */
    if (producer) {
        first = zext64(cg, sreg(cg, "ctaid.x"));
        grid = zext64(cg, sreg(cg, "nctaid.x"));
        total = mul(cg, cg->hopper.tiles_x, cg->hopper.tiles_y);
        s = section_heads(cg);
    }
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(cg->b);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "tile");
    LLVMBasicBlockRef bodybb = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "tile_body");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "tiles_done");
    LLVMBuildBr(cg->b, head);
    LLVMPositionBuilderAtEnd(cg->b, head);
    LLVMValueRef i = NULL, t = NULL, word;   /* the producer counts its tiles (i) */
    if (producer) {
        LLVMValueRef zero = ci32(cg, 0);
        i = LLVMBuildPhi(cg->b, cg->i32, "tile_i");
        LLVMAddIncoming(i, &zero, &pre, 1);
        t = LLVMBuildPhi(cg->b, cg->i64, "tile");
        LLVMAddIncoming(t, &first, &pre, 1);
        LLVMValueRef more = LLVMBuildICmp(cg->b, LLVMIntULT, t, total, "");
        LLVMValueRef pid[2];   /* (of tile 0 past the end: no division by 0) */
        tile_order(cg, LLVMBuildSelect(cg->b, more, t, ci64(cg, 0), ""), s, pid);
        word = LLVMBuildOr(cg->b, pid[0], LLVMBuildShl(cg->b, pid[1], ci64(cg, 32), ""), "");
        word = LLVMBuildSelect(cg->b, more, word, LLVMConstInt(cg->i64, SCHED_END, false), "");
        sched_publish(cg, i, word);
    } else {
        word = sched_take(cg);
    }
    LLVMBuildCondBr(cg->b, sched_more(cg, word), bodybb, exit);
    LLVMPositionBuilderAtEnd(cg->b, bodybb);
    LLVMValueRef asked = producer ? sched_ask(cg) : NULL;
    cg->hopper.tile_smem = false;
    cv_put(cg, body->args[0], cv_scalar(cg, LLVMBuildAnd(cg->b, word, ci64(cg, 0xffffffff), "")));
    cv_put(cg, body->args[1], cv_scalar(cg, LLVMBuildLShr(cg->b, word, ci64(cg, 32), "")));
    cv_put(cg, body->args[2], cv_scalar(cg, ci64(cg, 0)));
    emit_block(cg, body, NULL, NULL);
    if (cg->failed)
        return;
    if (!producer) {
        cg->target->complete(cg, NULL);
        tma_drain_release(cg);
        if (cg->hopper.tile_smem) {   /* (no kernel attnc makes has any: each warpgroup's O goes out by its own slab) */
            cg_err(cg, cg->spec->launch,
                   "internal error: the consumers of a persistent kernel write shared memory other warpgroups "
                   "read; its tiles would need a barrier of every consumer at the start",
                   NULL);
            return;
        }
    } else {
        LLVMValueRef args[4] = {ci32(cg, -1), asked, ci32(cg, 0), ci32(cg, 31)};
        LLVMValueRef n = cg_call(cg, "llvm.nvvm.shfl.sync.idx.i32", cg->i32, args, 4);
        LLVMValueRef next = add(cg, LLVMBuildZExt(cg->b, n, cg->i64, ""), grid);
        LLVMValueRef next_i = LLVMBuildAdd(cg->b, i, ci32(cg, 1), "");
        LLVMBasicBlockRef latch = LLVMGetInsertBlock(cg->b);
        LLVMAddIncoming(t, &next, &latch, 1);
        LLVMAddIncoming(i, &next_i, &latch, 1);
    }
    LLVMBuildBr(cg->b, head);
    LLVMPositionBuilderAtEnd(cg->b, exit);
}

/* Warp specialisation (FlashAttention-3's): the buffers TMA fills and
 * their mbarriers are made by every thread; then the consumer warps run the
 * body (waiting for stages, releasing them as they finish reading) and the
 * producer warpgroup runs it again with only the copies (waiting for free
 * stages); setmaxnreg hands the producer's registers to the consumers. */
void emit_specialised(Cg *cg, const Block *body) {
    for (const Op *op = body->first; op && !cg->failed; op = op->next)
        if (op->kind == OP_ALLOC && map_get(&cg->hopper.tma_bufs, op->results[0]))
            emit_alloc(cg, op);
    if (cg->hopper.persistent)
        sched_init(cg);
    Map shared;   /* the values both roles see: the parameters, the buffers */
    map_copy(cg->a, &shared, &cg->vals);
    LLVMBasicBlockRef prod = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "producer");
    LLVMBasicBlockRef cons = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "consumer");
    LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntUGE, cg->warp, ci32(cg, cg->nwarps), ""), prod, cons);
    LLVMPositionBuilderAtEnd(cg->b, cons);
    cg->hopper.role = ROLE_CONSUMER;
    cg_asm(cg, arena_printf(cg->a, "setmaxnreg.inc.sync.aligned.u32 %d;", cg->hopper.consumer_regs), "~{memory}",
           LLVMVoidTypeInContext(cg->ctx), NULL, 0);
    /* ping-pong: warpgroup 0 goes first (the last one's arrival stands for
     * a turn before the loop); after the loop warpgroup 0 takes the last
     * arrival meant for it, so no barrier is left half-arrived */
    LLVMValueRef wg = LLVMBuildLShr(cg->b, cg->warp, ci32(cg, 2), "");
    if (cg->hopper.pingpong) {
        LLVMBasicBlockRef join = if_begin(cg, LLVMBuildICmp(cg->b, LLVMIntEQ, wg, ci32(cg, cg->nwarps / 4 - 1), ""));
        named_barrier(cg, "arrive", NB_TURN, ci32(cg, 0), 256);
        if_end(cg, join);
    }
    emit_tiles(cg, body);
    if (cg->failed)
        return;
    if (cg->target->complete)
        cg->target->complete(cg, NULL);
    if (cg->hopper.pingpong) {
        LLVMBasicBlockRef join = if_begin(cg, LLVMBuildICmp(cg->b, LLVMIntEQ, wg, ci32(cg, 0), ""));
        named_barrier(cg, "sync", NB_TURN, ci32(cg, 0), 256);
        if_end(cg, join);
    }
    cg->target->drain(cg);
    LLVMBuildRetVoid(cg->b);
    LLVMPositionBuilderAtEnd(cg->b, prod);
    cg->vals = shared;
    cg->hopper.role = ROLE_PRODUCER;
    cg_asm(cg, arena_printf(cg->a, "setmaxnreg.dec.sync.aligned.u32 %d;", cg->hopper.producer_regs), "~{memory}",
           LLVMVoidTypeInContext(cg->ctx), NULL, 0);
    /* one warp of the warpgroup runs the copies (one of its threads issues
     * them); the other three have nothing to do */
    LLVMBasicBlockRef idle = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "idle");
    LLVMBasicBlockRef copier = LLVMAppendBasicBlockInContext(cg->ctx, cg->fn, "copier");
    LLVMBuildCondBr(cg->b, LLVMBuildICmp(cg->b, LLVMIntEQ, cg->warp, ci32(cg, cg->nwarps), ""), copier, idle);
    LLVMPositionBuilderAtEnd(cg->b, idle);
    LLVMBuildRetVoid(cg->b);
    LLVMPositionBuilderAtEnd(cg->b, copier);
    emit_tiles(cg, body);
}
