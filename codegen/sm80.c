/* sm80.c — Ampere (sm_80, and sm_90 running sm_80 code): mma.sync.m16n8k16,
 * ldmatrix and cp.async, behind lower.h's CgTarget. It emits what
 * passes/nv_layout.c's sm80-layout decided (doc/codegen.md).
 *
 *   accumulator  m16n8k16's: with g = lane / 4 and t = lane % 4, element i
 *                of a warp's 16×16 block (two n8 tiles) is at row
 *                g + 8·((i >> 1) & 1), column 8·(i >> 2) + 2t + (i & 1);
 *                the four lanes of a quad share a row. GEMMs may put the
 *                warps in a grid (nv.warp_cols): a warp's blocks then start
 *                at its first column
 *   tile.dot     A and B fragments by ldmatrix.x4 (.trans where the memory
 *                holds the other order, nv.a / nv.b), from padded rows or
 *                (the cp.async rings) swizzled panels; P, an accumulator tile,
 *                is already the A fragment of the next MMA: k-step s of P·V
 *                is block s's elements 0..7, packed in pairs; two dots with
 *                one A from shared memory (a dual GEMM's) are emitted
 *                together, each A fragment read once for both
 *   copy_async   cp.async straight into the shared stage (zero-filled
 *                outside the tensor), one commit group per copy; tile.wait
 *                waits with cp.async.wait_group nv.pending (the younger
 *                groups that may stay in flight, counted by sm80-layout),
 *                then a barrier
 *
 * f16 and bf16 operands; f32 accumulators, or f16 for f16 operands.
 */
#include <string.h>

#include "codegen/lower.h"

/* ---- the accumulator layout --------------------------------------------------- */

AccLayout mma16_acc_layout(bool acc16) {
    (void)acc16;   /* the f16 accumulator packs the same elements in pairs */
    return (AccLayout){.row_bits = 2, .col_bits = 5, .row_lanes = 3, .col_lanes = 28};
}

void mma16_acc_coords(Cg *cg, Pos p, int64_t rows, int64_t cols, LLVMValueRef *row, LLVMValueRef *col) {
    int i = p.i;
    *row = *col = ci64(cg, 0);
    if (rows != 1) {   /* g + 8·((i >> 1) & 1) */
        LLVMValueRef g = LLVMBuildLShr(cg->b, lane_bit(cg, 28), ci64(cg, 2), "");
        *row = add(cg, add(cg, warp_row_base(cg, p.a), g), ci64(cg, 8 * ((i >> 1) & 1)));
    }
    if (cols != 1) {   /* 8·(i >> 2) + 2t + (i & 1) */
        LLVMValueRef t2 = LLVMBuildShl(cg->b, lane_bit(cg, 3), ci64(cg, 1), "");
        *col = add(cg, t2, ci64(cg, 16 * p.b + 8 * (i >> 2) + (i & 1)));
        if (cg->wcols > 1)
            *col = add(cg, *col, warp_col_base(cg, cols));
    }
}

/* Accumulator register j of n8 tile n8 in row block a, as the MMA takes it
 * (m16n8k16 and, per warp, wgmma agree): f32 element 4·(n8 % 2) + j of
 * 16-column block n8 / 2; f16 (acc16) the pair of elements 4·(n8 % 2) + 2j
 * and + 1, a <2 x half>. */
LLVMValueRef mma16_acc_get(Cg *cg, const Dist *c, int a, int n8, int j, bool acc16) {
    Pos p = {a, n8 / 2, 4 * (n8 % 2) + (acc16 ? 2 * j : j)};
    if (!acc16)
        return cg_cast(cg, dist_get(cg, c, p), c->elem, SK_F32);
    Pos q = {p.a, p.b, p.i + 1};
    return pack2(cg, cg_cast(cg, dist_get(cg, c, p), c->elem, SK_F16), cg_cast(cg, dist_get(cg, c, q), c->elem, SK_F16));
}

void mma16_acc_set(Cg *cg, Dist *r, int a, int n8, int j, bool acc16, LLVMValueRef v) {
    Pos p = {a, n8 / 2, 4 * (n8 % 2) + (acc16 ? 2 * j : j)};
    if (!acc16) {
        dist_set(cg, r, p, v);
        return;
    }
    dist_set(cg, r, p, LLVMBuildExtractElement(cg->b, v, ci32(cg, 0), ""));
    dist_set(cg, r, (Pos){p.a, p.b, p.i + 1}, LLVMBuildExtractElement(cg->b, v, ci32(cg, 1), ""));
}

/* ---- fragments ----------------------------------------------------------------- */

/* ldmatrix.x4 at this lane's row address: four 8×8 matrices, one b32 (two
 * 16-bit elements) each. */
static void ldmatrix4(Cg *cg, LLVMValueRef addr, bool trans, LLVMValueRef *out) {
    LLVMTypeRef f[4] = {cg->i32, cg->i32, cg->i32, cg->i32};
    LLVMTypeRef st = LLVMStructTypeInContext(cg->ctx, f, 4, false);
    LLVMValueRef r = cg_call(cg, trans ? "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16.p3"
                                       : "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16.p3",
                             st, &addr, 1);
    for (int j = 0; j < 4; j++)
        out[j] = LLVMBuildExtractValue(cg->b, r, (unsigned)j, "");
}

/* Fragment addresses: each lane's address for one operand of one dot
 * (a_lane, b_lane), then a constant offset per fragment, which becomes the
 * ldmatrix's immediate. The base is made opaque (opaque_ptr) at the dot:
 * otherwise LLVM hoists every fragment address of a loop-invariant buffer
 * (Q in shared memory) out of the key loop, a register each, and d128
 * spilled.
 *
 * Padded rows: a fragment's address is the lane's plus a constant.
 * Swizzled (smem_offset's 128-byte panels, 1024-byte aligned): a fragment
 * `col` columns right has the lane's 16-byte chunk XOR col / 8 — bits 5-6
 * of the byte address, which no constant offset gives: one XOR of the
 * lane's address (what CUTLASS does), then constants for the rows and the
 * panels. That holds while adding col to the lane's column carries nothing
 * into the chunk bits, i.e. col % 64 stays below the power of two that the
 * lane's column base is a multiple of (`col_align`: the warp's share of
 * the columns, in a grid); otherwise each fragment's address is made whole
 * from the lane's (row, col). */
typedef struct Lane {
    const View *w;
    ScalarKind k;
    LLVMValueRef addr;              /* of the lane's (row, col) */
    LLVMValueRef base, row, col;    /* swizzled: for fragments made whole */
    int64_t col_align;
} Lane;

static Lane lane_addr(Cg *cg, const View *w, ScalarKind k, LLVMValueRef row, LLVMValueRef col, int64_t col_align) {
    Lane l = {.w = w, .k = k, .base = opaque_ptr(cg, w->base), .row = row, .col = col, .col_align = col_align};
    l.addr = gep(cg, k, l.base, smem_offset(cg, row, col, w->stride, w->panel_rows, w->swizzle));
    return l;
}

/* The power of two (at most 64) that multiples of `step` are multiples of. */
static int64_t align_of(int64_t step) {
    int64_t g = step & -step;
    return g > 64 || step == 0 ? 64 : g;
}

/* The address of the fragment `row` rows and `col` columns (multiples of 16)
 * past the lane's. */
static LLVMValueRef frag_addr(Cg *cg, const Lane *l, int64_t row, int64_t col) {
    const View *w = l->w;
    if (!w->swizzle)
        return gep(cg, l->k, l->addr, ci64(cg, row * w->stride + col));
    if (col % 64 >= l->col_align && l->col_align < 64) {
        LLVMValueRef r = add(cg, l->row, ci64(cg, row)), c = add(cg, l->col, ci64(cg, col));
        return gep(cg, l->k, l->base, smem_offset(cg, r, c, w->stride, w->panel_rows, 128));
    }
    LLVMValueRef a = l->addr;
    if (col % 64) {
        LLVMTypeRef it = LLVMIntTypeInContext(cg->ctx, cg->short_shared ? 32 : 64);
        LLVMValueRef bits = LLVMConstInt(it, (unsigned long long)(col % 64 / 8) << 4, 0);
        a = LLVMBuildIntToPtr(cg->b, LLVMBuildXor(cg->b, LLVMBuildPtrToInt(cg->b, a, it, ""), bits, ""),
                              LLVMTypeOf(a), "");
    }
    return gep(cg, l->k, a, ci64(cg, row * 64 + col / 64 * w->panel_rows * 64));   /* rows of 64 elements */
}

/* A operand: matrix j of ldmatrix.x4 covers tile rows 8·(j&1), columns
 * 8·(j>>1); lane l gives the address of its row l % 8. Memory [M][K]: row
 * m0 + (l & 15), column 8·((l >> 4) & 1); memory [K][M] (.trans): row (k)
 * (l & 7) + 8·((l >> 4) & 1), column m0 + (l & 8). m0 is the warp's first row
 * (16·mrep rows a warp: at a panel's start when that is a multiple of 64). */
static Lane a_lane(Cg *cg, const View *w, ScalarKind k) {
    LLVMValueRef m0 = warp_row_base(cg, 0), hi8 = LLVMBuildLShr(cg->b, lane_bit(cg, 16), ci64(cg, 1), "");
    if (!w->trans)
        return lane_addr(cg, w, k, add(cg, m0, lane_bit(cg, 15)), hi8, 64);
    return lane_addr(cg, w, k, add(cg, lane_bit(cg, 7), hi8), add(cg, m0, lane_bit(cg, 8)), align_of(16 * cg->mrep));
}

/* A fragments of row block a (16 rows), k-step ks (16 columns): a0..a3 =
 * rows g / g+8, columns 2t / 2t+8. */
static void frag_a(Cg *cg, const Lane *l, int a, int ks, LLVMValueRef *out) {
    if (!l->w->trans)
        ldmatrix4(cg, frag_addr(cg, l, 16 * a, 16 * ks), false, out);
    else
        ldmatrix4(cg, frag_addr(cg, l, 16 * ks, 16 * a), true, out);
}

/* B operand: memory [K][N] (V), transposed: row (l & 15), column 8·((l >> 4)
 * & 1); memory [N][K] (K of Q·Kᵀ): row (l & 7) + 8·((l >> 4) & 1), column
 * (l & 8). In a grid of warps, n counts from the warp's first column of the
 * N columns (N / wcols a warp). */
static Lane b_lane(Cg *cg, const View *w, ScalarKind k, int64_t N) {
    LLVMValueRef hi8 = LLVMBuildLShr(cg->b, lane_bit(cg, 16), ci64(cg, 1), "");
    LLVMValueRef n0 = warp_col_base(cg, N);   /* a constant 0 unless the warps form a grid */
    if (!w->trans)
        return lane_addr(cg, w, k, lane_bit(cg, 15), cg->wcols > 1 ? add(cg, n0, hi8) : hi8,
                         align_of(cg->wcols > 1 ? N / cg->wcols : 0));
    LLVMValueRef col = lane_bit(cg, 8), n = add(cg, lane_bit(cg, 7), hi8);
    return lane_addr(cg, w, k, cg->wcols > 1 ? add(cg, n0, n) : n, col, 64);
}

/* B fragments of column block b (two n8 tiles), k-step ks: out[0..1] the
 * first n8 tile's (k rows 2t and 2t+8), out[2..3] the second's. */
static void frag_b(Cg *cg, const Lane *l, int b, int ks, LLVMValueRef *out) {
    if (!l->w->trans)
        ldmatrix4(cg, frag_addr(cg, l, 16 * ks, 16 * b), true, out);
    else
        ldmatrix4(cg, frag_addr(cg, l, 16 * b, 16 * ks), false, out);
}

/* Q: every A fragment of the tile, into registers once (before the key
 * loop), out[(a·K/16 + ks)·4 + j]. */
static void preload_a(Cg *cg, View *w, ScalarKind k) {
    int nks = (int)(w->cols / 16);
    w->frags = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)(cg->mrep * nks * 4));
    Lane lane = a_lane(cg, w, k);
    for (int a = 0; a < cg->mrep; a++)
        for (int ks = 0; ks < nks; ks++)
            frag_a(cg, &lane, a, ks, &w->frags[(a * nks + ks) * 4]);
}

/* Two f32 values rounded to one b32 of f16 or bf16 (lo, hi): one
 * cvt.rn.{f16,bf16}x2.f32, whose first source is the upper half. */
static LLVMValueRef round_pack_b32(Cg *cg, LLVMValueRef lo, LLVMValueRef hi, ScalarKind k) {
    LLVMValueRef args[2] = {hi, lo};
    if (k == SK_F16)
        return LLVMBuildBitCast(cg->b, cg_call(cg, "llvm.nvvm.ff2f16x2.rn", cg->v2f16, args, 2), cg->i32, "");
    LLVMTypeRef v2bf16 = LLVMVectorType(cg->bf16, 2);
    return LLVMBuildBitCast(cg->b, cg_call(cg, "llvm.nvvm.ff2bf16x2.rn", v2bf16, args, 2), cg->i32, "");
}

/* P's A fragment: two 16-bit values, which are usually f32 scores just
 * rounded (arith.cast): then one paired rounding instead of two and a move. */
LLVMValueRef mma16_pack_a(Cg *cg, LLVMValueRef lo, LLVMValueRef hi, ScalarKind k) {
    if (LLVMIsAInstruction(lo) && LLVMIsAInstruction(hi) && LLVMGetInstructionOpcode(lo) == LLVMFPTrunc &&
        LLVMGetInstructionOpcode(hi) == LLVMFPTrunc) {
        LLVMValueRef x = LLVMGetOperand(lo, 0), y = LLVMGetOperand(hi, 0);
        if (LLVMTypeOf(x) == cg->f32 && LLVMTypeOf(y) == cg->f32)
            return round_pack_b32(cg, x, y, k);
    }
    return pack_b32(cg, lo, hi);
}

static LLVMValueRef as_operand(Cg *cg, LLVMValueRef b32, ScalarKind k) {   /* f16: <2 x half>; bf16: i32 */
    return k == SK_F16 ? LLVMBuildBitCast(cg->b, b32, cg->v2f16, "") : b32;
}

/* ---- tile.dot on mma.m16n8k16 ------------------------------------------------------ */

/* One dot's operands and accumulators, as its MMAs need them. */
typedef struct DotPlan {
    const Op *op;
    int64_t M, N;
    Lane blane;
    int nb, nacc;
    bool f16acc;
    LLVMValueRef *acc;   /* per (row block, n8 tile), in mma argument order */
    LLVMTypeRef st;
    const char *name;
} DotPlan;

/* Checks a dot against its nv attributes and reads its B view and
 * accumulators; *a_regs / *a_pre: A is P in registers / preloaded; *alane
 * (when not NULL): A's lane addresses, when ldmatrix reads it. */
static bool plan_dot(Cg *cg, const Op *op, DotPlan *d, bool *a_regs, bool *a_pre, Lane *alane) {
    const Type *at = op->operands[0]->type, *bt = op->operands[1]->type, *rt = op->results[0]->type;
    ScalarKind ek = bt->elem;
    d->op = op;
    d->M = at->dims[0].size, d->N = bt->dims[1].size;
    d->f16acc = rt->elem == SK_F16;
    Attr *mma = op_attr(op, "nv.mma"), *na = op_attr(op, "nv.a"), *nb_attr = op_attr(op, "nv.b");
    const char *want = arena_printf(cg->a, "m16n8k16.row.col.%s.%s", d->f16acc ? "f16" : "f32", scalar_name(ek));
    if (!mma || !na || !nb_attr || strcmp(mma->s, want) != 0)
        return cg_err(cg, op, "internal error: tile.dot's nv.mma is not '%s' (run sm80-layout)", want);
    if ((ek != SK_F16 && ek != SK_BF16) || (d->f16acc && ek != SK_F16))
        return cg_err(cg, op, "mma.m16n8k16 multiplies f16 or bf16 (f16 accumulates f16 only)", NULL);
    if (!dot_fits(cg, op))
        return false;
    Cv *ca = cv_get(cg, op->operands[0]), *cb = cv_get(cg, op->operands[1]);
    *a_regs = strcmp(na->s, "registers") == 0, *a_pre = strcmp(na->s, "fragments") == 0;
    if (!cb || cb->kind != CV_VIEW || cb->view->trans != (strcmp(nb_attr->s, "ldmatrix") == 0) ||
        (!*a_regs && (!ca || ca->kind != CV_VIEW || ca->view->trans != (strcmp(na->s, "ldmatrix.trans") == 0) ||
                      *a_pre != (ca->view->frags != NULL))))
        return cg_err(cg, op, "internal error: tile.dot's operands disagree with nv.a / nv.b", NULL);
    if (*a_regs && cg->wcols > 1)   /* P's columns are the dot's K: they would span warps */
        return cg_err(cg, op, "internal error: a dot whose A is in registers, in a grid of warps (nv.warp_cols)", NULL);
    d->nb = nrep_of(cg, d->N);   /* the 16-column blocks of this warp */
    d->nacc = d->f16acc ? 2 : 4;
    Dist *c = as_dist(cg, op, op->operands[2]);
    d->acc = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)(cg->mrep * d->nb * 2 * d->nacc));
    for (int a = 0; a < cg->mrep; a++)
        for (int n8 = 0; n8 < 2 * d->nb; n8++)
            for (int j = 0; j < d->nacc; j++)
                d->acc[(a * 2 * d->nb + n8) * d->nacc + j] = mma16_acc_get(cg, c, a, n8, j, d->f16acc);
    if (alane && !*a_regs && !*a_pre)
        *alane = a_lane(cg, ca->view, ek);
    d->blane = b_lane(cg, cb->view, ek, d->N);
    LLVMTypeRef et = d->f16acc ? cg->v2f16 : cg->f32;
    LLVMTypeRef fields[4] = {et, et, et, et};
    d->st = LLVMStructTypeInContext(cg->ctx, fields, (unsigned)d->nacc, false);
    d->name = ek == SK_BF16 ? "llvm.nvvm.mma.m16n8k16.row.col.bf16"
              : d->f16acc   ? "llvm.nvvm.mma.m16n8k16.row.col.f16.f16"
                            : "llvm.nvvm.mma.m16n8k16.row.col.f32.f32";
    return !cg->failed;
}

/* P's A fragments of k-step ks (block ks of P: elements (0,1), (2,3),
 * (4,5), (6,7) are a0..a3), out[a·4 + j]. */
static void pack_p(Cg *cg, const Dist *p, ScalarKind ek, int ks, LLVMValueRef *out) {
    for (int a = 0; a < cg->mrep; a++)
        for (int j = 0; j < 4; j++) {
            LLVMValueRef x = dist_get(cg, p, (Pos){a, ks, 2 * j}), y = dist_get(cg, p, (Pos){a, ks, 2 * j + 1});
            out[a * 4 + j] = mma16_pack_a(cg, cg_cast(cg, x, p->elem, ek), cg_cast(cg, y, p->elem, ek), ek);
        }
}

/* One m16n8k16: accumulator tile (row block a, n8 tile n8) += A fragment
 * afr × the n8 tile's half of B fragment bfr (ldmatrix.x4 of two n8 tiles). */
static void mma(Cg *cg, DotPlan *e, ScalarKind ek, int a, int n8, const LLVMValueRef *afr, const LLVMValueRef *bfr) {
    LLVMValueRef args[10];
    for (int j = 0; j < 4; j++)
        args[j] = as_operand(cg, afr[j], ek);
    args[4] = as_operand(cg, bfr[2 * (n8 % 2)], ek);
    args[5] = as_operand(cg, bfr[2 * (n8 % 2) + 1], ek);
    LLVMValueRef *ac = &e->acc[(a * 2 * e->nb + n8) * e->nacc];
    for (int j = 0; j < e->nacc; j++)
        args[6 + j] = ac[j];
    LLVMValueRef res = cg_call(cg, e->name, e->st, args, 6 + e->nacc);
    for (int j = 0; j < e->nacc; j++)
        ac[j] = LLVMBuildExtractValue(cg->b, res, (unsigned)j, "");
}

/* P·V with V swizzled: column block by column block, every k-step of one
 * before the next, the blocks of one XOR value together (0, 4, 1, 5, ...
 * of 8). Each XOR of V's lane address (frag_addr) is then live for one or
 * two blocks instead of the whole dot: k-step-major order kept all four,
 * and at head dim 128 with 64 keys ptxas spilled the row sums for them.
 * Each accumulator still sums its k-steps in order. */
static void emit_dot_by_columns(Cg *cg, DotPlan *e, ScalarKind ek, int64_t K, const LLVMValueRef *pfr) {
    int per = (e->nb + 3) / 4;   /* blocks per XOR value */
    for (int i = 0; i < e->nb; i++) {
        int b = e->nb % 4 ? i : 4 * (i % per) + i / per;
        for (int ks = 0; ks < K / 16; ks++) {
            LLVMValueRef bfr[4];
            frag_b(cg, &e->blane, b, ks, bfr);
            for (int n8 = 2 * b; n8 < 2 * b + 2; n8++)
                for (int a = 0; a < cg->mrep; a++)
                    mma(cg, e, ek, a, n8, &pfr[(ks * cg->mrep + a) * 4], bfr);
        }
    }
}

/* The online softmax's row sum of the scores that P·V's P is made of (a
 * tile.reduce "sum" before the dot in its block), or NULL. */
static const Op *row_sum_of_p(const Op *dot) {
    const Op *cast = dot->operands[0]->def;
    const Value *scores = cast && cast->kind == OP_CAST ? cast->operands[0] : dot->operands[0];
    const Op *sum = NULL;
    for (const Op *o = dot->parent->first; o && o != dot; o = o->next)
        if (o->kind == OP_TILE_REDUCE && o->operands[0] == scores && op_attr(o, "kind") &&
            strcmp(op_attr(o, "kind")->s, "sum") == 0)
            sum = o;
    return sum;
}

/* For a P·V at the register limit (sm80-layout's nv.register_limit: P in
 * registers, f32 scores and output of head dim 128 with 64 keys), P's row
 * sum; else NULL. emit_dots orders such a P·V so that ptxas does not spill
 * (below). */
static const Op *row_sum_at_register_limit(const Op *dot) {
    return op_attr(dot, "nv.register_limit") ? row_sum_of_p(dot) : NULL;
}

/* O·α behind a warp vote (lower.c, skips_unit_scale) where the product is
 * the accumulator of a P·V that is not at the register limit: there
 * rescale_after_row_sums needs O·α as a product it can tie to the row sums. */
static bool may_skip_unit_scale(const Cg *cg, const Op *mul) {
    (void)cg;
    for (const Op *o = mul->next; o; o = o->next)
        if (o->kind == OP_DOT && o->noperands > 2 && o->operands[2] == mul->results[0])
            return !row_sum_at_register_limit(o);
    return false;
}

/* P·V's accumulator is O·α (the online softmax's rescale), and the row
 * sums of P's scores are wanted only by the next key tile: ptxas then
 * sinks their adds below P·V and keeps all of the f32 scores alive
 * through it (64 registers at head dim 128 with 64 keys, which spilled).
 * Each O·α made here as fma(O, α, 0·l), l its row's sum, ties the
 * rescale, and so every MMA of P·V, to the sums: the same values (l is
 * finite, a sum of exponentials of at most 2^8 under online-softmax's lazy
 * max, or NaN only where P, and so O, is NaN too), and no more
 * instructions. */
static void rescale_after_row_sums(Cg *cg, const Op *sum, DotPlan *e) {
    Cv *c = cv_get(cg, sum->results[0]);
    if (!c || c->kind != CV_DIST)
        return;
    LLVMValueRef zero = fconst(cg, SK_F32, 0);
    for (int a = 0; a < cg->mrep; a++)
        for (int h = 0; h < 2; h++) {   /* rows g and g + 8 of row block a: accumulator registers 2h, 2h + 1 */
            LLVMValueRef l = cg_cast(cg, dist_get(cg, c->d, (Pos){a, 0, 2 * h}), c->d->elem, SK_F32);
            LLVMValueRef z = LLVMBuildFMul(cg->b, l, zero, "");
            for (int n8 = 0; n8 < 2 * e->nb; n8++)
                for (int j = 2 * h; j < 2 * h + 2; j++) {
                    LLVMValueRef *ac = &e->acc[(a * 2 * e->nb + n8) * e->nacc + j];
                    if (!LLVMIsAInstruction(*ac) || LLVMGetInstructionOpcode(*ac) != LLVMFMul)
                        continue;
                    LLVMValueRef args[3] = {LLVMGetOperand(*ac, 0), LLVMGetOperand(*ac, 1), z};
                    *ac = cg_call(cg, "llvm.fma.f32", cg->f32, args, 3);
                }
        }
}

/* ndots dots with one A operand (SwiGLU's gate and up: x @ wg, x @ wu),
 * k-step by k-step: A's fragments are read once a k-step for all of them,
 * and each fragment feeds every dot's MMAs. */
static void emit_dots(Cg *cg, const Op *const *ops, int ndots) {
    DotPlan d[2];
    bool a_regs = false, a_pre = false;
    Lane alane = {0};
    for (int i = 0; i < ndots; i++) {
        bool regs = false, pre = false;
        if (!plan_dot(cg, ops[i], &d[i], &regs, &pre, i == 0 ? &alane : NULL))
            return;
        if (i == 0) {
            a_regs = regs, a_pre = pre;
        } else if (regs || pre != a_pre || ops[i]->operands[0] != ops[0]->operands[0]) {
            cg_err(cg, ops[i], "internal error: dots emitted together must share A from shared memory", NULL);
            return;
        }
    }
    const Op *op = ops[0];
    int64_t K = op->operands[0]->type->dims[1].size;
    ScalarKind ek = op->operands[1]->type->elem;
    Cv *ca = cv_get(cg, op->operands[0]);
    Dist *p = NULL;
    if (a_regs && !(p = dot_a_in_registers(cg, op)))
        return;
    /* P·V at the register limit (scores and output over 160 f32 a thread:
     * head dim 128 with 64 keys) is emitted so that ptxas does not spill in
     * the key loop: P packed whole before the first MMA (the 16-bit pairs
     * take half the registers of the f32 scores, dead once packed;
     * FlashAttention-2 converts the whole tile first too), O's rescale tied
     * to the row sums, V by column block (emit_dot_by_columns). Elsewhere
     * those measured 5-7 % slower (head dim 64,
     * bench/results/2026-12-03-h200/NOTES.md): there P is packed k-step by
     * k-step, as the MMAs take it. */
    const Op *sum = p ? row_sum_at_register_limit(op) : NULL;
    bool tight = sum != NULL;
    LLVMValueRef *pfr = NULL;   /* P's A fragments, [ks][a][j] */
    if (p) {
        pfr = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)(K / 16 * cg->mrep * 4));
        for (int ks = 0; tight && ks < K / 16; ks++)
            pack_p(cg, p, ek, ks, &pfr[ks * cg->mrep * 4]);
    }
    if (tight)
        rescale_after_row_sums(cg, sum, &d[0]);
    if (tight && d[0].blane.w->swizzle && !d[0].blane.w->trans) {   /* V's XOR is per column block */
        emit_dot_by_columns(cg, &d[0], ek, K, pfr);
    } else {
        typedef LLVMValueRef Frag[4];   /* a k-step's fragments: a row block of A, a 16-column block of B */
        int max_nb = 0;
        for (int i = 0; i < ndots; i++)
            max_nb = d[i].nb > max_nb ? d[i].nb : max_nb;
        Frag *afr = NEW_ARRAY(cg->a, Frag, cg->mrep), *bfr = NEW_ARRAY(cg->a, Frag, max_nb);
        for (int ks = 0; ks < K / 16; ks++) {
            for (int a = 0; a < cg->mrep; a++) {
                if (p) {
                    if (!tight && a == 0)
                        pack_p(cg, p, ek, ks, &pfr[ks * cg->mrep * 4]);
                    for (int j = 0; j < 4; j++)
                        afr[a][j] = pfr[(ks * cg->mrep + a) * 4 + j];
                } else if (a_pre) {
                    for (int j = 0; j < 4; j++)
                        afr[a][j] = ca->view->frags[(a * (K / 16) + ks) * 4 + j];
                } else {
                    frag_a(cg, &alane, a, ks, afr[a]);
                }
            }
            for (int i = 0; i < ndots; i++) {
                DotPlan *e = &d[i];
                for (int b = 0; b < e->nb; b++)
                    frag_b(cg, &e->blane, b, ks, bfr[b]);
                for (int a = 0; a < cg->mrep; a++)
                    for (int n8 = 0; n8 < 2 * e->nb; n8++)
                        mma(cg, e, ek, a, n8, afr[a], bfr[n8 / 2]);
            }
        }
    }
    for (int i = 0; i < ndots; i++) {
        DotPlan *e = &d[i];
        Dist *r = dist_new(cg, e->op->results[0]->type->elem, e->M, e->N);
        for (int a = 0; a < cg->mrep; a++)
            for (int n8 = 0; n8 < 2 * e->nb; n8++)
                for (int j = 0; j < e->nacc; j++)
                    mma16_acc_set(cg, r, a, n8, j, e->f16acc, e->acc[(a * 2 * e->nb + n8) * e->nacc + j]);
        cv_put(cg, e->op->results[0], cv_dist(cg, r));
    }
}

static void emit_dot(Cg *cg, const Op *op) { emit_dots(cg, &op, 1); }

static void emit_dot_pair(Cg *cg, const Op *first, const Op *second) {
    emit_dots(cg, (const Op *const[]){first, second}, 2);
}

const CgTarget sm80_target = {
    .target = &target_sm80,
    .acc_layout = mma16_acc_layout,
    .acc_coords = mma16_acc_coords,
    .dot = emit_dot,
    .dot_pair = emit_dot_pair,
    .preload_a = preload_a,
    .copy_async = cp_async_copy,
    .wait = cp_async_wait,
    .drain = cp_async_drain,
    .pair_stores = true,
    .warp_grid = true,
    .may_skip_unit_scale = may_skip_unit_scale,
    .smem_align = 1024,   /* swizzled tiles: frag_addr XORs absolute addresses */
};
