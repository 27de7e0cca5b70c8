/* attnc-opt — runs any list of passes over IR text (or over a .attn file,
 * which it first lowers to attn IR), in the manner of mlir-opt.
 *
 *   attnc-opt FILE [-passes=a,b,c] [-print-after-all] [-verify-each] [-o OUT]
 */
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "target/target.h"
#include "tools/tool.h"

#include <string.h>

static const char usage[] =
    "usage: attnc-opt FILE [options]\n"
    "\n"
    "Reads IR text (or an .attn file), verifies it, runs passes, prints the result.\n"
    "\n"
    "options:\n"
    "  -passes=a,b,c       run these passes in order (see -list-passes)\n"
    "  -arch TARGET        the target passes prepare for: sm_70, sm_80 (default), sm_90a\n"
    "  -print-after-all    print the IR after every pass (to standard error)\n"
    "  -verify-each        verify the IR after every pass\n"
    "  -time-passes        report each pass's time (to standard error)\n"
    "  -verify-roundtrip   check that print -> parse -> print is exact\n"
    "  -interpret-check    run the program before and after the passes on the CPU\n"
    "                      interpreter (seeded random inputs) and fail if an output\n"
    "                      moved out of tolerance; with -D NAME=VALUE, --seed N, -q\n"
    "                      as for 'attnc run' (report on standard error)\n"
    "  -backward           (.attn input) also derive each attention block's backward\n"
    "  -print-loc          print each op's source location\n"
    "  -split-input-file   process each '// -----'-separated chunk on its own\n"
    "  -list-passes        list the registered passes\n"
    "  -o FILE             write the output to FILE (default: standard output)\n"
    "  --help, --version\n";

typedef struct Options {
    const char *input, *output;
    const Pass *passes[64];
    int npasses;
    PassOptions pass_opts;
    bool roundtrip, split, interpret;
    const char *arch;
    RunArgs run;
} Options;

static bool add_passes(Options *o, const char *list, Diag *d) {
    char buf[1024];
    if (strlen(list) >= sizeof buf) {
        diag_plain(d, "-passes list is too long");
        return false;
    }
    strcpy(buf, list);
    for (char *save = NULL, *name = strtok_r(buf, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        const Pass *p = pass_lookup(name);
        if (!p) {
            diag_plain(d, "unknown pass '%s'; see 'attnc-opt -list-passes'", name);
            return false;
        }
        if (o->npasses == 64) {
            diag_plain(d, "too many passes (at most 64)");
            return false;
        }
        o->passes[o->npasses++] = p;
    }
    return true;
}

static int parse_args(Arena *a, int argc, char **argv, Options *o, Diag *d) {
    int handled;
    bool bad = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage, stdout);
            return -1;
        } else if (strcmp(arg, "--version") == 0 || strcmp(arg, "-version") == 0) {
            printf("attnc-opt %s\n", ATTNC_VERSION);
            return -1;
        } else if (strcmp(arg, "-list-passes") == 0) {
            pass_list_print(stdout);
            return -1;
        } else if ((val = tool_flag_value(arg, "-passes"))) {
            if (!add_passes(o, val, d))
                return 1;
        } else if (strcmp(arg, "-print-after-all") == 0) {
            o->pass_opts.print_after_all = true;
        } else if (strcmp(arg, "-verify-each") == 0) {
            o->pass_opts.verify_each = true;
        } else if (strcmp(arg, "-time-passes") == 0) {
            o->pass_opts.time_passes = true;
        } else if (tool_arch_arg(d, argc, argv, &i, &o->arch, &bad)) {
            if (bad)
                return 1;
        } else if (strcmp(arg, "-interpret-check") == 0) {
            o->interpret = true;
        } else if ((handled = tool_run_arg(a, d, argc, argv, &i, &o->run)) != 0) {
            if (handled < 0)
                return 1;
        } else if (strcmp(arg, "-verify-roundtrip") == 0) {
            o->roundtrip = true;
        } else if (strcmp(arg, "-print-loc") == 0) {
            o->pass_opts.print.locations = true;
        } else if (strcmp(arg, "-split-input-file") == 0) {
            o->split = true;
        } else if (!tool_common_arg(d, argc, argv, &i, &o->input, &o->output)) {
            return 1;
        }
    }
    if (!tool_have_input(d, o->input))
        return 1;
    return 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static Op *load(Arena *a, Diag *d, const Source *src, const Options *o, Program **ast) {
    Op *m = ends_with(src->name, ".attn") ? frontend_compile(a, d, src, ast, (FrontendOptions){&o->run.consts})
                                          : ir_parse(a, d, src);
    if (m && o->run.backward && ends_with(src->name, ".attn") &&
        !pass_backward(m, &(PassContext){.arena = a, .diag = d}))
        m = NULL;
    return m && ir_verify(m, d, src) == 0 ? m : NULL;
}

static bool process(Arena *a, Diag *d, const Source *src, const void *opts, FILE *out) {
    const Options *o = opts;
    Program *ast = NULL;
    Op *module = load(a, d, src, o, &ast);
    /* -interpret-check compares with the program as it was read. */
    Op *before = module && o->interpret ? load(a, d, src, o, NULL) : NULL;
    if (!module)
        return false;
    PassContext ctx = {.arena = a, .diag = d, .arch = o->arch};
    if (!run_passes(module, o->passes, o->npasses, &ctx, o->pass_opts))
        return false;
    if (o->interpret) {
        RunOptions run = o->run.run;
        run.check = true;
        run.consts = program_consts(a, ast);
        interp_warn_unused_binds(a, d, before, &run);
        if (!interp_run_module(a, d, before, module, &run, stderr))
            return false;
    }
    if (o->roundtrip && !ir_roundtrip_check(a, module, o->pass_opts.print, d))
        return false;
    ir_print(out, module, o->pass_opts.print);
    return true;
}

int main(int argc, char **argv) {
    Diag d;
    diag_init(&d, stderr);
    d.tool = die_tool = "attnc-opt";
    Options o = {.arch = target_default()->name};
    o.pass_opts.dump = stderr;
    tool_run_args_init(&o.run);
    Arena args = {0};
    int status = parse_args(&args, argc, argv, &o, &d);
    if (status == 0) {
        tool_run_args_finish(&args, &o.run);
        status = tool_run(&d, o.input, o.output, o.split, process, &o);
    }
    arena_free(&args);
    return status < 0 ? 0 : status;
}
