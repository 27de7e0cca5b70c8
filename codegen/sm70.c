/* sm70.c — Volta (sm_70): mma.sync.aligned.m8n8k4 and register prefetch,
 * behind lower.h's CgTarget. It emits what the sm70-layout pass
 * (passes/nv_layout.c) decided: the nv.* attributes of the tile ops
 * (doc/codegen.md).
 *
 *   accumulator  mma.m8n8k4's, f32 or f16 per the dot's type: each 16×16
 *                block of a warp is four 8×8 quad-pair products, QP q at
 *                rows 8·(q&1), cols 8·(q>>1) (the PTX ISA's m8n8k4
 *                fragment tables give each lane's elements)
 *   tile.dot     A and B fragments read from shared memory (.row/.col as
 *                the memory lies, nv.mma); P, an accumulator tile, reaches
 *                the A layout by shuffles only (xor 2, then xor 8)
 *   copy_async   register prefetch: the global loads are issued where the
 *                copy is, the registers travel in the token (through
 *                loop-carried phis) and are stored to shared memory at the
 *                tile.wait, followed by a barrier
 */
#include <string.h>

#include "codegen/lower.h"

/* ---- the accumulator layout --------------------------------------------------- */

static AccLayout acc_layout(bool acc16) {
    /* f16: element i at (r + 4h, i); f32: ((lane&1) + (i&2) + 4h, (i&4) + (lane&2) + (i&1)) */
    return acc16 ? (AccLayout){.row_bits = 0, .col_bits = 7, .row_lanes = 8, .col_lanes = 16 | 4 | 3}
                 : (AccLayout){.row_bits = 2, .col_bits = 5, .row_lanes = 8 | 2, .col_lanes = 16 | 4 | 1};
}

static void acc_coords(Cg *cg, Pos p, int64_t rows, int64_t cols, LLVMValueRef *row, LLVMValueRef *col) {
    int i = p.i;
    LLVMValueRef h4 = LLVMBuildLShr(cg->b, lane_bit(cg, 16), ci64(cg, 2), "");     /* 4h */
    LLVMValueRef qrow = LLVMBuildShl(cg->b, lane_bit(cg, 4), ci64(cg, 1), "");    /* 8·(qp&1) */
    LLVMValueRef qcol = lane_bit(cg, 8);                                          /* 8·(qp>>1) */
    LLVMValueRef fr, fc;
    if (cg->acc16) {
        fr = add(cg, lane_bit(cg, 3), h4);
        fc = ci64(cg, i);
    } else {
        fr = add(cg, add(cg, lane_bit(cg, 1), ci64(cg, i & 2)), h4);
        fc = add(cg, ci64(cg, (i & 4) + (i & 1)), lane_bit(cg, 2));
    }
    LLVMValueRef rb = warp_row_base(cg, p.a);
    *row = rows == 1 ? ci64(cg, 0) : add(cg, add(cg, rb, qrow), fr);
    *col = cols == 1 ? ci64(cg, 0) : add(cg, add(cg, ci64(cg, 16 * p.b), qcol), fc);
}

/* ---- tile.dot on mma.m8n8k4 ----------------------------------------------------- */

/* Four consecutive f16 from shared memory as two f16x2 words. */
static void load4(Cg *cg, LLVMValueRef base, LLVMValueRef off, int64_t stride, LLVMValueRef *w) {
    LLVMTypeRef v4 = LLVMVectorType(cg->f16, 4);
    LLVMValueRef p = gep(cg, SK_F16, base, off);
    LLVMValueRef v = LLVMBuildLoad2(cg->b, v4, p, "");
    LLVMSetAlignment(v, stride % 4 == 0 ? 8 : 2);
    LLVMValueRef lo[2] = {ci32(cg, 0), ci32(cg, 1)}, hi[2] = {ci32(cg, 2), ci32(cg, 3)};
    w[0] = LLVMBuildShuffleVector(cg->b, v, LLVMGetUndef(v4), LLVMConstVector(lo, 2), "");
    w[1] = LLVMBuildShuffleVector(cg->b, v, LLVMGetUndef(v4), LLVMConstVector(hi, 2), "");
}

/* A fragment (rows of row block a, k-step ks) from a view: .row if the view
 * is [M, K] in memory, .col if it holds Aᵀ. */
static void frag_a_view(Cg *cg, const View *w, int a, int ks, LLVMValueRef *out, const char **lay) {
    LLVMValueRef m0 = add(cg, warp_row_base(cg, a), LLVMBuildShl(cg->b, lane_bit(cg, 4), ci64(cg, 1), ""));
    LLVMValueRef h4 = LLVMBuildLShr(cg->b, lane_bit(cg, 16), ci64(cg, 2), "");
    LLVMValueRef r = lane_bit(cg, 3);
    if (!w->trans) {   /* element i at (m0 + r + 4h, 4ks + i) */
        LLVMValueRef row = add(cg, add(cg, m0, r), h4);
        load4(cg, w->base, add(cg, mul(cg, row, ci64(cg, w->stride)), ci64(cg, 4 * ks)), w->stride, out);
        *lay = "row";
    } else {           /* element i at (m0 + 4h + i, 4ks + r): memory [K][M] */
        LLVMValueRef krow = add(cg, ci64(cg, 4 * ks), r);
        load4(cg, w->base, add(cg, mul(cg, krow, ci64(cg, w->stride)), add(cg, m0, h4)), w->stride, out);
        *lay = "col";
    }
}

/* B fragment (columns of block b, k-step ks): .row if the view is [K, N] in
 * memory, .col if it holds Bᵀ (as K of Q·Kᵀ). */
static void frag_b_view(Cg *cg, const View *w, int b, int ks, LLVMValueRef *out, const char **lay) {
    LLVMValueRef n0 = add(cg, ci64(cg, 16 * b), lane_bit(cg, 8));
    LLVMValueRef h4 = LLVMBuildLShr(cg->b, lane_bit(cg, 16), ci64(cg, 2), "");
    LLVMValueRef r = lane_bit(cg, 3);
    if (!w->trans) {   /* element i at (k = 4ks + r, n = n0 + 4h + i) */
        LLVMValueRef krow = add(cg, ci64(cg, 4 * ks), r);
        load4(cg, w->base, add(cg, mul(cg, krow, ci64(cg, w->stride)), add(cg, n0, h4)), w->stride, out);
        *lay = "row";
    } else {           /* element i at (k = 4ks + i, n = n0 + r + 4h): memory [N][K] */
        LLVMValueRef nrow = add(cg, add(cg, n0, r), h4);
        load4(cg, w->base, add(cg, mul(cg, nrow, ci64(cg, w->stride)), ci64(cg, 4 * ks)), w->stride, out);
        *lay = "col";
    }
}

/* P (an accumulator-layout tile, [R, K]) as A fragments, by shuffles only:
 * first each thread gathers its A row (r + 4h) of its quad pair's 8 columns
 * (f32 layout: one xor-2 exchange of an f16 pair per half), then the two quad
 * pairs of a row block swap halves (xor 8). out[(a·K/4 + ks)·2 + word]. */
static void frags_from_acc(Cg *cg, const Dist *p, int64_t K, LLVMValueRef *out) {
    LLVMValueRef odd = lane_test(cg, 2), hi = lane_test(cg, 8);
    int nb = (int)(K / 16);
    for (int a = 0; a < cg->mrep; a++)
        for (int b = 0; b < nb; b++)
            for (int c0 = 0; c0 < 8; c0 += 4) {
                LLVMValueRef v[8];
                for (int i = 0; i < 8; i++)
                    v[i] = cg_cast(cg, dist_get(cg, p, (Pos){a, b, i}), p->elem, SK_F16);
                LLVMValueRef w[2];
                if (cg->acc16) {
                    w[0] = pack2(cg, v[c0], v[c0 + 1]);
                    w[1] = pack2(cg, v[c0 + 2], v[c0 + 3]);
                } else {
                    LLVMValueRef own = pack2(cg, LLVMBuildSelect(cg->b, odd, v[c0 + 2], v[c0], ""),
                                             LLVMBuildSelect(cg->b, odd, v[c0 + 3], v[c0 + 1], ""));
                    LLVMValueRef send = pack2(cg, LLVMBuildSelect(cg->b, odd, v[c0], v[c0 + 2], ""),
                                              LLVMBuildSelect(cg->b, odd, v[c0 + 1], v[c0 + 3], ""));
                    LLVMValueRef recv = shfl_xor(cg, send, 2);
                    w[0] = LLVMBuildSelect(cg->b, odd, recv, own, "");
                    w[1] = LLVMBuildSelect(cg->b, odd, own, recv, "");
                }
                LLVMValueRef other[2] = {shfl_xor(cg, w[0], 8), shfl_xor(cg, w[1], 8)};
                for (int ch = 0; ch < 2; ch++) {
                    int ks = b * 4 + ch * 2 + c0 / 4;
                    for (int j = 0; j < 2; j++)
                        out[((int64_t)a * (K / 4) + ks) * 2 + j] =
                            ch == 0 ? LLVMBuildSelect(cg->b, hi, other[j], w[j], "")
                                    : LLVMBuildSelect(cg->b, hi, w[j], other[j], "");
                }
            }
}

static void emit_dot(Cg *cg, const Op *op) {
    const Type *at = op->operands[0]->type, *bt = op->operands[1]->type, *rt = op->results[0]->type;
    int64_t M = at->dims[0].size, K = at->dims[1].size, N = bt->dims[1].size;
    bool f16acc = rt->elem == SK_F16;
    if (at->elem != SK_F16 || bt->elem != SK_F16) {
        cg_err(cg, op, "mma.m8n8k4 multiplies f16 operands only", NULL);
        return;
    }
    if (!dot_fits(cg, op))
        return;
    Cv *ca = cv_get(cg, op->operands[0]), *cb = cv_get(cg, op->operands[1]);
    if (!cb || cb->kind != CV_VIEW) {
        cg_err(cg, op, "operand B of tile.dot must be a tile loaded from memory", NULL);
        return;
    }
    LLVMValueRef *pfr = NULL;
    if (!ca || ca->kind != CV_VIEW) {
        Dist *p = dot_a_in_registers(cg, op);
        if (!p)
            return;
        pfr = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)(cg->mrep * (K / 4) * 2));
        frags_from_acc(cg, p, K, pfr);
    }
    Dist *c = as_dist(cg, op, op->operands[2]);
    int nb = (int)(N / 16);
    Dist *r = dist_new(cg, rt->elem, M, N);
    /* accumulators, in mma argument order */
    int nacc = f16acc ? 4 : 8;
    LLVMValueRef *acc = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)(cg->mrep * nb * nacc));
    for (int a = 0; a < cg->mrep; a++)
        for (int b = 0; b < nb; b++)
            for (int j = 0; j < nacc; j++) {
                LLVMValueRef *slot = &acc[(a * nb + b) * nacc + j];
                if (f16acc)
                    *slot = pack2(cg, cg_cast(cg, dist_get(cg, c, (Pos){a, b, 2 * j}), c->elem, SK_F16),
                                  cg_cast(cg, dist_get(cg, c, (Pos){a, b, 2 * j + 1}), c->elem, SK_F16));
                else
                    *slot = cg_cast(cg, dist_get(cg, c, (Pos){a, b, j}), c->elem, SK_F32);
            }
    LLVMTypeRef et = f16acc ? cg->v2f16 : cg->f32;
    LLVMTypeRef fields[8];
    for (int j = 0; j < nacc; j++)
        fields[j] = et;
    LLVMTypeRef st = LLVMStructTypeInContext(cg->ctx, fields, (unsigned)nacc, false);
    /* a k-step's fragments: two words a row block of A, a 16-column block of B */
    typedef LLVMValueRef Frag[2];
    Frag *afr = NEW_ARRAY(cg->a, Frag, cg->mrep), *bfr = NEW_ARRAY(cg->a, Frag, nb);
    for (int ks = 0; ks < K / 4; ks++) {
        const char *alay = "row", *blay = "row";
        for (int a = 0; a < cg->mrep; a++) {
            if (pfr) {
                afr[a][0] = pfr[((int64_t)a * (K / 4) + ks) * 2];
                afr[a][1] = pfr[((int64_t)a * (K / 4) + ks) * 2 + 1];
            } else {
                frag_a_view(cg, ca->view, a, ks, afr[a], &alay);
            }
        }
        for (int b = 0; b < nb; b++)
            frag_b_view(cg, cb->view, b, ks, bfr[b], &blay);
        const char *acc_t = f16acc ? "f16" : "f32";
        const char *name = arena_printf(cg->a, "llvm.nvvm.mma.m8n8k4.%s.%s.%s.%s", alay, blay, acc_t, acc_t);
        Attr *mma = op_attr(op, "nv.mma");
        if (ks == 0 && (!mma || strcmp(mma->s, arena_printf(cg->a, "m8n8k4.%s.%s.%s", alay, blay, acc_t)) != 0)) {
            cg_err(cg, op, "internal error: the fragments disagree with nv.mma '%s'", mma ? mma->s : "(none)");
            return;
        }
        for (int a = 0; a < cg->mrep; a++)
            for (int b = 0; b < nb; b++) {
                LLVMValueRef args[12] = {afr[a][0], afr[a][1], bfr[b][0], bfr[b][1]};
                LLVMValueRef *ac = &acc[(a * nb + b) * nacc];
                for (int j = 0; j < nacc; j++)
                    args[4 + j] = ac[j];
                LLVMValueRef res = cg_call(cg, name, st, args, 4 + nacc);
                for (int j = 0; j < nacc; j++)
                    ac[j] = LLVMBuildExtractValue(cg->b, res, (unsigned)j, "");
            }
    }
    for (int a = 0; a < cg->mrep; a++)
        for (int b = 0; b < nb; b++)
            for (int j = 0; j < nacc; j++) {
                LLVMValueRef v = acc[(a * nb + b) * nacc + j];
                if (f16acc) {
                    dist_set(cg, r, (Pos){a, b, 2 * j}, LLVMBuildExtractElement(cg->b, v, ci32(cg, 0), ""));
                    dist_set(cg, r, (Pos){a, b, 2 * j + 1}, LLVMBuildExtractElement(cg->b, v, ci32(cg, 1), ""));
                } else {
                    dist_set(cg, r, (Pos){a, b, j}, v);
                }
            }
    cv_put(cg, op->results[0], cv_dist(cg, r));
}


static void emit_copy_async(Cg *cg, const Op *op) {
    Mem *src, *dst;
    if (!copy_operands(cg, op, "registers", &src, &dst))
        return;
    if (dst->rank != 3 || src->elem != SK_F16 || dst->elem != SK_F16) {
        cg_err(cg, op, "tile.copy_async is supported for f16 boxes into [stages, rows, cols] buffers", NULL);
        return;
    }
    Token *t = prefetch(cg, op, src, 3, dst->cdims[1], dst->cdims[2], inner_size_of(op->operands[0]));
    t->dst = dst;
    t->stage = as_scalar(cg, op, op->operands[2]);
    Cv *c = NEW(cg->a, Cv);
    c->kind = CV_TOKEN;
    c->tok = t;
    cv_put(cg, op->results[0], c);
}

static void emit_wait(Cg *cg, const Op *op) {
    const Token *t = wait_token(cg, op);
    if (!t)
        return;
    if (t->dst->cdims[0] < 2)   /* one stage: others may still read it */
        cg_barrier(cg);
    LLVMValueRef base = gep(cg, SK_F16, t->dst->ptr, mul(cg, t->stage, ci64(cg, t->dst->cstrides[0])));
    land(cg, t, base, t->dst->cstrides[1], t->dst->cdims[1], 0);
    cg_barrier(cg);
}

const CgTarget sm70_target = {
    .target = &target_sm70,
    .acc_layout = acc_layout,
    .acc_coords = acc_coords,
    .dot = emit_dot,
    .copy_async = emit_copy_async,
    .wait = emit_wait,
};
