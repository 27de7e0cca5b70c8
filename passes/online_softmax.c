/* online_softmax.c — the three passes over the keys that tiling makes for a
 * softmax (row max; row sum; P·V with P normalised) become one pass with a
 * running max m, a running sum l and an unnormalised accumulator rescaled
 * whenever m moves (FlashAttention's online softmax); one division at the end.
 * Scores go to base 2 (exp2, with log2(e) folded into the scale when the
 * scale is the last thing applied before the mask). With an f32
 * accumulator m moves lazily (lazy_max): only when a row's max outgrows it
 * by more than 8, so that α is exactly 1 in almost every iteration.
 *
 *   %m = tile.for ... {softmax = "max"}       %m, %l, %acc = tile.for(..., -inf, 0, 0) ({
 *   %l = tile.for ... {softmax = "sum"}  ==>    s2 = scores · log2(e); m' = max(m, rowmax(s2))
 *   %o = tile.for ... {softmax = "pv"}          α = exp2(m - m'); p = exp2(s2 - m')
 *   ... o, lse = m + log(l)                     l' = α·l + rowsum(p); acc' = α·acc + p·V
 *                                             }); o = acc · (1/l); lse = m·ln2 + log(l)
 *
 * The change of base, the running statistics m and l, p's exponentials and
 * the final division are f32 whatever the accumulator type; with FP16-ACC
 * (SparkAttention) only the two MMAs accumulate in f16 (O too, rescaled by
 * α). log2(e) folded into an f16 scale, or f16 scores times log2(e), are off
 * by ~2^-11 relative, which exp turns into an error of ~s·2^-11 (1.5% at
 * softcap 30: examples/softcap_alibi.attn failed its check so); m and l in
 * f16 would lose precision for nothing (one value per row).
 *
 * Requires: tiling's tagged loops in one block (each of the three kinds may be
 * a chain of segments: masked edge, unmasked interior, masked edge; they
 * become a chain of fused loops). Guarantees: the same softmax up to
 * rounding; masked rows still give 0 and -inf.
 * The test-only twin `test-online-softmax-no-rescale` leaves out the
 * rescaling by α, which the interpreter must catch.
 */
#include "ir/builder.h"
#include "passes/passes.h"

#include <float.h>
#include <math.h>
#include <string.h>

static const char *softmax_role(const Op *op) {
    Attr *a = op->kind == OP_FOR ? op_attr(op, "softmax") : NULL;
    return a && a->kind == AT_STR ? a->s : NULL;
}

/* ---- matching the P·V loop ------------------------------------------------------ */

/* In the pv loop: dot(cast(div(exp(sub(S, msafe)), lsafe)), V, acc). */
typedef struct PV {
    Op *dot;
    Value *scores, *vtile;
} PV;

static bool match_pv(Op *loop, PV *pv) {
    const Block *body = loop->regions[0].blocks[0];
    for_each_op(op, body) {
        if (op->kind != OP_DOT)
            continue;
        Value *p = op->operands[0];
        if (p->def && p->def->kind == OP_CAST)
            p = p->def->operands[0];
        if (!p->def || p->def->kind != OP_DIV)
            continue;
        Value *e = p->def->operands[0];
        if (!e->def || e->def->kind != OP_EXP || !e->def->operands[0]->def ||
            e->def->operands[0]->def->kind != OP_SUB)
            continue;
        pv->dot = op;
        pv->scores = e->def->operands[0]->def->operands[0];
        pv->vtile = op->operands[1];
        return true;
    }
    return false;
}

/* Scores into base 2: fold log2(e) into `select(valid, mul(x, c), -inf)`'s
 * constant when it has that shape, else multiply. */
static Value *fold_scale(Builder *b, Value *x, double k) {
    Op *mul = x->def;
    Attr *c = mul && mul->kind == OP_MUL && mul->operands[1]->def && mul->operands[1]->def->kind == OP_CONSTANT
                  ? op_attr(mul->operands[1]->def, "value")
                  : NULL;
    if (!c || c->kind != AT_FLOAT)
        return NULL;
    return b_bin(b, OP_MUL, mul->operands[0], b_float(b, mul->operands[1]->type->elem, c->f * k));
}

static Value *to_base2(Builder *b, Value *s) {
    const double log2e = 1.4426950408889634;
    Value *folded = fold_scale(b, s, log2e);   /* an unmasked tile: scale last */
    if (folded)
        return folded;
    Op *sel = s->def;
    if (sel && sel->kind == OP_SELECT) {
        Value *x = sel->operands[1];
        Op *mul = x->def;
        Attr *c = mul && mul->kind == OP_MUL && mul->operands[1]->def &&
                          mul->operands[1]->def->kind == OP_CONSTANT
                      ? op_attr(mul->operands[1]->def, "value")
                      : NULL;
        if (c && c->kind == AT_FLOAT) {
            Value *k = b_float(b, mul->operands[1]->type->elem, c->f * log2e);
            Value *scaled = b_bin(b, OP_MUL, mul->operands[0], k);
            Value *ops[3] = {sel->operands[0], scaled, sel->operands[2]};
            return b_emit(b, OP_SELECT, s->type, 3, ops);
        }
    }
    return b_bin(b, OP_MUL, s, b_float(b, s->type->elem, log2e));
}

/* Scores of the form mul(x, c) or select(valid, mul(x, c), -inf), with c a
 * positive f32 constant (the scale): x, valid (NULL when unmasked) and c. */
static bool scaled_scores(Value *s, Value **x, Value **valid, double *c) {
    *valid = NULL;
    Op *def = s->def;
    if (def && def->kind == OP_SELECT && def->operands[2]->def && def->operands[2]->def->kind == OP_CONSTANT) {
        Attr *v = op_attr(def->operands[2]->def, "value");
        if (!v || v->kind != AT_FLOAT || v->f != -INFINITY)
            return false;
        *valid = def->operands[0];
        def = def->operands[1]->def;
    }
    if (!def || def->kind != OP_MUL || def->results[0]->type->elem != SK_F32 || !def->operands[1]->def ||
        def->operands[1]->def->kind != OP_CONSTANT)
        return false;
    Attr *k = op_attr(def->operands[1]->def, "value");
    if (!k || k->kind != AT_FLOAT || !(k->f > 0))
        return false;
    *x = def->operands[0];
    *c = k->f;
    return true;
}

/* FlashAttention-4's conditional rescale: the running max m moves to a row's
 * new max only when that exceeds m by more than LAZY_MAX_SLACK (base 2), so
 * that after the first key tile or two α is exactly 1 in almost every
 * iteration and codegen's warp vote skips O·α (lower.c skips_unit_scale).
 * The softmax is unchanged: m is any common offset of the row's exponents,
 * l and O are kept relative to the same m, and o = O / l, lse = m + log l
 * are exact; p = exp2(s − m) is then at most 2^8, which f16 and bf16 hold
 * with full precision and an f32 accumulator with room to spare. Not with
 * FP16-ACC (O itself in f16: 256 × a row of V could overflow). */
enum { LAZY_MAX_SLACK = 8 };

static Value *lazy_max(Builder *b, Value *m, Value *m_max) {
    Value *grew = b_cmp(b, "gt", b_bin(b, OP_SUB, m_max, m), b_float(b, SK_F32, LAZY_MAX_SLACK));
    return b_select(b, grew, m_max, m);
}

/* One segment: lpv's body becomes the body of a loop carrying (m, l, acc)
 * from `init` (the max and sum loops' work is redone there: they die);
 * returns the new loop (inserted before lpv). */
static Op *fuse_segment(PassContext *ctx, Op *lpv, Value **init, bool rescale) {
    PV pv;
    if (!match_pv(lpv, &pv))
        return NULL;
    Arena *a = ctx->arena;
    Value *ops[6] = {lpv->operands[0], lpv->operands[1], lpv->operands[2], init[0], init[1], init[2]};   /* f32 */
    Type *types[3] = {init[0]->type, init[1]->type, lpv->results[0]->type};
    Op *loop = op_create(a, OP_FOR, 6, ops, 3, types, 1);
    loop->loc = lpv->loc;
    op_insert_before(lpv, loop);
    /* its body: lpv's body, moved, with two more carried values */
    region_take(&loop->regions[0], &lpv->regions[0]);
    Block *body = loop->regions[0].blocks[0];
    Value *acc = body->args[1];
    ScalarKind dot_t = acc->type->elem;   /* the MMA's accumulator (f16 for FP16-ACC) */
    Value *m = block_add_arg(a, body, types[0], "m");
    Value *l = block_add_arg(a, body, types[1], "l");
    /* block arguments in order: iv, m, l, acc */
    body->args[1] = m, body->args[2] = l, body->args[3] = acc;
    for (int i = 0; i < 4; i++)
        body->args[i]->index = i;
    Op *yield = body->last;
    Builder b = {a, NULL, yield, lpv->loc};
    /* f32 before the change of base: log2(e) folded into an f16 scale, or
     * f16 scores times log2(e), would be off by ~2^-11 relative, which exp
     * turns into an error of ~s·2^-11 (1.5% at softcap 30) */
    Value *ninf = b_float(&b, types[0]->elem, -INFINITY);
    /* the row's max of this tile and its base-2 scores s2 (FlashAttention-2's
     * form makes s2 = xm·k after the max, so xm and k stand for it until then) */
    Value *x, *valid, *row_max, *s2 = NULL, *xm = NULL, *k = NULL;
    double c;
    if (scaled_scores(pv.scores, &x, &valid, &c)) {
        /* FlashAttention-2's form: the row max of the unscaled scores, scaled
         * once per row (max commutes with rounding x·c, c > 0), and
         * p = exp2(x·c − m), one fma per score. A masked score is -inf in
         * both: m stays finite (it starts at -FLT_MAX, fuse_chain), so its
         * p = exp2(-inf) = 0 with no second select, and the mask is dead
         * once the scores are (64 predicates a thread would otherwise stay
         * live across the row max, which ptxas parks in registers) */
        k = b_float(&b, SK_F32, c * 1.4426950408889634);
        xm = valid ? b_select(&b, valid, x, ninf) : x;
        row_max = b_bin(&b, OP_MUL, b_row_reduce(&b, "max", xm), k);
    } else {
        s2 = pv.scores->type->elem == SK_F32 ? to_base2(&b, pv.scores)
                                             : b_bin(&b, OP_MUL, b_cast(&b, pv.scores, SK_F32),
                                                     b_float(&b, SK_F32, 1.4426950408889634));
        row_max = b_row_reduce(&b, "max", s2);
    }
    Value *m_new = b_bin(&b, OP_MAX, m, row_max);
    if (rescale && dot_t == SK_F32)
        m_new = lazy_max(&b, m, m_new);
    if (!s2)
        s2 = b_bin(&b, OP_MUL, xm, k);
    Value *p = b_unary(&b, OP_EXP2, b_bin(&b, OP_SUB, s2, m_new));
    Value *alpha = b_unary(&b, OP_EXP2, b_bin(&b, OP_SUB, m, m_new));
    Value *l_new = b_bin(&b, OP_ADD, rescale ? b_bin(&b, OP_MUL, l, alpha) : l, b_row_reduce(&b, "sum", p));
    Value *pc = p->type->elem == pv.vtile->type->elem ? p : b_emit(&b, OP_CAST, type_with_elem(a, p->type, pv.vtile->type->elem), 1, &p);
    Value *alpha_acc = alpha->type->elem == dot_t ? alpha : b_cast(&b, alpha, dot_t);
    Value *scaled = acc;
    if (rescale) {   /* O·α, tagged for the code generator (it may skip it where every α is 1) */
        scaled = b_bin(&b, OP_MUL, acc, alpha_acc);
        op_set_attr(a, scaled->def, "rescale", attr_bool(a, true));
    }
    Value *dops[3] = {pc, pv.vtile, scaled};
    Value *acc_new = b_emit(&b, OP_DOT, acc->type, 3, dops);
    Value *yields[3] = {m_new, l_new, acc_new};
    Op *y = op_create(a, OP_TILE_YIELD, 3, yields, 0, NULL, 0);
    y->loc = yield->loc;
    op_insert_before(yield, y);
    op_unlink(yield);
    return loop;
}

/* Does each loop carry just its one value, as tiling makes it? A loop
 * double-buffer has pipelined carries its copies' tokens too. */
static bool carries_one(Op **loops, int k) {
    for (int i = 0; i < k; i++)
        if (loops[i]->noperands != 4 || loops[i]->nresults != 1)
            return false;
    return true;
}

/* A chain of segments (max loops, sum loops, pv loops; k of each, in order)
 * becomes k fused loops in a chain; then o = acc / l, and m back to base e. */
static bool fuse_chain(PassContext *ctx, Op *func, Op **maxes, Op **sums, Op **pvs, int k, bool rescale) {
    if (!carries_one(maxes, k) || !carries_one(sums, k) || !carries_one(pvs, k)) {
        /* (attnc-opt with the passes out of order: the three loops stay,
         * right but three passes over the keys) */
        op_warn(ctx->diag, NULL, pvs[0],
                "online-softmax: the key loops are already pipelined (double-buffer ran first); they are left as "
                "three passes over the keys");
        return true;
    }
    PV pv;
    for (int i = 0; i < k; i++)
        if (!match_pv(pvs[i], &pv))
            return true;   /* not the shape tiling makes: leave it */
    Value *carry[3] = {maxes[0]->operands[3], sums[0]->operands[3], pvs[0]->operands[3]};
    Arena *a = ctx->arena;
    const Type *mt0 = carry[0]->type, *lt0 = carry[1]->type;
    Builder pre = {a, NULL, pvs[0], pvs[0]->loc};   /* where the fused loop goes: all starts in f32 */
    for (int r = 0; r < 2; r++)
        if (carry[r]->type->elem != SK_F32)
            carry[r] = b_cast(&pre, carry[r], SK_F32);
    /* m starts at -FLT_MAX, not -inf: a row that has seen only masked keys
     * keeps m = -FLT_MAX, and exp2(-inf - m) = 0, exp2(m - m) = 1 as they
     * should, so m needs no "-inf means 0" select in every iteration (nor a
     * register for it). No finite f32 score is below -FLT_MAX, so the
     * softmax is unchanged; lse = m·ln2 + log(0) is still -inf. */
    carry[0] = b_splat(&pre, b_float(&pre, SK_F32, -FLT_MAX), mt0->dims[0].size, mt0->dims[1].size);
    Op *loop = NULL;
    for (int i = 0; i < k; i++) {
        loop = fuse_segment(ctx, pvs[i], carry, rescale);
        for (int r = 0; r < 3; r++)
            carry[r] = loop->results[r];
    }
    Op *last_pv = pvs[k - 1];
    Builder o = {a, NULL, last_pv, last_pv->loc};
    Value *lf = carry[1];
    Value *l_safe = b_select(&o, b_cmp(&o, "eq", lf, b_float(&o, SK_F32, 0)), b_float(&o, SK_F32, 1), lf);
    ScalarKind acc_t = last_pv->results[0]->type->elem;
    /* one reciprocal per row, then a product per element (not a division each) */
    Value *inv_l = b_bin(&o, OP_DIV, b_float(&o, SK_F32, 1), l_safe);
    Value *out = b_bin(&o, OP_MUL, acc_t == SK_F32 ? carry[2] : b_cast(&o, carry[2], SK_F32), inv_l);
    Value *m_nat = b_bin(&o, OP_MUL, carry[0], b_float(&o, SK_F32, 0.6931471805599453));
    /* back to the types the loops' users had */
    if (acc_t != SK_F32)
        out = b_cast(&o, out, acc_t);
    if (mt0->elem != SK_F32)
        m_nat = b_cast(&o, m_nat, mt0->elem);
    if (lt0->elem != SK_F32)
        lf = b_cast(&o, lf, lt0->elem);
    replace_all_uses(func, last_pv->results[0], out);
    replace_all_uses(func, maxes[k - 1]->results[0], m_nat);
    replace_all_uses(func, sums[k - 1]->results[0], lf);
    /* the old loops are dead now (tile.for is not pure, so not dce's to
     * remove); dce removes what fed them */
    for (int i = 0; i < k; i++) {
        op_unlink(pvs[i]);
        op_unlink(maxes[i]);
        op_unlink(sums[i]);
    }
    return true;
}

static void walk(PassContext *ctx, Op *func, Block *blk, bool rescale) {
    enum { MAX_SEGMENTS = 8 };
    Op *maxes[MAX_SEGMENTS], *sums[MAX_SEGMENTS], *pvs[MAX_SEGMENTS];
    int nmax = 0, nsum = 0, npv = 0;
    for (Op *op = blk->first; op; op = op->next) {
        const char *role = softmax_role(op);
        if (role && strcmp(role, "max") == 0 && nmax < MAX_SEGMENTS)
            maxes[nmax++] = op;
        else if (role && strcmp(role, "sum") == 0 && nsum < MAX_SEGMENTS)
            sums[nsum++] = op;
        else if (role && strcmp(role, "pv") == 0 && npv < MAX_SEGMENTS)
            pvs[npv++] = op;
        else
            for (int r = 0; r < op->nregions; r++)
                for (int b = 0; b < op->regions[r].nblocks; b++)
                    walk(ctx, func, op->regions[r].blocks[b], rescale);
    }
    if (nmax && nmax == nsum && nmax == npv)
        fuse_chain(ctx, func, maxes, sums, pvs, nmax, rescale);
}

static bool run(Op *module, PassContext *ctx, bool rescale) {
    for_each_op(func, op_body(module)) walk(ctx, func, op_body(func), rescale);
    return pass_dce(module, ctx);
}

bool pass_online_softmax(Op *module, PassContext *ctx) { return run(module, ctx, true); }
bool pass_test_online_softmax_no_rescale(Op *module, PassContext *ctx) { return run(module, ctx, false); }
