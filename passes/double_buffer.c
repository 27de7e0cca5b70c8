/* double_buffer.c — software pipelining of the loads in a kernel's loops:
 * the tiles of iteration it + S - 1 are copied asynchronously into a ring of
 * S shared-memory stages while iteration it computes on stage it % S.
 *
 *   tile.for(%lb, %ub, %step, ...) ({            %kb = tile.alloc : memref<f16[2, 64, 32], shared>
 *   ^bb0(%j, ...):                                %t0 = tile.copy_async(%K, %kb, %c0, ..., %lb, ...)
 *     %k = tile.load(%K, ..., %j, ...)     ==>    tile.for(%lb, %ub, %step, ..., %t0) ({
 *     ...                                         ^bb0(%j, ..., %t):
 *   })                                              tile.wait(%t)
 *                                                   %tn = tile.copy_async(%K, %kb, next stage, ..., %j + step, ...)
 *                                                   %k = tile.load(%kb, stage, 0, 0)
 *                                                   ... tile.yield(..., %tn)
 *
 * Loads qualify when they read a global memref at indices that are the loop
 * index, loop-invariant or constants, with zero padding. S (2 or more) is the block's
 * `stages` for the target, else 2. On sm_70 the GPU lowering realises this as
 * register prefetch, on sm_80 as cp.async, on sm_90a as a TMA ring.
 *
 * Requires: tile-level kernels. Guarantees: the same values; the interpreter
 * lands a copy only at a wait for it, so a missing wait or a wrong stage
 * gives wrong results. The twins `test-double-buffer-no-wait` and
 * `test-double-buffer-wrong-stage` make exactly those mistakes.
 */
#include "passes/builder.h"
#include "passes/passes.h"
#include "passes/target.h"

#include <string.h>

typedef enum Mistake { NONE, NO_WAIT, WRONG_STAGE } Mistake;

/* Is v defined outside `loop` (so loop-invariant)? */
static bool outside(const Value *v, const Op *loop) {
    const Block *blk = v->def ? v->def->parent : v->owner;
    for (; blk; blk = blk->parent && blk->parent->parent ? blk->parent->parent->parent : NULL)
        if (blk->parent && blk->parent->parent == loop)
            return false;
    return true;
}

static bool qualifies(const Op *load, const Op *loop, const Value *iv) {
    const Value *mem = load->operands[0];
    Attr *pad = op_attr(load, "pad");
    if (mem->type->kind != TY_MEMREF || mem->type->space != AS_GLOBAL || (pad && pad->f != 0))
        return false;
    bool uses_iv = false;
    for (int i = 1; i < load->noperands; i++) {
        const Value *x = load->operands[i];
        if (x == iv)
            uses_iv = true;
        else if (!outside(x, loop) && !(x->def && x->def->kind == OP_CONSTANT))
            return false;
    }
    return uses_iv;
}

/* A copy of `load`'s box, with the loop index replaced by `at`, into stage. */
static Value *copy(Builder *b, const Op *load, Value *buf, Value *stage, const Value *iv, Value *at) {
    int n = load->noperands - 1;
    Value **ops = NEW_ARRAY(b->a, Value *, n + 3);
    ops[0] = load->operands[0];
    ops[1] = buf;
    ops[2] = stage;
    for (int i = 0; i < n; i++) {
        Value *x = load->operands[1 + i];
        if (x == iv)
            x = at;
        else if (x->def && x->def->kind == OP_CONSTANT)   /* may live inside the loop */
            x = b_index(b, op_attr(x->def, "value")->i);
        ops[3 + i] = x;
    }
    Type *tok = NEW(b->a, Type);
    tok->kind = TY_TOKEN;
    Value *t = b_emit(b, OP_COPY_ASYNC, tok, n + 3, ops);
    op_set_attr(b->a, t->def, "dims", op_attr(load, "dims"));
    return t;
}

static void pipeline_loop(PassContext *ctx, Op *loop, int64_t S, Mistake mistake) {
    Block *body = loop->regions[0].blocks[0];
    Value *iv = body->args[0];
    PtrVec loads = {0};
    for_each_op(op, body)
        if (op->kind == OP_LOAD && qualifies(op, loop, iv))
            vec_push(ctx->arena, &loads, op);
    if (!loads.len)
        return;
    Arena *a = ctx->arena;
    int n = loads.len, ncarried = loop->noperands - 3;
    Builder pre = {a, NULL, loop, loop->loc};
    Value *lb = loop->operands[0], *step = loop->operands[2];
    /* buffers, and the prologue: iterations 0 .. S-2 */
    Value **bufs = NEW_ARRAY(a, Value *, n);
    Value **toks = NEW_ARRAY(a, Value *, n * (S - 1));
    for (int c = 0; c < n; c++) {
        Op *ld = loads.items[c];
        const Type *t = ld->results[0]->type;
        Dim *dims = NEW_ARRAY(a, Dim, t->rank + 1);
        dims[0] = (Dim){NULL, S};
        memcpy(dims + 1, t->dims, sizeof(Dim) * (size_t)t->rank);
        Type *bt = type_shaped(a, TY_MEMREF, t->elem, t->rank + 1, dims);
        bt->space = AS_SHARED;
        bufs[c] = b_emit(&pre, OP_ALLOC, bt, 0, NULL);
        for (int s = 0; s < S - 1; s++) {
            Value *at = b_bin(&pre, OP_ADD, lb, b_bin(&pre, OP_MUL, step, b_index(&pre, s)));
            toks[c * (S - 1) + s] = copy(&pre, ld, bufs[c], b_index(&pre, s), iv, at);
        }
    }
    /* the loop, carrying the tokens of the copies in flight */
    Value **ops = NEW_ARRAY(a, Value *, loop->noperands + n * (S - 1));
    memcpy(ops, loop->operands, sizeof(Value *) * (size_t)loop->noperands);
    memcpy(ops + loop->noperands, toks, sizeof(Value *) * (size_t)(n * (S - 1)));
    Type **types = NEW_ARRAY(a, Type *, ncarried + n * (S - 1) + 1);
    for (int i = 0; i < ncarried; i++)
        types[i] = loop->results[i]->type;
    for (int i = 0; i < n * (S - 1); i++)
        types[ncarried + i] = toks[i]->type;
    Op *nl = op_create(a, OP_FOR, loop->noperands + n * (S - 1), ops, ncarried + n * (S - 1), types, 1);
    nl->loc = loop->loc;
    nl->attrs = loop->attrs;
    nl->nattrs = loop->nattrs;
    op_insert_before(loop, nl);
    region_take(&nl->regions[0], &loop->regions[0]);
    Value **targ = NEW_ARRAY(a, Value *, n * (S - 1));
    for (int i = 0; i < n * (S - 1); i++)
        targ[i] = block_add_arg(a, body, toks[i]->type, NULL);
    /* each iteration waits for its stages and issues it + S - 1 right after
     * its first wait: every thread is then past the iteration that last read
     * the stage being refilled (it - 1), so the GPU lowering needs no
     * barrier of its own before the copies */
    Builder top = {a, NULL, body->first, loop->loc};
    Value *it = b_bin(&top, OP_FLOORDIV, b_bin(&top, OP_SUB, iv, lb), step);
    Value *stage = b_bin(&top, OP_REM, it, b_index(&top, S));
    Value *next_stage = b_bin(&top, OP_REM, b_bin(&top, OP_ADD, it, b_index(&top, S - 1)), b_index(&top, S));
    Value *ahead = b_bin(&top, OP_ADD, iv, b_bin(&top, OP_MUL, step, b_index(&top, S - 1)));
    Op *first_wait = NULL;
    for (int c = 0; c < n; c++) {
        Op *ld = loads.items[c];
        Builder at = {a, NULL, ld, ld->loc};
        if (mistake != NO_WAIT) {
            b_emit(&at, OP_WAIT, NULL, 1, &targ[c * (S - 1)]);
            if (!first_wait)
                first_wait = ld->prev;
        }
        /* the load now reads its stage of the buffer */
        int rank = ld->results[0]->type->rank;
        Value **lops = NEW_ARRAY(a, Value *, rank + 2);
        lops[0] = bufs[c];
        lops[1] = mistake == WRONG_STAGE ? next_stage : stage;
        Attr **dims = NEW_ARRAY(a, Attr *, rank);
        for (int i = 0; i < rank; i++) {
            lops[2 + i] = b_index(&at, 0);
            dims[i] = attr_int(a, 1 + i);
        }
        Value *nv = b_emit(&at, OP_LOAD, ld->results[0]->type, rank + 2, lops);
        op_set_attr(a, nv->def, "dims", attr_array(a, rank, dims));
        replace_all_uses(nl, ld->results[0], nv);
        op_unlink(ld);
    }
    /* (without waits, the broken twin: where the top's index math ends) */
    Builder issue = {a, NULL, first_wait ? first_wait->next : ahead->def->next, loop->loc};
    Value **fresh = NEW_ARRAY(a, Value *, n);
    for (int c = 0; c < n; c++)
        fresh[c] = copy(&issue, loads.items[c], bufs[c], next_stage, iv, ahead);
    /* yield: the carried values, then the tokens rotated */
    Op *y = body->last;
    Value **yops = NEW_ARRAY(a, Value *, ncarried + n * (S - 1));
    memcpy(yops, y->operands, sizeof(Value *) * (size_t)ncarried);
    for (int c = 0; c < n; c++) {
        for (int s = 0; s < S - 2; s++)
            yops[ncarried + c * (S - 1) + s] = targ[c * (S - 1) + s + 1];
        yops[ncarried + c * (S - 1) + S - 2] = fresh[c];
    }
    Op *ny = op_create(a, OP_TILE_YIELD, ncarried + n * (S - 1), yops, 0, NULL, 0);
    ny->loc = y->loc;
    op_insert_before(y, ny);
    op_unlink(y);
    Op *root = loop;
    while (root->parent && root->parent->parent && root->parent->parent->parent)
        root = root->parent->parent->parent;
    for (int i = 0; i < ncarried; i++)
        replace_all_uses(root, loop->results[i], nl->results[i]);
    op_unlink(loop);
}

static int64_t stages_for(const Op *func, const char *arch) {
    Attr *all = op_attr(func, "schedule");
    Attr *s = all && arch ? attrs_get(all->entries, all->n, arch) : NULL;
    Attr *st = s ? attrs_get(s->entries, s->n, "stages") : NULL;
    const Target *t = target_lookup(arch);
    return st && st->i >= 2 ? st->i : t ? t->stages : 2;
}

static bool run(Op *module, PassContext *ctx, Mistake mistake) {
    for_each_op(func, op_body(module)) {
        int64_t S = stages_for(func, ctx->arch);
        for_each_op(launch, op_body(func)) {
            if (launch->kind != OP_LAUNCH)
                continue;
            Block *body = launch->regions[0].blocks[0];
            for (Op *op = body->first, *next; op; op = next) {
                next = op->next;
                if (op->kind == OP_FOR)
                    pipeline_loop(ctx, op, S, mistake);
            }
        }
    }
    return true;
}

bool pass_double_buffer(Op *module, PassContext *ctx) { return run(module, ctx, NONE); }
bool pass_test_double_buffer_no_wait(Op *module, PassContext *ctx) { return run(module, ctx, NO_WAIT); }
bool pass_test_double_buffer_wrong_stage(Op *module, PassContext *ctx) { return run(module, ctx, WRONG_STAGE); }
