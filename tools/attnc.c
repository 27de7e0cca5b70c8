/* attnc — the compiler driver: .attn in, IR (later PTX) out.
 *
 *   attnc FILE [-emit=ast|ir] [-o OUT] [-print-loc] [-split-input-file]
 *   attnc run FILE [-D NAME=VALUE]... [-arch TARGET] [--seed N] [--check] [-q]
 *
 * The pipeline, top to bottom: read → parse → check and lower → verify → print.
 */
#include "codegen/codegen.h"
#include "frontend/frontend.h"
#include "interp/interp.h"
#include "passes/passes.h"
#include "target/target.h"
#include "tools/tool.h"

#include <string.h>
#include <sys/stat.h>

static const char usage[] =
    "usage: attnc FILE [options]\n"
    "       attnc run FILE [run options]   (see 'attnc run --help')\n"
    "\n"
    "Compiles an attention or MLP block written in the .attn language.\n"
    "\n"
    "options:\n"
    "  -emit=ast           print the syntax tree\n"
    "  -emit=ir            print the attn-level IR (the default without -arch)\n"
    "  -emit=tile          print the tile-level IR (the pipeline before the target lowering)\n"
    "  -emit=nv            print the target IR: tile IR with the target's layouts\n"
    "  -emit=llvm          print the LLVM IR of the kernels (after O3)\n"
    "  -emit=ptx           write PTX with its manifest (the default with -arch)\n"
    "  -arch TARGET        sm_70, sm_80 (default) or sm_90a\n"
    "  -o FILE             write the output to FILE (default: standard output)\n"
    "  -backward           also derive each attention block's backward, NAME.backward\n"
    "                      (its gradients: dq, dk, dv); the forward also saves lse\n"
    "  -print-loc          print each op's source location in the IR\n"
    "  -split-input-file   compile each '# -----'-separated chunk on its own (PTX: not\n"
    "                      into a file, which holds one module)\n"
    "  --help              print this help\n"
    "  --version           print the version\n";

typedef enum Emit { EMIT_DEFAULT, EMIT_AST, EMIT_IR, EMIT_TILE, EMIT_NV, EMIT_LLVM, EMIT_PTX } Emit;

typedef struct Options {
    const char *input, *output, *arch;
    Emit emit;
    bool print_loc, split, backward;
} Options;

/* Returns 0 to go on, or the exit status to stop with. */
static int parse_args(int argc, char **argv, Options *o, Diag *d) {
    bool bad = false, arch_given = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(usage, stdout);
            return -1;
        } else if (strcmp(arg, "--version") == 0 || strcmp(arg, "-version") == 0) {
            printf("attnc %s\n", ATTNC_VERSION);
            return -1;
        } else if ((val = tool_flag_value(arg, "-emit"))) {
            if (strcmp(val, "ast") == 0)
                o->emit = EMIT_AST;
            else if (strcmp(val, "ir") == 0)
                o->emit = EMIT_IR;
            else if (strcmp(val, "tile") == 0)
                o->emit = EMIT_TILE;
            else if (strcmp(val, "nv") == 0)
                o->emit = EMIT_NV;
            else if (strcmp(val, "llvm") == 0)
                o->emit = EMIT_LLVM;
            else if (strcmp(val, "ptx") == 0)
                o->emit = EMIT_PTX;
            else {
                diag_plain(d, "unknown -emit kind '%s' (expected ast, ir, tile, nv, llvm or ptx)", val);
                return 1;
            }
        } else if (tool_arch_arg(d, argc, argv, &i, &o->arch, &bad)) {
            if (bad)
                return 1;
            arch_given = true;
        } else if (strcmp(arg, "-print-loc") == 0) {
            o->print_loc = true;
        } else if (strcmp(arg, "-backward") == 0) {
            o->backward = true;
        } else if (strcmp(arg, "-split-input-file") == 0) {
            o->split = true;
        } else if (!tool_common_arg(d, argc, argv, &i, &o->input, &o->output)) {
            return 1;
        }
    }
    if (!tool_have_input(d, o->input))
        return 1;
    /* like clang: naming a target means "compile for it"; so does an output
     * file named *.ptx (for the default target) */
    size_t olen = o->output ? strlen(o->output) : 0;
    bool ptx_file = olen > 4 && strcmp(o->output + olen - 4, ".ptx") == 0;
    if (o->emit == EMIT_DEFAULT)
        o->emit = arch_given || ptx_file ? EMIT_PTX : EMIT_IR;
    /* each chunk is a PTX module of its own, and a file of several is no
     * module ptxas or libattnrt can take: refused rather than written (to
     * standard output, a device or a pipe they are shown, as MLIR's tools
     * show split output) */
    struct stat st;
    bool to_file = o->output && strcmp(o->output, "-") != 0 && (stat(o->output, &st) != 0 || S_ISREG(st.st_mode));
    if (o->split && o->emit == EMIT_PTX && to_file) {
        diag_plain(d, "-split-input-file makes a PTX module per chunk, and '%s' can hold only one: compile each "
                      "chunk on its own, or print them (-o -)", o->output);
        return 1;
    }
    return 0;
}

/* Compiles one chunk; appends its output to out. False on errors. */
static bool compile(Arena *a, Diag *d, const Source *src, const void *opts, FILE *out) {
    const Options *o = opts;
    Program *ast = NULL;
    int before = d->errors;
    Op *module = frontend_compile(a, d, src, &ast, (FrontendOptions){NULL});
    if (module && o->backward && !pass_backward(module, &(PassContext){.arena = a, .diag = d}))
        module = NULL;
    if (o->emit == EMIT_AST) {
        if (ast && d->errors == before)
            ast_dump(out, ast);
        return d->errors == before;
    }
    if (!module)
        return false;
    if (ir_verify(module, d, src)) {
        diag_plain(d, "internal error: the frontend produced invalid IR");
        return false;
    }
    /* checked first, so a missing code generator never hides the user's errors */
    bool lowering = o->emit == EMIT_NV || o->emit == EMIT_LLVM || o->emit == EMIT_PTX;
    if (lowering && !codegen_supports(o->arch)) {
        diag_plain(d, "no code generator for target '%s' yet (-emit=nv, -emit=llvm and -emit=ptx support: %s)",
                   o->arch, target_codegen_names());
        return false;
    }
    if (o->emit != EMIT_IR) {
        PassContext ctx = {.arena = a, .diag = d};
        if (!run_pipeline_until(module, o->arch, &ctx, (PassOptions){.verify_each = true, .dump = stderr},
                                lowering))
            return false;
    }
    if (o->emit == EMIT_PTX || o->emit == EMIT_LLVM) {
        char *text;
        size_t len;
        if (!codegen_module(a, d, module, o->arch, o->emit == EMIT_LLVM ? CG_EMIT_LLVM : CG_EMIT_PTX, &text, &len))
            return false;
        fwrite(text, 1, len, out);
        return true;
    }
    ir_print(out, module, (PrintOptions){.locations = o->print_loc});
    return true;
}

/* ---- attnc run ---------------------------------------------------------- */

static const char run_usage[] =
    "usage: attnc run FILE [options]\n"
    "\n"
    "Lowers each block with the target's pipeline and runs it on the CPU\n"
    "interpreter, on seeded random inputs.\n"
    "\n"
    "options:\n"
    "  -D NAME=VALUE    bind a symbolic dimension, or replace an integer constant\n"
    "                   (unbound dimensions: 2 if the name starts with B or H, else 17)\n"
    "  -arch TARGET     sm_70, sm_80 (default) or sm_90a\n"
    "  --seed N         seed of the random inputs (default 1)\n"
    "  --check          compare every output with a float64 evaluation of the\n"
    "                   unoptimised program; exit 1 if one is out of tolerance\n"
    "  --check-each-pass  the same check after every pass of the pipeline, naming\n"
    "                   the first pass after which an output is out of tolerance\n"
    "  -backward        also run each attention block's backward (NAME.backward),\n"
    "                   fed the forward's o and lse; --check adds a finite-difference\n"
    "                   check of its gradients\n"
    "  -time-passes     report each pass's time (standard error)\n"
    "  --dump DIR       write each block's inputs and outputs (and with --check the\n"
    "                   float64 reference) to DIR as .npy files\n"
    "  -q               print only failures\n";

static int parse_run_args(Arena *a, Diag *d, int argc, char **argv, RunArgs *r) {
    int handled;
    bool bad = false;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(run_usage, stdout);
            return -1;
        } else if (tool_arch_arg(d, argc, argv, &i, &r->arch, &bad)) {
            if (bad)
                return 1;
        } else if (strcmp(arg, "--check") == 0) {
            r->run.check = true;
        } else if (strcmp(arg, "--check-each-pass") == 0) {
            r->run.check = r->each_pass = true;
        } else if (strcmp(arg, "-time-passes") == 0) {
            r->time_passes = true;
        } else if ((handled = tool_run_arg(a, d, argc, argv, &i, r)) != 0) {
            if (handled < 0)
                return 1;
        } else if (arg[0] == '-' && arg[1]) {
            diag_plain(d, "unknown argument '%s'; see 'attnc run --help'", arg);
            return 1;
        } else if (r->input) {
            diag_plain(d, "more than one input file ('%s' and '%s')", r->input, arg);
            return 1;
        } else {
            r->input = arg;
        }
    }
    if (!r->input) {
        diag_plain(d, "no input file; see 'attnc run --help'");
        return 1;
    }
    return 0;
}

/* --check-each-pass: the interpreter's check after every pass. */
struct EachPass {
    Arena *a;
    Diag *d;
    const Op *reference;
    const RunOptions *run;
};

static bool check_after_pass(Op *module, const char *pass, void *user) {
    struct EachPass *e = user;
    RunOptions quiet = *e->run;
    quiet.quiet = true;
    if (interp_run_module(e->a, e->d, e->reference, module, &quiet, stdout))
        return true;
    diag_plain(e->d, "the program's meaning changed in pass '%s'", pass);
    return false;
}

static int run_main(int argc, char **argv, Diag *d) {
    Arena a = {0};
    RunArgs r = {.arch = target_default()->name};
    tool_run_args_init(&r);
    int status = parse_run_args(&a, d, argc, argv, &r);
    Source src;
    if (status == 0 && !tool_read_input(&a, d, r.input, &src))
        status = 1;
    if (status) {
        arena_free(&a);
        return status < 0 ? 0 : status;
    }
    tool_run_args_finish(&a, &r);
    /* The reference is the unoptimised program; the lowered one goes through
     * the target's pipeline. Two compiles keep them independent. */
    Program *ast;
    Op *reference = frontend_compile(&a, d, &src, &ast, (FrontendOptions){&r.consts});
    if (reference && r.backward && !pass_backward(reference, &(PassContext){.arena = &a, .diag = d}))
        reference = NULL;
    /* the second compile repeats the first one's diagnostics: said once */
    FILE *sink = reference ? fopen("/dev/null", "w") : NULL;
    Diag quiet = *d;
    if (sink)
        quiet.out = sink;
    Op *lowered = reference ? frontend_compile(&a, sink ? &quiet : d, &src, NULL, (FrontendOptions){&r.consts}) : NULL;
    if (lowered && r.backward && !pass_backward(lowered, &(PassContext){.arena = &a, .diag = sink ? &quiet : d}))
        lowered = NULL;
    if (sink)
        fclose(sink);
    bool ok = lowered != NULL;
    if (ok) {
        r.run.consts = program_consts(&a, ast);
        interp_warn_unused_binds(&a, d, reference, &r.run);
        PassContext ctx = {.arena = &a, .diag = d};
        Map cache;   /* inputs and references, made once for all the passes */
        map_init(&cache, true);
        r.run.cache = r.each_pass ? &cache : NULL;
        struct EachPass each = {&a, d, reference, &r.run};
        PassOptions popts = {.verify_each = true, .time_passes = r.time_passes, .dump = stderr};
        if (r.each_pass) {
            popts.after_each = check_after_pass;
            popts.user = &each;
        }
        ok = run_pipeline(lowered, r.arch, &ctx, popts) &&
             interp_run_module(&a, d, reference, lowered, &r.run, stdout);
    }
    arena_free(&a);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    Diag d;
    diag_init(&d, stderr);
    if (argc > 1 && strcmp(argv[1], "run") == 0)
        return run_main(argc, argv, &d);
    Options o = {.emit = EMIT_DEFAULT, .arch = target_default()->name};
    int status = parse_args(argc, argv, &o, &d);
    if (status)
        return status < 0 ? 0 : status;
    return tool_run(&d, o.input, o.output, o.split, compile, &o);
}
