/* test_perturb.c — a deliberately wrong pass, for tests only: it scales every
 * float constant by 1.01. `attnc-opt -passes=test-perturb-constants
 * -interpret-check` must fail on any program whose result depends on one:
 * proof that the interpreter's check can fail.
 *
 *   %c = arith.constant {value = 0.125} : f32
 * becomes
 *   %c = arith.constant {value = 0.12625} : f32
 */
#include "passes/passes.h"

static void perturb(Op *op, Arena *a) {
    Attr *v = op->kind == OP_CONSTANT ? op_attr(op, "value") : NULL;
    if (v && v->kind == AT_FLOAT)
        op_set_attr(a, op, "value", attr_float(a, v->f * 1.01));
    for (int r = 0; r < op->nregions; r++)
        for (int b = 0; b < op->regions[r].nblocks; b++)
            for_each_op(inner, op->regions[r].blocks[b]) perturb(inner, a);
}

bool pass_test_perturb_constants(Op *module, PassContext *ctx) {
    perturb(module, ctx->arena);
    return true;
}

/* test-pending-plus-one: every tile.wait leaves one more cp.async copy in
 * flight than sm80-layout counted (an off-by-one in the group count). */
static void pending_plus_one(Op *op, Arena *a) {
    Attr *p = op->kind == OP_WAIT ? op_attr(op, "nv.pending") : NULL;
    if (p && p->kind == AT_INT)
        op_set_attr(a, op, "nv.pending", attr_int(a, p->i + 1));
    for (int r = 0; r < op->nregions; r++)
        for (int b = 0; b < op->regions[r].nblocks; b++)
            for_each_op(inner, op->regions[r].blocks[b]) pending_plus_one(inner, a);
}

bool pass_test_pending_plus_one(Op *module, PassContext *ctx) {
    pending_plus_one(module, ctx->arena);
    return true;
}

/* test-swap-waits: in every loop that waits on two tokens it carries (the K
 * and V copies), each wait names the other token. Waiting for the V copy
 * where the K copy is read is harmless where a wait lands every earlier
 * copy (cp.async groups), and wrong for TMA, whose wait lands its own
 * stage only: the twin that shows the interpreter keeps that difference. */
static void swap_waits(Op *op) {
    for (int r = 0; r < op->nregions; r++)
        for (int b = 0; b < op->regions[r].nblocks; b++) {
            Block *blk = op->regions[r].blocks[b];
            Op *waits[2];
            int n = 0;
            for_each_op(inner, blk) {
                if (op->kind == OP_FOR && inner->kind == OP_WAIT && !inner->operands[0]->def && n < 2)
                    waits[n++] = inner;
                swap_waits(inner);
            }
            if (n == 2 && waits[0]->operands[0] != waits[1]->operands[0]) {
                Value *t = waits[0]->operands[0];
                waits[0]->operands[0] = waits[1]->operands[0];
                waits[1]->operands[0] = t;
            }
        }
}

bool pass_test_swap_waits(Op *module, PassContext *ctx) {
    (void)ctx;
    swap_waits(module);
    return true;
}

/* test-backward-store-dq: the backward's dQ accumulation stores instead of
 * adding, so each key tile's contribution overwrites the one before: only
 * the last key tile's is kept (right when one key tile covers every key). */
static void store_dq(Op *op) {
    if (op->kind == OP_ATOMIC_ADD)
        op->kind = OP_STORE;
    for (int r = 0; r < op->nregions; r++)
        for (int b = 0; b < op->regions[r].nblocks; b++)
            for_each_op(inner, op->regions[r].blocks[b]) store_dq(inner);
}

bool pass_test_backward_store_dq(Op *module, PassContext *ctx) {
    (void)ctx;
    store_dq(module);
    return true;
}
