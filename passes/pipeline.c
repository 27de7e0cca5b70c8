/* pipeline.c — the target-independent pass pipeline of each target, one
 * straight-line function each (Triton's make_ttir/make_ttgir style): read
 * top to bottom to see what happens to a program on its way to a target.
 *
 * Today: clean up, fuse, find mask bands, tile (with the target's tile
 * sizes, skipping fully masked key tiles, masked edges apart from unmasked
 * interiors), online softmax, double buffering (the block's stages for the
 * target). The targets differ in tile sizes and stages; the target-specific
 * lowering (issue #4) follows these.
 */
#include "passes/passes.h"

#include <string.h>

static bool run1(Op *m, const char *name, PassContext *ctx, PassOptions opts) {
    const Pass *p = pass_lookup(name);
    if (!p)
        die("pipeline names an unregistered pass '%s'", name);
    return run_passes(m, &p, 1, ctx, opts);
}

static bool pipeline_sm70(Op *m, PassContext *ctx, PassOptions opts) {
    return run1(m, "dce", ctx, opts) &&
           run1(m, "fusion", ctx, opts) &&
           run1(m, "mask-analysis", ctx, opts) &&
           run1(m, "tiling", ctx, opts) &&
           run1(m, "online-softmax", ctx, opts) &&
           run1(m, "double-buffer", ctx, opts);
}

static bool pipeline_sm80(Op *m, PassContext *ctx, PassOptions opts) {
    return run1(m, "dce", ctx, opts) &&
           run1(m, "fusion", ctx, opts) &&
           run1(m, "mask-analysis", ctx, opts) &&
           run1(m, "tiling", ctx, opts) &&
           run1(m, "online-softmax", ctx, opts) &&
           run1(m, "double-buffer", ctx, opts);
}

static bool pipeline_sm90a(Op *m, PassContext *ctx, PassOptions opts) {
    return run1(m, "dce", ctx, opts) &&
           run1(m, "fusion", ctx, opts) &&
           run1(m, "mask-analysis", ctx, opts) &&
           run1(m, "tiling", ctx, opts) &&
           run1(m, "online-softmax", ctx, opts) &&
           run1(m, "double-buffer", ctx, opts);
}

static const struct {
    const char *arch;
    bool (*run)(Op *, PassContext *, PassOptions);
} pipelines[] = {
    {"sm_70", pipeline_sm70},
    {"sm_80", pipeline_sm80},
    {"sm_90a", pipeline_sm90a},
};

bool pipeline_known(const char *arch) {
    for (size_t i = 0; i < sizeof pipelines / sizeof pipelines[0]; i++)
        if (strcmp(pipelines[i].arch, arch) == 0)
            return true;
    return false;
}

bool run_pipeline(Op *module, const char *arch, PassContext *ctx, PassOptions opts) {
    for (size_t i = 0; i < sizeof pipelines / sizeof pipelines[0]; i++)
        if (strcmp(pipelines[i].arch, arch) == 0) {
            ctx->arch = pipelines[i].arch;
            return pipelines[i].run(module, ctx, opts);
        }
    diag_plain(ctx->diag, "unknown target '%s' (targets are sm_70, sm_80 and sm_90a)", arch);
    return false;
}
