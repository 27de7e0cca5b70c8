/* options.c — input and output handling shared by the tools. */
#include "tools/tool.h"

#include <errno.h>
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
    if (write_file_atomic(path, text, len, err, sizeof err))
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
