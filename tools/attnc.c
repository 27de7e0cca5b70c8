/* attnc — the compiler driver: .attn in, IR (later PTX) out.
 *
 *   attnc FILE [-emit=ast|ir] [-o OUT] [-print-loc] [-split-input-file]
 *
 * The pipeline, top to bottom: read → parse → check and lower → verify → print.
 */
#include "frontend/frontend.h"
#include "tools/tool.h"

#include <string.h>

static const char usage[] =
    "usage: attnc FILE [options]\n"
    "\n"
    "Compiles an attention or MLP block written in the .attn language.\n"
    "\n"
    "options:\n"
    "  -emit=ast           print the syntax tree\n"
    "  -emit=ir            print the attn-level IR (the default for now)\n"
    "  -o FILE             write the output to FILE (default: standard output)\n"
    "  -print-loc          print each op's source location in the IR\n"
    "  -split-input-file   compile each '# -----'-separated chunk on its own\n"
    "  --help              print this help\n"
    "  --version           print the version\n";

typedef enum Emit { EMIT_AST, EMIT_IR } Emit;

typedef struct Options {
    const char *input, *output;
    Emit emit;
    bool print_loc, split;
} Options;

/* Returns 0 to go on, or the exit status to stop with. */
static int parse_args(int argc, char **argv, Options *o, Diag *d) {
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
            else {
                diag_plain(d, "unknown -emit kind '%s' (expected ast or ir)", val);
                return 1;
            }
        } else if (strcmp(arg, "-print-loc") == 0) {
            o->print_loc = true;
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

/* Compiles one chunk; appends its output to out. False on errors. */
static bool compile(Arena *a, Diag *d, const Source *src, const void *opts, FILE *out) {
    const Options *o = opts;
    Program *ast = NULL;
    int before = d->errors;
    Op *module = frontend_compile(a, d, src, &ast);
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
    ir_print(out, module, (PrintOptions){.locations = o->print_loc});
    return true;
}

int main(int argc, char **argv) {
    Diag d;
    diag_init(&d, stderr);
    Options o = {.emit = EMIT_IR};
    int status = parse_args(argc, argv, &o, &d);
    if (status)
        return status < 0 ? 0 : status;
    return tool_run(&d, o.input, o.output, o.split, compile, &o);
}
