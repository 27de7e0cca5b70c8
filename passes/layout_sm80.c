/* layout_sm80.c — Ampere's layout (sm80-layout): mma.m16n8k16 fragments by
 * ldmatrix, cp.async rings in swizzled panels, Q's A fragments in
 * registers, a grid of warps for GEMMs. nv_layout.c is the pass. */
#include "passes/nv_layout.h"

#include <string.h>


/* sm_80: a buffer that cp.async fills (a K/V or GEMM operand ring) of
 * 16-bit tiles of 64k columns and 8k rows lies in 128-byte swizzled panels
 * (smem.c's smem_offset, CUTLASS's Swizzle<3,3,3>) instead of padded rows:
 * a warp's cp.async then covers whole 128-byte rows, 4 shared-memory
 * wavefronts an instruction where padded rows took 10.5 (ncu, 2026-12-02),
 * and ldmatrix stays conflict-free (the 8 rows of a phase read 8 different
 * 16-byte chunks). A fragment's address is then the lane's XOR a constant
 * (sm80.c), a register more per live XOR; the tiles stored through
 * registers (Q's scratch, the backward's dSᵀ) gain nothing from the
 * swizzle (16-byte stores into padded rows are conflict-free), so they keep
 * padded rows: in the backward's key kernel the XORs had doubled the
 * spills. Narrower buffers keep padded rows too. */
static bool swizzles_ring(const Type *t) {
    return is_16bit(t->elem) && t->rank >= 2 && !t->dims[t->rank - 1].sym &&
           !t->dims[t->rank - 2].sym && t->dims[t->rank - 1].size % 64 == 0 && t->dims[t->rank - 2].size % 8 == 0;
}

/* Q's A fragments stay in registers for the whole key loop when they take
 * at most 32 per thread (16·row_blocks rows × cols / 32 lanes / 2 per
 * register): beside a d128 output (128 f32 per thread) and the scores they
 * would spill, so there they are read from shared memory per key tile, as
 * FlashAttention-2 does. The same where registers are scarce (the
 * backward's dK and dV at head dim 128), where K's and V's fragments, 64
 * registers, made ptxas spill 416 bytes. */
static bool fits_in_fragments(const Lower *l, const Type *t) {
    return !l->registers_scarce && 16 * l->row_blocks * t->dims[1].size / 64 <= 32;
}

/* Register pressure, measured with ptxas (one model for this file's two
 * decisions, in f32 accumulator columns a 16-row warp block holds):
 *  - a P·V whose P comes from registers is at the register limit when P's
 *    columns and its f32 output's pass PV_LIMIT_COLS (head dim 128 with 64
 *    keys): nv.register_limit, and sm80.c orders its MMAs so that ptxas does
 *    not spill;
 *  - a 128-row tile gets a warp per 32 rows (4 warps) only while its
 *    accumulators (carried and scores) stay within WARP32_LIMIT_COLS and it
 *    gathers nothing per score, else a warp per 16 rows (pick_warps). */
enum { PV_LIMIT_COLS = 160, WARP32_LIMIT_COLS = 192 };

/* m16n8k16 is row.col only; ldmatrix(.trans) makes the fragments from
 * either memory order. A row-major A ([M, K]) and a K stored [N, K] need no
 * transpose. */
static void annotate_dot(const Lower *l, Op *op) {
    Arena *a = l->ctx->arena;
    const char *al = operand_layout(op->operands[0]), *bl = operand_layout(op->operands[1]);
    const char *acc = op->results[0]->type->elem == SK_F16 ? "f16" : "f32";
    const Op *adef = op->operands[0]->def;
    Attr *aop = adef && adef->kind == OP_LOAD ? op_attr(adef, "nv.operand") : NULL;
    bool frags = aop && strcmp(aop->s, "fragments") == 0;
    op_set_attr(a, op, "nv.a",
                attr_str(a, !*al ? "registers" : frags ? "fragments"
                            : strcmp(al, "row") == 0 ? "ldmatrix" : "ldmatrix.trans"));
    op_set_attr(a, op, "nv.b", attr_str(a, strcmp(bl, "col") == 0 ? "ldmatrix" : "ldmatrix.trans"));
    op_set_attr(a, op, "nv.mma",
                attr_str(a, arena_printf(a, "m16n8k16.row.col.%s.%s", acc,
                                         scalar_name(op->operands[1]->type->elem))));
    if (!*al && op->results[0]->type->elem == SK_F32 &&
        op->operands[0]->type->dims[1].size + op->results[0]->type->dims[1].size > PV_LIMIT_COLS)
        op_set_attr(a, op, "nv.register_limit", attr_bool(a, true));
}

/* 4 warps, each 16·row_blocks rows (the common choice): on sm_80 a warp
 * owns at least 32 rows of a 128-row tile, so each B fragment it reads from
 * shared memory feeds two MMAs, which halves the ldmatrix traffic that
 * otherwise bounds the MMA rate (FlashAttention-2's 4 warps × 32 rows) ...
 * when that fits in registers, measured with ptxas: a kernel whose
 * accumulators take at most 192 f32 per thread (attention at D 64 with 64
 * keys, at D 128 with 32 or 64 keys: output and scores, the last at the
 * register limit, where sm80.c emits P·V so that ptxas does not spill; a
 * GEMM with one 128-column accumulator) and that gathers nothing per score.
 * A per-score gather (a bias tensor) spills a lot; a GEMM with one
 * 128-column accumulator fits (166 registers), SwiGLU's two do not. Those
 * keep a warp per 16 rows. */
static bool pick_warps(const Lower *l, Op *launch, const Scan *s, int64_t rows, int *warps, Attr **hint) {
    (void)l, (void)launch, (void)hint;
    if (rows == 128 && (s->carried_cols + s->dot_cols > WARP32_LIMIT_COLS || s->gathers_per_score))
        *warps = 8;
    return true;
}

    /* sm_80 GEMMs (no row bound to a warp: nothing reduces along a row,
     * every dot reads A from memory): a grid of warps, 64 rows by
     * cols / warp_cols columns each, CUTLASS's and Triton's warp tile.
     * A warp owning whole 128-column rows reads every B fragment of the
     * tile from shared memory per 16 rows, and shared memory's 128
     * bytes a cycle then cap the MMA rate near half of what mma.sync
     * issues on an H200; a 64 × 32 or 64 × 64 warp tile reads half as
     * many bytes per FLOP (bench/results/2026-12-02-h200/NOTES.md). Columns per
     * warp: accumulators of at most 128 f32 a thread (carried_cols · 2
     * / warp_cols), in at most 8 warps; warps(N) sets the grid's size. */
static void warp_grid(const Scan *s, int64_t rows, const Attr *hint, int *warps, int *warp_cols, int *row_blocks) {
    if (s->row_bound || rows % 64 || s->carried_cols < 64)
        return;
    int wrows = (int)(rows / 64);
    int64_t per_row = s->carried_cols / 64;   /* at most 8 warps: 255 registers a thread */
    per_row = per_row < 1 ? 1 : per_row > 8 / wrows ? 8 / wrows : per_row;
    int64_t want = hint ? hint->i : wrows * per_row;
    int64_t wc = want % wrows ? 0 : want / wrows;
    if (wc > 1 && s->col_gcd % (16 * wc) == 0) {
        *warps = (int)want;
        *warp_cols = (int)wc;
        *row_blocks = 4;
    }
}

/* The dot after d1 in its block that reads the same A, when only copy
 * waits and loads stand between them — SwiGLU's x @ wg and x @ wu. The code
 * generator emits the two together, at the second, so each A fragment is
 * read once for both: the waits and loads in between are emitted first,
 * which moves nothing that d1 reads or writes. */
static const Op *dot_sharing_a(const Op *d1) {
    for (const Op *x = d1->next; x; x = x->next) {
        if (x->kind == OP_DOT)
            return x->operands[0] == d1->operands[0] && x->operands[2] != d1->results[0] ? x : NULL;
        if (x->kind != OP_WAIT && x->kind != OP_LOAD)
            return NULL;
    }
    return NULL;
}

/* nv.pair on the first dot of each such pair, in the launch's loops (not
 * at its top level). */
static void pair_dots(Arena *a, Block *blk, bool top) {
    for (Op *op = blk->first; op; op = op->next) {
        if (!top && op->kind == OP_DOT && dot_sharing_a(op))
            op_set_attr(a, op, "nv.pair", attr_bool(a, true));
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                pair_dots(a, op->regions[r].blocks[k], false);
    }
}

static bool annotate_launch(const Lower *l, Op *launch, const Scan *s, int warps) {
    (void)warps;
    pair_dots(l->ctx->arena, launch->regions[0].blocks[0], true);
    if (registers_scarce(s))
        op_set_attr(l->ctx->arena, launch, "nv.rematerialise", attr_int(l->ctx->arena, 1));
    return false;   /* (no TMA on sm_80) */
}

const LayoutTarget layout_sm80 = {
    .target = &target_sm80,
    .operand_multiple = 16, .operand_elem = is_16bit, .row_stride = ldmatrix_stride,
    .swizzles_ring = swizzles_ring, .holds_a_fragments = fits_in_fragments,
    .copy = "cp.async", .counts_groups = true,
    .annotate_dot = annotate_dot, .pick_warps = pick_warps, .warp_grid = warp_grid,
    .annotate_launch = annotate_launch,
};

bool pass_sm80_layout(Op *module, PassContext *ctx) { return nv_layout_run(&layout_sm80, module, ctx); }
