/* dot_hoist.c — sm_90a: a dot that needs nothing made after the dot before
 * it is issued right after that dot, so that the tensor cores run it
 * during the work between (FlashAttention-3's backward order). The
 * backward's query loop did
 *
 *   Sᵀ = K·Qᵀ;  Pᵀ = exp(Sᵀ − lse);  dV += Pᵀ·dO;  dPᵀ = V·dOᵀ;  dSᵀ = …
 *
 * and now does
 *
 *   Sᵀ = K·Qᵀ;  dPᵀ = V·dOᵀ;  Pᵀ = exp(Sᵀ − lse);  dV += Pᵀ·dO;  dSᵀ = …
 *
 * and the launch gets nv.overlap, so that the code generator waits for
 * each dot at the first op that needs its result (codegen/sm90a.c): the
 * exponentials wait for Sᵀ with dPᵀ still running (wgmma.wait_group 1),
 * dSᵀ waits for dPᵀ with dV's dot running.
 *
 * A dot moves with the views it reads (tile.trans without a scratch copy,
 * constants) when every other operand is made before the dot it follows:
 * outside the loop, or above it in the block. Loads, waits and copies stay
 * where they are: the dot reads its shared-memory operands at its new
 * place, where they are already loaded. A dot that reads a scratch tile
 * written in its own loop body stays: the next iteration rewrites it. Dots that take part in a ping-pong
 * turn (nv.turn) stay, and so does every dot of a launch softmax-overlap
 * rotated: its order is that pass's.
 *
 * Runs on sm_90a's target IR (after softmax-overlap), on the launches
 * whose schedule.overlap is 1: the schedule's overlap(1), and by default
 * the backward's key-tile kernel (tiling_backward.c records the target's
 * bwd_overlap there; overlap(0) turns it off). On the H100 it made the
 * backward 3 % faster over the quick protocol with no row slower
 * (bench/results/2026-12-06-h100/NOTES.md, item 3), although at head dim
 * 128 ptxas spills a little more with it. Guarantees: the same values
 * (each dot reads what it read before; the interpreter checks it with
 * --check-each-pass).
 */
#include "passes/passes.h"

#include <string.h>

/* Is v made before `at` in at's block, or outside the block? */
static bool made_before(const Value *v, const Op *at) {
    const Op *d = v->def;
    if (!d || d->parent != at->parent)
        return true;
    for (const Op *op = at; op; op = op->prev)
        if (op == d)
            return true;
    return false;
}

/* Is v a scratch copy made in dot's block? A dot in flight must not read
 * a scratch tile the next iteration rewrites: such dots stay. */
static bool written_here(const Value *v, const Op *dot) {
    const Op *d = v->def;
    return d && d->parent == dot->parent && op_attr(d, "nv.operand") &&
           strcmp(op_attr(d, "nv.operand")->s, "scratch") == 0;
}

/* A pure view the dot may take along: a transpose read in place (no
 * scratch copy) or a constant. */
static bool movable_view(const Op *op) {
    return (op->kind == OP_TRANS && !op_attr(op, "nv.operand")) || op->kind == OP_CONSTANT;
}

/* May dot be issued right after `at`: is each operand made before it, or a
 * movable view of values that are? */
static bool ready_after(const Op *dot, const Op *at) {
    for (int i = 0; i < dot->noperands; i++) {
        const Value *v = dot->operands[i];
        if (written_here(v, dot))
            return false;
        if (made_before(v, at))
            continue;
        const Op *d = v->def;
        if (!movable_view(d))
            return false;
        if (d->noperands && written_here(d->operands[0], dot))
            return false;
        for (int k = 0; k < d->noperands; k++)
            if (!made_before(d->operands[k], at))
                return false;
    }
    return true;
}

/* Moves dot (and the views it reads that are below `at`) to right after at. */
static void hoist(Op *dot, Op *at) {
    Op *before = at->next;
    for (int i = 0; i < dot->noperands; i++) {
        Op *d = dot->operands[i]->def;
        if (!made_before(dot->operands[i], at)) {
            op_unlink(d);
            op_insert_before(before, d);
        }
    }
    op_unlink(dot);
    op_insert_before(before, dot);
}

/* Hoists in blk and the blocks nested in it; true if a dot moved. */
static bool hoist_block(Block *blk) {
    bool moved = false;
    for (Op *op = blk->first; op; op = op->next) {
        for (int r = 0; r < op->nregions; r++)
            for (int b = 0; b < op->regions[r].nblocks; b++)
                moved |= hoist_block(op->regions[r].blocks[b]);
        if (op->kind != OP_DOT || op_attr(op, "nv.turn") || !op->next || op->next->kind == OP_DOT)
            continue;
        for (Op *later = op->next; later; later = later->next) {
            if (later->kind != OP_DOT || op_attr(later, "nv.turn"))
                continue;
            if (!ready_after(later, op))
                continue;
            hoist(later, op);
            moved = true;
            break;
        }
    }
    return moved;
}

bool pass_dot_hoist(Op *module, PassContext *ctx) {
    for_each_op(func, op_body(module))
        for_each_op(launch, op_body(func)) {
            if (launch->kind != OP_LAUNCH || op_attr(launch, "nv.overlap"))
                continue;
            /* where the schedule (or the backward's default) asks */
            Attr *on = op_attr(launch, "schedule.overlap");
            if (!on || !on->i)
                continue;
            if (hoist_block(launch->regions[0].blocks[0]))
                op_set_attr(ctx->arena, launch, "nv.overlap", attr_int(ctx->arena, 1));
        }
    return true;
}
