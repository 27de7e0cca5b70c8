/* registry.c — every pass by name, and the pass manager that runs a list. */
#include "passes/passes.h"

#include <string.h>
#include <time.h>

static const Pass registry[] = {
    {"backward", "add NAME.backward (the gradients dq, dk, dv) after every attention block NAME", pass_backward},
    {"dce", "remove pure ops whose results are never used", pass_dce},
    {"cse", "replace a pure op equal to an earlier one by that one", pass_cse},
    {"test-dce-stores", "(tests only) dce that also removes stores, whose results nobody uses", pass_test_dce_stores},
    {"test-cse-ignore-attrs", "(tests only) cse comparing ops without their attributes", pass_test_cse_ignore_attrs},
    {"fusion",
     "attention -> attn.attention; GEMM + elementwise epilogue -> attn.fused_gemm; elementwise chains -> "
     "attn.fused_map",
     pass_fusion},
    {"test-fusion-drop-mask", "(tests only) fusion that leaves the attention mask out", pass_test_fusion_drop_mask},
    {"mask-analysis", "record the affine key range a mask allows on attn.attention", pass_mask_analysis},
    {"test-mask-analysis-shrink", "(tests only) mask-analysis with bounds 64 keys too tight", pass_test_mask_analysis_shrink},
    {"tiling", "attn.attention and attn.fused_gemm -> tile.launch kernels over tiles", pass_tiling},
    {"test-tiling-rows-round-down", "(tests only) tiling with attention's query tiles counted rounding down", pass_test_tiling_rows_round_down},
    {"test-tiling-split-round-down", "(tests only) tiling with each split's key tiles counted rounding down", pass_test_tiling_split_round_down},
    {"test-tiling-pages-in-order", "(tests only) tiling that reads a paged cache's pages in order, not through its block table", pass_test_tiling_pages_in_order},
    {"test-tiling-sequences-unbounded", "(tests only) tiling whose stores of packed sequences run past a sequence's end", pass_test_tiling_sequences_unbounded},
    {"online-softmax", "three passes over the keys -> one, with running max, sum and rescale", pass_online_softmax},
    {"double-buffer", "loads in kernel loops -> async copies into a ring of shared stages", pass_double_buffer},
    {"test-double-buffer-no-wait", "(tests only) double-buffer without the waits", pass_test_double_buffer_no_wait},
    {"test-double-buffer-wrong-stage", "(tests only) double-buffer reading the stage being filled", pass_test_double_buffer_wrong_stage},
    {"test-online-softmax-no-rescale", "(tests only) online-softmax without the rescale", pass_test_online_softmax_no_rescale},
    {"test-perturb-constants", "(tests only) scale every float constant by 1.01", pass_test_perturb_constants},
    {"test-pending-plus-one", "(tests only) leave one more cp.async copy in flight at every tile.wait", pass_test_pending_plus_one},
    {"test-backward-store-dq", "(tests only) the backward's dQ tiles are stored, not added", pass_test_backward_store_dq},
    {"test-swap-waits", "(tests only) each of a loop's two tile.waits waits on the other's token", pass_test_swap_waits},
    {"sm70-layout", "tile IR -> sm_70 target IR: register layouts, operand paths and mma shapes as nv.* attributes", pass_sm70_layout},
    {"sm80-layout", "tile IR -> sm_80 target IR: mma.m16n8k16 layouts, ldmatrix operands, cp.async copies", pass_sm80_layout},
    {"sm90a-layout", "tile IR -> sm_90a target IR: wgmma operands in swizzled shared memory, cp.async copies", pass_sm90a_layout},
    {"softmax-overlap", "sm_90a key loops rotated: P·V of the last tile issued after Q·Kᵀ of this one, run during its softmax", pass_softmax_overlap},
    {"dot-hoist", "sm_90a: a dot whose operands are ready issued right after the dot before it, run during the work between", pass_dot_hoist},
    {"warp-roles", "sm_90a warp-specialised launches: which ops the producer runs, where each stage is released", pass_warp_roles},
    {"test-early-release", "(tests only) warp-roles with every stage released right after its wait", pass_test_early_release},
    {"test-softmax-overlap-no-tail", "(tests only) softmax-overlap without the last tile's P·V", pass_test_softmax_overlap_no_tail},
};

const Pass *pass_lookup(const char *name) {
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (strcmp(registry[i].name, name) == 0)
            return &registry[i];
    return NULL;
}

void pass_list_print(FILE *f) {
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        fprintf(f, "  %-20s %s\n", registry[i].name, registry[i].summary);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool run_passes(Op *module, const Pass *const *list, int n, PassContext *ctx, PassOptions opts) {
    double total = 0;
    for (int i = 0; i < n; i++) {
        double start = now();
        bool ok = list[i]->run(module, ctx);
        double spent = now() - start;
        total += spent;
        if (opts.time_passes)
            fprintf(opts.dump, "// time: %-20s %8.3f ms\n", list[i]->name, spent * 1e3);
        if (!ok)
            return false;
        if (opts.print_after_all) {
            fprintf(opts.dump, "// -----// IR Dump After %s //----- //\n", list[i]->name);
            ir_print(opts.dump, module, opts.print);
        }
        if (opts.verify_each && ir_verify(module, ctx->diag, NULL)) {
            diag_plain(ctx->diag, "the IR is invalid after pass '%s'", list[i]->name);
            return false;
        }
        if (opts.after_each && !opts.after_each(module, list[i]->name, opts.user))
            return false;
    }
    if (opts.time_passes)
        fprintf(opts.dump, "// time: %-20s %8.3f ms\n", "total", total * 1e3);
    return true;
}
