/* fusion.c — makes one op of each kernel-to-be.
 *
 * Attention: softmax(mask(score(scale · q @ kᵀ))) @ v, whichever way it was
 * written (an attention block, or the same ops in an mlp block; GQA through
 * attn.expand_heads; the scale as a multiplication or division by a constant,
 * or none; either hook or both, or neither; P cast or not; the row's
 * logsumexp taken or not) becomes one op carrying the hooks as regions:
 *
 *   %kt = attn.transpose(%k) ...        %o, %lse = attn.attention(%q, %k, %v) ({
 *   %s = attn.matmul(%q, %kt) ...       ^bb0(%s: f32, %b: index, ...):  // score
 *   %c = arith.constant {value = 0.125}   ...
 *   %x = arith.mul(%s, %c)        ==>   }, {
 *   %m = attn.mask(%x) ({...})          ^bb0(%b: index, ...):           // mask
 *   %p = attn.softmax(%m)                 ...
 *   %p16 = arith.cast(%p)               }) {acc = f32, scale = 0.125}
 *   %o = attn.matmul(%p16, %v) ...
 *   %lse = attn.reduce(%m) {kind = "logsumexp"}
 *
 * MLP: a matmul by a 2-D weight and the chain of elementwise ops that
 * consume it alone (bias, activation, residual add, scaling) become one
 * attn.fused_gemm whose region computes an output element; a second matmul
 * of the same input feeding that chain (the SwiGLU/GeGLU gate) joins it as a
 * second product (a dual GEMM):
 *
 *   %g = attn.matmul(%x, %wg)           %y = attn.fused_gemm(%x, %wg, %wu, %b) ({
 *   %a = math.silu(%g)            ==>   ^bb0(%p0: f16, %p1: f16, %e0: f16):
 *   %u = attn.matmul(%x, %wu)             silu(p0) * p1 + e0 ... attn.yield
 *   %h = arith.mul(%a, %u)              }) {acc = f32, num_b = 2}
 *   %y = arith.add(%h, %b)
 *
 * Elementwise chains no epilogue took become one attn.fused_map each (a row
 * kernel, not one kernel and one temporary an op):
 *
 *   %a = arith.add(%m, %eps)            %r = attn.fused_map(%h, %m, %w) ({
 *   %b = math.rsqrt(%a)           ==>   ^bb0(%e0: f16, %e1: f16, %e2: f16):
 *   %c = arith.mul(%h, %b)                ... attn.yield
 *   %r = arith.mul(%c, %w)              })
 *
 * Requires: verified attn IR. Guarantees: the same values, in emulation bit
 * for bit, except that an attention written with f16 scores in an mlp block
 * gets its scores in the accumulator type (more precise, never less).
 */
#include "passes/passes.h"

#include <string.h>

typedef struct Fuser {
    Arena *a;
    Arena *scratch;   /* what one fusion step needs and no IR keeps: freed after the step (fixpoint) */
    Op *func;
    Map uses;
    bool drop_mask;   /* the broken twin's mistake (test-fusion-drop-mask) */
} Fuser;

static int nuses(Fuser *f, const Value *v) { return (int)(intptr_t)map_get(&f->uses, v); }

static Op *def(const Value *v) { return v->def; }

static bool is_kind(const Value *v, OpKind k) { return v->def && v->def->kind == k; }

/* The only user of v inside body, or NULL. */
static Op *sole_user(Fuser *f, Block *body, const Value *v) {
    if (nuses(f, v) != 1)
        return NULL;
    for_each_op(op, body)
        for (int i = 0; i < op->noperands; i++)
            if (op->operands[i] == v)
                return op;
    return NULL;   /* used inside a region: leave it */
}

/* A float constant's value (through a scalar arith.constant). */
static bool constant_value(const Value *v, double *out) {
    if (!is_kind(v, OP_CONSTANT) || v->type->kind != TY_SCALAR)
        return false;
    Attr *a = op_attr(v->def, "value");
    *out = a->kind == AT_FLOAT ? a->f : (double)a->i;
    return a->kind != AT_BOOL;
}

/* Strips an attn.expand_heads: the fused op does the grouping itself. */
static Value *kv_base(const Value *v) { return is_kind(v, OP_EXPAND_HEADS) ? v->def->operands[0] : (Value *)v; }

/* ---- attention ------------------------------------------------------------ */

typedef struct AttnMatch {
    Op *pv, *softmax, *score, *mask, *qk, *lse;
    Value *q, *k, *v, *scores;   /* scores: what softmax and lse read */
    double scale;
} AttnMatch;

static bool match_qk(AttnMatch *m, Value *x) {
    double c;
    m->scale = 1;
    if (is_kind(x, OP_MUL) || is_kind(x, OP_DIV)) {
        Op *op = def(x);
        int ci = constant_value(op->operands[1], &c) ? 1 : op->kind == OP_MUL && constant_value(op->operands[0], &c) ? 0 : -1;
        if (ci < 0 || c == 0)
            return false;
        m->scale = op->kind == OP_MUL ? c : 1 / c;
        x = op->operands[1 - ci];
    }
    if (!is_kind(x, OP_MATMUL) || x->type->rank != 4)
        return false;
    m->qk = def(x);
    Value *kt = m->qk->operands[1];
    if (!is_kind(kt, OP_TRANSPOSE))
        return false;
    Attr *perm = op_attr(kt->def, "perm");
    if (perm->n != 4 || perm->elems[0]->i != 0 || perm->elems[1]->i != 1 || perm->elems[2]->i != 3 ||
        perm->elems[3]->i != 2)
        return false;
    m->q = m->qk->operands[0];
    m->k = kv_base(kt->def->operands[0]);
    return m->q->type->rank == 4 && m->k->type->rank == 4;
}

static bool match_attention(Fuser *f, Block *body, Op *softmax, AttnMatch *m) {
    memset(m, 0, sizeof *m);
    m->softmax = softmax;
    /* forwards: [cast] then the P·V matmul */
    Op *user = sole_user(f, body, softmax->results[0]);
    if (user && user->kind == OP_CAST)
        user = sole_user(f, body, user->results[0]);
    if (!user || user->kind != OP_MATMUL || user->operands[1]->type->rank != 4)
        return false;
    m->pv = user;
    m->v = kv_base(user->operands[1]);
    /* backwards: [mask] [score] [scale] q @ kᵀ */
    Value *x = softmax->operands[0];
    m->scores = x;
    if (is_kind(x, OP_MASK)) {
        m->mask = def(x);
        x = m->mask->operands[0];
    }
    if (is_kind(x, OP_SCORE_MOD)) {
        m->score = def(x);
        x = m->score->operands[0];
    }
    if (!match_qk(m, x))
        return false;
    /* q, k, v: one dtype; O in that dtype; one accumulator for both products */
    ScalarKind dt = m->q->type->elem;
    Attr *acc1 = op_attr(m->qk, "acc"), *acc2 = op_attr(m->pv, "acc");
    if (m->k->type->elem != dt || m->v->type->elem != dt || m->pv->results[0]->type->elem != dt ||
        acc1->type->elem != acc2->type->elem)
        return false;
    /* the logsumexp of the same scores, if the program takes it */
    for_each_op(op, body) {
        bool reads = false;
        for (int i = 0; i < op->noperands; i++)
            reads |= op->operands[i] == m->scores;
        if (!reads || op == softmax)
            continue;
        Op *r = op->kind == OP_CAST && op->results[0]->type->elem == SK_F32 ? sole_user(f, body, op->results[0]) : op;
        if (r && r->kind == OP_REDUCE && strcmp(op_attr(r, "kind")->s, "logsumexp") == 0 &&
            r->results[0]->type->rank == 3 && r->results[0]->type->elem == SK_F32 && !m->lse)
            m->lse = r;
        else
            return false;   /* the scores have another use: not ours to fuse */
    }
    return true;
}

static void fuse_attention(Fuser *f, Block *body, AttnMatch *m) {
    Value *ops[3] = {m->q, m->k, m->v};
    Type *types[2] = {m->pv->results[0]->type, m->lse ? m->lse->results[0]->type : NULL};
    Op *att = op_create(f->a, OP_ATTENTION, 3, ops, m->lse ? 2 : 1, types, 2);
    att->loc = m->pv->loc;
    op_set_attr(f->a, att, "acc", op_attr(m->qk, "acc"));
    op_set_attr(f->a, att, "scale", attr_float(f->a, m->scale));
    if (m->score)
        region_take(&att->regions[0], &m->score->regions[0]);
    if (m->mask && !f->drop_mask)
        region_take(&att->regions[1], &m->mask->regions[0]);
    /* before the first of the results' producers, after everything they read */
    Op *at = m->pv;
    if (m->lse)
        for (Op *o = body->first; o && o != m->pv; o = o->next)
            if (o == m->lse)
                at = m->lse;
    op_insert_before(at, att);
    att->results[0]->name = m->pv->results[0]->name;
    replace_all_uses(f->func, m->pv->results[0], att->results[0]);
    if (m->lse) {
        att->results[1]->name = m->lse->results[0]->name;
        replace_all_uses(f->func, m->lse->results[0], att->results[1]);
    }
}

/* ---- the attention backward ---------------------------------------------------
 * The backward block passes/backward.c derives becomes one op, its hook
 * regions (the score hook, its derivative, the mask) moved into it:
 *
 *   ... S, P = exp(S' - lse), dP, D, dS ...      %dq, %dk, %dv = attn.attention_backward(
 *   %dq = cast(scale · dS @ k)             ==>      %q, %k, %v, %o, %lse, %do) ({score}, {score'}, {mask})
 *   %dk = cast(scale · Σheads dSᵀ @ q)              {acc, scale}
 *   %dv = cast(Σheads Pᵀ @ do)
 *
 * The match walks back from the three returned values and checks every
 * step; anything else is left as it is (and stays correct, only unfused). */

static Op *def_is(const Value *v, OpKind k) { return v && v->def && v->def->kind == k ? v->def : NULL; }

static Value *strip(const Value *v, OpKind k) { return def_is(v, k) ? v->def->operands[0] : (Value *)v; }

static bool is_kv_transpose(const Value *v) {
    Op *t = def_is(v, OP_TRANSPOSE);
    Attr *perm = t ? op_attr(t, "perm") : NULL;
    return perm && perm->n == 4 && perm->elems[2]->i == 3 && perm->elems[3]->i == 2;
}

typedef struct BwdMatch {
    Value *q, *k, *v, *o, *lse, *dout;
    Op *score, *grad, *mask, *qk;
    double scale;
} BwdMatch;

/* cast(mul(x, c)): x and the constant c; NULL unless so. */
static Value *scaled(const Value *v, double *c) {
    Op *m = def_is(strip(v, OP_CAST), OP_MUL);
    return m && constant_value(m->operands[1], c) ? m->operands[0] : NULL;
}

/* The gradient the backward block returns as its i-th result: of packed
 * sequences, the operand of its attn.unpad. */
static Value *gradient(const Op *ret, int i) { return strip(ret->operands[i], OP_UNPAD); }

static bool match_backward(Op *ret, BwdMatch *m) {
    memset(m, 0, sizeof *m);
    if (ret->noperands != 3)
        return false;
    double cq = 0, ck = 0, cs = 0;   /* (set whenever scaled() matches; -O3 cannot see it) */
    Op *dq = def_is(scaled(gradient(ret, 0), &cq), OP_MATMUL);
    Op *dk = def_is(strip(scaled(gradient(ret, 1), &ck), OP_SUM_HEADS), OP_MATMUL);
    Op *dv = def_is(strip(strip(gradient(ret, 2), OP_CAST), OP_SUM_HEADS), OP_MATMUL);
    if (!dq || !dk || !dv || cq != ck || !def_is(gradient(ret, 0), OP_CAST))
        return false;
    /* dq = dS @ k, dk = dSᵀ @ q, dv = Pᵀ @ do */
    Value *dsc = dq->operands[0], *kx = dq->operands[1];
    if (!is_kv_transpose(dk->operands[0]) || dk->operands[0]->def->operands[0] != dsc ||
        !is_kv_transpose(dv->operands[0]))
        return false;
    m->q = dk->operands[1], m->dout = dv->operands[1], m->k = kv_base(kx);
    Value *p = strip(dv->operands[0]->def->operands[0], OP_CAST);
    /* dS = P ∘ (dP − D) [∘ score'] */
    Value *ds = strip(dsc, OP_CAST);
    Op *chain = def_is(ds, OP_MUL);
    if (chain && def_is(chain->operands[1], OP_SCORE_MOD)) {
        m->grad = chain->operands[1]->def;
        ds = chain->operands[0];
    }
    Op *pd = def_is(ds, OP_MUL), *sub = pd ? def_is(pd->operands[1], OP_SUB) : NULL;
    if (!pd || pd->operands[0] != p || !sub)
        return false;
    Op *dp = def_is(sub->operands[0], OP_MATMUL), *dd = def_is(sub->operands[1], OP_REDUCE);
    if (!dp || dp->operands[0] != m->dout || !is_kv_transpose(dp->operands[1]) || !dd)
        return false;
    m->v = kv_base(dp->operands[1]->def->operands[0]);
    Op *od = def_is(dd->operands[0], OP_MUL);
    if (!od || strcmp(op_attr(dd, "kind")->s, "sum") != 0 || strip(od->operands[0], OP_CAST) != m->dout)
        return false;
    m->o = strip(od->operands[1], OP_CAST);
    /* P = exp(S' − select(lse == −inf, 0, lse)) */
    Op *ex = def_is(p, OP_EXP), *sl = ex ? def_is(ex->operands[0], OP_SUB) : NULL;
    Op *sel = sl ? def_is(sl->operands[1], OP_SELECT) : NULL;
    Op *rs = sel ? def_is(sel->operands[2], OP_RESHAPE) : NULL;
    if (!rs)
        return false;
    m->lse = rs->operands[0];
    Value *x = strip(sl->operands[0], OP_CAST);
    if ((m->mask = def_is(x, OP_MASK)))
        x = m->mask->operands[0];
    if ((m->score = def_is(x, OP_SCORE_MOD)))
        x = m->score->operands[0];
    if (!m->score != !m->grad || (m->grad && strip(m->grad->operands[0], OP_CAST) != x))
        return false;
    Op *sc = def_is(x, OP_MUL);
    if (!sc || !constant_value(sc->operands[1], &cs) || !(m->qk = def_is(sc->operands[0], OP_MATMUL)))
        return false;
    m->scale = cs;
    Attr *acc = op_attr(m->qk, "acc");
    return m->qk->operands[0] == m->q && is_kv_transpose(m->qk->operands[1]) &&
           kv_base(m->qk->operands[1]->def->operands[0]) == m->k && cs == cq &&
           op_attr(dq, "acc")->type->elem == acc->type->elem && m->lse->type->rank == 3;
}

static bool fuse_one_backward(Fuser *f, Block *body) {
    Op *ret = body->last;
    BwdMatch m;
    if (!ret || ret->kind != OP_RETURN || !match_backward(ret, &m))
        return false;
    Value *ops[6] = {m.q, m.k, m.v, m.o, m.lse, m.dout};
    Type *types[3] = {m.q->type, m.k->type, m.v->type};
    Op *bwd = op_create(f->a, OP_ATTENTION_BWD, 6, ops, 3, types, 3);
    bwd->loc = ret->operands[0]->def->loc;
    op_set_attr(f->a, bwd, "acc", op_attr(m.qk, "acc"));
    op_set_attr(f->a, bwd, "scale", attr_float(f->a, m.scale));
    Op *regions[3] = {m.score, m.grad, m.mask};
    for (int i = 0; i < 3; i++)
        if (regions[i])
            region_take(&bwd->regions[i], &regions[i]->regions[0]);
    Op *first_unpad = def_is(ret->operands[0], OP_UNPAD);   /* (packed sequences: the unpads, then ret) */
    op_insert_before(first_unpad ? first_unpad : ret, bwd);
    for (int i = 0; i < 3; i++) {
        Op *unpad = def_is(ret->operands[i], OP_UNPAD);
        Op *user = unpad ? unpad : ret;
        int at = unpad ? 0 : i;
        bwd->results[i]->name = user->operands[at]->name;
        user->operands[at] = bwd->results[i];
    }
    return true;
}

/* ---- GEMM + epilogue ------------------------------------------------------- */

/* Elementwise arithmetic on tensors: no index math, no booleans. */
static bool is_epilogue_op(const Op *op) {
    return op_kind_has(op->kind, OPF_ELEMENTWISE) && !op_kind_has(op->kind, OPF_INDEX | OPF_PREDICATE) &&
           op->results[0]->type->kind == TY_TENSOR;
}

static bool is_weight_matmul(const Op *op) {
    return op->kind == OP_MATMUL && op->operands[1]->type->rank == 2 &&
           op->operands[0]->type->rank == op->results[0]->type->rank;
}

typedef struct Chain {
    PtrVec products;   /* the matmuls */
    PtrVec extras;     /* tensors read elementwise */
    PtrVec ops;        /* the elementwise ops, in order */
    Value *last;
} Chain;

static int index_of(PtrVec *v, const void *x) {
    for (int i = 0; i < v->len; i++)
        if (v->items[i] == x)
            return i;
    return -1;
}

/* A tensor of the output's element type that broadcasts to its shape:
 * read elementwise at the output's coordinates. */
static bool reads_elementwise(const Type *t, const Type *out) {
    return t->kind == TY_TENSOR && t->elem == out->elem && type_broadcasts_to(t, out);
}

/* How deep an elementwise operand's own ops are taken into the epilogue
 * (absorb_operand recurses; deeper ones are read as computed tensors). */
enum { SIDE_DEPTH = 32 };

/* Can `w` (an operand of the next chain op) join the chain? A product of
 * the same input (an operand of the chain's own ops: the dual GEMM), a
 * constant, or a tensor read elementwise (an extra);
 * a tensor made by an elementwise op used only here, whose own operands
 * can join, joins with its op — `x @ w + x * 0.5`'s x * 0.5 is computed
 * in the epilogue from x, not by a kernel of its own into a temporary. */
static bool absorb_operand(Fuser *f, Block *body, Chain *c, Op *first, Op *user, Value *w, int depth) {
    double ignored;
    if (index_of(&c->ops, w->def) >= 0 || index_of(&c->products, w->def) >= 0 || constant_value(w, &ignored))
        return true;
    const Type *out = first->results[0]->type;
    if (depth == 0 && w->def && is_weight_matmul(w->def) && w->def->operands[0] == first->operands[0] &&
        type_equal(w->type, out) && sole_user(f, body, w) == user &&
        op_attr(w->def, "acc")->type->elem == op_attr(first, "acc")->type->elem) {
        vec_push(f->scratch, &c->products, w->def);
        return true;
    }
    if (!reads_elementwise(w->type, out))
        return false;
    Op *side = w->def;
    if (side && depth < SIDE_DEPTH && side->parent == body && is_epilogue_op(side) && sole_user(f, body, w) == user) {
        Chain saved = *c;
        bool ok = true;
        for (int i = 0; i < side->noperands && ok; i++)
            ok = absorb_operand(f, body, c, first, side, side->operands[i], depth + 1);
        if (ok) {
            vec_push(f->scratch, &c->ops, side);
            return true;
        }
        *c = saved;
    }
    if (index_of(&c->extras, w) < 0)
        vec_push(f->scratch, &c->extras, w);
    return true;
}

static void grow_chain(Fuser *f, Block *body, Op *first, Chain *c) {
    memset(c, 0, sizeof *c);
    vec_push(f->scratch, &c->products, first);
    c->last = first->results[0];
    for (;;) {
        Op *user = sole_user(f, body, c->last);
        if (!user || !is_epilogue_op(user) || !type_equal(user->results[0]->type, first->results[0]->type))
            return;
        Chain saved = *c;
        bool ok = true;
        for (int i = 0; i < user->noperands && ok; i++)
            if (user->operands[i] != c->last)
                ok = absorb_operand(f, body, c, first, user, user->operands[i], 0);
        if (!ok) {
            *c = saved;
            return;
        }
        vec_push(f->scratch, &c->ops, user);
        c->last = user->results[0];
    }
}

/* op as the scalar op of a fused region b computing one element: its
 * operands through `scalar` (tensor value -> the region's scalar), a
 * constant cloned into the region at its first use; its result recorded. */
static void append_scalar_op(Fuser *f, Block *b, Map *scalar, const Op *op) {
    Value **operands = NEW_ARRAY(f->a, Value *, op->noperands);
    for (int j = 0; j < op->noperands; j++) {
        Value *w = op->operands[j];
        Value *s = map_get(scalar, w);
        if (!s) {
            Type *t = w->type;
            Op *k = op_create(f->a, OP_CONSTANT, 0, NULL, 1, &t, 0);
            k->loc = w->def->loc;
            op_set_attr(f->a, k, "value", op_attr(w->def, "value"));
            block_append(b, k);
            s = k->results[0];
            map_put(f->scratch, scalar, w, s);
        }
        operands[j] = s;
    }
    Type *rt = type_scalar(f->a, op->results[0]->type->elem);
    Op *x = op_create(f->a, op->kind, op->noperands, operands, 1, &rt, 0);
    x->loc = op->loc;
    x->attrs = op->attrs;
    x->nattrs = op->nattrs;
    block_append(b, x);
    map_put(f->scratch, scalar, op->results[0], x->results[0]);
}

/* The region: products and extras as arguments, each chain op as a scalar op. */
static void build_epilogue(Fuser *f, Op *gemm, Chain *c) {
    Block *b = region_add_block(f->a, &gemm->regions[0]);
    Map scalar;   /* tensor value -> scalar value in the region */
    map_init(&scalar, false);
    for (int i = 0; i < c->products.len; i++) {
        Op *mm = c->products.items[i];
        map_put(f->scratch, &scalar, mm->results[0], block_add_arg(f->a, b, type_scalar(f->a, mm->results[0]->type->elem), NULL));
    }
    for (int i = 0; i < c->extras.len; i++) {
        Value *e = c->extras.items[i];
        map_put(f->scratch, &scalar, e, block_add_arg(f->a, b, type_scalar(f->a, e->type->elem), NULL));
    }
    for (int i = 0; i < c->ops.len; i++)
        append_scalar_op(f, b, &scalar, c->ops.items[i]);
    Value *y = map_get(&scalar, c->last);
    Op *yield = op_create(f->a, OP_YIELD, 1, &y, 0, NULL, 0);
    block_append(b, yield);
}

/* w's [N, K] source when w is its transpose (x @ transpose(w): a weight
 * kept as nn.Linear keeps it, [out, in]), else NULL. */
static Value *transposed_weight(const Value *w) {
    Op *t = def_is(w, OP_TRANSPOSE);
    Attr *perm = t ? op_attr(t, "perm") : NULL;
    return perm && perm->n == 2 && perm->elems[0]->i == 1 ? t->operands[0] : NULL;
}

static void fuse_gemm(Fuser *f, Op *first, Chain *c) {
    int n = c->products.len, noperands = 1 + n + c->extras.len;
    Value **operands = NEW_ARRAY(f->a, Value *, noperands);
    Attr **trans = NEW_ARRAY(f->a, Attr *, n);
    bool any_trans = false;
    operands[0] = first->operands[0];
    for (int i = 0; i < n; i++) {
        Value *w = ((Op *)c->products.items[i])->operands[1], *src = transposed_weight(w);
        operands[1 + i] = src ? src : w;   /* read in place, transposed by the tiles */
        trans[i] = attr_int(f->a, src != NULL);
        any_trans |= src != NULL;
    }
    for (int i = 0; i < c->extras.len; i++)
        operands[1 + n + i] = c->extras.items[i];
    Type *rt = c->last->type;
    Op *g = op_create(f->a, OP_FUSED_GEMM, noperands, operands, 1, &rt, 1);
    Op *at = c->last->def;
    g->loc = at->loc;
    op_set_attr(f->a, g, "acc", op_attr(first, "acc"));
    op_set_attr(f->a, g, "num_b", attr_int(f->a, n));
    if (any_trans)
        op_set_attr(f->a, g, "b_transposed", attr_array(f->a, n, trans));
    build_epilogue(f, g, c);
    op_insert_before(at, g);
    g->results[0]->name = c->last->name;
    replace_all_uses(f->func, c->last, g->results[0]);
}

/* ---- the pass ---------------------------------------------------------------- */

/* One fusion of each kind: true when it changed the function. */
static bool fuse_one_attention(Fuser *f, Block *body) {
    for_each_op(op, body) {
        AttnMatch m;
        if (op->kind == OP_SOFTMAX && match_attention(f, body, op, &m)) {
            fuse_attention(f, body, &m);
            return true;
        }
    }
    return false;
}

static bool fuse_one_gemm(Fuser *f, Block *body) {
    for_each_op(op, body) {
        if (!is_weight_matmul(op))
            continue;
        Chain c;
        grow_chain(f, body, op, &c);
        fuse_gemm(f, op, &c);
        return true;
    }
    return false;
}

/* ---- elementwise maps -------------------------------------------------------
 * What no GEMM epilogue took: a chain of elementwise ops over tensors, each
 * but the last used once and by the chain, becomes one attn.fused_map whose
 * region computes an element of the last op's result from the chain's
 * inputs' elements (a row kernel; one op a kernel before, each with its own
 * temporary). At most MAP_INPUTS inputs (the interpreter's limit, and half of
 * libattnrt's tensors). */
enum { MAP_INPUTS = 16 };

static bool is_map_op(const Op *op) {
    return op_kind_has(op->kind, OPF_ELEMENTWISE) && !op_kind_has(op->kind, OPF_INDEX) && op->nresults == 1 &&
           op->results[0]->type->kind == TY_TENSOR;
}

/* A growing chain: its ops and the values it reads from outside (inputs),
 * each with a map to its position (+1) for constant-time lookups; an input
 * the chain comes to compute itself is blanked (NULL) in place. */
typedef struct MapGroup {
    PtrVec ops;      /* Op* */
    PtrVec inputs;   /* Value* or NULL: tensors and non-constant scalars the chain reads */
    Map op_at, input_at;
    int ninputs;
} MapGroup;

static bool listed(const PtrVec *v, const Map *at, const void *x) {
    intptr_t i = (intptr_t)map_get(at, x) - 1;
    return i >= 0 && i < v->len && v->items[i] == x;
}

static void list(Arena *a, PtrVec *v, Map *at, void *x) {
    vec_push(a, v, x);
    map_put(a, at, x, (void *)(intptr_t)v->len);
}

static bool is_input(MapGroup *g, const Value *w) { return listed(&g->inputs, &g->input_at, w); }

static bool reads_from_outside(const Value *w) { return !(w->def && w->def->kind == OP_CONSTANT); }

/* Grows the chain from its last op breadth first: an input made by an
 * elementwise op used once (by the chain) joins it, when the inputs that op
 * brings keep them within MAP_INPUTS. No recursion: a chain of any length
 * is one map. */
static void grow_map(Fuser *f, Block *body, MapGroup *g, Op *last) {
    list(f->scratch, &g->ops, &g->op_at, last);
    for (int i = 0; i < last->noperands; i++)
        if (reads_from_outside(last->operands[i]) && !is_input(g, last->operands[i])) {
            list(f->scratch, &g->inputs, &g->input_at, last->operands[i]);
            g->ninputs++;
        }
    for (int next = 0; next < g->inputs.len; next++) {   /* inputs, in the order found, as the worklist */
        Value *w = g->inputs.items[next];
        Op *p = w ? w->def : NULL;
        if (!p || p->parent != body || !is_map_op(p) || nuses(f, w) != 1)
            continue;
        int brings = 0;
        for (int i = 0; i < p->noperands; i++) {
            Value *x = p->operands[i];
            bool seen = false;
            for (int j = 0; j < i; j++)
                seen |= p->operands[j] == x;
            brings += reads_from_outside(x) && !is_input(g, x) && !seen;
        }
        if (g->ninputs - 1 + brings > MAP_INPUTS)
            continue;
        list(f->scratch, &g->ops, &g->op_at, p);
        g->inputs.items[next] = NULL;
        g->ninputs--;
        for (int i = 0; i < p->noperands; i++)
            if (reads_from_outside(p->operands[i]) && !is_input(g, p->operands[i])) {
                list(f->scratch, &g->inputs, &g->input_at, p->operands[i]);
                g->ninputs++;
            }
    }
}

static void fuse_map(Fuser *f, Block *body, Op *last, MapGroup *g) {
    Type *rt = last->results[0]->type;
    Value **inputs = NEW_ARRAY(f->a, Value *, g->ninputs + 1);
    int n = 0;
    for (int i = 0; i < g->inputs.len; i++)
        if (g->inputs.items[i])
            inputs[n++] = g->inputs.items[i];
    Op *m = op_create(f->a, OP_FUSED_MAP, n, inputs, 1, &rt, 1);
    m->loc = last->loc;
    Block *b = region_add_block(f->a, &m->regions[0]);
    Map scalar;   /* value outside -> scalar value in the region */
    map_init(&scalar, false);
    for (int i = 0; i < n; i++)
        map_put(f->scratch, &scalar, inputs[i], block_add_arg(f->a, b, type_scalar(f->a, inputs[i]->type->elem), NULL));
    for_each_op(op, body)   /* the chain's ops in the body's order */
        if (listed(&g->ops, &g->op_at, op))
            append_scalar_op(f, b, &scalar, op);
    Value *y = map_get(&scalar, last->results[0]);
    block_append(b, op_create(f->a, OP_YIELD, 1, &y, 0, NULL, 0));
    op_insert_before(last, m);
    m->results[0]->name = last->results[0]->name;
    replace_all_uses(f->func, last->results[0], m->results[0]);
}

/* The last op of a chain: an elementwise op whose result is not used once
 * by another (that one's chain takes it). */
static bool fuse_one_map(Fuser *f, Block *body) {
    Map user_of;   /* a value -> an op of the body that uses it (sole_user's answer where it has one use) */
    map_init(&user_of, false);
    for_each_op(op, body)
        for (int i = 0; i < op->noperands; i++)
            map_put(f->scratch, &user_of, op->operands[i], op);
    for_each_op(op, body) {
        if (!is_map_op(op))
            continue;
        Op *user = nuses(f, op->results[0]) == 1 ? map_get(&user_of, op->results[0]) : NULL;
        if (user && is_map_op(user))
            continue;
        MapGroup g = {0};
        map_init(&g.op_at, false);
        map_init(&g.input_at, false);
        grow_map(f, body, &g, op);
        if (g.ops.len < 2)
            continue;
        fuse_map(f, body, op, &g);
        return true;
    }
    return false;
}

/* Fuses until nothing more matches; uses are recounted and the dead ops
 * removed after each fusion, since each one changes both. A step's counts
 * and chains live in an arena of its own, freed after it: a block of n
 * GEMMs takes n steps, and with the function's arena the counts alone
 * grew as n² (800 GEMMs: 850 MB). */
static void fixpoint(Fuser *f, bool (*fuse_one)(Fuser *, Block *)) {
    for (bool fused = true; fused;) {
        Arena scratch = {0};
        f->scratch = &scratch;
        map_init(&f->uses, false);
        count_uses(f->func, &f->uses, &scratch);
        fused = fuse_one(f, op_body(f->func));
        if (fused)
            pass_dce(f->func, &(PassContext){.arena = &scratch});
        arena_free(&scratch);
        f->scratch = NULL;
    }
}

static void fuse_func(Fuser *f) {
    fixpoint(f, fuse_one_backward);
    fixpoint(f, fuse_one_attention);   /* first: its matmuls are not GEMM epilogues */
    fixpoint(f, fuse_one_gemm);
    fixpoint(f, fuse_one_map);   /* last: what the GEMMs' epilogues did not take */
}

static bool run(Op *module, PassContext *ctx, bool drop_mask) {
    for_each_op(func, op_body(module)) {
        Fuser f = {.a = ctx->arena, .func = func, .drop_mask = drop_mask};
        fuse_func(&f);
    }
    return true;
}

bool pass_fusion(Op *module, PassContext *ctx) { return run(module, ctx, false); }

/* The broken twin: attention fused without its mask (every key seen). */
bool pass_test_fusion_drop_mask(Op *module, PassContext *ctx) { return run(module, ctx, true); }
