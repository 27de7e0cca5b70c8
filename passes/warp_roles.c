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

static bool walk(PassContext *ctx, Block *blk, bool early) {
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_LAUNCH) {
            if (op_attr(op, "nv.producer_warps"))
                mark(ctx->arena, op->regions[0].blocks[0], early);
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
