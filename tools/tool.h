/* tool.h — what attnc and attnc-opt share: reading the input (whole, or split
 * into independent chunks for tests) and writing the output (support.h's
 * write_output_file: atomic for regular files, written through for devices). */
#ifndef ATTNC_TOOL_H
#define ATTNC_TOOL_H

#include "frontend/ast.h"
#include "interp/interp.h"

/* Reads path into *whole; on failure reports and returns false. */
bool tool_read_input(Arena *a, Diag *d, const char *path, Source *whole);

/* -split-input-file: chunks separated by a line "# -----" or "// -----".
 * Each chunk keeps its line numbers within the whole file. */
int tool_split(Arena *a, const Source *whole, bool split, Source **chunks);

/* Writes the output (stdout for NULL or "-"); reports and returns false on failure. */
bool tool_write_output(Diag *d, const char *path, const char *text, size_t len);

/* Compiles one chunk of the input, appending its output to out. */
typedef bool (*ChunkFn)(Arena *a, Diag *d, const Source *src, const void *opts, FILE *out);

/* The tools' common body: read input (stdin for "-"), split it when asked,
 * run fn on each chunk (20 errors at most per chunk), write the output
 * once at the end. Nothing is written when a chunk failed, except in split
 * mode to standard output, where each chunk's result is the point; an output
 * file that is the input file is an error. Returns the exit status. */
int tool_run(Diag *d, const char *input, const char *output, bool split, ChunkFn fn, const void *opts);

/* The arguments both tools take: "-o FILE", the input file, and anything else
 * starting with '-' (an unknown flag). Returns true when argv[*i] was one of
 * them (advancing *i past -o's value), false with an error reported. */
bool tool_common_arg(Diag *d, int argc, char **argv, int *i, const char **input, const char **output);

/* "-arch T" or "-arch=T": true when argv[*i] was one (advancing *i past the
 * value) with *arch set to a known target; an error is reported in *bad. */
bool tool_arch_arg(Diag *d, int argc, char **argv, int *i, const char **arch, bool *bad);

/* After the arguments: an error unless an input file was named. */
bool tool_have_input(Diag *d, const char *input);

/* "-name=value": the value if arg starts with "-name=", else NULL. */
const char *tool_flag_value(const char *arg, const char *name);

/* ---- flags of the interpreter (attnc run, attnc-opt -interpret-check) ---- */

typedef struct RunArgs {
    const char *input, *arch;
    RunOptions run;
    bool each_pass, time_passes;   /* attnc run --check-each-pass, -time-passes */
    bool backward;         /* -backward: derive the attention blocks' backward blocks */
    Map consts;            /* -D values, which may replace constants */
    PtrVec names, values;  /* -D in order */
} RunArgs;

void tool_run_args_init(RunArgs *r);
/* -D NAME=VALUE, -DNAME=VALUE, --seed N, -q, -backward: 1 if argv[*i] was one (advancing
 * *i past a value), 0 if not, -1 on an error (reported). */
int tool_run_arg(Arena *a, Diag *d, int argc, char **argv, int *i, RunArgs *r);
/* Fills r->run's bindings from the -D flags seen. */
void tool_run_args_finish(Arena *a, RunArgs *r);
/* The names of a program's constants (which -D may set). */
const Map *program_consts(Arena *a, const Program *p);

#endif
