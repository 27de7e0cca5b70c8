/* softmax_overlap.c — FlashAttention-3's intra-warpgroup overlap: the key
 * loop is rotated so that P·V of the previous key tile is issued right
 * after Q·Kᵀ of this one, and the tensor cores run it while the softmax of
 * this tile runs on the other units. Iteration j of a pipelined key loop
 * (double-buffer, then sm90a-layout) did
 *
 *   wait K(j); copy K(j+1), V(j+1); S = Q·K(j)ᵀ; wait V(j); softmax(S) -> P, α
 *   O = P·V(j) + O·α
 *
 * and now does
 *
 *   wait K(j); copy K(j+1); S = Q·K(j)ᵀ; wait V(j-1); O = P(j-1)·V(j-1) + O
 *   softmax(S) -> P, α;  O = O·α;  copy V(j+1)
 *
 * carrying P(j-1), V(j-1)'s stage and its token. The copy of V(j+1) moves
 * after O·α: it fills the stage P(j-1)·V(j-1) reads. The first tile's
 * softmax runs before the loop ("head": a loop of at most one iteration,
 * per segment, since tiling's segments differ in their masks) and the last
 * tile's P·V after it ("tail", at most one iteration: none when there was
 * no key tile). A chain of segments (double-buffer's: edge, interior, edge)
 * is rotated as one: the heads of every segment first (only the segment
 * that holds the first tile runs one), then the segments without their
 * first tile, then the tail.
 *
 * The launch gets nv.overlap: the code generator (codegen/sm90a.c) then
 * waits for a dot at the first op that needs its result, so Q·Kᵀ(j) waits with P·V(j-1) still running
 * (wgmma.wait_group 1) and O·α waits for P·V (wait_group 0).
 *
 * Runs on sm_90a's target IR for launches whose copies are TMA's: by
 * default where they are warp-specialised; the schedule's overlap(0|1)
 * decides. Requires: double-buffered key
 * loops whose P·V accumulates into a carried O scaled by α, and whose V
 * buffer nothing else reads. Guarantees: the same values (the interpreter
 * checks, with --check-each-pass, like any pass; the broken twin
 * test-softmax-overlap-no-tail forgets the tail and fails that check).
 */
#include "ir/builder.h"
#include "passes/passes.h"
#include "target/target.h"

#include <string.h>

/* The parts of a key loop the rotation moves. */
typedef struct KeyLoop {
    Op *loop;
    Op *pv;       /* tile.dot(P, V, C): P·V */
    Op *scale;    /* C = arith.mul(O, α) */
    Op *vload;    /* V's tile, from its stage */
    Op *vwait;    /* the tile.wait before it */
    Op *vcopy;    /* the copy of a later V tile */
    int o, tv;    /* carried positions: O, and the token vwait waits for */
} KeyLoop;

/* How many operands under blk (nested regions too) are v. */
static int uses_in(const Block *blk, const Value *v) {
    int n = 0;
    for_each_op(op, blk) {
        for (int i = 0; i < op->noperands; i++)
            n += op->operands[i] == v;
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                n += uses_in(op->regions[r].blocks[k], v);
    }
    return n;
}

/* Is loop a key loop the rotation may move (the file's comment): a P·V dot
 * accumulating into arith.mul(O, α) of the carried O and yielded as O, its
 * V tile a load from a shared buffer right after a wait on a carried
 * token, that buffer read by that load and filled by one copy only? */
static bool match(Op *loop, KeyLoop *m) {
    Block *body = loop->regions[0].blocks[0];
    Op *y = body->last;
    if (!y || y->kind != OP_TILE_YIELD)
        return false;
    *m = (KeyLoop){.loop = loop, .o = -1, .tv = -1};
    for_each_op(op, body) {
        if (op->kind != OP_DOT || m->pv)
            continue;
        const Op *c = op->operands[2]->def, *v = op->operands[1]->def;
        int o = -1;
        for (int i = 0; i < y->noperands; i++)
            if (y->operands[i] == op->results[0])
                o = i;
        if (o < 0 || uses_in(body, op->results[0]) != 1 || !c || c->kind != OP_MUL || c->parent != body ||
            c->operands[0] != body->args[1 + o] || uses_in(body, c->results[0]) != 1 ||
            uses_in(body, body->args[1 + o]) != 1 || !v || v->kind != OP_LOAD || v->parent != body ||
            v->operands[0]->type->kind != TY_MEMREF || v->operands[0]->type->space != AS_SHARED ||
            uses_in(body, v->results[0]) != 1)
            continue;
        m->pv = op;
        m->scale = (Op *)c;
        m->vload = (Op *)v;
        m->o = o;
    }
    if (!m->pv)
        return false;
    const Value *vbuf = m->vload->operands[0];
    for_each_op(op, body) {
        if (op->kind == OP_WAIT && op->next == m->vload) {
            for (int i = 0; i < loop->noperands - 3; i++)
                if (op->operands[0] == body->args[1 + i] && token_buffer(loop->operands[3 + i]) == vbuf &&
                    uses_in(body, body->args[1 + i]) == 1)
                    m->tv = i, m->vwait = op;
        } else if (op->kind == OP_COPY_ASYNC && op->operands[1] == vbuf) {
            if (m->vcopy)
                return false;
            m->vcopy = op;
        }
    }
    /* V's buffer: read by this load only, filled by this copy only */
    return m->vwait && m->vcopy && uses_in(body, vbuf) == 2;
}

/* The loops of one chain: each starts where the one before ends, with the
 * same step, carrying exactly its results, which nothing else uses; their
 * P·V dots read one V buffer at the same carried positions. */
static int chain_at(Op *first, KeyLoop *ms, int cap) {
    int n = 0;
    for (Op *op = first; op && op->kind == OP_FOR && n < cap; op = op->next) {
        if (!match(op, &ms[n]))
            break;
        if (n) {
            Op *prev = ms[n - 1].loop;
            bool ok = op->operands[0] == prev->operands[1] && op->operands[2] == prev->operands[2] &&
                      op->noperands == prev->noperands && ms[n].o == ms[0].o && ms[n].tv == ms[0].tv &&
                      ms[n].vload->operands[0] == ms[0].vload->operands[0];
            for (int i = 0; ok && i < prev->nresults; i++)
                ok = op->operands[3 + i] == prev->results[i] && uses_in(prev->parent, prev->results[i]) == 1;
            if (!ok)
                break;
        }
        n++;
    }
    return n;
}

/* A tile.for over [lb, ub) by step, carrying inits, with an empty body
 * (block arguments made) inserted before `before`. */
static Op *new_loop(Arena *a, Op *before, Value *lb, Value *ub, Value *step, int n, Value **inits) {
    Value **ops = NEW_ARRAY(a, Value *, n + 3);
    ops[0] = lb, ops[1] = ub, ops[2] = step;
    Type **types = NEW_ARRAY(a, Type *, n + 1);
    for (int i = 0; i < n; i++)
        ops[3 + i] = inits[i], types[i] = inits[i]->type;
    Op *l = op_create(a, OP_FOR, n + 3, ops, n, types, 1);
    l->loc = before->loc;
    op_insert_before(before, l);
    return l;
}

/* Replaces a block's yield by one with these operands. */
static void set_yield(Arena *a, Block *body, int n, Value **ops) {
    Op *y = body->last;
    Op *ny = op_create(a, OP_TILE_YIELD, n, ops, 0, NULL, 0);
    ny->loc = y->loc;
    op_insert_before(y, ny);
    op_unlink(y);
}

/* The head of one segment: its first iteration when that is the chain's
 * first tile, without P·V. It carries on O·α, V's token unwaited, P and
 * V's stage. */
static Op *head(Arena *a, Op *before, const KeyLoop *m, Value *ub, Value **inits, int ncar) {
    Op *l = new_loop(a, before, m->loop->operands[0], ub, m->loop->operands[2], ncar + 3, inits);
    Map map;
    map_init(&map, false);
    region_clone(a, &l->regions[0], &m->loop->regions[0], &map);
    Block *body = l->regions[0].blocks[0];
    for (int i = 0; i < 3; i++)
        block_add_arg(a, body, inits[ncar + i]->type, NULL);
    Op *pv = ((Value *)map_get(&map, m->pv->results[0]))->def, *vload = pv->operands[1]->def;
    Value *P = pv->operands[0], *stage = vload->operands[1], *scaled = pv->operands[2];
    Op *y = body->last;
    Value **ys = NEW_ARRAY(a, Value *, ncar + 3);
    memcpy(ys, y->operands, sizeof(Value *) * (size_t)ncar);
    ys[m->o] = scaled;
    ys[ncar] = body->args[1 + m->tv];   /* V(j)'s token, waited next iteration */
    ys[ncar + 1] = P;
    ys[ncar + 2] = stage;
    set_yield(a, body, ncar + 3, ys);
    op_unlink(pv);
    op_unlink(vload);
    for_each_op(op, body)
        if (op->kind == OP_WAIT && op->operands[0] == body->args[1 + m->tv]) {
            op_unlink(op);
            break;
        }
    return l;
}

/* A segment without its chain's first tile, rotated (the file's comment). */
static Op *rotated(Arena *a, const KeyLoop *m, Value *lb, Value **inits, int ncar) {
    Op *old = m->loop;
    Op *l = new_loop(a, old, lb, old->operands[1], old->operands[2], ncar + 3, inits);
    region_take(&l->regions[0], &old->regions[0]);
    Block *body = l->regions[0].blocks[0];
    Value *tvp = block_add_arg(a, body, inits[ncar]->type, NULL);
    Value *Pp = block_add_arg(a, body, inits[ncar + 1]->type, NULL);
    Value *sp = block_add_arg(a, body, inits[ncar + 2]->type, NULL);
    Value *tv = m->vwait->operands[0], *P = m->pv->operands[0], *stage = m->vload->operands[1];
    Value *O = body->args[1 + m->o];
    /* wait V(j-1); its tile from its stage; P(j-1)·V(j-1) + O, right there */
    m->vwait->operands[0] = tvp;
    m->vload->operands[1] = sp;
    m->pv->operands[0] = Pp;
    m->pv->operands[2] = O;
    op_unlink(m->pv);
    op_insert_before(m->vload->next, m->pv);
    /* after the softmax: O·α, then the copy into the stage P·V read */
    Op *y = body->last;
    m->scale->operands[0] = m->pv->results[0];
    op_unlink(m->scale);
    op_insert_before(y, m->scale);
    op_unlink(m->vcopy);
    op_insert_before(y, m->vcopy);
    Value **ys = NEW_ARRAY(a, Value *, ncar + 3);
    memcpy(ys, y->operands, sizeof(Value *) * (size_t)ncar);
    ys[m->o] = m->scale->results[0];
    ys[ncar] = tv;
    ys[ncar + 1] = P;
    ys[ncar + 2] = stage;
    set_yield(a, body, ncar + 3, ys);
    return l;
}

/* The tail: P·V of the chain's last tile, when there was one: the rotated
 * body's wait, V load and P·V, on what the last segment hands on. */
static Op *tail(Arena *a, const Block *top, const KeyLoop *m, Value *lb, Value *ub, Op *last) {
    int ncar = m->loop->noperands - 3;
    Value *O = last->results[m->o];
    Op *l = new_loop(a, last->next, lb, ub, m->loop->operands[2], 1, &O);
    Block *body = region_add_block(a, &l->regions[0]);
    block_add_arg(a, body, lb->type, NULL);
    Map map;   /* the rotated body's V token, P, stage and O -> the tail's */
    map_init(&map, false);
    map_put(a, &map, m->vwait->operands[0], last->results[ncar]);
    map_put(a, &map, m->pv->operands[0], last->results[ncar + 1]);
    map_put(a, &map, m->vload->operands[1], last->results[ncar + 2]);
    map_put(a, &map, m->pv->operands[2], block_add_arg(a, body, O->type, NULL));
    Builder b = {a, body, NULL, m->pv->loc};
    for (int i = 2; i < m->vload->noperands; i++) {   /* indices made inside the loop: constants */
        const Value *x = m->vload->operands[i];
        if (x->def && x->def->kind == OP_CONSTANT && x->def->parent != top)
            map_put(a, &map, x, b_index(&b, op_attr(x->def, "value")->i));
    }
    block_append(body, op_clone(a, m->vwait, &map));
    block_append(body, op_clone(a, m->vload, &map));
    Op *pv = op_clone(a, m->pv, &map);
    block_append(body, pv);
    b_emit(&b, OP_TILE_YIELD, NULL, 1, &pv->results[0]);
    return l;
}

/* no_tail: the broken twin (test-softmax-overlap-no-tail), which leaves
 * out the last tile's P·V */
static void rotate_chain(Arena *a, Op *launch, KeyLoop *ms, int n, bool no_tail) {
    Block *top = launch->regions[0].blocks[0];
    Op *first = ms[0].loop, *last = ms[n - 1].loop;
    int ncar = first->noperands - 3;
    Builder b = {a, NULL, first, first->loc};
    Value *start = first->operands[0], *step = first->operands[2], *end = last->operands[1];
    Value *second = b_bin(&b, OP_ADD, start, step);   /* where the chain's second tile starts */
    Value *first_end = b_bin(&b, OP_MIN, second, end);
    Value **head_ub = NEW_ARRAY(a, Value *, n), **main_lb = NEW_ARRAY(a, Value *, n);
    for (int i = 0; i < n; i++) {
        head_ub[i] = b_bin(&b, OP_MIN, ms[i].loop->operands[1], second);
        main_lb[i] = b_bin(&b, OP_MAX, ms[i].loop->operands[0], second);
    }
    /* the new carried values start as: V's first token, P = 0, stage 0
     * (read only after a head ran, which sets them) */
    Value **inits = NEW_ARRAY(a, Value *, ncar + 3);
    memcpy(inits, first->operands + 3, sizeof(Value *) * (size_t)ncar);
    inits[ncar] = first->operands[3 + ms[0].tv];
    const Type *pt = ms[0].pv->operands[0]->type;
    inits[ncar + 1] = b_splat(&b, b_float(&b, pt->elem, 0), pt->dims[0].size, pt->dims[1].size);
    inits[ncar + 2] = b_index(&b, 0);
    for (int i = 0; i < n; i++) {
        Op *h = head(a, first, &ms[i], head_ub[i], inits, ncar);
        for (int k = 0; k < ncar + 3; k++)
            inits[k] = h->results[k];
    }
    Value **old = NEW_ARRAY(a, Value *, ncar);
    memcpy(old, last->results, sizeof(Value *) * (size_t)ncar);
    Op *l = NULL;
    for (int i = 0; i < n; i++) {
        l = rotated(a, &ms[i], main_lb[i], inits, ncar);
        for (int k = 0; k < ncar + 3; k++)
            inits[k] = l->results[k];
    }
    Op *t = tail(a, top, &ms[n - 1], start, first_end, l);
    for (int i = 0; i < n; i++)
        op_unlink(ms[i].loop);
    for (int k = 0; k < ncar; k++)
        replace_all_uses(launch, old[k], k == ms[0].o && !no_tail ? t->results[0] : l->results[k]);
    if (no_tail)
        op_unlink(t);
}

static bool has_tma(const Block *blk) { return block_holds(blk, OP_COPY_ASYNC, "nv.copy", "tma"); }

/* The widest result of a tile.dot in blk (0: none). */
static int64_t max_dot_cols(const Block *blk) {
    int64_t most = 0;
    for (const Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_DOT && op->results[0]->type->dims[1].size > most)
            most = op->results[0]->type->dims[1].size;
        for (int r = 0; r < op->nregions; r++)
            for (int b = 0; b < op->regions[r].nblocks; b++) {
                int64_t inner = max_dot_cols(op->regions[r].blocks[b]);
                most = inner > most ? inner : most;
            }
    }
    return most;
}

/* A plain (not warp-specialised) kernel the rotation made, whose dots are
 * at most 64 wide (head dim 64, 64 key rows), of at most 256 threads: two
 * blocks an SM where their buffers fit twice, so that ptxas keeps it within
 * 128 registers (it does so without spills; 155 registers without the
 * bound, one block an SM). Wider score tiles spilled hundreds of bytes
 * under the bound. */
static bool two_blocks_fit(const Op *launch) {
    const Block *body = launch->regions[0].blocks[0];
    Attr *warps = op_attr(launch, "nv.warps");
    return !op_attr(launch, "nv.producer_warps") && warps && 32 * warps->i <= 256 && max_dot_cols(body) <= 64 &&
           2 * nv_buffer_bytes(body, op_attr(launch, "nv.persistent")) <= target_lookup("sm_90a")->smem_limit;
}

static bool run(Op *module, PassContext *ctx, bool no_tail) {
    for_each_op(func, op_body(module))
        for_each_op(launch, op_body(func)) {
            if (launch->kind != OP_LAUNCH || !has_tma(launch->regions[0].blocks[0]))
                continue;
            /* default (measured on the H200, bench/results/2026-12-01-h200/NOTES.md):
             * under warp specialisation, where it gains at head dims 128
             * and 256 (up to 14 %); not in plain TMA kernels, where it
             * lost 27-30 % (head dim 64 without a mask: 155 registers
             * instead of 124, one block an SM instead of two) */
            Attr *on = op_attr(launch, "schedule.overlap");
            if (on ? !on->i : !op_attr(launch, "nv.producer_warps"))
                continue;
            Block *top = launch->regions[0].blocks[0];
            for (Op *op = top->first; op; op = op->next) {
                KeyLoop ms[8];
                int n = op->kind == OP_FOR ? chain_at(op, ms, 8) : 0;
                if (!n)
                    continue;
                Op *after = ms[n - 1].loop->next;
                rotate_chain(ctx->arena, launch, ms, n, no_tail);
                /* for the code generator: wait for each dot at its first use */
                op_set_attr(ctx->arena, launch, "nv.overlap", attr_int(ctx->arena, 1));
                op = after->prev;   /* the tail (or the last loop) */
            }
            if (op_attr(launch, "nv.overlap") && two_blocks_fit(launch))
                op_set_attr(ctx->arena, launch, "nv.blocks_per_sm", attr_int(ctx->arena, 2));
        }
    return true;
}

bool pass_softmax_overlap(Op *module, PassContext *ctx) { return run(module, ctx, false); }
bool pass_test_softmax_overlap_no_tail(Op *module, PassContext *ctx) { return run(module, ctx, true); }
