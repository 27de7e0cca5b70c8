/* mask_analysis.c — finds the key range a mask allows, as affine bounds in
 * the query row, and records it on the attention op for tiling, which then
 * visits only the key tiles that can hold a visible key.
 *
 *   %o = attn.attention(...) ({}, {             %o = attn.attention(...) ({}, {
 *   ^bb0(%b, %h, %i, %j: index):                  ...same...
 *     %le = arith.cmp(%j, %i) {pred = "le"}   ==> }) {band = {exact = true,
 *     ...                                               hi = {c = 0, dims = {}, i = 1}}, ...}
 *
 * The mask's conjuncts (arith.and) of the form `a·j + b·i + K <= 0`, with
 * a = ±1, b an integer and K made of constants and dimensions (`<`, `>`,
 * `>=` normalised over integers), give the bounds j <= hi(i) = h·i + K and
 * j >= lo(i) = l·i + K. `exact` says the mask is exactly those bounds (no
 * other conjunct), so tiles entirely inside them need no mask at all. The
 * frontend's `j < (a batch's key count)` of a paged cache or packed
 * sequences (marked `key_count`) leaves a band exact, bounds or none:
 * tiling ends each program's keys at that count and masks the tile it
 * falls in.
 * Masks with no such conjunct (a document mask, a padding mask read from a
 * tensor) get no band and stay elementwise.
 *
 * attn.attention_backward gets the same band; its tiling inverts it (the
 * query tiles a key tile is visible to).
 *
 * Requires: attn.attention ops (after fusion). Guarantees: every (i, j) the
 * mask keeps satisfies the recorded bounds. Its twin
 * `test-mask-analysis-shrink` records bounds 64 keys too tight.
 */
#include "passes/passes.h"

#include <string.h>

/* c + ci·i + cj·j + Σ dims[k]·dim_k */
typedef struct Affine {
    int64_t c, ci, cj;
    int ndims;
    const char *dim[8];
    int64_t coef[8];
} Affine;

static bool add_dim(Affine *a, const char *name, int64_t k) {
    for (int d = 0; d < a->ndims; d++)
        if (strcmp(a->dim[d], name) == 0) {
            a->coef[d] += k;
            return true;
        }
    if (a->ndims == 8)
        return false;
    a->dim[a->ndims] = name;
    a->coef[a->ndims++] = k;
    return true;
}

static bool combine(Affine *r, const Affine *x, const Affine *y, int64_t ky) {
    *r = *x;
    r->c += ky * y->c, r->ci += ky * y->ci, r->cj += ky * y->cj;
    for (int d = 0; d < y->ndims; d++)
        if (!add_dim(r, y->dim[d], ky * y->coef[d]))
            return false;
    return true;
}

static bool scale(Affine *a, int64_t k) {
    a->c *= k, a->ci *= k, a->cj *= k;
    for (int d = 0; d < a->ndims; d++)
        a->coef[d] *= k;
    return true;
}

static bool is_const(const Affine *a) { return a->ci == 0 && a->cj == 0 && a->ndims == 0; }

/* The affine form of an index value of the mask region; false if it is not one. */
static bool affine(const Value *v, const Block *hook, Affine *out, int depth) {
    memset(out, 0, sizeof *out);
    if (depth > 32)
        return false;
    if (v->owner == hook) {   /* block arguments: b, h, i, j */
        if (v->index == 2)
            out->ci = 1;
        else if (v->index == 3)
            out->cj = 1;
        return v->index >= 2;
    }
    const Op *op = v->def;
    if (!op || op->results[0]->type->kind != TY_SCALAR || op->results[0]->type->elem != SK_INDEX)
        return false;
    Affine x, y;
    switch (op->kind) {
    case OP_CONSTANT:
        out->c = op_attr(op, "value")->i;
        return op_attr(op, "value")->kind == AT_INT;
    case OP_DIM:
        return add_dim(out, op_attr(op, "name")->s, 1);
    case OP_ADD:
    case OP_SUB:
        return affine(op->operands[0], hook, &x, depth + 1) && affine(op->operands[1], hook, &y, depth + 1) &&
               combine(out, &x, &y, op->kind == OP_ADD ? 1 : -1);
    case OP_NEG:
        return affine(op->operands[0], hook, out, depth + 1) && scale(out, -1);
    case OP_MUL:
        if (!affine(op->operands[0], hook, &x, depth + 1) || !affine(op->operands[1], hook, &y, depth + 1))
            return false;
        if (is_const(&y)) {
            *out = x;
            return scale(out, y.c);
        }
        if (is_const(&x)) {
            *out = y;
            return scale(out, x.c);
        }
        return false;
    default:
        return false;
    }
}

typedef struct Band {
    bool has_lo, has_hi, exact;
    bool key_count;  /* a conjunct j < (a batch's key count), marked so by the frontend */
    Affine lo, hi;   /* j >= lo(i), j <= hi(i); cj unused */
} Band;

/* One conjunct: a comparison of two affine index values. */
static bool constrain(const Op *cmp, const Block *hook, Band *band) {
    if (cmp->kind != OP_CMP)
        return false;
    const char *p = op_attr(cmp, "pred")->s;
    Affine a, b, e;
    if (!affine(cmp->operands[0], hook, &a, 0) || !affine(cmp->operands[1], hook, &b, 0))
        return false;
    /* e <= 0, over integers */
    if (strcmp(p, "le") == 0 || strcmp(p, "lt") == 0) {
        combine(&e, &a, &b, -1);
        if (p[1] == 't')
            e.c += 1;
    } else if (strcmp(p, "ge") == 0 || strcmp(p, "gt") == 0) {
        combine(&e, &b, &a, -1);
        if (p[1] == 't')
            e.c += 1;
    } else {
        return false;
    }
    if (e.cj == 1 && !band->has_hi) {          /* j <= -(e - j) */
        band->hi = e;
        band->hi.cj = 0;
        scale(&band->hi, -1);
        band->has_hi = true;
        return true;
    }
    if (e.cj == -1 && !band->has_lo) {         /* j >= e + j */
        band->lo = e;
        band->lo.cj = 0;
        band->has_lo = true;
        return true;
    }
    return false;
}

/* Walks the conjunction; anything that is not a bound makes the band inexact. */
static void conjuncts(const Value *v, const Block *hook, Band *band, int depth) {
    const Op *op = v->def;
    if (op && op->kind == OP_AND && depth < 32) {
        conjuncts(op->operands[0], hook, band, depth + 1);
        conjuncts(op->operands[1], hook, band, depth + 1);
        return;
    }
    /* a paged cache's or a packed sequence's j < key count: tiling ends the
     * program's keys there (nk) and masks the tile it falls in, so it keeps
     * the band exact */
    Attr *count = op ? op_attr(op, "key_count") : NULL;
    if (count && count->kind == AT_BOOL && count->i) {
        band->key_count = true;
        return;
    }
    if (!op || !constrain(op, hook, band))
        band->exact = false;
}

static Attr *affine_attr(Arena *a, const Affine *x) {
    Attr *d = attr_dict(a), *dims = attr_dict(a);
    for (int k = 0; k < x->ndims; k++)
        if (x->coef[k])
            attrs_set(a, &dims->entries, &dims->n, x->dim[k], attr_int(a, x->coef[k]));
    attrs_set(a, &d->entries, &d->n, "c", attr_int(a, x->c));
    attrs_set(a, &d->entries, &d->n, "i", attr_int(a, x->ci));
    attrs_set(a, &d->entries, &d->n, "dims", dims);
    return d;
}

static bool run(Op *module, PassContext *ctx, int64_t shrink) {
    for_each_op(func, op_body(module))
        for_each_op(op, op_body(func)) {
            int mask = op->kind == OP_ATTENTION ? 1 : op->kind == OP_ATTENTION_BWD ? 2 : -1;
            if (mask < 0 || op->regions[mask].nblocks != 1)
                continue;
            const Block *hook = op->regions[mask].blocks[0];
            Band band = {.exact = true};
            conjuncts(hook->last->operands[0], hook, &band, 0);
            if (!band.has_lo && !band.has_hi && !(band.exact && band.key_count))
                continue;   /* (a mask of the key count alone: exact, no bounds) */
            Attr *d = attr_dict(ctx->arena);
            attrs_set(ctx->arena, &d->entries, &d->n, "exact", attr_bool(ctx->arena, band.exact));
            if (band.has_lo)
                attrs_set(ctx->arena, &d->entries, &d->n, "lo", affine_attr(ctx->arena, &band.lo));
            band.hi.c -= shrink;
            if (band.has_hi)
                attrs_set(ctx->arena, &d->entries, &d->n, "hi", affine_attr(ctx->arena, &band.hi));
            op_set_attr(ctx->arena, op, "band", d);
        }
    return true;
}

bool pass_mask_analysis(Op *module, PassContext *ctx) { return run(module, ctx, 0); }

/* Wrong on purpose: every upper bound 64 keys too low, so that tiles with
 * visible keys are skipped; the interpreter must catch it. */
bool pass_test_mask_analysis_shrink(Op *module, PassContext *ctx) { return run(module, ctx, 64); }
