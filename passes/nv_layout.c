/* nv_layout.c — tile IR → target IR for the mma.sync targets: the decisions
 * of the code generator, written onto the tile ops as `nv.*` attributes (the
 * way TritonGPU puts layouts on types). Two passes share this file, one per
 * target: sm70-layout (Volta, mma.m8n8k4) and sm80-layout (Ampere,
 * mma.m16n8k16); codegen/sm70.c and codegen/sm80.c emit LLVM IR from them.
 * `attnc FILE -emit=nv -arch sm_70` prints the result.
 *
 *   tile.launch    nv.layout   "acc.f32" | "acc.f16": kernels with a tile.dot
 *                              keep every tile in the MMA's accumulator
 *                              layout; "blocked": row kernels
 *                  nv.rows, nv.warps, nv.row_blocks: the row tile, warps per
 *                              block (each owns 16·row_blocks rows)
 *                  nv.warp_cols  sm_80 GEMMs: the warps form a grid,
 *                              warps / warp_cols down the rows by warp_cols
 *                              across the columns (absent: 1, each warp
 *                              owns whole rows)
 *   tile.load      nv.operand  "smem" (a shared stage read by the dots in
 *                              place) | "scratch" (a global tile copied once
 *                              into shared memory for the dots) |
 *                              "fragments" (sm_80: copied so, then held in
 *                              registers as the A fragments of every dot
 *                              that reads it), with nv.row_stride; absent:
 *                              loaded into the layout
 *   tile.trans     nv.operand  "scratch" on the transpose of a computed tile
 *                              that dots read (the backward's dSᵀ): the tile
 *                              is stored to shared memory (nv.row_stride)
 *                              and read transposed
 *   tile.dot       nv.mma      sm_70: "m8n8k4.<A>.<B>.<acc>", the fragment
 *                              layouts (row/col) that read the operands'
 *                              memory without a transpose; sm_80:
 *                              "m16n8k16.row.col.<acc>.<ab>"
 *                  nv.a        sm_70: "smem" | "shuffle" (P, an accumulator
 *                              tile, reaches the A layout by warp shuffles);
 *                              sm_80: "ldmatrix" | "ldmatrix.trans" |
 *                              "registers" (P is the A fragment as it is) |
 *                              "fragments" (preloaded, nv.operand)
 *                  nv.b        sm_80: "ldmatrix" ([N, K] in memory) |
 *                              "ldmatrix.trans" ([K, N])
 *   tile.alloc     nv.row_stride  16-bit rows, padded so fragment loads are
 *                              free of bank conflicts; or
 *                  nv.swizzle  sm_80: 128 on a ring that cp.async fills,
 *                              64k columns wide (sm80_swizzles)
 *   tile.copy_async nv.copy    sm_70: "registers" (loads issued here, stored
 *                              to shared memory at the tile.wait); sm_80:
 *                              "cp.async" (straight to shared memory, one
 *                              commit group per copy)
 *   tile.wait      nv.pending  sm_80: the copies issued after the awaited one
 *                              that may stay in flight (cp.async.wait_group);
 *                              the interpreter honours it
 *   tile.reduce    nv.partial  a row sum that each lane keeps as the sum of
 *                              its own columns (the online softmax's l,
 *                              carried so through the key loops) ...
 *   nv.lane_sum                ... until this op, after the loops, adds the
 *                              lanes' pieces (to the interpreter: the value
 *                              as it is)
 *
 * sm90a-layout (Hopper, wgmma) shares sm80-layout's decisions but for the
 * operands: wgmma reads A (unless P, from registers) and B from shared memory
 * through descriptors, so every 16-bit shared tile is laid out in 128-byte
 * swizzled panels of 64 columns (nv.swizzle = 128, no row padding), and each
 * warpgroup (4 warps, 64 rows) issues its own wgmma:
 *   tile.dot       nv.mma      "wgmma.m64n<N>k16.<acc>.<ab>"
 *                  nv.a        "smem" (K-major) | "registers" (P)
 *                  nv.b        "smem" ([N, K] in memory: K-major) |
 *                              "smem.trans" ([K, N]: MN-major)
 *   tile.alloc, tile.load "scratch"   nv.swizzle  128
 *
 * Refuses what the target cannot do (the one place that does: the code
 * generator assumes it): bf16 on sm_70 (no bf16 MMA), an f16
 * accumulator with bf16 operands, row tiles that are not a multiple of 16.
 */
#include <stdint.h>
#include <string.h>

#include "ir/builder.h"
#include "passes/passes.h"
#include "target/target.h"

typedef enum { SM70, SM80, SM90 } Gen;

typedef struct Lower {
    PassContext *ctx;
    Gen gen;
    const Target *t;
    int row_blocks;   /* of the launch being lowered: 16-row blocks per warp */
    bool tma;         /* sm_90a: the launch's copies are TMA copies (tma_copies) */
} Lower;

/* ---- bank conflicts -------------------------------------------------------------- */

/* Whether the fragment loads of one half-warp (16 lanes, 8 bytes each: one
 * wavefront when conflict-free) hit 16 different banks, with `stride` f16
 * between rows. Two patterns: 8 rows r + 8j (+4h) at one column (A .row, B
 * .col), and rows r at two columns 8 apart (B .row, A .col). */
static bool conflict_free(int64_t stride) {
    for (int h = 0; h < 2; h++)
        for (int pattern = 0; pattern < 2; pattern++) {
            unsigned used = 0;
            for (int r = 0; r < 4; r++)
                for (int j = 0; j < 2; j++) {
                    int64_t half = pattern == 0 ? (r + 8 * j + 4 * h) * stride : r * stride + 8 * j + 4 * h;
                    unsigned banks = 3u << ((half / 2) % 32);   /* an 8-byte word: two banks */
                    if (used & banks)
                        return false;
                    used |= banks;
                }
        }
    return true;
}

/* The row stride (in f16) of a shared tile `cols` wide: the least padding,
 * in 8-byte steps, that makes the fragment loads conflict-free (12 for 32
 * columns and more: a 16-byte pad leaves 2-way conflicts). */
static int64_t shared_stride(int64_t cols) {
    for (int64_t pad = 0; pad < 64; pad += 4)
        if (conflict_free(cols + pad))
            return cols + pad;
    return cols + 8;
}

/* sm_80: ldmatrix reads 8 rows of 16 bytes per phase; rows 16-byte aligned
 * whose stride is an odd number of 16-byte units fall in 8 different
 * 4-bank groups (cols + 8 for the usual multiples of 16). */
static int64_t ldmatrix_stride(int64_t cols) {
    int64_t s = (cols + 7) / 8 * 8;
    return (s / 8) % 2 ? s : s + 8;
}

static int64_t row_stride(const Lower *l, int64_t cols) {
    return l->gen == SM70 ? shared_stride(cols) : ldmatrix_stride(cols);
}

static bool is_16bit(ScalarKind k) { return k == SK_F16 || k == SK_BF16; }

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
static bool sm80_swizzles(const Lower *l, const Type *t) {
    return l->gen == SM80 && is_16bit(t->elem) && t->rank >= 2 && !t->dims[t->rank - 1].sym &&
           !t->dims[t->rank - 2].sym && t->dims[t->rank - 1].size % 64 == 0 && t->dims[t->rank - 2].size % 8 == 0;
}

/* The layout attribute of a 16-bit shared tile: nv.swizzle 128 or
 * nv.row_stride (padded rows). */
static void set_shared_layout(const Lower *l, Op *op, const Type *t, bool swizzle) {
    Arena *a = l->ctx->arena;
    if (swizzle)
        op_set_attr(a, op, "nv.swizzle", attr_int(a, 128));
    else
        op_set_attr(a, op, "nv.row_stride", attr_int(a, row_stride(l, t->dims[t->rank - 1].size)));
}

/* ---- uses -------------------------------------------------------------------------- */

static bool only_dot_uses(const Block *top, const Value *v, bool a_only);

/* Whether v's uses in blk (counted in *count) are all tile.dot operands,
 * possibly through tile.trans (a_only: all operand A, as it is). */
static bool dot_uses_in(const Block *top, const Value *v, const Block *blk, bool a_only, int *count) {
    for (const Op *o = blk->first; o; o = o->next) {
        for (int i = 0; i < o->noperands; i++)
            if (o->operands[i] == v) {
                (*count)++;
                bool ok = a_only                ? o->kind == OP_DOT && i == 0
                          : o->kind == OP_TRANS ? only_dot_uses(top, o->results[0], false)
                                                : o->kind == OP_DOT && i < 2;
                if (!ok)
                    return false;
            }
        for (int r = 0; r < o->nregions; r++)
            for (int k = 0; k < o->regions[r].nblocks; k++)
                if (!dot_uses_in(top, v, o->regions[r].blocks[k], a_only, count))
                    return false;
    }
    return true;
}

static bool only_dot_uses(const Block *top, const Value *v, bool a_only) {
    int n = 0;
    return dot_uses_in(top, v, top, a_only, &n) && n > 0;
}

static bool is_dot_operand_load(const Lower *l, const Block *top, const Op *op);

static bool reads_whole_stage(const Op *load) {
    const Type *bt = load->operands[0]->type, *rt = load->results[0]->type;
    return rt->dims[0].size == bt->dims[bt->rank - 2].size && rt->dims[1].size == bt->dims[bt->rank - 1].size;
}

/* Whether every use of the shared buffer v in blk is a tile.copy_async
 * into it or a tile.load of a whole stage for dots (the only readers that
 * know the swizzle: a swizzled stage is read whole). */
static bool buffer_uses_in(const Lower *l, const Block *top, const Value *v, const Block *blk) {
    for (const Op *o = blk->first; o; o = o->next) {
        for (int i = 0; i < o->noperands; i++)
            if (o->operands[i] == v && o->kind != OP_COPY_ASYNC &&
                !(o->kind == OP_LOAD && i == 0 && is_dot_operand_load(l, top, o) && reads_whole_stage(o)))
                return false;
        for (int r = 0; r < o->nregions; r++)
            for (int k = 0; k < o->regions[r].nblocks; k++)
                if (!buffer_uses_in(l, top, v, o->regions[r].blocks[k]))
                    return false;
    }
    return true;
}

static bool only_copied_and_read_by_dots(const Lower *l, const Block *top, const Value *v) {
    return buffer_uses_in(l, top, v, top);
}

/* ---- the kernel ---------------------------------------------------------------------- */

typedef struct Scan {
    int64_t rows, dot_rows;   /* the widest tile; the rows of the dots */
    int dots;
    ScalarKind acc;
    const Op *bf16;           /* an op with a bf16 tile or buffer */
    int64_t carried_cols;     /* of the 2-D tiles a loop carries (accumulators), widest loop */
    int64_t dot_cols;         /* the widest dot that starts from zero (scores) */
    const Op *bad_dot;        /* a dot whose K or N is not a multiple of 16 */
    bool gathers_per_score;   /* a tile.gather of a whole score tile (a bias tensor) */
    /* what keeps a row of every tile inside one warp: a reduction along a
     * row, a dot whose A is a computed tile (P), a transpose */
    bool row_bound;
    int64_t col_gcd;          /* of the widths of the 2-D tiles in registers */
} Scan;

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

static void scan(const Block *top, const Block *blk, Scan *s) {
    for (const Op *o = blk->first; o; o = o->next) {
        for (int i = 0; i < o->nresults; i++) {
            const Type *t = o->results[i]->type;
            if (t->kind == TY_TILE && t->rank == 2 && t->dims[0].size > s->rows)
                s->rows = t->dims[0].size;
            if (t->kind != TY_TOKEN && t->elem == SK_BF16 && !s->bf16)   /* tiles, buffers and scalars */
                s->bf16 = o;
            /* (a dot operand's load stays in shared memory: not a tile of the layout) */
            if (t->kind == TY_TILE && t->rank == 2 && t->dims[1].size > 1 &&
                !(o->kind == OP_LOAD && only_dot_uses(top, o->results[i], false)))
                s->col_gcd = gcd64(s->col_gcd, t->dims[1].size);
        }
        if (o->kind == OP_TILE_REDUCE || o->kind == OP_TRANS ||
            (o->kind == OP_DOT && (!o->operands[0]->def || o->operands[0]->def->kind != OP_LOAD)))
            s->row_bound = true;
        if (o->kind == OP_GATHER && o->results[0]->type->kind == TY_TILE && o->results[0]->type->rank == 2 &&
            o->results[0]->type->dims[0].size > 1 && o->results[0]->type->dims[1].size > 1)
            s->gathers_per_score = true;
        if (o->kind == OP_DOT) {
            s->dots++;
            if (!s->bad_dot && (o->operands[0]->type->dims[1].size % 16 || o->results[0]->type->dims[1].size % 16))
                s->bad_dot = o;
            s->acc = o->results[0]->type->elem;
            s->dot_rows = o->results[0]->type->dims[0].size;
            const Op *init = o->operands[2]->def;   /* a fresh accumulator: scores, not O */
            if (init && init->kind == OP_SPLAT && o->results[0]->type->dims[1].size > s->dot_cols)
                s->dot_cols = o->results[0]->type->dims[1].size;
        }
        if (o->kind == OP_FOR) {
            int64_t cols = 0;
            for (int i = 0; i < o->nresults; i++) {
                const Type *t = o->results[i]->type;
                if (t->kind == TY_TILE && t->rank == 2 && t->dims[0].size > 1 && t->dims[1].size > 1)
                    cols += t->dims[1].size;
            }
            if (cols > s->carried_cols)
                s->carried_cols = cols;
        }
        for (int r = 0; r < o->nregions; r++)
            for (int k = 0; k < o->regions[r].nblocks; k++)
                scan(top, o->regions[r].blocks[k], s);
    }
}

/* A tile.load that only dots read, read as whole 16-bit rows of a 2-D
 * window (sm_80's ldmatrix: 16-row, 16-column blocks). */
static bool is_dot_operand_load(const Lower *l, const Block *top, const Op *op) {
    const Type *mt = op->operands[0]->type, *rt = op->results[0]->type;
    Attr *dims = op_attr(op, "dims");
    int q = l->gen == SM70 ? 4 : 16;
    bool elem_ok = l->gen == SM70 ? mt->elem == SK_F16 : is_16bit(mt->elem);
    return elem_ok && dims && dims->n == 2 && dims->elems[0]->i == mt->rank - 2 &&
           dims->elems[1]->i == mt->rank - 1 && rt->dims[0].size % q == 0 && rt->dims[1].size % q == 0 &&
           only_dot_uses(top, op->results[0], false);
}

/* The fragment layout that reads a dot operand's memory as it lies: "row"
 * for a loaded tile, "col" for the transpose of one or of a computed tile
 * put in shared memory (nv.operand on the tile.trans), "" if computed. */
static const char *operand_layout(const Value *v) {
    const Op *d = v->def;
    if (d && d->kind == OP_LOAD && op_attr(d, "nv.operand"))
        return "row";
    if (d && d->kind == OP_TRANS && op_attr(d, "nv.operand"))
        return "col";
    if (d && d->kind == OP_TRANS && d->operands[0]->def && d->operands[0]->def->kind == OP_LOAD &&
        op_attr(d->operands[0]->def, "nv.operand"))
        return "col";
    return "";
}

/* sm_80: the async copies (commit groups) issued after the one whose token
 * a loop carries as its i-th token, at the top of a later iteration: those after its copy in
 * the body, plus a whole body per iteration it was passed along unchanged.
 * 0 when unknown (a wait then waits for everything). */
static int groups_after(const Block *body, int i, int depth) {
    const Op *yield = NULL;
    int copies = 0;
    for (const Op *o = body->first; o; o = o->next) {
        copies += o->kind == OP_COPY_ASYNC;
        if (o->kind == OP_TILE_YIELD)
            yield = o;
    }
    if (!yield || i >= yield->noperands || depth > 8)
        return 0;
    const Value *v = yield->operands[i];
    for (int j = 0; j + 1 < body->nargs; j++)
        if (v == body->args[1 + j])   /* passed along: a body's copies later */
            return groups_after(body, j, depth + 1) + copies;
    int after = -1;
    for (const Op *o = body->first; o; o = o->next) {
        if (after >= 0 && o->kind == OP_COPY_ASYNC)
            after++;
        if (o->kind == OP_COPY_ASYNC && o->results[0] == v)
            after = 0;
    }
    return after < 0 ? 0 : after;
}

/* sm_80's cp.async commits one group per tile.copy_async; a tile.wait may
 * leave the groups committed after its token's in flight. nv.pending says how
 * many (the interpreter lands all but that many youngest copies there, so a
 * count that is too large reads an unlanded stage and fails the check). For
 * a token a loop carries, the fewer of the first iteration's and a later
 * one's. Numbers are copy sequence numbers in issue order, +1 in the map. */
static void count_groups(const Lower *l, Block *blk, Map *group, int *count) {
    Arena *a = l->ctx->arena;
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_COPY_ASYNC) {
            map_put(a, group, op->results[0], (void *)(intptr_t)(++*count));
        } else if (op->kind == OP_WAIT) {
            intptr_t g = (intptr_t)map_get(group, op->operands[0]);
            op_set_attr(a, op, "nv.pending", attr_int(a, g ? *count - g : 0));
        } else if (op->kind == OP_FOR) {
            Block *body = op->regions[0].blocks[0];
            int before = *count;
            for (int i = 0; 3 + i < op->noperands; i++) {
                intptr_t g = (intptr_t)map_get(group, op->operands[3 + i]);
                if (!g)
                    continue;
                int first = *count - (int)g, later = groups_after(body, i, 0);
                map_put(a, group, body->args[1 + i], (void *)(intptr_t)(*count - (later < first ? later : first)));
            }
            count_groups(l, body, group, count);
            /* a token the loop hands on (the next segment of a chain waits
             * for it): younger groups are the copies after it in the last
             * iteration, or, when the loop ran no iteration, those after
             * the token it was given; the fewer of the two */
            for (int i = 0; 3 + i < op->noperands && i < op->nresults; i++) {
                intptr_t g = (intptr_t)map_get(group, op->operands[3 + i]);
                if (!g)
                    continue;
                int none = before - (int)g, last = groups_after(body, i, 0);
                map_put(a, group, op->results[i], (void *)(intptr_t)(*count - (last < none ? last : none)));
            }
        } else {
            for (int r = 0; r < op->nregions; r++)
                for (int k = 0; k < op->regions[r].nblocks; k++)
                    count_groups(l, op->regions[r].blocks[k], group, count);
        }
    }
}

static void annotate_dot(const Lower *l, Op *op) {
    Arena *a = l->ctx->arena;
    const char *al = operand_layout(op->operands[0]), *bl = operand_layout(op->operands[1]);
    const char *acc = op->results[0]->type->elem == SK_F16 ? "f16" : "f32";
    if (l->gen == SM90) {   /* wgmma: "row" A is K-major; B is K-major when stored [N, K] ("col") */
        op_set_attr(a, op, "nv.a", attr_str(a, !*al ? "registers" : strcmp(al, "row") == 0 ? "smem" : "smem.trans"));
        op_set_attr(a, op, "nv.b", attr_str(a, strcmp(bl, "col") == 0 ? "smem" : "smem.trans"));
        op_set_attr(a, op, "nv.mma", attr_str(a, arena_printf(a, "wgmma.m64n%lldk16.%s.%s",
                                                               (long long)op->results[0]->type->dims[1].size, acc,
                                                               scalar_name(op->operands[1]->type->elem))));
        return;
    }
    if (l->gen == SM70) {
        op_set_attr(a, op, "nv.a", attr_str(a, *al ? "smem" : "shuffle"));
        op_set_attr(a, op, "nv.mma", attr_str(a, arena_printf(a, "m8n8k4.%s.%s.%s", *al ? al : "row",
                                                               *bl ? bl : "?", acc)));
        return;
    }
    /* m16n8k16 is row.col only; ldmatrix(.trans) makes the fragments from
     * either memory order. A row-major A ([M, K]) and a K stored [N, K] need
     * no transpose. */
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
}

/* Q's A fragments stay in registers for the whole key loop when they take
 * at most 32 per thread (16·row_blocks rows × cols / 32 lanes / 2 per
 * register): beside a d128 output (128 f32 per thread) and the scores they
 * would spill, so there they are read from shared memory per key tile, as
 * FlashAttention-2 does. */
static bool fits_in_fragments(const Lower *l, const Type *t) {
    return 16 * l->row_blocks * t->dims[1].size / 64 <= 32;
}

/* sm_90a: every copy of the launch is a TMA copy (tma_copies). */
static void annotate_tma(Arena *a, const Block *blk) {
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_COPY_ASYNC)
            op_set_attr(a, op, "nv.copy", attr_str(a, "tma"));
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                annotate_tma(a, op->regions[r].blocks[k]);
    }
}

static void annotate(const Lower *l, const Block *top, const Block *blk) {
    Arena *a = l->ctx->arena;
    for (Op *op = blk->first; op; op = op->next) {
        switch (op->kind) {
        case OP_LOAD:
            if (is_dot_operand_load(l, top, op)) {
                bool shared = op->operands[0]->type->space == AS_SHARED;
                /* sm_80: a global tile that only A operands read (Q) is held
                 * in registers as A fragments, loaded once */
                bool frags = !shared && l->gen == SM80 && only_dot_uses(top, op->results[0], true) &&
                             fits_in_fragments(l, op->results[0]->type);
                op_set_attr(a, op, "nv.operand", attr_str(a, shared ? "smem" : frags ? "fragments" : "scratch"));
                if (!shared)   /* sm_80's scratch stays padded (sm80_swizzles) */
                    set_shared_layout(l, op, op->results[0]->type, l->gen == SM90);
            }
            break;
        case OP_TRANS: {   /* a computed tile's transpose read by dots (the backward's dSᵀ): via shared memory */
            const Op *src = op->operands[0]->def;
            const Type *t = op->operands[0]->type;
            int q = l->gen == SM70 ? 4 : 16;
            bool elem_ok = l->gen == SM70 ? t->elem == SK_F16 : is_16bit(t->elem);
            if ((!src || src->kind != OP_LOAD) && elem_ok && t->dims[0].size % q == 0 && t->dims[1].size % q == 0 &&
                only_dot_uses(top, op->results[0], false)) {
                op_set_attr(a, op, "nv.operand", attr_str(a, "scratch"));
                set_shared_layout(l, op, t, l->gen == SM90);
            }
            break;
        }
        case OP_ALLOC: {
            const Type *t = op->results[0]->type;
            if (l->gen == SM90 && is_16bit(t->elem) && t->rank >= 2)
                op_set_attr(a, op, "nv.swizzle", attr_int(a, 128));
            else if ((l->gen == SM70 ? t->elem == SK_F16 : is_16bit(t->elem)) && t->rank >= 2 &&
                     !t->dims[t->rank - 1].sym)
                set_shared_layout(l, op, t, sm80_swizzles(l, t) && only_copied_and_read_by_dots(l, top, op->results[0]));
            break;
        }
        case OP_COPY_ASYNC:
            op_set_attr(a, op, "nv.copy", attr_str(a, l->gen == SM70 ? "registers" : "cp.async"));
            break;
        case OP_DOT: annotate_dot(l, op); break;
        default: break;
        }
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                annotate(l, top, op->regions[r].blocks[k]);
    }
}

/* ---- row sums left in pieces (FlashAttention-2) -------------------------------- */

/* The online softmax carries each row's sum l' = l·α + rowsum(P) through the
 * key loop, and nothing reads it before the loop ends. Each lane can carry
 * the sum of its own columns instead, scaled by the same α (every lane of a
 * row holds α): the reduce gets nv.partial, and one nv.lane_sum after the
 * loops adds the lanes' pieces. That takes the shuffles out of every
 * iteration. The carry qualifies when its yield is arith.add of
 * arith.mul(arg, α) and a tile.reduce "sum" of a score tile, each used only
 * there, and its start is a splat of 0 or the same carry of an earlier loop
 * (the key loop's segments). */

typedef struct Partial {
    Arena *a;
    Map nuses;     /* Value -> use count, in the launch */
    Map pieces;    /* Values held in pieces: qualifying carries' args and the loops' results */
    Map lane_sum;  /* a loop result -> its nv.lane_sum */
} Partial;

static int nuses(const Partial *p, const Value *v) { return (int)(intptr_t)map_get(&p->nuses, v); }

static bool is_zero_splat(const Value *v) {
    const Op *s = v->def, *c = s && s->kind == OP_SPLAT ? s->operands[0]->def : NULL;
    Attr *x = c && c->kind == OP_CONSTANT ? op_attr(c, "value") : NULL;
    return x && (x->kind == AT_FLOAT ? x->f == 0 : x->kind == AT_INT && x->i == 0);
}

static bool is_row_vector(const Type *t) {
    return t->kind == TY_TILE && t->rank == 2 && !t->dims[0].sym && t->dims[0].size > 1 && !t->dims[1].sym &&
           t->dims[1].size == 1 && scalar_is_float(t->elem);
}

/* The reduce of carry i of loop f, when the carry qualifies. */
static Op *partial_reduce(const Partial *p, const Op *f, int i) {
    const Block *body = f->regions[0].blocks[0];
    Value *arg = body->args[1 + i], *init = f->operands[3 + i];
    const Op *add = body->last->operands[i]->def;
    if (!is_row_vector(arg->type) || (!is_zero_splat(init) && !map_get(&p->pieces, init)) || nuses(p, arg) != 1 ||
        !add || add->kind != OP_ADD || add->parent != body || nuses(p, add->results[0]) != 1)
        return NULL;
    for (int s = 0; s < 2; s++) {
        Op *mul = add->operands[s]->def, *red = add->operands[1 - s]->def;
        if (!mul || !red || mul->kind != OP_MUL || red->kind != OP_TILE_REDUCE ||
            strcmp(op_attr(red, "kind")->s, "sum") != 0 || nuses(p, mul->results[0]) != 1 ||
            nuses(p, red->results[0]) != 1)
            continue;
        const Type *x = red->operands[0]->type;   /* a score tile: every element in one lane */
        if (x->dims[1].sym || x->dims[1].size % 16 || !type_equal(red->results[0]->type, arg->type) ||
            !type_equal(add->results[0]->type, arg->type))
            continue;
        int k = mul->operands[0] == arg ? 0 : mul->operands[1] == arg ? 1 : -1;
        const Type *alpha = k < 0 ? NULL : mul->operands[1 - k]->type;   /* the same in every lane of a row */
        if (alpha && (alpha->kind != TY_TILE || is_row_vector(alpha)) && type_equal(mul->results[0]->type, arg->type))
            return red;
    }
    return NULL;
}

static void find_partials(Partial *p, Block *blk) {
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_FOR)
            for (int i = 0; i < op->nresults; i++) {
                Op *red = partial_reduce(p, op, i);
                if (!red)
                    continue;
                op_set_attr(p->a, red, "nv.partial", attr_bool(p->a, true));
                map_put(p->a, &p->pieces, op->regions[0].blocks[0]->args[1 + i], (void *)1);
                map_put(p->a, &p->pieces, op->results[i], (void *)1);
            }
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                find_partials(p, op->regions[r].blocks[k]);
    }
}

/* Every use of a loop result held in pieces, other than the start of the
 * same carry of a later loop, reads its nv.lane_sum, placed right after the
 * loop. */
static void join_partials(Partial *p, Block *blk) {
    for (Op *op = blk->first; op; op = op->next) {
        for (int i = 0; i < op->noperands && op->kind != OP_LANE_SUM; i++) {
            Value *v = op->operands[i];
            if (!v->def || v->def->kind != OP_FOR || !map_get(&p->pieces, v))
                continue;
            if (op->kind == OP_FOR && i >= 3 && map_get(&p->pieces, op->regions[0].blocks[0]->args[1 + i - 3]))
                continue;
            Value *whole = map_get(&p->lane_sum, v);
            if (!whole) {
                Builder b = {.a = p->a, .blk = v->def->parent, .before = v->def->next, .loc = v->def->loc};
                whole = b_emit(&b, OP_LANE_SUM, v->type, 1, &v);
                map_put(p->a, &p->lane_sum, v, whole);
            }
            op->operands[i] = whole;
        }
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                join_partials(p, op->regions[r].blocks[k]);
    }
}

static void partial_row_sums(Arena *a, Op *launch) {
    Partial p = {.a = a};
    map_init(&p.nuses, false);
    map_init(&p.pieces, false);
    map_init(&p.lane_sum, false);
    count_uses(launch, &p.nuses, a);
    find_partials(&p, launch->regions[0].blocks[0]);
    join_partials(&p, launch->regions[0].blocks[0]);
}

/* sm_90a: the first 16-bit shared tile (a buffer, or a global tile the dots
 * read through shared memory) that 128-byte swizzled panels of 64 columns
 * cannot hold, or NULL. */
static const Op *narrow_shared_tile(const Lower *l, const Block *top, const Block *blk) {
    for (const Op *op = blk->first; op; op = op->next) {
        const Type *t = op->results && op->nresults ? op->results[0]->type : NULL;
        if ((op->kind == OP_ALLOC && is_16bit(t->elem) && t->rank >= 2 &&
             (t->dims[t->rank - 1].sym || t->dims[t->rank - 1].size % 64 || t->dims[t->rank - 2].size % 8)) ||
            (op->kind == OP_LOAD && op->operands[0]->type->space != AS_SHARED && is_dot_operand_load(l, top, op) &&
             t->dims[1].size % 64))
            return op;
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++) {
                const Op *bad = narrow_shared_tile(l, top, op->regions[r].blocks[k]);
                if (bad)
                    return bad;
            }
    }
    return NULL;
}

/* sm_90a: whether TMA can make this copy. The source is a tensor the
 * kernel takes (the runtime encodes a tensor map over it: rank at most 5,
 * 16-bit, its rows a multiple of 16 bytes: a static innermost dim), the box
 * is rows of a contiguous run of the innermost dim, and the destination is
 * [stages, rows <= 256, 64-column panels], 128-byte swizzled (what
 * SWIZZLE_128B writes, a panel per TMA box). */
static bool tma_box_ok(const Block *top, const Value *src, const Attr *dims, int64_t rows, int64_t cols) {
    const Type *st = src->type;
    bool param = false;
    for (int i = 3; i < top->nargs; i++)
        param |= top->args[i] == src;
    int inner = st->rank - 1;
    return param && st->rank <= 5 && is_16bit(st->elem) && !st->dims[inner].sym &&
           st->dims[inner].size * 2 % 16 == 0 && dims && dims->n == 2 && dims->elems[1]->i == inner &&
           dims->elems[0]->i >= 0 && dims->elems[0]->i < inner && rows <= 256 && cols % 64 == 0;
}

static bool tma_copy_ok(const Block *top, const Op *op) {
    const Type *dt = op->operands[1]->type;
    const Op *alloc = op->operands[1]->def;
    return dt->rank == 3 && tma_box_ok(top, op->operands[0], op_attr(op, "dims"), dt->dims[1].size, dt->dims[2].size) &&
           alloc && op_attr(alloc, "nv.swizzle");
}

/* Moves [first, last] (a new buffer, its index constants, its copy) up
 * past the pure ops, allocs and copies before it that define none of its
 * operands: Q's copy then goes ahead of the first K/V copies, which
 * double-buffer hoisted above Q's load. A persistent block's producer, which
 * issues them in this order, so fetches the next tile's Q as soon as the
 * consumers release the buffer, not after K's first stage is free too. */
static void hoist_copy(Op *first, Op *last) {
    Op *pos = first;
    for (;;) {
        Op *p = pos->prev;
        if (!p || !((op_info[p->kind].flags & OPF_PURE) || p->kind == OP_ALLOC || p->kind == OP_COPY_ASYNC))
            break;
        bool used = false;
        for (Op *o = first; o != last->next && !used; o = o->next)
            for (int i = 0; i < o->noperands; i++)
                for (int r = 0; r < p->nresults; r++)
                    used |= o->operands[i] == p->results[r];
        if (used)
            break;
        pos = p;
    }
    if (pos == first)
        return;
    Op *stop = last->next;
    for (Op *o = first, *next; o != stop; o = next) {
        next = o->next;
        op_unlink(o);
        op_insert_before(pos, o);
    }
}

/* Under warp specialisation a global tile the dots read (Q, copied once into
 * a shared scratch by the consumers) becomes a TMA copy the producer issues
 * before the first K/V copies, into a one-stage buffer the consumers wait
 * for and release after its last reader (FlashAttention-3's Q): the
 * consumers no longer load it themselves, and a persistent block's producer
 * fetches the next tile's Q while they finish this one. */
static void tma_scratch_loads(Arena *a, Op *launch) {
    Block *body = launch->regions[0].blocks[0];
    for (Op *op = body->first, *next; op; op = next) {
        next = op->next;
        Attr *operand = op_attr(op, "nv.operand");
        if (op->kind != OP_LOAD || !operand || strcmp(operand->s, "scratch") != 0)
            continue;
        const Type *t = op->results[0]->type;
        if (t->rank != 2 || t->dims[0].sym || t->dims[1].sym ||
            !tma_box_ok(body, op->operands[0], op_attr(op, "dims"), t->dims[0].size, t->dims[1].size))
            continue;
        Builder b = {a, NULL, op, op->loc};
        Dim dims[3] = {{NULL, 1}, t->dims[0], t->dims[1]};
        Type *bt = type_shaped(a, TY_MEMREF, t->elem, 3, dims);
        bt->space = AS_SHARED;
        Value *buf = b_emit(&b, OP_ALLOC, bt, 0, NULL);
        op_set_attr(a, buf->def, "nv.swizzle", attr_int(a, 128));
        int n = op->noperands - 1;
        Value **ops = NEW_ARRAY(a, Value *, n + 3);
        ops[0] = op->operands[0];
        ops[1] = buf;
        ops[2] = b_index(&b, 0);
        memcpy(ops + 3, op->operands + 1, sizeof(Value *) * (size_t)n);
        Type *tok = NEW(a, Type);
        tok->kind = TY_TOKEN;
        Value *copy = b_emit(&b, OP_COPY_ASYNC, tok, n + 3, ops);
        op_set_attr(a, copy->def, "dims", op_attr(op, "dims"));
        op_set_attr(a, copy->def, "nv.copy", attr_str(a, "tma"));
        hoist_copy(buf->def, copy->def);
        b_emit(&b, OP_WAIT, NULL, 1, &copy);
        Value *lops[4] = {buf, b_index(&b, 0), b_index(&b, 0), b_index(&b, 0)};
        Value *ld = b_emit(&b, OP_LOAD, op->results[0]->type, 4, lops);
        op_set_attr(a, ld->def, "dims", attr_array(a, 2, (Attr *[]){attr_int(a, 1), attr_int(a, 2)}));
        op_set_attr(a, ld->def, "nv.operand", attr_str(a, "smem"));
        replace_all_uses(launch, op->results[0], ld);
        op_unlink(op);
    }
}

/* Under warp specialisation a 16-bit tile stored whole into an output the
 * kernel takes (O) is stored by TMA (nv.store = "tma": through a swizzled
 * shared buffer, codegen's tma_store). Head dim 256's 64 KB buffer fits
 * only where it can take memory a dead buffer held (Q's): not persistent. */
static void tma_stores(Arena *a, const Block *body) {
    for (Op *op = body->first; op; op = op->next) {
        if (op->kind != OP_STORE)
            continue;
        const Type *t = op->operands[1]->type;
        if (t->kind == TY_TILE && t->rank == 2 && !t->dims[0].sym && !t->dims[1].sym &&
            op->operands[0]->type->elem == t->elem &&
            tma_box_ok(body, op->operands[0], op_attr(op, "dims"), t->dims[0].size, t->dims[1].size))
            op_set_attr(a, op, "nv.store", attr_str(a, "tma"));
    }
}

/* The shared memory a launch's 16-bit buffers take (its swizzled allocs,
 * the tiles TMA stores through a buffer of their own), and 4 KiB for its
 * mbarriers and row vectors, as tiling's fit_keys counts. */
int64_t nv_buffer_bytes(const Block *body) {
    int64_t bytes = 4096;
    for (const Op *op = body->first; op; op = op->next) {
        const Type *t = op->kind == OP_ALLOC && op_attr(op, "nv.swizzle") ? op->results[0]->type
                        : op->kind == OP_STORE && op_attr(op, "nv.store")   ? op->operands[1]->type
                                                                            : NULL;
        int64_t n = 2;
        for (int d = 0; t && d < t->rank; d++)
            n *= t->dims[d].size;
        bytes += t ? n : 0;
    }
    return bytes;
}

/* Whether v is computed from x; seen: the values already looked at (each
 * once, so shared subexpressions cost nothing more). */
static bool depends_on(Arena *a, Map *seen, const Value *v, const Value *x) {
    if (v == x)
        return true;
    if (!v->def || map_get(seen, v))
        return false;
    map_put(a, seen, v, (void *)1);
    for (int i = 0; i < v->def->noperands; i++)
        if (depends_on(a, seen, v->def->operands[i], x))
            return true;
    return false;
}

/* Whether a loop's key range in blk depends on the query tile (pid x): a
 * causal mask or a window. */
static bool keys_follow_queries(Arena *a, const Block *blk, const Value *pid_x) {
    Map seen;
    map_init(&seen, false);
    for (const Op *op = blk->first; op; op = op->next)
        if (op->kind == OP_FOR && (depends_on(a, &seen, op->operands[0], pid_x) ||
                                   depends_on(a, &seen, op->operands[1], pid_x)))
            return true;
    return false;
}

/* Whether every copy in blk can be a TMA copy (and there is one): a launch
 * takes TMA for all its copies or none, so cp.async's group counts
 * (nv.pending) never mix with mbarriers. */
static bool tma_copies(const Block *top, const Block *blk, int *n) {
    for (const Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_COPY_ASYNC && !tma_copy_ok(top, op))
            return false;
        *n += op->kind == OP_COPY_ASYNC;
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                if (!tma_copies(top, op->regions[r].blocks[k], n))
                    return false;
    }
    return true;
}

static bool layout_launch(const Lower *l, Op *launch) {
    PassContext *ctx = l->ctx;
    const Block *body = launch->regions[0].blocks[0];
    Scan s = {.acc = SK_F32};
    scan(body, body, &s);
    if (s.bf16 && !l->t->bf16) {
        op_diag(ctx->diag, NULL, launch,
                arena_printf(ctx->arena, "%s codegen: bf16 tensors are not supported on %s (%s has no bf16 MMA); use f16",
                             l->t->name, l->t->name, l->t->family));
        return false;
    }
    if (s.bf16 && s.dots && s.acc == SK_F16) {
        op_diag(ctx->diag, NULL, launch,
                arena_printf(ctx->arena, "%s codegen: bf16 operands accumulate in f32 only (use acc f32)", l->t->name));
        return false;
    }
    if (s.bad_dot) {   /* before anything trips over the shape (head dim 1) */
        const Type *at = s.bad_dot->operands[0]->type, *rt = s.bad_dot->results[0]->type;
        op_diag(ctx->diag, NULL, launch,
                arena_printf(ctx->arena,
                             "%s codegen: a matrix product of [%lld x %lld] by [%lld x %lld]: both widths must be "
                             "multiples of 16 (the head dims of an attention block, the widths of an mlp block)",
                             l->t->name, (long long)at->dims[0].size, (long long)at->dims[1].size,
                             (long long)at->dims[1].size, (long long)rt->dims[1].size));
        return false;
    }
    int64_t rows = s.dots ? s.dot_rows : s.rows > 0 ? s.rows : 1;
    int warps = 4, row_blocks = 1, warp_cols = 1;
    if (s.dots) {
        if (rows % 16) {
            op_diag(ctx->diag, NULL, launch,
                    arena_printf(ctx->arena, "%s codegen: the row tile (%lld) must be a multiple of 16", l->t->name,
                                 (long long)rows));
            return false;
        }
        /* 4 warps, each 16·row_blocks rows (fewer warps for tiles under 64
         * rows). On sm_80 a warp owns at least 32 rows of a 128-row tile:
         * each B fragment it reads from shared memory feeds two MMAs, which
         * halves the ldmatrix traffic that otherwise bounds the MMA rate
         * (FlashAttention-2's 4 warps × 32 rows). */
        warps = rows % 64 == 0 ? 4 : (int)(rows / 16);
        /* ... when that fits in registers, measured with ptxas: a kernel
         * whose accumulators take at most 192 f32 per thread (attention at
         * D 64 with 64 keys, at D 128 with 32 or 64 keys: output and
         * scores, the last at the register limit, where sm80.c emits P·V
         * so that ptxas does not spill; a GEMM with one 128-column
         * accumulator) and that gathers nothing per score. A per-score
         * gather (a bias tensor) spills a lot; a GEMM with one 128-column
         * accumulator fits (166 registers), SwiGLU's two do not. Those keep
         * a warp per 16 rows. */
        if (l->gen == SM80 && rows == 128 && (s.carried_cols + s.dot_cols > 192 || s.gathers_per_score))
            warps = 8;
        Attr *hint = op_attr(launch, "schedule.warps");
        if (l->gen == SM90) {   /* a warpgroup (4 warps) per 64 rows, each warp 16 */
            const Op *narrow = narrow_shared_tile(l, body, body);
            const char *why =
                rows % 64 ? arena_printf(ctx->arena, "the row tile (%lld) must be a multiple of 64 (a warpgroup's wgmma "
                                                     "covers 64 rows)", (long long)rows)
                : hint && hint->i != rows / 16
                    ? arena_printf(ctx->arena, "warps(%lld): a %lld-row tile takes %lld warps (a warpgroup per 64 rows)",
                                   (long long)hint->i, (long long)rows, (long long)(rows / 16))
                : narrow ? "wgmma reads shared tiles in 128-byte swizzled panels of 64 columns: the head dim (or "
                           "a schedule's tile width) must be a multiple of 64"
                         : NULL;
            if (why) {
                op_diag(ctx->diag, NULL, narrow && !(rows % 64) ? narrow : launch,
                        arena_printf(ctx->arena, "%s codegen: %s", l->t->name, why));
                return false;
            }
            warps = (int)(rows / 16);
            hint = NULL;
        }
        if (hint) {
            if (rows % (16 * hint->i)) {
                op_diag(ctx->diag, NULL, launch,
                        arena_printf(ctx->arena,
                                     "%s codegen: warps(%lld) does not split the row tile (%lld) into 16-row blocks",
                                     l->t->name, (long long)hint->i, (long long)rows));
                return false;
            }
            warps = (int)hint->i;
        }
        row_blocks = (int)(rows / 16 / warps);
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
        if (l->gen == SM80 && !s.row_bound && rows % 64 == 0 && s.carried_cols >= 64) {
            int wrows = (int)(rows / 64);
            int64_t per_row = s.carried_cols / 64;   /* at most 8 warps: 255 registers a thread */
            per_row = per_row < 1 ? 1 : per_row > 8 / wrows ? 8 / wrows : per_row;
            int64_t want = hint ? hint->i : wrows * per_row;
            int64_t wc = want % wrows ? 0 : want / wrows;
            if (wc > 1 && s.col_gcd % (16 * wc) == 0) {
                warps = (int)want;
                warp_cols = (int)wc;
                row_blocks = 4;
            }
        }
    }
    Arena *a = ctx->arena;
    op_set_attr(a, launch, "nv.layout", attr_str(a, !s.dots ? "blocked" : s.acc == SK_F16 ? "acc.f16" : "acc.f32"));
    op_set_attr(a, launch, "nv.rows", attr_int(a, rows));
    op_set_attr(a, launch, "nv.warps", attr_int(a, warps));
    op_set_attr(a, launch, "nv.row_blocks", attr_int(a, row_blocks));
    if (warp_cols > 1)
        op_set_attr(a, launch, "nv.warp_cols", attr_int(a, warp_cols));
    Lower lw = *l;
    lw.row_blocks = row_blocks;
    l = &lw;
    annotate(l, body, body);   /* in order: a dot's loads come before it (and allocs before copies) */
    int ncopies = 0;
    if (l->gen == SM90 && tma_copies(body, body, &ncopies) && ncopies) {
        lw.tma = true;
        annotate_tma(a, body);
        /* warp specialisation: a producer warpgroup issues the copies.
         * Default (measured on the H200, bench/results/2026-12-01-h200/NOTES.md and
         * 9): on for attention with 128-wide score tiles, outputs wider
         * than 128 (head dim 256) or key ranges that follow the query tile
         * (causal, windows); off for 64-wide score tiles
         * over every key (head dim 64, no mask), which without it fit two
         * blocks per SM and run faster so, and for GEMMs (no score tile;
         * the same speed either way). The schedule's producer(0|1) decides. */
        Attr *ws = op_attr(launch, "schedule.producer"), *pp = op_attr(launch, "schedule.pingpong");
        bool wide = s.dot_cols > 64 || (s.dot_cols && s.carried_cols > 128);
        bool band = keys_follow_queries(a, body, body->args[0]);   /* causal, windows */
        bool specialise = ws ? ws->i != 0 : wide || band;
        if (specialise) {
            op_set_attr(a, launch, "nv.producer_warps", attr_int(a, 4));
            tma_scratch_loads(a, launch);
            tma_stores(a, body);
            /* one consumer warpgroup (a 64-row tile): two blocks an SM
             * where their buffers fit twice, so two consumers share it as
             * in a 128-row tile but each with its own producer, tiles and
             * epilogue (2026-12-02, head dim 64 causal N 512: 201 → 235
             * TFLOP/s at 64 × 64; one block an SM before) */
            if (warps == 4 && 2 * nv_buffer_bytes(body) <= l->t->smem_limit)
                op_set_attr(a, launch, "nv.blocks_per_sm", attr_int(a, 2));
            /* ping-pong between consumer warpgroups, a turn holding Q·Kᵀ(j)
             * and P·V(j−1). Default (2026-12-02, H200, same run): on where
             * the keys do not follow the query tile, up to head dim 128
             * (head dim 64 +5 to 7 %, 128 +1 to 2 %); off under a causal
             * band (head dim 64 −5 %, 128 ±2 %) and at head dim 256 (−1 to
             * −3 %). The schedule's pingpong(0|1) decides. */
            bool ping = pp ? pp->i != 0 : s.carried_cols <= 128 && !band;
            if (warps >= 8 && ping)
                op_set_attr(a, launch, "nv.pingpong", attr_int(a, 1));
            /* persistent blocks: each loops over the grid's tiles, so the
             * producer fetches the next tile's Q and K/V while the
             * consumers finish this one, and O's TMA store runs beside the
             * next tile. Default (bench/results/2026-12-02-h200/NOTES.md): on for
             * attention whose O goes through a TMA store (head dim up to
             * 128: 6–18 % faster at N ≤ 2k, even at 8k), off for head dim
             * 256 (O's buffer then would not fit beside the stages; with O
             * from registers it was 15 % slower). The schedule's
             * persistent(0|1) decides. Needs grid z = 1. */
            Attr *ps = op_attr(launch, "schedule.persistent");
            bool persist = ps ? ps->i != 0 : s.dot_cols && s.carried_cols <= 128;
            const Op *z = launch->operands[2]->def;
            if (persist && z && z->kind == OP_CONSTANT && op_attr(z, "value")->i == 1)
                op_set_attr(a, launch, "nv.persistent", attr_int(a, 1));
        }
    }
    if (s.dots)
        partial_row_sums(a, launch);
    if (l->gen != SM70 && !l->tma) {
        Map group;
        map_init(&group, false);
        int count = 0;
        count_groups(l, launch->regions[0].blocks[0], &group, &count);
    }
    return true;
}

static bool walk(const Lower *l, Block *blk) {
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_LAUNCH) {
            if (!layout_launch(l, op))
                return false;
            continue;
        }
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                if (!walk(l, op->regions[r].blocks[k]))
                    return false;
    }
    return true;
}

bool pass_sm70_layout(Op *module, PassContext *ctx) {
    op_set_attr(ctx->arena, module, "nv.target", attr_str(ctx->arena, "sm_70"));
    Lower l = {ctx, SM70, target_lookup("sm_70"), 1, false};
    return walk(&l, op_body(module));
}

bool pass_sm80_layout(Op *module, PassContext *ctx) {
    op_set_attr(ctx->arena, module, "nv.target", attr_str(ctx->arena, "sm_80"));
    Lower l = {ctx, SM80, target_lookup("sm_80"), 1, false};
    return walk(&l, op_body(module));
}

bool pass_sm90a_layout(Op *module, PassContext *ctx) {
    op_set_attr(ctx->arena, module, "nv.target", attr_str(ctx->arena, "sm_90a"));
    Lower l = {ctx, SM90, target_lookup("sm_90a"), 1, false};
    return walk(&l, op_body(module));
}
