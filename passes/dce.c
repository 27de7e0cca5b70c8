/* dce.c — dead-code elimination.
 *
 *   %0 = arith.constant {value = 2.0} : f32      // never used
 *   %1 = arith.cast(%x) : tensor<f32[N]>          // used only by %2, unused
 *   %2 = math.exp(%1) : tensor<f32[N]>
 *   builtin.return(%y)
 * becomes
 *   builtin.return(%y)
 *
 * Requires: verified IR. Guarantees: every removed op was OPF_PURE and had
 * no remaining use; ops with regions are kept unless they are pure too.
 */
#include "passes/passes.h"

static void release_uses(Op *op, Map *uses, Arena *a) {
    for (int i = 0; i < op->noperands; i++) {
        intptr_t n = (intptr_t)map_get(uses, op->operands[i]);
        map_put(a, uses, op->operands[i], (void *)(n - 1));
    }
    for (int r = 0; r < op->nregions; r++)
        for (int b = 0; b < op->regions[r].nblocks; b++)
            for_each_op(inner, op->regions[r].blocks[b]) release_uses(inner, uses, a);
}

/* Walks each block backwards so a chain of dead ops goes in one sweep.
 * impure_too: the broken twin's mistake, ops with effects (stores) dropped
 * like unused pure ones. */
static void sweep(Op *op, Map *uses, Arena *a, bool impure_too) {
    for (int r = 0; r < op->nregions; r++)
        for (int bi = 0; bi < op->regions[r].nblocks; bi++)
            for (Op *x = op->regions[r].blocks[bi]->last, *prev; x; x = prev) {
                prev = x->prev;
                bool dead = ((op_info[x->kind].flags & OPF_PURE) && x->nresults > 0) ||
                            (impure_too && (x->kind == OP_STORE || x->kind == OP_ATOMIC_ADD));
                for (int i = 0; dead && i < x->nresults; i++)
                    dead = map_get(uses, x->results[i]) == NULL || (intptr_t)map_get(uses, x->results[i]) == 0;
                if (dead) {
                    release_uses(x, uses, a);
                    op_unlink(x);
                } else {
                    sweep(x, uses, a, impure_too);
                }
            }
}

static bool run(Op *module, PassContext *ctx, bool impure_too) {
    Map uses;
    map_init(&uses, false);
    count_uses(module, &uses, ctx->arena);
    sweep(module, &uses, ctx->arena, impure_too);
    return true;
}

bool pass_dce(Op *module, PassContext *ctx) { return run(module, ctx, false); }

/* The broken twin: stores have no results anyone uses, and it removes them. */
bool pass_test_dce_stores(Op *module, PassContext *ctx) { return run(module, ctx, true); }
