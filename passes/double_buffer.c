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
 * index, loop-invariant or constants, with zero padding: of 16-bit tiles,
 * and where the target copies them (sm_90a's TMA) of f32 whole rows. S (2 or more) is the block's
 * `stages` for the target, else 2. On sm_70 the GPU lowering realises this as
 * register prefetch, on sm_80 as cp.async, on sm_90a as a TMA ring.
 *
 * Requires: tile-level kernels. Guarantees: the same values; the interpreter
 * lands a copy only at a wait for it, so a missing wait or a wrong stage
 * gives wrong results. The twins `test-double-buffer-no-wait` and
 * `test-double-buffer-wrong-stage` make exactly those mistakes.
 */
#include "ir/builder.h"
#include "passes/passes.h"
#include "target/schedule.h"
#include "target/target.h"

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

/* Whether x is computed from iv inside `loop` by pure scalar ops whose
 * other inputs are outside it or constants: a paged cache's page,
 * table[b, j // page_size], and row, j % page_size. */
static bool from_iv(const Value *x, const Op *loop, const Value *iv, int depth) {
    if (x == iv)
        return true;
    const Op *d = x->def;
    if (!d || depth > 8 || x->type->kind != TY_SCALAR || !(op_info[d->kind].flags & OPF_PURE) || d->nregions)
        return false;
    bool uses = false;
    for (int i = 0; i < d->noperands; i++) {
        const Value *y = d->operands[i];
        if (from_iv(y, loop, iv, depth + 1))
            uses = true;
        else if (!outside(y, loop) && !(y->def && y->def->kind == OP_CONSTANT))
            return false;
    }
    return uses;
}

/* x (an index of a load) at iteration `at`: from_iv's ops again, with at
 * for iv, built at b; x itself where the loop does not compute it. */
static Value *index_at(Builder *b, Value *x, const Op *loop, const Value *iv, Value *at) {
    if (x == iv)
        return at;
    if (x->def && x->def->kind == OP_CONSTANT && x->type->elem == SK_INDEX)   /* may live inside the loop */
        return b_index(b, op_attr(x->def, "value")->i);
    if (outside(x, loop))
        return x;
    const Op *d = x->def;
    Value **ops = NEW_ARRAY(b->a, Value *, d->noperands + 1);
    for (int i = 0; i < d->noperands; i++)
        ops[i] = index_at(b, d->operands[i], loop, iv, at);
    Value *r = b_emit(b, d->kind, x->type, d->noperands, ops);
    r->def->attrs = d->attrs;
    r->def->nattrs = d->nattrs;
    return r;
}

/* Whether `load` (of tile type t from mem) reads one whole row of a
 * static length: the backward's lse and D, a row of [B, H, QT, BM] per
 * query tile (tiling_backward.c), which TMA copies whatever Nq is. */
static bool whole_row(const Op *load, const Type *mem, const Type *t) {
    Attr *dims = op_attr(load, "dims");
    int inner = mem->rank - 1;
    return t->rank == 2 && !t->dims[0].sym && t->dims[0].size == 1 && dims && dims->n == 2 &&
           dims->elems[1]->i == inner && !mem->dims[inner].sym && mem->dims[inner].size == t->dims[1].size &&
           dims->elems[0]->i >= 0 && dims->elems[0]->i < inner;
}

static bool qualifies(const Op *load, const Op *loop, const Value *iv, bool f32_rows) {
    const Value *mem = load->operands[0];
    Attr *pad = op_attr(load, "pad");
    if (mem->type->kind != TY_MEMREF || mem->type->space != AS_GLOBAL || (pad && pad->f != 0))
        return false;
    /* the copies every target makes are of 16-bit boxes; f32 whole rows
     * where the target copies them (target.h copies_f32_rows; elsewhere
     * the backward's lse and D stay loads) */
    const Type *t = load->results[0]->type;
    ScalarKind k = t->elem;
    if (k != SK_F16 && k != SK_BF16 && !(k == SK_F32 && f32_rows && whole_row(load, mem->type, t)))
        return false;
    bool uses_iv = false;
    for (int i = 1; i < load->noperands; i++) {
        const Value *x = load->operands[i];
        if (from_iv(x, loop, iv, 0))
            uses_iv = true;
        else if (!outside(x, loop) && !(x->def && x->def->kind == OP_CONSTANT))
            return false;
    }
    return uses_iv;
}

/* Does any op of [first, end) use a result of `def`? */
static bool uses_result_of(const Op *first, const Op *end, const Op *def) {
    for (const Op *o = first; o != end; o = o->next)
        for (int i = 0; i < o->noperands; i++)
            if (o->operands[i]->def == def)
                return true;
    return false;
}

/* The prologue [first, end) moves up past the loads and pure ops before it
 * that it does not depend on: the first K/V copies are then in flight while
 * the kernel loads Q (a synchronous load the copies would otherwise wait
 * behind). They write only their new buffers, so no load they pass can see
 * the difference. */
static void hoist_prologue(Op *first, Op *end) {
    Op *pos = first;
    while (pos->prev && (pos->prev->kind == OP_LOAD || (op_info[pos->prev->kind].flags & OPF_PURE)) &&
           !uses_result_of(first, end, pos->prev))
        pos = pos->prev;
    if (pos == first)
        return;
    for (Op *o = first, *next; o != end; o = next) {
        next = o->next;
        op_unlink(o);
        op_insert_before(pos, o);
    }
}

/* A copy of `load`'s box, with the loop index replaced by `at`, into stage. */
static Value *copy(Builder *b, const Op *load, Value *buf, Value *stage, const Value *iv, Value *at) {
    int n = load->noperands - 1;
    Value **ops = NEW_ARRAY(b->a, Value *, n + 3);
    ops[0] = load->operands[0];
    ops[1] = buf;
    ops[2] = stage;
    const Op *loop = iv->owner->parent->parent;
    for (int i = 0; i < n; i++)
        ops[3 + i] = index_at(b, load->operands[1 + i], loop, iv, at);
    Type *tok = NEW(b->a, Type);
    tok->kind = TY_TOKEN;
    Value *t = b_emit(b, OP_COPY_ASYNC, tok, n + 3, ops);
    op_set_attr(b->a, t->def, "dims", op_attr(load, "dims"));
    return t;
}

/* A pipelined loop, for the next segment of its chain (tiling splits a key
 * loop into segments: masked edge, interior, masked edge, each starting
 * where the one before ends). */
typedef struct Chain {
    Op *loop;              /* the pipelined loop */
    Value *iv_base;        /* the start its stages count from (the chain's) */
    Value *ub, *step;
    PtrVec loads;          /* the original loads (unlinked) */
    Value **bufs;
    int ncarried;
    Op **fresh;            /* its copies of iteration it + S - 1 (one per load) */
    Value *ahead;          /* their index: iv + step·(S - 1) */
    Op **first;            /* the copies before its first loop, of iterations 0 .. S - 2 */
    Value **first_at;      /* their indices */
    int nfirst;
} Chain;

/* Whether v is a constant index, c: a constant, or sums and products of
 * them (the prologue's lb + step·s). */
static bool index_constant(const Value *v, int64_t *c) {
    const Op *d = v->def;
    int64_t x, y;
    if (!d)
        return false;
    if (d->kind == OP_CONSTANT) {
        Attr *a = op_attr(d, "value");
        *c = a && a->kind == AT_INT ? a->i : 0;
        return a && a->kind == AT_INT;
    }
    if ((d->kind != OP_ADD && d->kind != OP_MUL) || !index_constant(d->operands[0], &x) ||
        !index_constant(d->operands[1], &y))
        return false;
    *c = d->kind == OP_ADD ? x + y : x * y;
    return true;
}

/* Guards cp, a copy of the tile at index `at`, by at < end: otherwise its
 * row index is the memref's dim, past the tensor's end, where no target
 * fetches anything. Its row index is `at` itself, or (a paged cache's row
 * in its page) computed from it. Past the end nobody reads the tile: only
 * the kernel's drain before it returns would wait for it. */
static bool needs_guard(const Op *cp, Value *at, Value *end, const Op *loop) {
    const Value *x = cp->operands[3 + op_attr(cp, "dims")->elems[0]->i];
    int64_t ca, ce;
    return (x == at || from_iv(x, loop, at, 0)) && !(index_constant(at, &ca) && index_constant(end, &ce) && ca < ce);
}

static void guard_copy(Arena *a, Op *cp, Value *at, Value *end, const Op *loop) {
    int row = (int)op_attr(cp, "dims")->elems[0]->i;
    Value *x = cp->operands[3 + row];
    if (!needs_guard(cp, at, end, loop))
        return;
    Builder b = {a, NULL, cp, cp->loc};
    cp->operands[3 + row] = b_select(&b, b_cmp(&b, "lt", at, end), x, b_dim(&b, cp->operands[0]->type->dims[row]));
}

/* The chain's first copies, before its first loop, guarded by its end
 * (a chain with fewer tiles than S - 1: none at all in a split past the
 * keys a window leaves, or a paged batch of length 0), as end_chain
 * guards its last copies. Where the end is
 * computed after them (hoist_prologue moved them up), they move down to
 * it, in their order, still before the loop. */
static void guard_first(Arena *a, Chain *chain) {
    bool any = false;
    for (int c = 0; c < chain->nfirst; c++)
        any |= needs_guard(chain->first[c], chain->first_at[c], chain->ub, chain->loop);
    if (!any)
        return;
    Op *first = chain->first[0];
    const Op *end = chain->ub->def;
    if (end && end->parent == first->parent) {
        bool before = false, after = false;
        for (const Op *o = first->parent->first; o != first; o = o->next)
            before |= o == end;
        for (const Op *o = first->next; !before && !after && o && o->kind != OP_FOR; o = o->next)
            after = o == end;
        if (!before && !after)
            return;   /* (defined past the loop: never, as the loop's bound) */
        if (after) {   /* in their order in the block (stage by stage), after the end */
            Op *at = end->next;
            for (Op *o = first->parent->first, *next; o != end; o = next) {
                next = o->next;
                for (int c = 0; c < chain->nfirst; c++)
                    if (o == chain->first[c]) {
                        op_unlink(o);
                        op_insert_before(at, o);
                    }
            }
        }
    }
    for (int c = 0; c < chain->nfirst; c++)
        guard_copy(a, chain->first[c], chain->first_at[c], chain->ub, chain->loop);
}

/* The chain ends with its last loop: the copies that loop issues at
 * iv + step·(S - 1) >= ub fetch tiles nobody reads (in a causal row, the
 * tiles past the diagonal: a tenth to a third of a short row's K/V). Their
 * index becomes the dim's size instead, past the tensor's end, which every
 * target fetches nothing for (a TMA box past the end is not issued, cp.async
 * loads only elements inside). Only where copies are asynchronous: with
 * register prefetch (sm_70) the select cost the sliding-window kernel a
 * spill, for one tile a row. */
static void end_chain(PassContext *ctx, Chain *chain, bool async) {
    if (!async || !chain->loop)   /* (a chain with a loop has its fresh copies) */
        return;
    guard_first(ctx->arena, chain);
    for (int c = 0; c < chain->loads.len; c++) {
        Op *cp = chain->fresh[c];
        const Type *mt = cp->operands[0]->type;
        int row = (int)op_attr(cp, "dims")->elems[0]->i;
        for (int i = 3; i < cp->noperands; i++) {
            /* the index itself, or (a paged cache's) row computed from it */
            if (cp->operands[i] != chain->ahead &&
                !(i - 3 == row && from_iv(cp->operands[i], chain->loop, chain->ahead, 0)))
                continue;
            Builder b = {ctx->arena, NULL, cp, cp->loc};
            Value *inside = b_cmp(&b, "lt", chain->ahead, chain->ub);
            cp->operands[i] = b_select(&b, inside, cp->operands[i], b_dim(&b, mt->dims[i - 3]));
        }
    }
    chain->loop = NULL;
}

static bool same_dims(const Attr *x, const Attr *y) {
    if (!x || !y || x->kind != AT_ARRAY || y->kind != AT_ARRAY || x->n != y->n)
        return x == y;
    for (int i = 0; i < x->n; i++)
        if (x->elems[i]->i != y->elems[i]->i)
            return false;
    return true;
}

/* The same value, or equal constants (cse has not run yet). */
static bool same_value(const Value *x, const Value *y) {
    if (x == y)
        return true;
    if (!x->def || !y->def || x->def->kind != OP_CONSTANT || y->def->kind != OP_CONSTANT ||
        !type_equal(x->type, y->type))
        return false;
    Attr *a = op_attr(x->def, "value"), *b = op_attr(y->def, "value");
    return a && b && a->kind == b->kind && (a->kind == AT_INT ? a->i == b->i : a->kind == AT_FLOAT && a->f == b->f);
}

/* The same index of each loop's own index: equal values, the loop
 * indices themselves, or the same pure scalar ops of such (a paged cache's
 * page and row, a packed sequence's first key + j). */
static bool same_index(const Value *x, const Value *aiv, const Value *y, const Value *biv, int depth) {
    if (same_value(x, y) || (x == aiv && y == biv))
        return true;
    const Op *dx = x->def, *dy = y->def;
    if (!dx || !dy || depth > 8 || dx->kind != dy->kind || dx->noperands != dy->noperands || dx->nregions ||
        x->type->kind != TY_SCALAR || !type_equal(x->type, y->type) || !(op_info[dx->kind].flags & OPF_PURE) ||
        (dx->kind != OP_GATHER && !(op_info[dx->kind].flags & OPF_ELEMENTWISE)))
        return false;
    Attr *px = op_attr(dx, "pred"), *py = op_attr(dy, "pred");
    if ((px || py) && (!px || !py || strcmp(px->s, py->s) != 0))
        return false;
    for (int i = 0; i < dx->noperands; i++)
        if (!same_index(dx->operands[i], aiv, dy->operands[i], biv, depth + 1))
            return false;
    return true;
}

/* Do two loops' loads read the same boxes, each at its own loop index? */
static bool same_loads(const PtrVec *a, const Value *aiv, const PtrVec *b, const Value *biv) {
    if (a->len != b->len)
        return false;
    for (int c = 0; c < a->len; c++) {
        const Op *x = a->items[c], *y = b->items[c];
        if (x->noperands != y->noperands || !type_equal(x->results[0]->type, y->results[0]->type) ||
            !same_dims(op_attr(x, "dims"), op_attr(y, "dims")))
            return false;
        for (int i = 0; i < x->noperands; i++)
            if (!same_index(x->operands[i], aiv, y->operands[i], biv, 0))
                return false;
    }
    return true;
}

/* Whether a loop body only loads tiles and multiplies them: loads, dots,
 * waits and index arithmetic (a GEMM's K loop). */
static bool only_products(const Block *body) {
    for_each_op(op, body)
        if (op->kind != OP_LOAD && op->kind != OP_DOT && op->kind != OP_WAIT && op->kind != OP_TILE_YIELD &&
            !op_is_scalar_math(op))
            return false;
    return true;
}

/* What the steps of pipeline_loop share: the loop and its S-stage
 * pipeline of n loads (their buffers, the tokens of the copies in flight
 * before the loop, toks, and in its body, targ: S - 1 per load). */
typedef struct Pipeline {
    Arena *a;
    Op *loop, *nl;      /* the loop, and the one that replaces it */
    Block *body;
    Value *iv, *lb, *step, *iv_base;
    PtrVec loads;
    int n, ncarried;
    int64_t S;
    Value **bufs, **toks, **targ;
    Value **at;         /* the prologue's copies' indices, as toks */
} Pipeline;

/* The buffers and the copies issued before the loop (its first S - 1
 * iterations' tiles), hoisted above what they need not wait for; or, for
 * the next segment of a chain, the chain's buffers and copies in flight. */
static void prologue(Pipeline *pl, Chain *chain, bool continues) {
    Arena *a = pl->a;
    int n = pl->n;
    int64_t S = pl->S;
    Builder pre = {a, NULL, pl->loop, pl->loop->loc};
    Op *before_prologue = pl->loop->prev;
    pl->bufs = NEW_ARRAY(a, Value *, n);
    pl->toks = NEW_ARRAY(a, Value *, n * (S - 1));
    pl->at = NEW_ARRAY(a, Value *, n * (S - 1));
    if (continues) {
        pl->iv_base = chain->iv_base;
        memcpy(pl->bufs, chain->bufs, sizeof(Value *) * (size_t)n);
        for (int i = 0; i < n * (S - 1); i++)
            pl->toks[i] = chain->loop->results[chain->ncarried + i];
        return;
    }
    for (int c = 0; c < n; c++) {
        Op *ld = pl->loads.items[c];
        const Type *t = ld->results[0]->type;
        Dim *dims = NEW_ARRAY(a, Dim, t->rank + 1);
        dims[0] = (Dim){NULL, S};
        memcpy(dims + 1, t->dims, sizeof(Dim) * (size_t)t->rank);
        Type *bt = type_shaped(a, TY_MEMREF, t->elem, t->rank + 1, dims);
        bt->space = AS_SHARED;
        pl->bufs[c] = b_emit(&pre, OP_ALLOC, bt, 0, NULL);
        pl->toks[c * (S - 1)] = copy(&pre, ld, pl->bufs[c], b_index(&pre, 0), pl->iv, pl->lb);
        pl->at[c * (S - 1)] = pl->lb;
    }
    /* the later stages stage by stage, as the loop issues them: a wait then
     * leaves as many younger copies in flight in the first iteration as in
     * the others (nv.pending takes the fewer; tensor by tensor, the first
     * iteration's last tile had only its own later stages after it, and a
     * GEMM's combined wait at 3 stages waited for the next K step too) */
    for (int s = 1; s < S - 1; s++) {
        Value *at = b_bin(&pre, OP_ADD, pl->lb, b_bin(&pre, OP_MUL, pl->step, b_index(&pre, s)));
        for (int c = 0; c < n; c++) {
            pl->toks[c * (S - 1) + s] = copy(&pre, pl->loads.items[c], pl->bufs[c], b_index(&pre, s), pl->iv, at);
            pl->at[c * (S - 1) + s] = at;
        }
    }
    hoist_prologue(before_prologue ? before_prologue->next : pl->loop->parent->first, pl->loop);
}

/* The new loop, carrying the tokens of the copies in flight (its body the
 * old loop's, with a block argument per token). */
static void carry_tokens(Pipeline *pl) {
    Arena *a = pl->a;
    Op *loop = pl->loop;
    int nt = pl->n * (int)(pl->S - 1);
    Value **ops = NEW_ARRAY(a, Value *, loop->noperands + nt);
    memcpy(ops, loop->operands, sizeof(Value *) * (size_t)loop->noperands);
    memcpy(ops + loop->noperands, pl->toks, sizeof(Value *) * (size_t)nt);
    Type **types = NEW_ARRAY(a, Type *, pl->ncarried + nt + 1);
    for (int i = 0; i < pl->ncarried; i++)
        types[i] = loop->results[i]->type;
    for (int i = 0; i < nt; i++)
        types[pl->ncarried + i] = pl->toks[i]->type;
    Op *nl = pl->nl = op_create(a, OP_FOR, loop->noperands + nt, ops, pl->ncarried + nt, types, 1);
    nl->loc = loop->loc;
    nl->attrs = loop->attrs;
    nl->nattrs = loop->nattrs;
    op_insert_before(loop, nl);
    region_take(&nl->regions[0], &loop->regions[0]);
    pl->targ = NEW_ARRAY(a, Value *, nt);
    for (int i = 0; i < nt; i++)
        pl->targ[i] = block_add_arg(a, pl->body, pl->toks[i]->type, NULL);
}

/* Each load waits for its stage and reads it from its buffer; returns the
 * first wait (NULL for the twin without waits). */
static Op *read_stages(Pipeline *pl, Mistake mistake, Value *stage, Value *next_stage) {
    Arena *a = pl->a;
    Op *first_wait = NULL;
    for (int c = 0; c < pl->n; c++) {
        Op *ld = pl->loads.items[c];
        Builder at = {a, NULL, ld, ld->loc};
        if (mistake != NO_WAIT) {
            b_emit(&at, OP_WAIT, NULL, 1, &pl->targ[c * (pl->S - 1)]);
            if (!first_wait)
                first_wait = ld->prev;
        }
        /* the load now reads its stage of the buffer */
        int rank = ld->results[0]->type->rank;
        Value **lops = NEW_ARRAY(a, Value *, rank + 2);
        lops[0] = pl->bufs[c];
        lops[1] = mistake == WRONG_STAGE ? next_stage : stage;
        Attr **dims = NEW_ARRAY(a, Attr *, rank);
        for (int i = 0; i < rank; i++) {
            lops[2 + i] = b_index(&at, 0);
            dims[i] = attr_int(a, 1 + i);
        }
        Value *nv = b_emit(&at, OP_LOAD, ld->results[0]->type, rank + 2, lops);
        op_set_attr(a, nv->def, "dims", attr_array(a, rank, dims));
        replace_all_uses(pl->nl, ld->results[0], nv);
        op_unlink(ld);
    }
    return first_wait;
}

/* In a loop that only multiplies tiles (a GEMM's K loop) all of its
 * waits move up to the first: the tiles of an iteration were issued
 * together and land together, and one barrier a K step then makes them
 * all visible, where a wait before each product took one barrier each
 * (CUTLASS's multistage loop waits once a K step too). Not where other
 * work comes between the products, as the softmax between attention's
 * Q·Kᵀ and P·V, which a later wait overlaps with V's copy. Only where
 * waits end in barriers (target.h gemm_waits_together: cp.async; sm_70's
 * waits store its prefetched registers, sm_90a's TMA waits are
 * mbarriers, and its MLP ran 4-5 % slower so, bench/results/2026-12-03-h200/NOTES.md).
 * Returns the last wait. */
static Op *waits_at_first(Block *body, Op *first_wait) {
    Op *last_wait = first_wait;
    for (Op *op = first_wait->next, *next; op; op = next) {
        next = op->next;
        if (op->kind != OP_WAIT)
            continue;
        op_unlink(op);
        op_insert_before(last_wait->next, op);
        last_wait = op;
    }
    return last_wait;
}

/* The yield: the carried values, then the tokens rotated (the copies
 * issued this iteration, fresh, go last). */
static void rotate_yield(Pipeline *pl, Value **fresh) {
    Op *y = pl->body->last;
    int ncarried = pl->ncarried;
    int64_t S = pl->S;
    Value **yops = NEW_ARRAY(pl->a, Value *, ncarried + pl->n * (S - 1));
    memcpy(yops, y->operands, sizeof(Value *) * (size_t)ncarried);
    for (int c = 0; c < pl->n; c++) {
        for (int s = 0; s < S - 2; s++)
            yops[ncarried + c * (S - 1) + s] = pl->targ[c * (S - 1) + s + 1];
        yops[ncarried + c * (S - 1) + S - 2] = fresh[c];
    }
    Op *ny = op_create(pl->a, OP_TILE_YIELD, ncarried + pl->n * (int)(S - 1), yops, 0, NULL, 0);
    ny->loc = y->loc;
    op_insert_before(y, ny);
    op_unlink(y);
}

/* The old loop's results are the new one's. They are used inside its
 * launch only (launches are isolated): walking the whole module per loop
 * made the pass quadratic in the number of blocks. */
static void replace_loop(Pipeline *pl) {
    Op *root = pl->loop;
    while (!(op_info[root->kind].flags & OPF_ISOLATED) && root->parent && root->parent->parent &&
           root->parent->parent->parent)
        root = root->parent->parent->parent;
    for (int i = 0; i < pl->ncarried; i++)
        replace_all_uses(root, pl->loop->results[i], pl->nl->results[i]);
    op_unlink(pl->loop);
}

static void pipeline_loop(PassContext *ctx, Op *loop, int64_t S, Mistake mistake, Chain *chain, const Target *target) {
    bool async = target && target->async_copies, waits_together = target && target->gemm_waits_together;
    Block *body = loop->regions[0].blocks[0];
    Value *iv = body->args[0];
    PtrVec loads = {0};
    for_each_op(op, body)
        if (op->kind == OP_LOAD && qualifies(op, loop, iv, target && target->copies_f32_rows))
            vec_push(ctx->arena, &loads, op);
    if (!loads.len)
        return;
    Arena *a = ctx->arena;
    Pipeline pl = {a, loop, NULL, body, iv, loop->operands[0], loop->operands[2], loop->operands[0], loads,
                   loads.len, loop->noperands - 3, S, NULL, NULL, NULL, NULL};
    /* The next segment of a chain takes over the buffers and the copies in
     * flight of the segment before: that one's last iterations already
     * fetched this one's first tiles (at its index + step·(S - 1)), so the
     * pipeline runs on across segments instead of draining and refilling
     * (a bubble of one load per segment, a tenth of a short causal row).
     * Its stages keep counting from the chain's start. Only where copies in
     * flight hold no registers (target.h async_copies). */
    bool continues = async && chain->loop && chain->ub == pl.lb && same_value(chain->step, pl.step) &&
                     same_loads(&chain->loads, chain->loop->regions[0].blocks[0]->args[0], &loads, iv);
    if (!continues)
        end_chain(ctx, chain, async);
    prologue(&pl, chain, continues);
    carry_tokens(&pl);
    /* each iteration waits for its stages and issues it + S - 1 right after
     * its first wait: every thread is then past the iteration that last read
     * the stage being refilled (it - 1), so the GPU lowering needs no
     * barrier of its own before the copies */
    Builder top = {a, NULL, body->first, loop->loc};
    Value *it = b_bin(&top, OP_FLOORDIV, b_bin(&top, OP_SUB, iv, pl.iv_base), pl.step);
    Value *stage = b_bin(&top, OP_REM, it, b_index(&top, S));
    Value *next_stage = b_bin(&top, OP_REM, b_bin(&top, OP_ADD, it, b_index(&top, S - 1)), b_index(&top, S));
    Value *ahead = b_bin(&top, OP_ADD, iv, b_bin(&top, OP_MUL, pl.step, b_index(&top, S - 1)));
    Op *first_wait = read_stages(&pl, mistake, stage, next_stage);
    Op *last_wait = waits_together && first_wait && only_products(body) ? waits_at_first(body, first_wait)
                                                                        : first_wait;
    /* (without waits, the broken twin: where the top's index math ends) */
    Builder issue = {a, NULL, last_wait ? last_wait->next : ahead->def->next, loop->loc};
    Value **fresh = NEW_ARRAY(a, Value *, pl.n);
    for (int c = 0; c < pl.n; c++)
        fresh[c] = copy(&issue, loads.items[c], pl.bufs[c], next_stage, iv, ahead);
    rotate_yield(&pl, fresh);
    replace_loop(&pl);
    Op **fresh_ops = NEW_ARRAY(a, Op *, pl.n);
    for (int c = 0; c < pl.n; c++)
        fresh_ops[c] = fresh[c]->def;
    Op **first = chain->first;
    Value **first_at = chain->first_at;
    int nfirst = chain->nfirst;
    if (!continues) {   /* this loop's prologue starts the chain */
        nfirst = pl.n * (int)(S - 1);
        first = NEW_ARRAY(a, Op *, nfirst);
        for (int i = 0; i < nfirst; i++)
            first[i] = pl.toks[i]->def;
        first_at = pl.at;
    }
    *chain = (Chain){pl.nl, pl.iv_base, pl.nl->operands[1], pl.step, loads, pl.bufs, pl.ncarried, fresh_ops, ahead,
                     first, first_at, nfirst};
}

static int64_t stages_for(const Op *func, const char *arch) {
    Attr *st = schedule_directive(func, arch, SCHED_STAGES);
    const Target *t = target_lookup(arch);
    return st && st->i >= 2 ? st->i : t ? t->stages : 2;
}

static bool run(Op *module, PassContext *ctx, Mistake mistake) {
    for_each_op(func, op_body(module)) {
        int64_t S = stages_for(func, ctx->arch);
        /* with register prefetch (sm_70) the tiles in flight are registers:
         * carried from one segment into the next they made sm_70 spill */
        const Target *target = target_lookup(ctx->arch);
        for_each_op(launch, op_body(func)) {
            if (launch->kind != OP_LAUNCH)
                continue;
            Block *body = launch->regions[0].blocks[0];
            Chain chain = {0};
            for (Op *op = body->first, *next; op; op = next) {
                next = op->next;
                if (op->kind == OP_FOR)
                    pipeline_loop(ctx, op, S, mistake, &chain, target);
            }
            end_chain(ctx, &chain, target && target->async_copies);
        }
    }
    return true;
}

bool pass_double_buffer(Op *module, PassContext *ctx) { return run(module, ctx, NONE); }
bool pass_test_double_buffer_no_wait(Op *module, PassContext *ctx) { return run(module, ctx, NO_WAIT); }
bool pass_test_double_buffer_wrong_stage(Op *module, PassContext *ctx) { return run(module, ctx, WRONG_STAGE); }
