/* options.c — input and output handling shared by the tools. */
#include "passes/passes.h"
#include "target/target.h"
#include "tools/tool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool tool_read_input(Arena *a, Diag *d, const char *path, Source *whole) {
    size_t len;
    char *text = read_file(a, path, &len);
    if (!text) {
        diag_plain(d, "cannot read '%s': %s", path, strerror(errno));
        return false;
    }
    *whole = (Source){.name = strcmp(path, "-") == 0 ? "<stdin>" : path, .text = text, .len = len};
    return true;
}

static bool is_separator(const char *line, size_t len) {
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i < len && line[i] == '#')
        i++;
    else if (i + 1 < len && line[i] == '/' && line[i + 1] == '/')
        i += 2;
    else
        return false;
    while (i < len && line[i] == ' ')
        i++;
    if (len - i < 5 || strncmp(line + i, "-----", 5) != 0)
        return false;
    for (i += 5; i < len; i++)
        if (line[i] != '-' && line[i] != ' ' && line[i] != '\r')
            return false;
    return true;
}

int tool_split(Arena *a, const Source *whole, bool split, Source **chunks) {
    PtrVec v = {0};
    const char *p = whole->text, *end = whole->text + whole->len, *start = p;
    int line = 0, start_line = 0;
    while (split && p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t len = eol ? (size_t)(eol - p) : (size_t)(end - p);
        if (is_separator(p, len)) {
            Source *c = NEW(a, Source);
            *c = (Source){whole->name, start, (size_t)(p - start), start_line};
            vec_push(a, &v, c);
            start = eol ? eol + 1 : end;
            start_line = line + 1;
        }
        line++;
        p = eol ? eol + 1 : end;
    }
    Source *last = NEW(a, Source);
    *last = (Source){whole->name, start, (size_t)(end - start), start_line};
    vec_push(a, &v, last);
    *chunks = NEW_ARRAY(a, Source, v.len);
    for (int i = 0; i < v.len; i++) {
        (*chunks)[i] = *(Source *)v.items[i];
        /* Chunks point into the whole text; a NUL-terminated copy keeps the
         * scanners from reading past a chunk's end. */
        (*chunks)[i].text = arena_strndup(a, (*chunks)[i].text, (*chunks)[i].len);
    }
    return v.len;
}

bool tool_write_output(Diag *d, const char *path, const char *text, size_t len) {
    char err[512];
    if (write_output_file(path, text, len, err, sizeof err))
        return true;
    diag_plain(d, "%s", err);
    return false;
}

const char *tool_flag_value(const char *arg, const char *name) {
    size_t n = strlen(name);
    if (strncmp(arg, name, n) == 0 && arg[n] == '=')
        return arg + n + 1;
    return NULL;
}

int tool_run(Diag *d, const char *input, const char *output, bool split, ChunkFn fn, const void *opts) {
    Arena arena = {0};
    Source whole;
    if (same_file(input, output)) {
        diag_plain(d, "the output file '%s' is the input file", output);
        return 1;
    }
    if (!tool_read_input(&arena, d, input, &whole)) {
        arena_free(&arena);
        return 1;
    }
    Source *chunks;
    int n = tool_split(&arena, &whole, split, &chunks);
    StrBuf out;
    strbuf_open(&out);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        if (i)
            fputs("// -----\n", out.f);
        d->max_errors = d->errors + 20;
        ok &= fn(&arena, d, &chunks[i], opts, out.f);
    }
    size_t len;
    char *text = strbuf_finish(&out, &arena, &len);
    /* Split mode shows each chunk's result on standard output even when
     * another chunk failed (that is what the tests read); a file is only
     * written when every chunk compiled. */
    bool to_stdout = !output || strcmp(output, "-") == 0;
    if ((ok || (split && to_stdout)) && !tool_write_output(d, output, text, len))
        ok = false;
    arena_free(&arena);
    return ok ? 0 : 1;
}

bool tool_common_arg(Diag *d, int argc, char **argv, int *i, const char **input, const char **output) {
    const char *arg = argv[*i];
    if (strcmp(arg, "-o") == 0) {
        if (++*i == argc) {
            diag_plain(d, "'-o' needs a file name");
            return false;
        }
        if (*output) {   /* (clang takes the last; a second -o is more likely a slip) */
            diag_plain(d, "'-o' given twice ('%s' and '%s')", *output, argv[*i]);
            return false;
        }
        *output = argv[*i];
        return true;
    }
    if (arg[0] == '-' && arg[1] != 0) {
        diag_plain(d, "unknown argument '%s'; see '%s --help'", arg, d->tool);
        return false;
    }
    if (*input) {
        diag_plain(d, "more than one input file ('%s' and '%s')", *input, arg);
        return false;
    }
    *input = arg;
    return true;
}

bool tool_have_input(Diag *d, const char *input) {
    if (!input)
        diag_plain(d, "no input file; see '%s --help'", d->tool);
    return input != NULL;
}

/* ---- interpreter flags --------------------------------------------------- */

void tool_run_args_init(RunArgs *r) {
    r->run.seed = 1;
    map_init(&r->consts, true);
}

static bool parse_binding(Arena *a, Diag *d, const char *text, RunArgs *r) {
    const char *eq = strchr(text, '=');
    char *end = NULL;
    errno = 0;
    long long v = eq ? strtoll(eq + 1, &end, 10) : 0;
    bool too_large = eq && eq[1] && end && !*end && v > 0 && (errno == ERANGE || v > (1ll << 40));
    if (!too_large && (!eq || eq == text || !eq[1] || *end || errno || v <= 0)) {
        diag_plain(d, "-D needs NAME=VALUE with a positive integer VALUE, not '%s'", text);
        return false;
    }
    if (too_large) {
        diag_plain(d, "-D %s: the value is too large (at most 2^40 = %lld)", text, 1ll << 40);
        return false;
    }
    char *name = arena_strndup(a, text, (size_t)(eq - text));
    vec_push(a, &r->names, name);
    vec_push(a, &r->values, (void *)(intptr_t)v);
    map_put(a, &r->consts, name, (void *)(intptr_t)v);
    return true;
}

int tool_run_arg(Arena *a, Diag *d, int argc, char **argv, int *i, RunArgs *r) {
    const char *arg = argv[*i];
    if (strcmp(arg, "-q") == 0) {
        r->run.quiet = true;
        return 1;
    }
    if (strcmp(arg, "-backward") == 0) {
        r->backward = true;
        return 1;
    }
    if (strcmp(arg, "--dump") == 0) {
        if (++*i == argc) {
            diag_plain(d, "'--dump' needs a folder");
            return -1;
        }
        r->run.dump_dir = argv[*i];
        return 1;
    }
    if (strcmp(arg, "-D") == 0 || strcmp(arg, "--seed") == 0) {
        if (++*i == argc) {
            diag_plain(d, "'%s' needs a value", arg);
            return -1;
        }
        if (arg[1] == 'D')
            return parse_binding(a, d, argv[*i], r) ? 1 : -1;
        char *end;
        errno = 0;
        r->run.seed = strtoull(argv[*i], &end, 10);
        if (*end || errno || argv[*i][0] == '-' || !argv[*i][0]) {
            diag_plain(d, "--seed needs a non-negative integer, not '%s'", argv[*i]);
            return -1;
        }
        return 1;
    }
    if (strncmp(arg, "-D", 2) == 0)
        return parse_binding(a, d, arg + 2, r) ? 1 : -1;
    return 0;
}

void tool_run_args_finish(Arena *a, RunArgs *r) {
    r->run.bind_names = (const char **)r->names.items;
    r->run.bind_values = NEW_ARRAY(a, int64_t, r->values.len + 1);
    for (int i = 0; i < r->values.len; i++)
        r->run.bind_values[i] = (int64_t)(intptr_t)r->values.items[i];
    r->run.nbinds = r->names.len;
}

const Map *program_consts(Arena *a, const Program *p) {
    Map *m = NEW(a, Map);
    map_init(m, true);
    for (int i = 0; p && i < p->nitems; i++)
        if (p->items[i]->kind == I_CONST)
            map_put(a, m, p->items[i]->name, (void *)1);
    return m;
}

bool tool_arch_arg(Diag *d, int argc, char **argv, int *i, const char **arch, bool *bad) {
    const char *arg = argv[*i], *val = tool_flag_value(arg, "-arch");
    if (!val && strcmp(arg, "-arch") != 0)
        return false;
    if (!val && ++*i == argc) {
        diag_plain(d, "'-arch' needs a target");
        *bad = true;
        return true;
    }
    *arch = val ? val : argv[*i];
    if (!pipeline_known(*arch)) {
        diag_plain(d, "unknown target '%s' (targets are %s)", *arch, target_names());
        *bad = true;
    }
    return true;
}
