/* fuzz_frontend.c — libFuzzer target over the .attn frontend and the IR
 * parser, printer and verifier.
 *
 * Each input is tried both ways:
 *   as .attn:  parse + check + lower must not crash; when it succeeds, the
 *              IR must verify and print -> parse -> print identically, and
 *              every target's pipeline must keep it valid (and printable);
 *              its last pass, the target lowering, may refuse a block, but
 *              only with an error;
 *   as IR:     parse must not crash; when it parses and verifies, the
 *              round trip must be exact.
 * Any other outcome aborts, which libFuzzer reports as a crash.
 */
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "target/target.h"

#include <stdlib.h>
#include <string.h>

static FILE *sink;

static void check(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz invariant broken: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!sink)
        sink = fopen("/dev/null", "w");
    Arena a = {0};
    char *text = arena_strndup(&a, (const char *)data, size);
    Source src = {.name = "fuzz", .text = text, .len = size};
    Diag d;
    diag_init(&d, sink);

    Op *module = frontend_compile(&a, &d, &src, NULL, (FrontendOptions){NULL});
    if (module && !pass_backward(module, &(PassContext){.arena = &a, .diag = &d}))
        module = NULL;
    if (module) {
        check(ir_verify(module, &d, &src) == 0, "the frontend produced IR the verifier rejects");
        check(ir_roundtrip_check(&a, module, (PrintOptions){0}, &d), "frontend IR round trip");
        check(ir_roundtrip_check(&a, module, (PrintOptions){.locations = true}, &d),
              "frontend IR round trip with locations");
        static const char *const targets[] = {"sm_70", "sm_80", "sm_90a"};
        const char *arch = targets[size % 3];
        PassContext ctx = {.arena = &a, .diag = &d, .arch = arch};
        check(run_pipeline_until(module, arch, &ctx, (PassOptions){.verify_each = true, .dump = sink}, false),
              "a pass made invalid IR");
        check(ir_roundtrip_check(&a, module, (PrintOptions){0}, &d), "tile IR round trip");
        /* the target's lowering may refuse a valid block (head dims not a
         * multiple of 16, too much shared memory): with an error, never
         * silently; what it accepts must verify */
        const Target *t = target_lookup(arch);
        if (t->lowering) {
            int errors = d.errors;
            if (pass_lookup(t->lowering)->run(module, &ctx))
                check(ir_verify(module, &d, NULL) == 0, "the target lowering made invalid IR");
            else
                check(d.errors > errors, "the target lowering failed without an error");
        }
    }

    diag_init(&d, sink);
    Op *parsed = ir_parse(&a, &d, &src);
    if (parsed && ir_verify(parsed, &d, &src) == 0)
        check(ir_roundtrip_check(&a, parsed, (PrintOptions){.locations = true}, &d), "IR round trip");
    arena_free(&a);
    return 0;
}
