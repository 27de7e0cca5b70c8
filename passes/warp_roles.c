/* warp_roles.c — the roles of a warp-specialised sm_90a kernel, made
 * explicit in nv IR for the code generator to follow (FlashAttention-3's
 * producer / consumer split). Runs last on sm_90a's target IR, after every
 * pass that moves ops (softmax-overlap), on launches with nv.producer_warps:
 *
 *   nv.producer = true  on each op the producer warpgroup runs as well as
 *                       the consumers: the copies (which it issues), the
 *                       loops around them and the scalar arithmetic they
 *                       need (no tile: the producer holds none, so it needs
 *                       no shared memory and no barrier). Every other op is
 *                       the consumers' alone.
 *   nv.free_after = k   on each tile.wait: the consumers are done with the
 *                       waited stage after the k-th op that follows the wait
 *                       in its block (0: right after the wait), and release
 *                       it there to the producer, which may then fill it
 *                       again. The stage is read by the tile.loads of its
 *                       buffer after the wait (up to the next wait on that
 *                       buffer) and by what uses them (a tile.trans, then
 *                       the dot): the last of those frees it.
 *
 * To the interpreter, a freed stage holds poison: an op that reads it after
 * its release fails the check (the broken twin test-early-release frees
 * every stage right after its wait and fails so).
 *
 * On the launch, the rest of the kernel's skeleton (codegen/warp_specialise.c
 * builds it as written here):
 *
 *   nv.producer_regs, nv.consumer_regs   the registers each role keeps
 *                       (setmaxnreg): the producer gives up all it does not
 *                       need to issue copies.
 *   nv.barrier.NAME = id  the named barriers (bar.sync/bar.arrive ids; 0
 *                       is the whole block's): consumers (the consumer
 *                       warps alone), turn (ping-pong, one per consumer
 *                       warpgroup), sched_empty and sched_full (the tile
 *                       scheduler's slot, full one per warpgroup), warpgroup
 *                       (each warpgroup's own, for its slab of O's store).
 *   nv.scheduler = "dynamic", nv.section_tiles = S   (persistent launches)
 *                       the tiles go to the blocks as they become free, in
 *                       longest-first order over sections of S tiles (the
 *                       interpreter runs them in that order and checks that
 *                       it visits every tile once).
 *
 * and on each tile.dot of a ping-pong launch nv.turn = first, middle, last or
 * only: where the warpgroup's turn at the tensor cores starts (it waits on
 * its turn barrier before the dot) and ends (it passes the turn on after the
 * dot). The verifier checks the turns are well formed.
 */
#include "passes/passes.h"

#include <string.h>

static bool uses_any(const Op *op, const Map *vals) {
    for (int i = 0; i < op->noperands; i++)
        if (map_get(vals, op->operands[i]))
            return true;
    for (int r = 0; r < op->nregions; r++)
        for (int b = 0; b < op->regions[r].nblocks; b++)
            for (const Op *o = op->regions[r].blocks[b]->first; o; o = o->next)
                if (uses_any(o, vals))
                    return true;
    return false;
}

/* The ops the producer runs too: copies, loops, and scalar arithmetic and
 * elements read from memory. */
static bool producer_runs(const Op *op) {
    switch (op->kind) {
    case OP_CONSTANT: case OP_DIM: case OP_COPY_ASYNC: case OP_FOR: return true;
    default: break;
    }
    return (op_kind_has(op->kind, OPF_ELEMENTWISE) || op->kind == OP_GATHER) &&
           op->results[0]->type->kind != TY_TILE;
}

/* How many ops after wait w its stage stays in use. */
static int64_t free_after(Arena *a, const Op *w) {
    const Value *buf = token_buffer(w->operands[0]);
    int64_t k = 0, last = 0;
    Map readers;
    map_init(&readers, false);
    for (const Op *x = w->next; x && buf; x = x->next) {
        k++;
        if (x->kind == OP_WAIT && token_buffer(x->operands[0]) == buf)
            break;
        if ((x->kind == OP_LOAD && x->operands[0] == buf) || uses_any(x, &readers)) {
            last = k;
            for (int r = 0; r < x->nresults; r++)
                if (x->kind == OP_LOAD || x->kind == OP_TRANS)
                    map_put(a, &readers, x->results[r], (void *)1);
        }
    }
    return last;
}

static void mark(Arena *a, Block *blk, bool early) {
    for (Op *op = blk->first; op; op = op->next) {
        if (producer_runs(op))
            op_set_attr(a, op, "nv.producer", attr_bool(a, true));
        if (op->kind == OP_WAIT)
            op_set_attr(a, op, "nv.free_after", attr_int(a, early ? 0 : free_after(a, op)));
        for (int r = 0; r < op->nregions; r++)
            for (int b = 0; b < op->regions[r].nblocks; b++)
                mark(a, op->regions[r].blocks[b], early);
    }
}

/* ---- the launch's skeleton ---------------------------------------------------- */

/* Registers a producer warpgroup keeps after setmaxnreg.dec (it only
 * issues copies), and the most a thread may have. */
enum { PRODUCER_REGS = 24, MAX_REGS = 240 };

/* A persistent kernel's tile order (FlashAttention-3's longest-first): the
 * y tiles (heads) go in sections of max(1, SECTION_TILES / tiles_x), and a
 * section's tiles from the last x (under a causal mask the most keys) to
 * the first, each x over the section's heads, so the K/V that a section's
 * tiles read (SECTION_TILES row tiles' worth, 16 MB at head dim 128 for
 * 128-row tiles) stays in L2 while they do. */
enum { SECTION_TILES = 256 };

/* The named barriers: 0 is the whole block's; the consumers' own is 1; then
 * the ping-pong turns, the scheduler's slot and the warpgroups' own, each
 * range one id per consumer warpgroup (the slot's EMPTY one in all). */
static void name_barriers(Arena *a, Op *launch, int groups) {
    op_set_attr(a, launch, "nv.barrier.consumers", attr_int(a, 1));
    if (op_attr(launch, "nv.pingpong"))
        op_set_attr(a, launch, "nv.barrier.turn", attr_int(a, 2));
    if (op_attr(launch, "nv.persistent")) {
        op_set_attr(a, launch, "nv.barrier.sched_empty", attr_int(a, 2 + groups));
        op_set_attr(a, launch, "nv.barrier.sched_full", attr_int(a, 3 + groups));
    }
    op_set_attr(a, launch, "nv.barrier.warpgroup", attr_int(a, 3 + 2 * groups));
}

static void skeleton(Arena *a, Op *launch) {
    int64_t consumer_threads = 32 * op_attr(launch, "nv.warps")->i;
    int64_t producer_warps = op_attr(launch, "nv.producer_warps")->i;
    Attr *per_sm = op_attr(launch, "nv.blocks_per_sm");
    /* the consumers get what the producer gives up (of their block's share
     * of the register file), in multiples of 8 */
    int64_t regs = (65536 / (per_sm ? per_sm->i : 1) - 32 * producer_warps * PRODUCER_REGS) / consumer_threads / 8 * 8;
    op_set_attr(a, launch, "nv.producer_regs", attr_int(a, PRODUCER_REGS));
    op_set_attr(a, launch, "nv.consumer_regs", attr_int(a, regs < MAX_REGS ? regs : MAX_REGS));
    name_barriers(a, launch, (int)(consumer_threads / 128));
    if (op_attr(launch, "nv.persistent")) {
        op_set_attr(a, launch, "nv.scheduler", attr_str(a, "dynamic"));
        op_set_attr(a, launch, "nv.section_tiles", attr_int(a, SECTION_TILES));
    }
}

/* ---- ping-pong turns --------------------------------------------------------- */

/* A turn holds a run of dots: the dot after `dot` in its block shares its
 * turn when no op from `dot` on reads a dot's result (the turn never waits
 * for a dot) and none has regions. In softmax-overlap's loop that pairs
 * Q·Kᵀ(j) and P·V(j−1), FlashAttention-3's turn: one warpgroup issues both
 * while the other runs its softmax. */
static bool next_in_turn(const Op *dot) {
    for (const Op *op = dot->next; op; op = op->next) {
        if (op->nregions || op_reads_result_of(op, OP_DOT))
            return false;
        if (op->kind == OP_DOT)
            return true;
    }
    return false;
}

static void mark_turns(Arena *a, Block *blk) {
    bool open = false;   /* the previous dot's turn goes on */
    for (Op *op = blk->first; op; op = op->next) {
        for (int r = 0; r < op->nregions; r++)
            for (int b = 0; b < op->regions[r].nblocks; b++)
                mark_turns(a, op->regions[r].blocks[b]);
        if (op->kind != OP_DOT)
            continue;
        bool more = next_in_turn(op);
        op_set_attr(a, op, "nv.turn", attr_str(a, open ? (more ? "middle" : "last") : (more ? "first" : "only")));
        open = more;
    }
}

static bool walk(PassContext *ctx, Block *blk, bool early) {
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_LAUNCH) {
            if (op_attr(op, "nv.producer_warps")) {
                mark(ctx->arena, op->regions[0].blocks[0], early);
                skeleton(ctx->arena, op);
                if (op_attr(op, "nv.pingpong"))
                    mark_turns(ctx->arena, op->regions[0].blocks[0]);
            }
            continue;
        }
        for (int r = 0; r < op->nregions; r++)
            for (int b = 0; b < op->regions[r].nblocks; b++)
                walk(ctx, op->regions[r].blocks[b], early);
    }
    return true;
}

bool pass_warp_roles(Op *module, PassContext *ctx) { return walk(ctx, op_body(module), false); }

/* The broken twin: every stage freed right after its wait. */
bool pass_test_early_release(Op *module, PassContext *ctx) { return walk(ctx, op_body(module), true); }
