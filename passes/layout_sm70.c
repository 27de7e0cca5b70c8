/* layout_sm70.c — Volta's layout (sm70-layout): mma.m8n8k4 fragments read
 * from padded shared rows, P moved to the A layout by shuffles, register
 * prefetch for the async copies. nv_layout.c is the pass. */
#include "passes/nv_layout.h"

#include <string.h>

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

static bool f16_only(ScalarKind k) { return k == SK_F16; }

static void annotate_dot(const Lower *l, Op *op) {
    Arena *a = l->ctx->arena;
    const char *al = operand_layout(op->operands[0]), *bl = operand_layout(op->operands[1]);
    const char *acc = op->results[0]->type->elem == SK_F16 ? "f16" : "f32";
    op_set_attr(a, op, "nv.a", attr_str(a, *al ? "smem" : "shuffle"));
    op_set_attr(a, op, "nv.mma", attr_str(a, arena_printf(a, "m8n8k4.%s.%s.%s", *al ? al : "row",
                                                           *bl ? bl : "?", acc)));
}

const LayoutTarget layout_sm70 = {
    .target = &target_sm70,
    .operand_multiple = 4, .operand_elem = f16_only, .row_stride = shared_stride,
    .copy = "registers",
    .annotate_dot = annotate_dot,
};

bool pass_sm70_layout(Op *module, PassContext *ctx) { return nv_layout_run(&layout_sm70, module, ctx); }
