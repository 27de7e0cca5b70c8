/* sm70_layout.c — tile IR → sm_70 target IR: the decisions of the Volta code
 * generator, written onto the tile ops as `nv.*` attributes (the way
 * TritonGPU puts layouts on types). codegen/sm70.c emits LLVM IR from them.
 * `attnc FILE -emit=nv -arch sm_70` prints the result.
 *
 *   tile.launch    nv.layout   "acc.f32" | "acc.f16": kernels with a tile.dot
 *                              keep every tile in mma.m8n8k4's accumulator
 *                              layout; "blocked": row kernels
 *                  nv.rows, nv.warps, nv.row_blocks: the row tile, warps per
 *                              block (each owns 16·row_blocks rows)
 *   tile.load      nv.operand  "smem" (a shared stage read by the dots in
 *                              place) | "scratch" (a global tile copied once
 *                              into shared memory for the dots), with
 *                              nv.row_stride; absent: loaded into the layout
 *   tile.dot       nv.mma      "m8n8k4.<A>.<B>.<acc>": the fragment layouts
 *                              (row/col) that read the operands' memory
 *                              without a transpose, and the accumulator
 *                  nv.a        "smem" | "shuffle": P, an accumulator tile,
 *                              reaches the A layout by warp shuffles
 *   tile.alloc     nv.row_stride  f16 rows, padded so fragment loads are
 *                              free of bank conflicts
 *   tile.copy_async nv.prefetch "registers": loads issued here, stored to
 *                              shared memory at the tile.wait
 *
 * Refuses what Volta cannot do: bf16 (no bf16 MMA), row tiles that are not
 * a multiple of 16.
 */
#include <string.h>

#include "passes/passes.h"

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

/* ---- uses -------------------------------------------------------------------------- */

static bool only_dot_uses(const Block *top, const Value *v);

/* Whether v's uses in blk (counted in *count) are all tile.dot operands,
 * possibly through tile.trans. */
static bool dot_uses_in(const Block *top, const Value *v, const Block *blk, int *count) {
    for (const Op *o = blk->first; o; o = o->next) {
        for (int i = 0; i < o->noperands; i++)
            if (o->operands[i] == v) {
                (*count)++;
                if (o->kind == OP_TRANS ? !only_dot_uses(top, o->results[0]) : !(o->kind == OP_DOT && i < 2))
                    return false;
            }
        for (int r = 0; r < o->nregions; r++)
            for (int k = 0; k < o->regions[r].nblocks; k++)
                if (!dot_uses_in(top, v, o->regions[r].blocks[k], count))
                    return false;
    }
    return true;
}

static bool only_dot_uses(const Block *top, const Value *v) {
    int n = 0;
    return dot_uses_in(top, v, top, &n) && n > 0;
}

/* ---- the kernel ---------------------------------------------------------------------- */

typedef struct Scan {
    int64_t rows, dot_rows;   /* the widest tile; the rows of the dots */
    int dots;
    ScalarKind acc;
    const Op *bf16;           /* an op with a bf16 tile or buffer */
} Scan;

static void scan(const Block *blk, Scan *s) {
    for (const Op *o = blk->first; o; o = o->next) {
        for (int i = 0; i < o->nresults; i++) {
            const Type *t = o->results[i]->type;
            if (t->kind == TY_TILE && t->rank == 2 && t->dims[0].size > s->rows)
                s->rows = t->dims[0].size;
            if ((t->kind == TY_TILE || t->kind == TY_MEMREF) && t->elem == SK_BF16 && !s->bf16)
                s->bf16 = o;
        }
        if (o->kind == OP_DOT) {
            s->dots++;
            s->acc = o->results[0]->type->elem;
            s->dot_rows = o->results[0]->type->dims[0].size;
        }
        for (int r = 0; r < o->nregions; r++)
            for (int k = 0; k < o->regions[r].nblocks; k++)
                scan(o->regions[r].blocks[k], s);
    }
}

/* A tile.load that only dots read, read as whole f16 rows of a 2-D window. */
static bool is_dot_operand_load(const Block *top, const Op *op) {
    const Type *mt = op->operands[0]->type, *rt = op->results[0]->type;
    Attr *dims = op_attr(op, "dims");
    return mt->elem == SK_F16 && dims && dims->n == 2 && dims->elems[0]->i == mt->rank - 2 &&
           dims->elems[1]->i == mt->rank - 1 && rt->dims[0].size % 4 == 0 && rt->dims[1].size % 4 == 0 &&
           only_dot_uses(top, op->results[0]);
}

/* The fragment layout that reads a dot operand's memory as it lies: "row"
 * for a loaded tile, "col" for the transpose of one, "" if computed. */
static const char *operand_layout(const Value *v) {
    const Op *d = v->def;
    if (d && d->kind == OP_LOAD && op_attr(d, "nv.operand"))
        return "row";
    if (d && d->kind == OP_TRANS && d->operands[0]->def && d->operands[0]->def->kind == OP_LOAD &&
        op_attr(d->operands[0]->def, "nv.operand"))
        return "col";
    return "";
}

static void annotate(PassContext *ctx, const Block *top, const Block *blk) {
    Arena *a = ctx->arena;
    for (Op *op = blk->first; op; op = op->next) {
        switch (op->kind) {
        case OP_LOAD:
            if (is_dot_operand_load(top, op)) {
                bool shared = op->operands[0]->type->space == AS_SHARED;
                op_set_attr(a, op, "nv.operand", attr_str(a, shared ? "smem" : "scratch"));
                if (!shared)
                    op_set_attr(a, op, "nv.row_stride", attr_int(a, shared_stride(op->results[0]->type->dims[1].size)));
            }
            break;
        case OP_ALLOC: {
            const Type *t = op->results[0]->type;
            if (t->elem == SK_F16 && t->rank >= 2 && !t->dims[t->rank - 1].sym)
                op_set_attr(a, op, "nv.row_stride", attr_int(a, shared_stride(t->dims[t->rank - 1].size)));
            break;
        }
        case OP_COPY_ASYNC: op_set_attr(a, op, "nv.prefetch", attr_str(a, "registers")); break;
        case OP_DOT: {
            const char *al = operand_layout(op->operands[0]), *bl = operand_layout(op->operands[1]);
            const char *acc = op->results[0]->type->elem == SK_F16 ? "f16" : "f32";
            op_set_attr(a, op, "nv.a", attr_str(a, *al ? "smem" : "shuffle"));
            op_set_attr(a, op, "nv.mma", attr_str(a, arena_printf(a, "m8n8k4.%s.%s.%s", *al ? al : "row",
                                                                   *bl ? bl : "?", acc)));
            break;
        }
        default: break;
        }
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                annotate(ctx, top, op->regions[r].blocks[k]);
    }
}

static bool layout_launch(PassContext *ctx, Op *launch) {
    const Block *body = launch->regions[0].blocks[0];
    Scan s = {.acc = SK_F32};
    scan(body, &s);
    if (s.bf16) {
        op_diag(ctx->diag, NULL, launch,
                "sm_70 codegen: bf16 tensors are not supported on sm_70 (Volta has no bf16 MMA); use f16");
        return false;
    }
    int64_t rows = s.dots ? s.dot_rows : s.rows > 0 ? s.rows : 1;
    int warps = 4, row_blocks = 1;
    if (s.dots) {
        if (rows % 16) {
            op_diag(ctx->diag, NULL, launch,
                    arena_printf(ctx->arena, "sm_70 codegen: the row tile (%lld) must be a multiple of 16",
                                 (long long)rows));
            return false;
        }
        warps = rows % 64 == 0 ? 4 : (int)(rows / 16);
        row_blocks = (int)(rows / 16 / warps);
    }
    Arena *a = ctx->arena;
    op_set_attr(a, launch, "nv.layout", attr_str(a, !s.dots ? "blocked" : s.acc == SK_F16 ? "acc.f16" : "acc.f32"));
    op_set_attr(a, launch, "nv.rows", attr_int(a, rows));
    op_set_attr(a, launch, "nv.warps", attr_int(a, warps));
    op_set_attr(a, launch, "nv.row_blocks", attr_int(a, row_blocks));
    annotate(ctx, body, body);   /* in order: a dot's loads come before it */
    return true;
}

static bool walk(PassContext *ctx, Block *blk) {
    for (Op *op = blk->first; op; op = op->next) {
        if (op->kind == OP_LAUNCH) {
            if (!layout_launch(ctx, op))
                return false;
            continue;
        }
        for (int r = 0; r < op->nregions; r++)
            for (int k = 0; k < op->regions[r].nblocks; k++)
                if (!walk(ctx, op->regions[r].blocks[k]))
                    return false;
    }
    return true;
}

bool pass_sm70_layout(Op *module, PassContext *ctx) { return walk(ctx, op_body(module)); }
