/* sm90a.c — Hopper (sm_90a): tile.dot on wgmma.mma_async, behind lower.h's
 * CgTarget. It emits what passes/nv_layout.c's sm90a-layout decided
 * (doc/codegen.md). The kernel around the dots: TMA copies into the
 * double-buffering pass's stages with mbarriers (tma.c), issued by a
 * producer warpgroup under warp specialisation (lower.c); the consumer
 * warps run the dots and the softmax.
 *
 *   accumulator  wgmma's, which per warp is m16n8k16's (sm80.c): warp w of
 *                a warpgroup holds rows 16w..16w+15 of the warpgroup's 64,
 *                register d[4n + j] of n8 tile n is element j of that tile
 *   tile.dot     each warpgroup issues m64nNk16 for its 64 rows (N up to
 *                256 a instruction): A from shared memory (a descriptor) or,
 *                for P, from the accumulator registers as they are (RS); B
 *                from shared memory, K-major (K stored [N, K]) or MN-major
 *                (V stored [K, N], transposed by the instruction). Operands
 *                lie in 128-byte swizzled panels of 64 columns (smem.c's
 *                smem_offset). fence, the k-steps, commit; the wait comes
 *                right after, or, in a launch softmax-overlap rotated
 *                (nv.overlap), at the first op that needs the result
 *                (complete), so the code between runs beside the dot
 *   copies       TMA (tma.c) into the swizzled stages, or cp.async with
 *                fence.proxy.async before the barrier that publishes them
 *                (wgmma reads shared memory through the async proxy)
 *   ping-pong    (nv.pingpong) the consumer warpgroups take turns at their
 *                dots, on named barriers
 *
 * f16 and bf16 operands; f32 accumulators, or f16 (pairs in b32 registers)
 * for f16 operands.
 */
#include <string.h>

#include "codegen/lower.h"

/* The first row of this thread's warpgroup, as i64: 64 · (warp / 4). */
static LLVMValueRef warpgroup_row(Cg *cg) {
    return zext64(cg, LLVMBuildShl(cg->b, LLVMBuildLShr(cg->b, cg->warp, ci32(cg, 2), ""), ci32(cg, 6), ""));
}

/* A shared-memory matrix descriptor with the 128-byte swizzle (PTX ISA,
 * "Matrix Descriptor Format"): start address >> 4 in bits 0-13, leading
 * byte offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, base offset
 * 0 in 49-51 (panels are 1024-byte aligned), swizzle mode 1 in 62-63. A
 * byte offset inside the tile is added later as offset >> 4 (the address
 * field cannot carry over: shared memory ends below 2^18). */
static LLVMValueRef descriptor(Cg *cg, LLVMValueRef addr, int64_t lbo, int64_t sbo) {
    LLVMValueRef a32 = LLVMBuildPtrToInt(cg->b, addr, cg->i32, "");
    LLVMValueRef lo = zext64(cg, LLVMBuildLShr(cg->b, LLVMBuildAnd(cg->b, a32, ci32(cg, 0x3FFFF), ""), ci32(cg, 4), ""));
    unsigned long long hi = ((unsigned long long)(lbo >> 4) << 16) | ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
    return LLVMBuildOr(cg->b, lo, LLVMConstInt(cg->i64, hi, false), "");
}

static LLVMValueRef desc_plus(Cg *cg, LLVMValueRef desc, int64_t bytes) {
    return bytes ? add(cg, desc, ci64(cg, bytes >> 4)) : desc;
}

/* An operand in shared memory, as a descriptor at k-step 0 and the byte
 * offset of each further k-step. K-major (the operand's rows are its M or N,
 * its columns K): the rows of 128 bytes, 8-row groups 1024 apart (stride
 * offset), a k-step 32 bytes along the row, a new panel every 4. MN-major
 * (rows are K): a k-step is 16 rows (2048 bytes), the panels of 64 M/N
 * columns panel_rows · 128 apart (leading offset). first: the operand's
 * first M/N index (this warpgroup's rows of A; a chunk of B's columns). */
typedef struct Operand {
    LLVMValueRef desc;
    bool mn_major;
    int64_t panel_bytes;
} Operand;

static Operand operand(Cg *cg, const View *w, bool mn_major, LLVMValueRef first) {
    Operand o = {.mn_major = mn_major, .panel_bytes = w->panel_rows * 128};
    LLVMValueRef base = w->base;
    if (!mn_major)   /* row `first` (a multiple of 8) of every panel */
        base = gep(cg, SK_F16, base, mul(cg, first, ci64(cg, 64)));
    else             /* panel first / 64 */
        base = gep(cg, SK_F16, base, mul(cg, LLVMBuildLShr(cg->b, first, ci64(cg, 6), ""), ci64(cg, w->panel_rows * 64)));
    o.desc = descriptor(cg, base, mn_major ? o.panel_bytes : 16, 1024);
    if (cg->rematerialise)   /* formed at each dot, not held across the loop a k-step each */
        o.desc = opaque(cg, o.desc);
    return o;
}

static LLVMValueRef operand_at(Cg *cg, const Operand *o, int ks) {
    return desc_plus(cg, o->desc, o->mn_major ? 2048 * ks : (ks / 4) * o->panel_bytes + 32 * (ks % 4));
}

/* One wgmma.mma_async m64n<n>k16: acc (this thread's n/2 f32, or n/4 b32
 * f16 pairs: acc16) += A·B. a: a descriptor (SS) or four b32 registers
 * (RS, a_regs). scale_d false: the accumulator's old value is ignored (a
 * fresh dot; acc may be undef). */
static void wgmma(Cg *cg, int n, ScalarKind ek, bool acc16, LLVMValueRef *acc, LLVMValueRef a_desc,
                  LLVMValueRef *a_regs, LLVMValueRef b_desc, bool scale_d, bool trans_a, bool trans_b) {
    int nacc = acc16 ? n / 4 : n / 2, nin = a_regs ? 4 : 1;
    LLVMTypeRef at = acc16 ? cg->i32 : cg->f32;
    StrBuf text, cons;
    strbuf_open(&text);
    strbuf_open(&cons);
    const char *ab = scalar_name(ek);
    fprintf(text.f, "{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\nwgmma.mma_async.sync.aligned.m64n%dk16.%s.%s.%s {",
            nacc + nin + 1, n, acc16 ? "f16" : "f32", ab, ab);
    for (int i = 0; i < nacc; i++)
        fprintf(text.f, "%s$%d", i ? ", " : "", i);
    if (a_regs)
        fprintf(text.f, "}, {$%d, $%d, $%d, $%d}, $%d, p, 1, 1, %d;\n}", nacc, nacc + 1, nacc + 2, nacc + 3, nacc + 4,
                trans_b);
    else
        fprintf(text.f, "}, $%d, $%d, p, 1, 1, %d, %d;\n}", nacc, nacc + 1, trans_a, trans_b);
    for (int i = 0; i < nacc; i++)
        fprintf(cons.f, "%s=%c", i ? "," : "", acc16 ? 'r' : 'f');
    fprintf(cons.f, a_regs ? ",r,r,r,r,l,n" : ",l,l,n");   /* scale-d an immediate, as CUTLASS passes it */
    for (int i = 0; i < nacc; i++)
        fprintf(cons.f, ",%d", i);
    int nargs = nin + 2 + nacc;
    LLVMValueRef *args = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)nargs);
    int k = 0;
    for (int i = 0; i < nin; i++)
        args[k++] = a_regs ? a_regs[i] : a_desc;
    args[k++] = b_desc;
    args[k++] = ci32(cg, scale_d);
    for (int i = 0; i < nacc; i++)
        args[k++] = scale_d ? acc[i] : LLVMGetUndef(at);
    LLVMTypeRef *fields = NEW_ARRAY(cg->a, LLVMTypeRef, (size_t)nacc);
    for (int i = 0; i < nacc; i++)
        fields[i] = at;
    LLVMTypeRef st = LLVMStructTypeInContext(cg->ctx, fields, (unsigned)nacc, false);
    LLVMValueRef r = cg_asm(cg, strbuf_finish(&text, cg->a, NULL), strbuf_finish(&cons, cg->a, NULL), st, args, nargs);
    for (int i = 0; i < nacc; i++)
        acc[i] = LLVMBuildExtractValue(cg->b, r, (unsigned)i, "");
}

static LLVMValueRef add32(Cg *cg, LLVMValueRef x, int64_t y) { return LLVMBuildAdd(cg->b, x, ci32(cg, y), ""); }

/* Ping-pong (FlashAttention-3): the consumer warpgroups issue their dots in
 * turn, so one's softmax runs while another's dots keep the tensor cores
 * busy. Warpgroup w's turn is a named barrier (NB_TURN): it syncs there (128
 * threads) before its dots, and once they are issued arrives at the next
 * warpgroup's (128 more: 256 in all). */
static void pingpong_barrier(Cg *cg, const char *how, LLVMValueRef wg) { named_barrier(cg, how, NB_TURN, wg, 256); }

/* wgmma.wait_group n: every group but the n committed last is complete.
 * The registers of the completed dots pass through the wait's inline asm,
 * so LLVM places their uses after it. */
static void wait_groups(Cg *cg, int n, LLVMValueRef *acc, int nacc) {
    StrBuf cons;
    strbuf_open(&cons);
    for (int i = 0; i < nacc; i++)
        fprintf(cons.f, "%s=%c", i ? "," : "", LLVMTypeOf(acc[i]) == cg->f32 ? 'f' : 'r');
    for (int i = 0; i < nacc; i++)
        fprintf(cons.f, ",%d", i);
    fprintf(cons.f, "%s~{memory}", nacc ? "," : "");
    LLVMTypeRef *fields = NEW_ARRAY(cg->a, LLVMTypeRef, (size_t)nacc + 1);
    for (int i = 0; i < nacc; i++)
        fields[i] = LLVMTypeOf(acc[i]);
    LLVMTypeRef st = nacc ? LLVMStructTypeInContext(cg->ctx, fields, (unsigned)nacc, false)
                          : LLVMVoidTypeInContext(cg->ctx);
    LLVMValueRef r = cg_asm(cg, arena_printf(cg->a, "wgmma.wait_group.sync.aligned %d;", n),
                            strbuf_finish(&cons, cg->a, NULL), st, acc, nacc);
    for (int i = 0; i < nacc; i++)
        acc[i] = LLVMBuildExtractValue(cg->b, r, (unsigned)i, "");
}

/* The result of an in-flight dot, from its accumulator registers. */
static void set_result(Cg *cg, struct InFlight *f) {
    for (int i = 0; i < f->nacc; i++)
        mma16_acc_set(cg, f->r, 0, i / f->per, i % f->per, f->acc16,
                      f->acc16 ? LLVMBuildBitCast(cg->b, f->acc[i], cg->v2f16, "") : f->acc[i]);
}

/* Does the dot read a tile loaded from buf (through a transpose)? */
static bool dot_reads(const Op *dot, const Value *buf) {
    for (int i = 0; i < 2; i++) {
        const Op *d = dot->operands[i]->def;
        if (d && d->kind == OP_TRANS)
            d = d->operands[0]->def;
        if (d && d->kind == OP_LOAD && d->operands[0] == buf)
            return true;
    }
    return false;
}

static bool reads_result(const Op *op, const Op *dot) {
    for (int i = 0; i < op->noperands; i++)
        if (op->operands[i]->def == dot)
            return true;
    return false;
}

/* A dot is issued asynchronously (fence, k-steps, commit) and, in a launch
 * softmax-overlap rotated (nv.overlap), completes at the first op that
 * needs it (lower.h's complete; a copy needs the dots
 * that read its buffer, except a consumer's, which copies nothing: the
 * producer waits for the stage's release): wait_group with the
 * number of dots committed after it, which also completes every older one.
 * So a Q·Kᵀ followed by a P·V of the previous tile and then the softmax
 * (the overlap pass's order) waits for Q·Kᵀ with P·V still running. */
static void complete(Cg *cg, const Op *op) {
    int need = -1;
    for (int i = 0; i < cg->hopper.nin_flight; i++) {
        const Op *dot = cg->hopper.in_flight[i].op;
        if (!op || op->nregions || reads_result(op, dot) ||
            (op->kind == OP_COPY_ASYNC && cg->hopper.role != ROLE_CONSUMER && dot_reads(dot, op->operands[1])))
            need = i;
    }
    if (need < 0)
        return;
    int nacc = 0;
    for (int i = 0; i <= need; i++)
        nacc += cg->hopper.in_flight[i].nacc;
    LLVMValueRef *acc = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)nacc + 1);
    nacc = 0;
    for (int i = 0; i <= need; i++)
        for (int j = 0; j < cg->hopper.in_flight[i].nacc; j++)
            acc[nacc++] = cg->hopper.in_flight[i].acc[j];
    wait_groups(cg, cg->hopper.nin_flight - 1 - need, acc, nacc);
    nacc = 0;
    struct InFlight done[sizeof cg->hopper.in_flight / sizeof cg->hopper.in_flight[0]];
    memcpy(done, cg->hopper.in_flight, sizeof done[0] * (size_t)(need + 1));
    memmove(cg->hopper.in_flight, cg->hopper.in_flight + need + 1, sizeof done[0] * (size_t)(cg->hopper.nin_flight - need - 1));
    cg->hopper.nin_flight -= need + 1;
    for (int i = 0; i <= need; i++) {
        for (int j = 0; j < done[i].nacc; j++)
            done[i].acc[j] = acc[nacc++];
        set_result(cg, &done[i]);
        if (done[i].deferred)
            release_stages(cg, done[i].op);
    }
}

/* Where a ping-pong launch's dot stands in its warpgroup's turn
 * (warp-roles' nv.turn): it takes the turn before it (first, only) or
 * passes it on after it (last, only). */
static bool turn_is(const Op *dot, const char *a, const char *b) {
    Attr *t = op_attr(dot, "nv.turn");
    return t && (strcmp(t->s, a) == 0 || strcmp(t->s, b) == 0);
}

static void emit_dot(Cg *cg, const Op *op) {
    const Type *at = op->operands[0]->type, *bt = op->operands[1]->type, *rt = op->results[0]->type;
    int64_t K = at->dims[1].size, N = bt->dims[1].size;
    ScalarKind ek = bt->elem;
    Attr *mma = op_attr(op, "nv.mma"), *na = op_attr(op, "nv.a"), *nb = op_attr(op, "nv.b");
    bool acc16 = rt->elem == SK_F16;
    const char *want = arena_printf(cg->a, "wgmma.m64n%lldk16.%s.%s", (long long)N, acc16 ? "f16" : "f32",
                                    scalar_name(ek));
    if (!mma || !na || !nb || strcmp(mma->s, want) != 0) {
        cg_err(cg, op, "internal error: tile.dot's nv.mma is not '%s' (run sm90a-layout)", want);
        return;
    }
    if ((ek != SK_F16 && ek != SK_BF16) || (rt->elem != SK_F32 && !(acc16 && ek == SK_F16)) || at->elem != ek) {
        cg_err(cg, op, "wgmma multiplies f16 or bf16 into f32, or f16 into f16", NULL);
        return;
    }
    if (!dot_fits(cg, op))
        return;
    bool a_regs = strcmp(na->s, "registers") == 0, a_mn = strcmp(na->s, "smem.trans") == 0;
    bool b_mn = strcmp(nb->s, "smem.trans") == 0;
    Cv *ca = cv_get(cg, op->operands[0]), *cb = cv_get(cg, op->operands[1]);
    /* B is K-major when the tile is the transpose of a loaded [N, K] (trans) */
    if (!cb || cb->kind != CV_VIEW || cb->view->swizzle != 128 || cb->view->trans == b_mn ||
        (!a_regs && (!ca || ca->kind != CV_VIEW || ca->view->swizzle != 128 || ca->view->trans != a_mn))) {
        cg_err(cg, op, "internal error: tile.dot's operands disagree with nv.a / nv.b, or are not swizzled", NULL);
        return;
    }
    Dist *p = NULL;
    if (a_regs && !(p = dot_a_in_registers(cg, op)))
        return;
    Dist *c = as_dist(cg, op, op->operands[2]);
    /* this thread's accumulators in wgmma order, d[per·n8 + j]: m16n8k16's
     * (mma16_acc_get), f16 pairs as b32 */
    int per = acc16 ? 2 : 4, nacc = (int)(N / 8) * per;
    LLVMValueRef *acc = NEW_ARRAY(cg->a, LLVMValueRef, (size_t)nacc);
    bool fresh = true;   /* a zero accumulator: the first k-step ignores it */
    for (int i = 0; i < nacc; i++) {
        acc[i] = mma16_acc_get(cg, c, 0, i / per, i % per, acc16);
        if (acc16)
            acc[i] = LLVMBuildBitCast(cg->b, acc[i], cg->i32, "");
        fresh = fresh && LLVMIsConstant(acc[i]) && LLVMIsNull(acc[i]);
    }
    LLVMValueRef row0 = warpgroup_row(cg);
    Operand ao = {0};
    if (!a_regs)
        ao = operand(cg, ca->view, a_mn, row0);
    /* P's A registers, every k-step's, before the fence: registers written
     * between the fence and a wgmma that reads them make ptxas add a
     * warpgroup.arrive there (info C7519) */
    LLVMValueRef *afr = p ? NEW_ARRAY(cg->a, LLVMValueRef, (size_t)(K / 16 * 4)) : NULL;
    for (int ks = 0; p && ks < K / 16; ks++)   /* block ks of P: elements (0,1), (2,3), (4,5), (6,7) */
        for (int j = 0; j < 4; j++) {
            LLVMValueRef x = dist_get(cg, p, (Pos){0, ks, 2 * j}), y = dist_get(cg, p, (Pos){0, ks, 2 * j + 1});
            afr[4 * ks + j] = mma16_pack_a(cg, cg_cast(cg, x, p->elem, ek), cg_cast(cg, y, p->elem, ek), ek);
        }
    LLVMValueRef wg = LLVMBuildLShr(cg->b, cg->warp, ci32(cg, 2), "");
    if (cg->hopper.pingpong && cg->hopper.role == ROLE_CONSUMER && turn_is(op, "first", "only"))   /* this warpgroup's turn */
        pingpong_barrier(cg, "sync", wg);
    cg_asm(cg, "wgmma.fence.sync.aligned;", "~{memory}", LLVMVoidTypeInContext(cg->ctx), NULL, 0);
    for (int64_t n0 = 0; n0 < N; n0 += 256) {   /* N up to 256 an instruction */
        int n = (int)(N - n0 < 256 ? N - n0 : 256);
        Operand bo = operand(cg, cb->view, b_mn, ci64(cg, n0));
        for (int ks = 0; ks < K / 16; ks++)
            wgmma(cg, n, ek, acc16, acc + n0 / 8 * per, p ? NULL : operand_at(cg, &ao, ks), p ? afr + 4 * ks : NULL,
                  operand_at(cg, &bo, ks), !(fresh && ks == 0), a_mn, b_mn);
    }
    cg_asm(cg, "wgmma.commit_group.sync.aligned;", "~{memory}", LLVMVoidTypeInContext(cg->ctx), NULL, 0);
    if (cg->hopper.pingpong && cg->hopper.role == ROLE_CONSUMER && turn_is(op, "last", "only"))   /* issued: the next warpgroup's turn */
        pingpong_barrier(cg, "arrive", LLVMBuildURem(cg->b, add32(cg, wg, 1), ci32(cg, cg->nwarps / 4), ""));
    if (cg->hopper.nin_flight == (int)(sizeof cg->hopper.in_flight / sizeof cg->hopper.in_flight[0]))
        complete(cg, NULL);   /* (no kernel keeps this many in flight) */
    struct InFlight *f = &cg->hopper.in_flight[cg->hopper.nin_flight++];
    *f = (struct InFlight){op, false, dist_new(cg, rt->elem, cg->R, N), acc, nacc, per, acc16};
    set_result(cg, f);
    cv_put(cg, op->results[0], cv_dist(cg, f->r));
    if (!cg->hopper.lazy_dots)   /* a launch softmax-overlap left alone: the dot completes here */
        complete(cg, NULL);
}

/* A launch's copies are all TMA's or all cp.async's (sm90a-layout). */
static void copy_async(Cg *cg, const Op *op) {
    Attr *how = op_attr(op, "nv.copy");
    if (how && strcmp(how->s, "tma") == 0)
        tma_copy(cg, op);
    else
        cp_async_copy(cg, op);
}

static void wait(Cg *cg, const Op *op) {
    const Token *t = wait_token(cg, op);
    if (t && t->ring)
        tma_wait(cg, op);
    else if (t)
        cp_async_wait(cg, op);
}

static void drain(Cg *cg) {
    cp_async_drain(cg);
    tma_drain(cg);
    tma_store_wait(cg);
}

/* O·α behind a warp vote in a softmax-overlap launch (its dots in flight),
 * where it was measured (+2.6 %, doc/codegen.md); not measured elsewhere. */
static bool may_skip_unit_scale(const Cg *cg, const Op *mul) {
    (void)mul;
    return cg->hopper.lazy_dots;
}

const CgTarget sm90a_target = {
    .target = &target_sm90a,
    .acc_layout = mma16_acc_layout,
    .acc_coords = mma16_acc_coords,
    .dot = emit_dot,
    .copy_async = copy_async,
    .wait = wait,
    .drain = drain,
    .complete = complete,
    .async_proxy = true,
    .smem_align = 1024,
    .pair_stores = true,
    .stmatrix = true,
    .may_skip_unit_scale = may_skip_unit_scale,
};
