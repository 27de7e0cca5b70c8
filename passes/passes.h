/* passes.h — the pass registry and the pass manager.
 *
 * A pass is a plain function over a module (QBE's style). Each lives in its
 * own file, opens with a before/after sketch, and is registered in
 * registry.c under the name attnc-opt's -passes= uses.
 *
 *   registry.c   the table of passes; the pass manager (verify, print, time)
 *   pipeline.c   runs a target's pipeline (target/target.c lists them)
 *   dce.c        dead-code elimination of pure ops
 *   cse.c        common subexpression elimination (constants, index arithmetic)
 *   backward.c   attention blocks' gradients, derived in the attn IR (-backward)
 *   fusion.c     attention patterns -> attn.attention; GEMM + epilogue -> attn.fused_gemm
 *   mask_analysis.c  affine key bounds of attention masks (for tiling)
 *   tiling.c     fused ops -> tile.launch kernels (programs over tiles, K/V loops);
 *                each kind of op in tiling_gemm.c, tiling_attention.c,
 *                tiling_backward.c, tiling_rows.c
 *   online_softmax.c  the softmax's three key loops -> one, with running max/sum/rescale
 *   double_buffer.c   loads of iteration it + S - 1 copied async into S shared stages
 *   nv_layout.c  tile IR -> nv IR (sm70-, sm80-, sm90a-layout), with the
 *                targets' hooks in layout_sm70.c, layout_sm80.c, layout_sm90a.c
 *   softmax_overlap.c  sm_90a key loops rotated: P·V during the next softmax
 *   dot_hoist.c  sm_90a: a dot whose operands are ready issued right after the dot before
 *   warp_roles.c sm_90a warp-specialised launches: the producer's ops, stage releases
 *   test_*.c     passes that are wrong on purpose, to prove the checks bite
 */
#ifndef ATTNC_PASSES_H
#define ATTNC_PASSES_H

#include "ir/ir.h"

typedef struct PassContext {
    Arena *arena;
    Diag *diag;
    const char *arch;   /* the target the passes prepare for (sm_70, sm_80, sm_90a) */
} PassContext;

typedef struct Pass {
    const char *name;
    const char *summary;
    bool (*run)(Op *module, PassContext *ctx);   /* false: failed, with a diagnostic */
} Pass;

const Pass *pass_lookup(const char *name);
void pass_list_print(FILE *f);

typedef struct PassOptions {
    bool print_after_all;   /* dump the IR after each pass to `dump` */
    bool verify_each;       /* run the verifier after each pass */
    bool time_passes;       /* report each pass's time to `dump` */
    FILE *dump;
    PrintOptions print;
    /* called after every pass (after verification); false stops the run */
    bool (*after_each)(Op *module, const char *pass, void *user);
    void *user;
} PassOptions;

/* Runs the passes in order; false on the first failure. */
bool run_passes(Op *module, const Pass *const *list, int n, PassContext *ctx, PassOptions opts);

/* pipeline.c: the pipeline of a target (target.c lists them), through its
 * lowering to target IR; false with a diagnostic for an unknown target.
 * run_pipeline_until with lowering false stops before the target lowering
 * (the tile IR of -emit=tile). */
bool pipeline_known(const char *arch);
bool run_pipeline(Op *module, const char *arch, PassContext *ctx, PassOptions opts);
bool run_pipeline_until(Op *module, const char *arch, PassContext *ctx, PassOptions opts, bool lowering);

/* the passes */
bool pass_dce(Op *module, PassContext *ctx);
bool pass_cse(Op *module, PassContext *ctx);
bool pass_fusion(Op *module, PassContext *ctx);
bool pass_mask_analysis(Op *module, PassContext *ctx);
bool pass_test_mask_analysis_shrink(Op *module, PassContext *ctx);   /* wrong on purpose */
bool pass_tiling(Op *module, PassContext *ctx);
bool pass_online_softmax(Op *module, PassContext *ctx);
bool pass_double_buffer(Op *module, PassContext *ctx);
bool pass_test_double_buffer_no_wait(Op *module, PassContext *ctx);       /* wrong on purpose */
bool pass_test_double_buffer_wrong_stage(Op *module, PassContext *ctx);   /* wrong on purpose */
bool pass_test_online_softmax_no_rescale(Op *module, PassContext *ctx);   /* wrong on purpose */
bool pass_test_perturb_constants(Op *module, PassContext *ctx);   /* wrong on purpose */
bool pass_test_pending_plus_one(Op *module, PassContext *ctx);    /* wrong on purpose */
bool pass_test_swap_waits(Op *module, PassContext *ctx);          /* wrong on purpose */
bool pass_test_backward_store_dq(Op *module, PassContext *ctx);   /* wrong on purpose */
/* Target lowering: the last pass of a target's pipeline. */
bool pass_sm70_layout(Op *module, PassContext *ctx);
bool pass_sm80_layout(Op *module, PassContext *ctx);
bool pass_sm90a_layout(Op *module, PassContext *ctx);
/* The shared memory a launch body's 16-bit buffers take, with 4 KiB for
 * the rest (nv_layout.c): what decides two blocks an SM. A persistent
 * kernel keeps every loop's buffers; another reuses them loop after loop. */
int64_t nv_buffer_bytes(const Block *body, bool persistent);
bool pass_softmax_overlap(Op *module, PassContext *ctx);
bool pass_dot_hoist(Op *module, PassContext *ctx);
bool pass_warp_roles(Op *module, PassContext *ctx);
/* backward.c: adds NAME.backward after every attention block NAME (its
 * gradients, derived in the attn IR); false (reported) when a score hook
 * cannot be differentiated. The drivers run it right after the frontend
 * under -backward. */
bool pass_backward(Op *module, PassContext *ctx);
bool pass_test_cse_ignore_attrs(Op *module, PassContext *ctx);
bool pass_test_fusion_drop_mask(Op *module, PassContext *ctx);
bool pass_test_tiling_rows_round_down(Op *module, PassContext *ctx);
bool pass_test_tiling_split_round_down(Op *module, PassContext *ctx);
bool pass_test_tiling_pages_in_order(Op *module, PassContext *ctx);
bool pass_test_tiling_sequences_unbounded(Op *module, PassContext *ctx);
bool pass_test_dce_stores(Op *module, PassContext *ctx);
bool pass_test_early_release(Op *module, PassContext *ctx);
bool pass_test_softmax_overlap_no_tail(Op *module, PassContext *ctx);

#endif
