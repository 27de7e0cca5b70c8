/* eval_fused.c — the fused ops the passes make (attention, its backward,
 * fused GEMMs), in the same arithmetic and order as the ops they replace. */
#include "interp/eval.h"

#include <string.h>

/* ---- fused ops: the same arithmetic, in the same order, as the ops they
 * replace, so that fusion keeps results bit for bit in emulation ---------- */

/* mask-analysis's band on an attention op: the keys j a query row i may
 * see, lo(i) <= j <= hi(i), each bound c + ci·i + Σ coef·dim. The pass
 * guarantees that the mask keeps no key outside it, so the interpreter
 * hides those keys too: a band that is too tight (the twin
 * test-mask-analysis-shrink) then changes the result on its own, before
 * tiling skips the key tiles it rules out. */
typedef struct Band {
    bool has_lo, has_hi;
    int64_t lo_c, lo_i, hi_c, hi_i;   /* the dims folded into c */
} Band;

static bool band_bound(Interp *in, const Op *op, const Attr *b, int64_t *c, int64_t *ci) {
    Attr *cc = attrs_get(b->entries, b->n, "c"), *ii = attrs_get(b->entries, b->n, "i");
    Attr *dims = attrs_get(b->entries, b->n, "dims");
    if (!cc || !ii || !dims)
        return eval_fail(in, op, "band bound without c, i and dims");
    *c = cc->i, *ci = ii->i;
    for (int d = 0; d < dims->n; d++) {
        int64_t v = (int64_t)(intptr_t)map_get(&in->bind->dims, dims->entries[d].name);
        if (v <= 0)
            return eval_fail(in, op, "dimension '%s' is not bound", dims->entries[d].name);
        *c += dims->entries[d].value->i * v;
    }
    return true;
}

static bool read_band(Interp *in, const Op *op, Band *band) {
    *band = (Band){0};
    Attr *b = op_attr(op, "band");
    Attr *lo = b ? attrs_get(b->entries, b->n, "lo") : NULL, *hi = b ? attrs_get(b->entries, b->n, "hi") : NULL;
    if (lo && !(band->has_lo = band_bound(in, op, lo, &band->lo_c, &band->lo_i)))
        return false;
    if (hi && !(band->has_hi = band_bound(in, op, hi, &band->hi_c, &band->hi_i)))
        return false;
    return true;
}

/* What hides or changes an attention op's scores: its score hook (and,
 * in the backward, the hook's derivative), its mask, its band. */
typedef struct Hooks {
    bool has_score, has_mask;
    Plan score, grad, mask;
    Band band;
} Hooks;

/* The hooks in the op's regions score_r, grad_r (-1: none) and mask_r. */
static bool read_hooks(Interp *in, const Op *op, int score_r, int grad_r, int mask_r, Hooks *hk) {
    *hk = (Hooks){.has_score = op->regions[score_r].nblocks > 0, .has_mask = op->regions[mask_r].nblocks > 0};
    if (hk->has_score && (!plan_region(in, op->regions[score_r].blocks[0], &hk->score) ||
                          (grad_r >= 0 && !plan_region(in, op->regions[grad_r].blocks[0], &hk->grad))))
        return false;
    if (hk->has_mask && !plan_region(in, op->regions[mask_r].blocks[0], &hk->mask))
        return false;
    return read_band(in, op, &hk->band);
}

/* A score after the hooks, as attn.score_mod and attn.mask give it: the
 * score hook on the f32 score `x` (rounded back to acc), then -inf where the
 * mask or the band hides it. False on a run-time error. */
static bool hooked_score(Interp *in, Hooks *hk, ScalarKind acc, double x, int64_t b, int64_t h, int64_t i, int64_t j,
                         double *out) {
    Plan *score = hk->has_score ? &hk->score : NULL, *mask = hk->has_mask ? &hk->mask : NULL;
    const Band *band = &hk->band;
    if (score) {
        score->slots[0] = eval_round(in, SK_F32, x);
        score->slots[1] = (double)b, score->slots[2] = (double)h;
        score->slots[3] = (double)i, score->slots[4] = (double)j;
        if (!run_plan(in, score, &x))
            return false;
        x = eval_round(in, acc, x);
    }
    if (mask) {
        double keep;
        mask->slots[0] = (double)b, mask->slots[1] = (double)h;
        mask->slots[2] = (double)i, mask->slots[3] = (double)j;
        if (!run_plan(in, mask, &keep))
            return false;
        if (keep == 0)
            x = -INFINITY;
    }
    if ((band->has_lo && j < band->lo_c + band->lo_i * i) || (band->has_hi && j > band->hi_c + band->hi_i * i))
        x = -INFINITY;
    *out = x;
    return true;
}

/* attn.attention: per (b, h, i), the score row in `acc`, the hooks, the
 * softmax, P rounded to q's type, P·V in `acc`; lse from the masked row. */
bool eval_attention(Interp *in, const Op *op) {
    Tensor *q = eval_get(in, op->operands[0]), *k = eval_get(in, op->operands[1]), *v = eval_get(in, op->operands[2]);
    Tensor *o = eval_new_result(in, op);
    Tensor *lse = NULL;
    if (!o)
        return false;
    if (op->nresults == 2) {
        int64_t dims[MAX_RANK];
        if (!concrete_shape(in, op->results[1]->type, dims))
            return false;
        lse = tensor_new(in->arena, SK_F32, 3, dims);
    }
    ScalarKind acc = op_attr(op, "acc")->type->elem;
    double scale = eval_round(in, acc, op_attr(op, "scale")->f);
    Hooks hooks;
    if (!read_hooks(in, op, 0, -1, 1, &hooks))
        return false;
    int64_t B = q->dims[0], H = q->dims[1], NQ = q->dims[2], D = q->dims[3];
    int64_t HK = k->dims[1], NK = k->dims[2], DV = v->dims[3];
    if (H % HK)
        return eval_fail(in, op, "query heads (%lld) are not a multiple of kv heads (%lld)", (long long)H,
                    (long long)HK);
    double *s = NEW_ARRAY(in->arena, double, NK + 1), *p = NEW_ARRAY(in->arena, double, NK + 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int64_t kh = h / (H / HK);
            const double *Q = q->data + (b * H + h) * NQ * D;
            const double *K = k->data + (b * HK + kh) * NK * D, *V = v->data + (b * HK + kh) * NK * DV;
            for (int64_t i = 0; i < NQ; i++) {
                double m = -INFINITY;
                for (int64_t j = 0; j < NK; j++) {
                    double sum = 0;
                    for (int64_t d = 0; d < D; d++)
                        sum = eval_round(in, acc, sum + Q[i * D + d] * K[j * D + d]);
                    double x;
                    if (!hooked_score(in, &hooks, acc, eval_round(in, acc, sum * scale), b, h, i, j, &x))
                        return false;
                    s[j] = x;
                    m = nan_max(m, x);
                }
                double total = 0;
                for (int64_t j = 0; j < NK && m != -INFINITY; j++)
                    total += exp(s[j] - m);
                for (int64_t j = 0; j < NK; j++)  /* softmax in acc, then P in q's type */
                    p[j] = m == -INFINITY ? 0 : eval_round(in, q->dtype, eval_round(in, acc, exp(s[j] - m) / total));
                if (lse) {
                    double lm = -INFINITY, lt = 0;   /* logsumexp of the f32 scores */
                    for (int64_t j = 0; j < NK; j++) {
                        s[j] = eval_round(in, SK_F32, s[j]);
                        lm = nan_max(lm, s[j]);
                    }
                    for (int64_t j = 0; j < NK && lm != -INFINITY; j++)
                        lt += exp(s[j] - lm);
                    lse->data[(b * H + h) * NQ + i] = lm == -INFINITY ? -INFINITY : eval_round(in, SK_F32, lm + log(lt));
                }
                double *O = o->data + ((b * H + h) * NQ + i) * DV;
                matmul_acc(in, acc, p, V, O, 1, NK, DV);   /* O starts at 0: a new tensor */
                for (int64_t d = 0; d < DV; d++)
                    O[d] = eval_round(in, o->dtype, O[d]);
            }
        }
    map_put(in->arena, &in->values, op->results[0], o);
    if (lse)
        map_put(in->arena, &in->values, op->results[1], lse);
    return true;
}

/* attn.attention_backward: per (b, h), the unfused backward's arithmetic
 * (passes/backward.c) in the same roundings: S in acc, P = exp(S' − lse)
 * in f32, the products in acc rounded to f32, dS in f32 then q's type; dk
 * and dv summed over each kv head's group exactly, rounded once. */
bool eval_attention_backward(Interp *in, const Op *op) {
    Tensor *q = eval_get(in, op->operands[0]), *k = eval_get(in, op->operands[1]), *v = eval_get(in, op->operands[2]);
    Tensor *o = eval_get(in, op->operands[3]), *lse = eval_get(in, op->operands[4]), *dout = eval_get(in, op->operands[5]);
    Tensor *dq = eval_new_result_n(in, op, 0), *dk = eval_new_result_n(in, op, 1), *dv = eval_new_result_n(in, op, 2);
    if (!dq || !dk || !dv)
        return false;
    ScalarKind acc = op_attr(op, "acc")->type->elem, dt = q->dtype, F = SK_F32;
    double scale = eval_round(in, acc, op_attr(op, "scale")->f), scale32 = eval_round(in, F, op_attr(op, "scale")->f);
    Hooks hooks;
    if (!read_hooks(in, op, 0, 1, 2, &hooks))
        return false;
    int64_t B = q->dims[0], H = q->dims[1], NQ = q->dims[2], D = q->dims[3];
    int64_t HK = k->dims[1], NK = k->dims[2], DV = v->dims[3];
    if (H % HK)
        return eval_fail(in, op, "query heads (%lld) are not a multiple of kv heads (%lld)", (long long)H,
                    (long long)HK);
    int64_t G = H / HK;
    double *P = NEW_ARRAY(in->arena, double, NQ * NK + 1), *DS = NEW_ARRAY(in->arena, double, NQ * NK + 1);
    double *T = NEW_ARRAY(in->arena, double, NQ * NK + 1);   /* a transposed operand */
    double *R = NEW_ARRAY(in->arena, double, (NQ > NK ? NQ : NK) * (D > DV ? D : DV) + 1);
    double *dkx = NEW_ARRAY(in->arena, double, NK * D + 1), *dvx = NEW_ARRAY(in->arena, double, NK * DV + 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t kh = 0; kh < HK; kh++) {
            memset(dkx, 0, sizeof(double) * (size_t)(NK * D));
            memset(dvx, 0, sizeof(double) * (size_t)(NK * DV));
            const double *K = k->data + (b * HK + kh) * NK * D, *V = v->data + (b * HK + kh) * NK * DV;
            for (int64_t h = kh * G; h < kh * G + G; h++) {
                const double *Q = q->data + (b * H + h) * NQ * D, *O = o->data + (b * H + h) * NQ * DV;
                const double *dO = dout->data + (b * H + h) * NQ * DV, *L = lse->data + (b * H + h) * NQ;
                for (int64_t i = 0; i < NQ; i++) {
                    double delta = 0;
                    for (int64_t d = 0; d < DV; d++)
                        delta += eval_round(in, F, dO[i * DV + d] * O[i * DV + d]);
                    delta = eval_round(in, F, delta);
                    double lz = L[i] == -INFINITY ? 0 : L[i];
                    for (int64_t j = 0; j < NK; j++) {
                        double sum = 0, dp = 0;
                        for (int64_t d = 0; d < D; d++)
                            sum = eval_round(in, acc, sum + Q[i * D + d] * K[j * D + d]);
                        for (int64_t d = 0; d < DV; d++)
                            dp = eval_round(in, acc, dp + dO[i * DV + d] * V[j * DV + d]);
                        dp = eval_round(in, F, dp);
                        double pre = eval_round(in, acc, sum * scale), x, g = 1;
                        if (!hooked_score(in, &hooks, acc, pre, b, h, i, j, &x))
                            return false;
                        if (hooks.has_score) {   /* the derivative, at the same arguments */
                            memcpy(hooks.grad.slots, hooks.score.slots, sizeof(double) * 5);
                            if (!run_plan(in, &hooks.grad, &g))
                                return false;
                            g = eval_round(in, F, g);
                        }
                        double p = eval_round(in, F, exp(eval_round(in, F, eval_round(in, F, x) - lz)));
                        double ds = eval_round(in, F, p * eval_round(in, F, dp - delta));
                        if (hooks.has_score)
                            ds = eval_round(in, F, ds * g);
                        P[i * NK + j] = eval_round(in, dt, p);
                        DS[i * NK + j] = eval_round(in, dt, ds);
                    }
                }
                /* dq = scale · dS @ k */
                memset(R, 0, sizeof(double) * (size_t)(NQ * D));
                matmul_acc(in, acc, DS, K, R, NQ, NK, D);
                double *DQ = dq->data + (b * H + h) * NQ * D;
                for (int64_t e = 0; e < NQ * D; e++)
                    DQ[e] = eval_round(in, dt, eval_round(in, F, eval_round(in, F, R[e]) * scale32));
                /* dk += dSᵀ @ q, dv += Pᵀ @ do (each head's rounded to f32) */
                for (int64_t i = 0; i < NQ; i++)
                    for (int64_t j = 0; j < NK; j++)
                        T[j * NQ + i] = DS[i * NK + j];
                memset(R, 0, sizeof(double) * (size_t)(NK * D));
                matmul_acc(in, acc, T, Q, R, NK, NQ, D);
                for (int64_t e = 0; e < NK * D; e++)
                    dkx[e] += eval_round(in, F, R[e]);
                for (int64_t i = 0; i < NQ; i++)
                    for (int64_t j = 0; j < NK; j++)
                        T[j * NQ + i] = P[i * NK + j];
                memset(R, 0, sizeof(double) * (size_t)(NK * DV));
                matmul_acc(in, acc, T, dO, R, NK, NQ, DV);
                for (int64_t e = 0; e < NK * DV; e++)
                    dvx[e] += eval_round(in, F, R[e]);
            }
            double *DK = dk->data + (b * HK + kh) * NK * D, *DVo = dv->data + (b * HK + kh) * NK * DV;
            for (int64_t e = 0; e < NK * D; e++)
                DK[e] = eval_round(in, dt, eval_round(in, F, eval_round(in, F, dkx[e]) * scale32));
            for (int64_t e = 0; e < NK * DV; e++)
                DVo[e] = eval_round(in, dt, eval_round(in, F, dvx[e]));
        }
    for (int i = 0; i < 3; i++)
        map_put(in->arena, &in->values, op->results[i], i == 0 ? dq : i == 1 ? dk : dv);
    return true;
}

/* The region `blk` on each element of r, its argument i fed ins[i]'s element
 * (broadcast to r's shape), rounded to r's type: op's result. */
static bool map_region(Interp *in, const Op *op, const Block *blk, Tensor *r, Tensor **ins, int n) {
    Plan plan = {0};
    if (!plan_region(in, blk, &plan))
        return false;
    int64_t *strides = NEW_ARRAY(in->arena, int64_t, (size_t)(n + 1) * MAX_RANK), idx[MAX_RANK] = {0};
    for (int i = 0; i < n; i++)
        broadcast_strides(ins[i], r->rank, strides + i * MAX_RANK);
    for (int64_t e = 0; e < r->size; e++) {
        for (int i = 0; i < n; i++) {
            int64_t off = 0;
            for (int d = 0; d < r->rank; d++)
                off += idx[d] * strides[i * MAX_RANK + d];
            plan.slots[i] = ins[i]->data[off];
        }
        double y;
        if (!run_plan(in, &plan, &y))
            return false;
        r->data[e] = eval_round(in, r->dtype, y);
        for (int d = r->rank - 1; d >= 0 && ++idx[d] == r->dims[d]; d--)
            idx[d] = 0;
    }
    return eval_set_result(in, op, r);
}

/* attn.fused_gemm: each product a @ b_i (b_i a 2-D weight, [K, N] or with
 * b_transposed [N, K]) as attn.matmul computes it, rounded to the region's
 * argument type; then the region per output element. */
bool eval_fused_gemm(Interp *in, const Op *op) {
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    const Block *blk = op->regions[0].blocks[0];
    int n = (int)op_attr(op, "num_b")->i, nextra = op->noperands - 1 - n;
    ScalarKind acc = op_attr(op, "acc")->type->elem;
    Tensor *a = eval_get(in, op->operands[0]);
    int64_t M = a->dims[a->rank - 2], K = a->dims[a->rank - 1], N = r->dims[r->rank - 1];
    if (nextra > 16)
        return eval_fail(in, op, "the interpreter takes at most 16 extra operands");
    Tensor **ins = NEW_ARRAY(in->arena, Tensor *, n + nextra);   /* the region's: the products, then the extras */
    for (int i = 0; i < n; i++) {
        Tensor *b = eval_get(in, op->operands[1 + i]);
        int64_t sk = N, sn = 1;   /* b's strides along K and N */
        if (gemm_weight_transposed(op, i))
            sk = 1, sn = K;
        Tensor *prod = ins[i] = tensor_new(in->arena, blk->args[i]->type->elem, r->rank, r->dims);
        int64_t mn = M * N, nbatch = mn > 0 ? r->size / mn : 0;
        for (int64_t bt = 0; bt < nbatch; bt++) {   /* b is a 2-D weight: no batch */
            const double *A = a->data + bt * M * K, *Bm = b->data;
            for (int64_t m = 0; m < M; m++)
                for (int64_t c = 0; c < N; c++) {
                    double sum = 0;
                    for (int64_t k2 = 0; k2 < K; k2++)
                        sum = eval_round(in, acc, sum + A[m * K + k2] * Bm[k2 * sk + c * sn]);
                    prod->data[(bt * M + m) * N + c] = eval_round(in, prod->dtype, sum);
                }
        }
    }
    for (int i = 0; i < nextra; i++)
        ins[n + i] = eval_get(in, op->operands[1 + n + i]);
    return map_region(in, op, blk, r, ins, n + nextra);
}

/* attn.fused_map: the region on each element of the result, fed the
 * operands' elements (broadcast to the result's shape). */
bool eval_fused_map(Interp *in, const Op *op) {
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    int n = op->noperands;
    if (n > 16)
        return eval_fail(in, op, "the interpreter takes at most 16 operands of an attn.fused_map");
    Tensor **ins = NEW_ARRAY(in->arena, Tensor *, n);
    for (int i = 0; i < n; i++)
        ins[i] = eval_get(in, op->operands[i]);
    return map_region(in, op, op->regions[0].blocks[0], r, ins, n);
}
