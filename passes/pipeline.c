/* pipeline.c — runs a target's pass pipeline (the lists are in target.c). */
#include "passes/passes.h"
#include "target/target.h"

#include <string.h>

bool pipeline_known(const char *arch) { return target_lookup(arch) != NULL; }

bool run_pipeline_until(Op *module, const char *arch, PassContext *ctx, PassOptions opts, bool lowering) {
    const Target *t = target_lookup(arch);
    if (!t) {
        diag_plain(ctx->diag, "unknown target '%s' (targets are %s)", arch, target_names());
        return false;
    }
    const Pass *list[32];
    int n = 0;
    for (const char *const *name = t->pipeline; *name; name++) {
        if (!lowering && t->lowering && strcmp(*name, t->lowering) == 0)
            break;
        if (!(list[n++] = pass_lookup(*name)))
            die("pipeline %s names an unregistered pass '%s'", arch, *name);
    }
    ctx->arch = t->name;
    return run_passes(module, list, n, ctx, opts);
}

bool run_pipeline(Op *module, const char *arch, PassContext *ctx, PassOptions opts) {
    return run_pipeline_until(module, arch, ctx, opts, true);
}
