/* nv_layout.h — the layout passes' shared state and the hooks each target
 * fills in (as Triton splits MMAv1/MMAv2/WGMMA): nv_layout.c is the pass,
 * layout_sm70.c, layout_sm80.c and layout_sm90a.c are the targets. */
#ifndef ATTNC_NV_LAYOUT_H
#define ATTNC_NV_LAYOUT_H

#include "ir/builder.h"
#include "passes/passes.h"
#include "target/target.h"

typedef struct LayoutTarget LayoutTarget;

typedef struct Lower {
    PassContext *ctx;
    const LayoutTarget *lt;
    const Target *t;
    int row_blocks;   /* of the launch being lowered: 16-row blocks per warp */
    bool registers_scarce;   /* of the launch being lowered: registers_scarce(its Scan) */
    bool tma;         /* sm_90a: the launch's copies are TMA copies */
} Lower;

/* What the pass learns of a launch body before it decides its shape. */
typedef struct Scan {
    int64_t rows, dot_rows;   /* the widest tile; the rows of the dots */
    int dots;
    ScalarKind acc;
    const Op *bf16;           /* an op with a bf16 tile or buffer */
    int64_t carried_cols;     /* of the 2-D tiles a loop carries (accumulators), widest loop */
    int64_t dot_cols;         /* the widest dot that starts from zero (scores) */
    const Op *bad_dot;        /* a dot whose K or N is not a multiple of 16 */
    const Op *wide_dot;       /* a dot whose operands are not 16-bit (f32: no tensor core takes it) */
    bool gathers_per_score;   /* a tile.gather of a whole score tile (a bias tensor) */
    /* what keeps a row of every tile inside one warp: a reduction along a
     * row, a dot whose A is a computed tile (P), a transpose */
    bool row_bound;
    int64_t col_gcd;          /* of the widths of the 2-D tiles in registers */
} Scan;

/* Whether registers are scarce in the launch: a loop over score tiles
 * carries accumulators more than 128 columns wide (the backward's dK and
 * dV at head dim 128: 128 f32 a thread). Then addresses are formed where
 * they are used (nv.rematerialise, where no setmaxnreg adds registers) and
 * sm_80 holds no A fragments across the loop. */
static inline bool registers_scarce(const Scan *s) { return s->dot_cols && s->carried_cols > 128; }

struct LayoutTarget {
    const Target *target;
    /* a dot operand's rows and columns are multiples of this (the MMA's
     * smallest fragment: 4 for m8n8k4, 16 for m16n8k16 and wgmma), and of an
     * element type operand_elem accepts */
    int operand_multiple;
    bool (*operand_elem)(ScalarKind k);
    /* the row stride (16-bit elements) of a padded shared tile `cols` wide:
     * conflict-free for the target's fragment loads */
    int64_t (*row_stride)(int64_t cols);
    /* every 16-bit shared tile in 128-byte swizzled panels (sm_90a: what
     * wgmma's descriptors read) */
    bool swizzle_all;
    /* a ring that async copies fill and only dots read, of this tile type,
     * in swizzled panels instead of padded rows (sm_80); NULL: never */
    bool (*swizzles_ring)(const Type *t);
    /* a global tile that only A operands read held in registers as A
     * fragments, loaded once (sm_80's Q); NULL: never */
    bool (*holds_a_fragments)(const Lower *l, const Type *t);
    const char *copy;      /* nv.copy of an async copy: "registers" or "cp.async" */
    bool counts_groups;    /* cp.async waits count the copies left in flight (nv.pending) */
    /* nv.mma, nv.a and nv.b of a tile.dot */
    void (*annotate_dot)(const Lower *l, Op *dot);
    /* a dot kernel's warps, after the common choice (4, fewer under 64
     * rows): may refuse the launch (false, said) or take the schedule's
     * warps(N) itself (*hint = NULL); NULL: the common choice */
    bool (*pick_warps)(const Lower *l, Op *launch, const Scan *s, int64_t rows, int *warps, Attr **hint);
    /* the warps as a grid over rows and columns (nv.warp_cols); NULL: none */
    void (*warp_grid)(const Scan *s, int64_t rows, const Attr *hint, int *warps, int *warp_cols, int *row_blocks);
    /* after the common annotations, the target's own over the whole launch
     * (sm_80: dots emitted in pairs; sm_90a: TMA copies and warp
     * specialisation); returns whether the launch's copies are TMA's.
     * NULL: none */
    bool (*annotate_launch)(const Lower *l, Op *launch, const Scan *s, int warps);
    /* before any decision, the target's rewrites of the launch (sm_90a:
     * loop-invariant A operands through shared memory); NULL: none */
    void (*prepare_launch)(const Lower *l, Op *launch);
};

extern const LayoutTarget layout_sm70, layout_sm80, layout_sm90a;

/* nv_layout.c: the pass for one target */
bool nv_layout_run(const LayoutTarget *lt, Op *module, PassContext *ctx);
/* shared helpers */
bool is_16bit(ScalarKind k);
/* padded 16-bit rows that ldmatrix reads without bank conflicts */
int64_t ldmatrix_stride(int64_t cols);
bool only_dot_uses(const Block *top, const Value *v, bool a_only);
bool is_dot_operand_load(const Lower *l, const Block *top, const Op *op);
/* "row" for a loaded dot operand, "col" for a transposed one, "" if computed */
const char *operand_layout(const Value *v);
/* nv.swizzle 128 or nv.row_stride (padded rows) on a 16-bit shared tile */
void set_shared_layout(const Lower *l, Op *op, const Type *t, bool swizzle);

/* An error of the target lowering at op, with a note at the block's
 * schedule for the target where it has one (schedule_note). */
void layout_error(const Lower *l, const Op *op, const char *msg);

#endif
