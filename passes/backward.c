/* backward.c — derives the backward block of every attention block, in the
 * attn IR, from the forward the frontend built.
 *
 * The forward of `attention NAME(q, k, v, side...) -> (o[, lse])` is
 *
 *   S = scale · q @ kᵀ     (k, v head-expanded under GQA; summed in acc)
 *   S' = mask(score(S))    P = softmax(S')    o = P(rounded to q's type) @ v
 *
 * and its backward block `NAME.backward(q, k, v, side..., o, lse, do) ->
 * (dq, dk, dv)` recomputes P from the saved logsumexp instead of the
 * softmax (FlashAttention-2's form, doc/backward.md):
 *
 *   P  = exp(S' − lse)            (lse = −inf, a row with no visible key: 0,
 *                                  so P = 0 and every gradient is 0, not NaN)
 *   dv = Pᵀ @ do                  dP = do @ vᵀ
 *   D  = rowsum(do ∘ o)           dS = P ∘ (dP − D) ∘ score'(S)
 *   dq = scale · dS @ k           dk = scale · dSᵀ @ q
 *
 * with dk, dv summed over each kv head's group of query heads (GQA). Every
 * product is summed in the block's `acc`, as the forward's are; the score
 * hook's derivative score'(s) is formed here from its region by forward-mode
 * differentiation (an op with no rule is an error naming it), and evaluated
 * on the scores before the mask, so a masked −inf never meets it. Additive
 * terms (ALiBi, biases) differentiate to 1, as they should.
 *
 * A mask hides scores, so hidden entries have P = 0 and zero gradient.
 */
#include "ir/builder.h"
#include "passes/passes.h"

#include <math.h>
#include <string.h>

/* ---- the score hook's derivative ------------------------------------------- */

typedef struct Deriv {
    Builder b;
    Map d;          /* Value* -> its derivative by s (absent: zero) */
    Diag *diag;
    bool failed;
} Deriv;

static Value *dval(Deriv *g, const Value *v) { return map_get(&g->d, v); }

static Value *fconst(Deriv *g, const Value *like, double x) { return b_float(&g->b, like->type->elem, x); }

static Value *mul(Deriv *g, Value *x, Value *y) { return b_bin(&g->b, OP_MUL, x, y); }

static Value *add_or(Deriv *g, Value *x, Value *y) {   /* x + y, either possibly zero (NULL) */
    return !x ? y : !y ? x : b_bin(&g->b, OP_ADD, x, y);
}

static Value *neg_or(Deriv *g, Value *x) { return x ? b_unary(&g->b, OP_NEG, x) : NULL; }

static Value *or_zero(Deriv *g, Value *dx, const Value *like) { return dx ? dx : fconst(g, like, 0); }

/* The derivative of one op's result from its operands'; NULL for zero. */
static Value *derive_op(Deriv *g, const Op *op) {
    Value *a = op->noperands > 0 ? op->operands[0] : NULL, *b = op->noperands > 1 ? op->operands[1] : NULL;
    Value *da = a ? dval(g, a) : NULL, *db = b ? dval(g, b) : NULL, *r = op->results[0];
    bool any = false;
    for (int i = 0; i < op->noperands; i++)
        any |= dval(g, op->operands[i]) != NULL;
    if (!any)   /* constants, dimensions, side-tensor reads, index arithmetic */
        return NULL;
    Builder *B = &g->b;
    switch (op->kind) {
    case OP_CMP: case OP_AND: case OP_OR: case OP_NOT:   /* booleans: no derivative */
        return NULL;
    case OP_ADD: return add_or(g, da, db);
    case OP_SUB: return add_or(g, da, neg_or(g, db));
    case OP_NEG: return neg_or(g, da);
    case OP_MUL: return add_or(g, da ? mul(g, da, b) : NULL, db ? mul(g, a, db) : NULL);
    case OP_DIV:   /* d(a/b) = da/b − r·db/b */
        return add_or(g, da ? b_bin(B, OP_DIV, da, b) : NULL,
                      db ? neg_or(g, b_bin(B, OP_DIV, mul(g, r, db), b)) : NULL);
    case OP_MIN:
    case OP_MAX:   /* the derivative of the operand that was taken */
        return b_select(B, b_cmp(B, op->kind == OP_MIN ? "le" : "ge", a, b), or_zero(g, da, r),
                        or_zero(g, db, r));
    case OP_SELECT:
        return b_select(B, a, or_zero(g, db, r), or_zero(g, dval(g, op->operands[2]), r));
    case OP_CAST:
        if (scalar_is_float(r->type->elem))
            return b_cast(B, da, r->type->elem);
        break;   /* to an integer: no derivative */
    case OP_EXP: return mul(g, r, da);
    case OP_EXP2: return mul(g, mul(g, r, fconst(g, r, 0.69314718055994530942)), da);
    case OP_LOG: return b_bin(B, OP_DIV, da, a);
    case OP_SQRT: return b_bin(B, OP_DIV, mul(g, da, fconst(g, r, 0.5)), r);
    case OP_RSQRT: return mul(g, da, b_bin(B, OP_DIV, mul(g, r, fconst(g, r, -0.5)), a));
    case OP_TANH:
        return mul(g, da, b_bin(B, OP_SUB, fconst(g, r, 1), mul(g, r, r)));
    case OP_ABS:
        return b_select(B, b_cmp(B, "lt", a, fconst(g, a, 0)), neg_or(g, da), da);
    case OP_RELU:
        return b_select(B, b_cmp(B, "gt", a, fconst(g, a, 0)), da, fconst(g, r, 0));
    case OP_SIGMOID:
        return mul(g, da, mul(g, r, b_bin(B, OP_SUB, fconst(g, r, 1), r)));
    case OP_SILU: {   /* σ(a)·(1 + a·(1 − σ(a))) */
        Value *sg = b_unary(B, OP_SIGMOID, a);
        Value *one = fconst(g, r, 1);
        return mul(g, da, mul(g, sg, b_bin(B, OP_ADD, one, mul(g, a, b_bin(B, OP_SUB, one, sg)))));
    }
    case OP_GELU: {   /* Φ(a) + a·φ(a), with Φ(a) = gelu(a)/a (½ at 0) */
        Value *zero = fconst(g, a, 0);
        Value *phi_cdf = b_select(B, b_cmp(B, "eq", a, zero), fconst(g, r, 0.5),
                                  b_bin(B, OP_DIV, r, b_select(B, b_cmp(B, "eq", a, zero), fconst(g, a, 1), a)));
        Value *pdf = mul(g, b_unary(B, OP_EXP, mul(g, mul(g, a, a), fconst(g, a, -0.5))),
                         fconst(g, a, 1 / sqrt(2 * 3.14159265358979323846)));
        return mul(g, da, b_bin(B, OP_ADD, phi_cdf, mul(g, a, pdf)));
    }
    case OP_GELU_TANH: {   /* ½(1 + t) + ½a(1 − t²)·c(1 + 3·0.044715a²), t = tanh(c(a + 0.044715a³)) */
        double c = sqrt(2 / 3.14159265358979323846);
        Value *a2 = mul(g, a, a);
        Value *u = mul(g, fconst(g, a, c), b_bin(B, OP_ADD, a, mul(g, fconst(g, a, 0.044715), mul(g, a2, a))));
        Value *t = b_unary(B, OP_TANH, u), *one = fconst(g, a, 1), *half = fconst(g, a, 0.5);
        Value *du = mul(g, fconst(g, a, c), b_bin(B, OP_ADD, one, mul(g, fconst(g, a, 3 * 0.044715), a2)));
        Value *left = mul(g, half, b_bin(B, OP_ADD, one, t));
        Value *right = mul(g, mul(g, half, a), mul(g, b_bin(B, OP_SUB, one, mul(g, t, t)), du));
        return mul(g, da, b_bin(B, OP_ADD, left, right));
    }
    default:
        break;
    }
    char msg[200];
    snprintf(msg, sizeof msg, "the backward pass cannot differentiate '%s' in this score hook",
             op_info[op->kind].name);
    op_diag(g->diag, NULL, op, msg);
    g->failed = true;
    return NULL;
}

/* Fills `to` (an attn.score_mod's region) with the derivative by s of the
 * score hook `hook`: the same arguments (s, b, h, i, j), the hook's own ops,
 * then the derivative's, yielding ∂score/∂s. Values from outside the hook
 * (side tensors) are renamed through `outer`. */
static bool derive_hook(Arena *a, Diag *d, const Region *hook, Region *to, Map *outer) {
    region_clone(a, to, hook, outer);
    Block *blk = to->blocks[0];
    Op *yield = blk->last;
    PtrVec ops = {0};   /* the hook's ops, before the derivative's are added */
    for (Op *op = blk->first; op != yield; op = op->next)
        vec_push(a, &ops, op);
    Deriv g = {.b = {a, blk, yield, yield->loc}, .diag = d};
    map_init(&g.d, false);
    Value *s = blk->args[0];
    map_put(a, &g.d, s, b_float(&g.b, s->type->elem, 1));
    for (int i = 0; i < ops.len; i++) {
        Op *op = ops.items[i];
        g.b.loc = op->loc;
        Value *dr = op->nresults == 1 ? derive_op(&g, op) : NULL;
        if (dr)
            map_put(a, &g.d, op->results[0], dr);
    }
    if (g.failed)
        return false;
    Value *dy = dval(&g, yield->operands[0]);
    yield->operands[0] = dy ? dy : b_float(&g.b, yield->operands[0]->type->elem, 0);
    return true;
}

/* ---- the backward block ------------------------------------------------------ */

typedef struct Bwd {
    Arena *a;
    Builder b;
    ScalarKind acc;
} Bwd;

static Type *shaped(Bwd *w, ScalarKind k, Dim d0, Dim d1, Dim d2, Dim d3) {
    Dim d[4] = {d0, d1, d2, d3};
    return type_shaped(w->a, TY_TENSOR, k, 4, d);
}

static Value *named(Value *v, const char *name) {
    v->name = name;
    return v;
}

static Value *op2(Bwd *w, OpKind k, Type *t, Value *x, Value *y) {
    Value *ops[2] = {x, y};
    return b_emit(&w->b, k, t, y ? 2 : 1, ops);
}

static Value *matmul(Bwd *w, Value *x, Value *y, Type *t) {
    Value *r = op2(w, OP_MATMUL, t, x, y);
    op_set_attr(w->a, r->def, "acc", attr_type(w->a, type_scalar(w->a, w->acc)));
    return r;
}

/* [.., M, N] -> [.., N, M] */
static Value *transpose(Bwd *w, Value *x) {
    const Type *t = x->type;
    Value *r = op2(w, OP_TRANSPOSE, shaped(w, t->elem, t->dims[0], t->dims[1], t->dims[3], t->dims[2]), x, NULL);
    Attr *perm[4] = {attr_int(w->a, 0), attr_int(w->a, 1), attr_int(w->a, 3), attr_int(w->a, 2)};
    op_set_attr(w->a, r->def, "perm", attr_array(w->a, 4, perm));
    return r;
}

static Value *heads(Bwd *w, OpKind k, Value *x, Dim h) {
    const Type *t = x->type;
    return op2(w, k, shaped(w, t->elem, t->dims[0], h, t->dims[2], t->dims[3]), x, NULL);
}

static Value *scalar(Bwd *w, ScalarKind k, double x) { return b_float(&w->b, k, x); }

static Value *elementwise(Bwd *w, OpKind k, Value *x, Value *y) {   /* y a scalar or [.., 1] */
    return op2(w, k, x->type, x, y);
}

static const char *unique_name(Arena *a, Attr *taken, const char *want) {
    for (const char *name = want;; name = arena_printf(a, "%s_", name)) {
        bool clash = false;
        for (int i = 0; i < taken->n; i++)
            clash |= strcmp(taken->elems[i]->s, name) == 0;
        if (!clash)
            return name;
    }
}

static Op *def_of(const Value *v, OpKind k) { return v->def && v->def->kind == k ? v->def : NULL; }

/* The forward's pieces, as the frontend built them (frontend/sema.c).
 * Packed sequences (attn.pad of q, k and v; doc/dsl.md): q, k, v and o are
 * the [B, H, T, D] views the attention reads and makes, `last_pad` the
 * last of the ops that make those views (the frontend's SEQS dim first),
 * cu_q and cu_k the offsets. */
typedef struct Forward {
    Op *qk, *scale, *score, *mask, *last_pad;
    Value *q, *k, *v, *o, *cu_q, *cu_k;
} Forward;

static bool read_forward(Op *func, Forward *f) {
    memset(f, 0, sizeof *f);
    Block *body = op_body(func);
    f->q = body->args[0], f->k = body->args[1], f->v = body->args[2];
    for_each_op(op, body) {
        if (op->kind == OP_PAD) {
            f->last_pad = op;
            for (int i = 0; i < 3; i++)
                if (op->operands[0] == body->args[i]) {
                    Value **view[3] = {&f->q, &f->k, &f->v};
                    *view[i] = op->results[0];
                    if (i < 2)
                        *(i ? &f->cu_k : &f->cu_q) = op->operands[1];
                }
        } else if (op->kind == OP_MATMUL && !f->qk)
            f->qk = op;
        else if (op->kind == OP_MUL && f->qk && op->operands[0] == f->qk->results[0])
            f->scale = op;
        else if (op->kind == OP_SCORE_MOD)
            f->score = op;
        else if (op->kind == OP_MASK)
            f->mask = op;
        else if (op->kind == OP_RETURN)
            f->o = def_of(op->operands[0], OP_UNPAD) ? op->operands[0]->def->operands[0] : op->operands[0];
    }
    return f->qk && f->scale && f->o && f->scale->operands[1]->def->kind == OP_CONSTANT &&
           (!f->last_pad || (f->cu_q && f->cu_k));
}

/* The backward needs the forward's logsumexp: a forward that does not
 * return it gets it as a second output, "lse" (fusion makes it part of the
 * attention kernel, which computes it anyway); of packed sequences, packed
 * [H, T] as o is. */
static void save_lse(Arena *a, Op *fwd) {
    Attr *outs = op_attr(fwd, "outputs");
    if (outs->n == 2)
        return;
    Block *body = op_body(fwd);
    Op *ret = body->last, *softmax = NULL;
    for_each_op(op, body)
        if (op->kind == OP_SOFTMAX)
            softmax = op;
    Value *scores = softmax->operands[0];
    const Type *st = scores->type;
    Builder b = {a, body, ret, ret->loc};
    Value *s32 = b_cast(&b, scores, SK_F32);
    Type *lt = type_shaped(a, TY_TENSOR, SK_F32, 3, st->dims);
    Value *lse = b_emit(&b, OP_REDUCE, lt, 1, &s32);
    op_set_attr(a, lse->def, "kind", attr_str(a, "logsumexp"));
    Op *unpad = def_of(ret->operands[0], OP_UNPAD);
    if (unpad) {
        Type *packed = type_shaped(a, TY_TENSOR, SK_F32, 2, (Dim[2]){st->dims[1], unpad->results[0]->type->dims[0]});
        lse = b_emit(&b, OP_UNPAD, packed, 2, (Value *[]){lse, unpad->operands[1]});
    }
    Value *rets[2] = {ret->operands[0], lse};
    b_emit_op(&b, OP_RETURN, 0, NULL, 2, rets);
    op_unlink(ret);
    Attr *ins = op_attr(fwd, "inputs");   /* a name neither an input nor o has */
    Attr **all = NEW_ARRAY(a, Attr *, ins->n + 1);
    memcpy(all, ins->elems, sizeof(Attr *) * (size_t)ins->n);
    all[ins->n] = outs->elems[0];
    const char *name = unique_name(a, attr_array(a, ins->n + 1, all), "lse");
    lse->name = name;
    Attr *names[2] = {outs->elems[0], attr_str(a, name)};
    op_set_attr(a, fwd, "outputs", attr_array(a, 2, names));
}

static Op *derive_block(Arena *a, Diag *d, Op *fwd) {
    save_lse(a, fwd);
    Forward f;
    if (!read_forward(fwd, &f))
        die("backward: an attention block the frontend did not build");
    const char *name = op_attr(fwd, "sym_name")->s;
    Attr *fin = op_attr(fwd, "inputs"), *fout = op_attr(fwd, "outputs");
    const Block *fbody = op_body(fwd);
    int nin = fbody->nargs;
    Op *func = op_create(a, OP_FUNC, 0, NULL, 0, NULL, 1);
    func->loc = fwd->loc;
    Block *body = region_add_block(a, &func->regions[0]);
    /* inputs: the forward's, then o, lse and the gradient of o */
    const Type *qt = f.q->type, *kt = f.k->type, *vt = f.v->type, *ot = f.o->type;
    Dim B = qt->dims[0], Hq = qt->dims[1], Hkv = kt->dims[1], Nq = qt->dims[2], Nk = kt->dims[2];
    Dim one = {NULL, 1};
    Attr **in_names = NEW_ARRAY(a, Attr *, nin + 3);
    Map args;
    map_init(&args, false);
    for (int i = 0; i < nin; i++) {
        in_names[i] = fin->elems[i];
        map_put(a, &args, fbody->args[i], block_add_arg(a, body, fbody->args[i]->type, fin->elems[i]->s));
    }
    Attr *taken = attr_array(a, nin, in_names);
    const char *oname = unique_name(a, taken, fout->elems[0]->s);
    in_names[nin] = attr_str(a, oname);
    const char *lname = unique_name(a, (taken = attr_array(a, nin + 1, in_names)), fout->elems[1]->s);   /* save_lse made it */
    in_names[nin + 1] = attr_str(a, lname);
    const char *doname = unique_name(a, (taken = attr_array(a, nin + 2, in_names)),
                                     arena_printf(a, "d%s", oname));
    in_names[nin + 2] = attr_str(a, doname);
    Type *lse_t = type_shaped(a, TY_TENSOR, SK_F32, 3, (Dim[3]){B, Hq, Nq});
    /* packed sequences: o, lse and do packed as the forward returns them,
     * the gradients too; the derivation works on their [B, H, T, D] views,
     * made as the forward makes q's, k's and v's */
    bool packed = f.last_pad != NULL;
    const Type *packed_ot = op_body(fwd)->last->operands[0]->type;
    Type *packed_lse_t = type_shaped(a, TY_TENSOR, SK_F32, 2, (Dim[2]){Hq, packed_ot->dims[0]});
    Value *o = block_add_arg(a, body, (Type *)(packed ? packed_ot : ot), oname);
    Value *lse = block_add_arg(a, body, packed ? packed_lse_t : lse_t, lname);
    Value *dout = block_add_arg(a, body, (Type *)(packed ? packed_ot : ot), doname);

    Bwd w = {a, {a, body, NULL, fwd->loc}, op_attr(f.qk, "acc")->type->elem};
    Value *cu_q = NULL, *cu_k = NULL;
    if (packed) {
        for (const Op *op = fbody->first; op; op = op->next) {
            block_append(body, op_clone(a, op, &args));
            if (op == f.last_pad)
                break;
        }
        cu_q = map_get(&args, f.cu_q), cu_k = map_get(&args, f.cu_k);
        o = b_emit(&w.b, OP_PAD, (Type *)ot, 2, (Value *[]){o, cu_q});
        lse = b_emit(&w.b, OP_PAD, lse_t, 2, (Value *[]){lse, cu_q});
        /* rows past a sequence's length: P = exp(S' − ∞) = 0, as the kernels mask them (a hook may
           make S' large there: the view's q rows are 0, not the mask's) */
        op_set_attr(a, lse->def, "fill", attr_float(a, INFINITY));
        dout = b_emit(&w.b, OP_PAD, (Type *)ot, 2, (Value *[]){dout, cu_q});
    }
    Value *q = map_get(&args, f.q), *k = map_get(&args, f.k), *v = map_get(&args, f.v);
    ScalarKind dt = qt->elem, acc = w.acc;
    bool gqa = !dim_equal(Hq, Hkv);
    Value *kx = gqa ? heads(&w, OP_EXPAND_HEADS, k, Hq) : k;
    Value *vx = gqa ? heads(&w, OP_EXPAND_HEADS, v, Hq) : v;
    Type *s_acc = shaped(&w, acc, B, Hq, Nq, Nk), *s32 = shaped(&w, SK_F32, B, Hq, Nq, Nk);
    Type *row32 = shaped(&w, SK_F32, B, Hq, Nq, one);
    /* the scores, as the forward made them */
    Value *scores = elementwise(&w, OP_MUL, matmul(&w, q, transpose(&w, kx), s_acc),
                                scalar(&w, acc, op_attr(f.scale->operands[1]->def, "value")->f));
    Value *masked = scores;
    Op *hooks[2] = {f.score, f.mask};
    for (int h = 0; h < 2; h++)
        if (hooks[h]) {
            Op *c = op_create(a, hooks[h]->kind, 1, &masked, 1, &s_acc, 1);
            c->loc = hooks[h]->loc;
            region_clone(a, &c->regions[0], &hooks[h]->regions[0], &args);
            block_append(body, c);
            masked = c->results[0];
        }
    /* P from the saved logsumexp; a row with none visible has lse = -inf: P = 0 */
    Value *l4 = op2(&w, OP_RESHAPE, row32, lse, NULL);
    Value *dead = op2(&w, OP_CMP, type_with_elem(a, row32, SK_I1), l4, scalar(&w, SK_F32, -INFINITY));
    op_set_attr(a, dead->def, "pred", attr_str(a, "eq"));
    Value *sel[3] = {dead, scalar(&w, SK_F32, 0), l4};
    Value *lz = b_emit(&w.b, OP_SELECT, row32, 3, sel);
    Value *p = named(op2(&w, OP_EXP, s32, elementwise(&w, OP_SUB, b_cast(&w.b, masked, SK_F32), lz), NULL), "p");
    Value *pc = b_cast(&w.b, p, dt);
    Value *dvx = matmul(&w, transpose(&w, pc), dout, shaped(&w, SK_F32, B, Hq, Nk, vt->dims[3]));
    Value *dv = named(b_cast(&w.b, gqa ? heads(&w, OP_SUM_HEADS, dvx, Hkv) : dvx, dt), "dv");
    Value *dp = named(matmul(&w, dout, transpose(&w, vx), s32), "dp");
    Value *od = op2(&w, OP_MUL, type_with_elem(a, ot, SK_F32), b_cast(&w.b, dout, SK_F32), b_cast(&w.b, o, SK_F32));
    Value *dd = named(op2(&w, OP_REDUCE, row32, od, NULL), "delta");
    op_set_attr(a, dd->def, "kind", attr_str(a, "sum"));
    Value *ds = named(op2(&w, OP_MUL, s32, p, elementwise(&w, OP_SUB, dp, dd)), "ds");
    if (f.score) {   /* the chain rule through the score hook, at the unmasked scores */
        Value *s = b_cast(&w.b, scores, SK_F32);
        Op *c = op_create(a, OP_SCORE_MOD, 1, &s, 1, &s32, 1);
        c->loc = f.score->loc;
        if (!derive_hook(a, d, &f.score->regions[0], &c->regions[0], &args))
            return NULL;
        block_append(body, c);
        ds = named(op2(&w, OP_MUL, s32, ds, c->results[0]), "ds");
    }
    Value *dsc = b_cast(&w.b, ds, dt);
    double scale = op_attr(f.scale->operands[1]->def, "value")->f;
    Value *dqx = matmul(&w, dsc, kx, type_with_elem(a, qt, SK_F32));
    Value *dq = named(b_cast(&w.b, elementwise(&w, OP_MUL, dqx, scalar(&w, SK_F32, scale)), dt), "dq");
    Value *dkx = matmul(&w, transpose(&w, dsc), q, shaped(&w, SK_F32, B, Hq, Nk, kt->dims[3]));
    if (gqa)
        dkx = heads(&w, OP_SUM_HEADS, dkx, Hkv);
    Value *dk = named(b_cast(&w.b, elementwise(&w, OP_MUL, dkx, scalar(&w, SK_F32, scale)), dt), "dk");
    Value *outs[3] = {dq, dk, dv};
    if (packed)
        for (int i = 0; i < 3; i++)
            outs[i] = named(b_emit(&w.b, OP_UNPAD, fbody->args[i]->type, 2, (Value *[]){outs[i], i ? cu_k : cu_q}),
                            outs[i]->name);
    b_emit(&w.b, OP_RETURN, NULL, 3, outs);

    Attr *out_names[3];
    const char *grad_names[3] = {fin->elems[0]->s, fin->elems[1]->s, fin->elems[2]->s};
    Attr *all = attr_array(a, nin + 3, in_names);
    for (int i = 0; i < 3; i++)
        out_names[i] = attr_str(a, unique_name(a, all, arena_printf(a, "d%s", grad_names[i])));
    op_set_attr(a, func, "sym_name", attr_str(a, arena_printf(a, "%s.backward", name)));
    op_set_attr(a, func, "kind", attr_str(a, "attention_backward"));
    op_set_attr(a, func, "forward", attr_str(a, name));
    op_set_attr(a, func, "inputs", all);
    op_set_attr(a, func, "outputs", attr_array(a, 3, out_names));
    Attr *schedule = op_attr(fwd, "schedule");   /* its hints (deterministic) are the backward's too */
    if (schedule)
        op_set_attr(a, func, "schedule", schedule);
    return func;
}

bool pass_backward(Op *module, PassContext *ctx) {
    Arena *a = ctx->arena;
    Diag *d = ctx->diag;
    bool ok = true;
    Block *top = op_body(module);
    for (Op *f = top->first; f; f = f->next) {
        Attr *kind = op_attr(f, "kind");
        if (!kind || strcmp(kind->s, "attention") != 0)
            continue;
        const Op *paged = NULL;
        for_each_op(op, op_body(f))
            if (op->kind == OP_PAGES)
                paged = op;
        if (paged) {   /* a cache is read (decode, serving), not trained */
            op_diag(d, NULL, paged, "a paged KV cache (pages) has no backward: -backward derives the gradients "
                                    "of blocks that read k and v whole");
            ok = false;
            continue;
        }
        Op *bwd = derive_block(a, d, f);
        if (!bwd) {
            ok = false;
            continue;
        }
        if (f->next)   /* right after its forward */
            op_insert_before(f->next, bwd);
        else
            block_append(top, bwd);
        f = bwd;
    }
    return ok;
}
