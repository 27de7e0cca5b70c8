/* pipeline.c — the target-independent pass pipeline of each target, one list
 * each (Triton's make_ttir/make_ttgir style): read top to bottom to see what
 * happens to a program on its way to a target.
 *
 * Today every target runs the same passes; they differ in the tile sizes and
 * stage counts the passes pick for the target (PassContext.arch). The
 * target-specific lowering (issue #4) follows these.
 */
#include "passes/passes.h"

#include <string.h>

/* sm_70 (V100): 64x64 attention tiles, register prefetch of K/V */
static const char *const sm70[] = {
    "dce",            /* what the frontend left unused */
    "fusion",         /* attention -> attn.attention; GEMM + epilogue -> attn.fused_gemm */
    "mask-analysis",  /* affine key bands of masks */
    "tiling",         /* fused ops -> tile.launch kernels; fully masked key tiles skipped */
    "online-softmax", /* one key loop: running max, sum, rescale */
    "double-buffer",  /* loads of the next iteration in flight */
    "cse",            /* the constants and index arithmetic made more than once */
    "dce",
    NULL,
};

/* sm_80 (A100; full speed on H100/H200): 128x64 tiles, cp.async stages */
static const char *const sm80[] = {
    "dce", "fusion", "mask-analysis", "tiling", "online-softmax", "double-buffer", "cse", "dce", NULL,
};

/* sm_90a (H100/H200): 128x128 tiles, a TMA ring */
static const char *const sm90a[] = {
    "dce", "fusion", "mask-analysis", "tiling", "online-softmax", "double-buffer", "cse", "dce", NULL,
};

static const struct {
    const char *arch;
    const char *const *passes;
} pipelines[] = {
    {"sm_70", sm70},
    {"sm_80", sm80},
    {"sm_90a", sm90a},
};

bool pipeline_known(const char *arch) {
    for (size_t i = 0; i < sizeof pipelines / sizeof pipelines[0]; i++)
        if (strcmp(pipelines[i].arch, arch) == 0)
            return true;
    return false;
}

bool run_pipeline(Op *module, const char *arch, PassContext *ctx, PassOptions opts) {
    for (size_t i = 0; i < sizeof pipelines / sizeof pipelines[0]; i++) {
        if (strcmp(pipelines[i].arch, arch) != 0)
            continue;
        const Pass *list[32];
        int n = 0;
        for (const char *const *name = pipelines[i].passes; *name; name++)
            if (!(list[n++] = pass_lookup(*name)))
                die("pipeline %s names an unregistered pass '%s'", arch, *name);
        ctx->arch = pipelines[i].arch;
        return run_passes(module, list, n, ctx, opts);
    }
    diag_plain(ctx->diag, "unknown target '%s' (targets are sm_70, sm_80 and sm_90a)", arch);
    return false;
}
