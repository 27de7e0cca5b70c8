/* diag.c — diagnostics in clang's form:
 *
 *   model.attn:14:19: error: query heads (32) are not a multiple of kv heads (6)
 *       k: f16[B, 6, N, 128],
 *                 ^
 */
#include "support.h"

#include <string.h>

void diag_init(Diag *d, FILE *out) {
    memset(d, 0, sizeof *d);
    d->out = out;
    d->max_errors = 20;
    d->tool = "attnc";
}

/* The text of line `line` (1-based, before the offset) of src. */
static const char *line_start(const Source *src, int line, size_t *len) {
    const char *p = src->text, *end = src->text + src->len;
    for (int l = 1; l < line && p < end; p++)
        if (*p == '\n')
            l++;
    const char *q = p;
    while (q < end && *q != '\n')
        q++;
    *len = (size_t)(q - p);
    return p;
}

/* Prints the source line and a caret range under loc. Tabs are copied into
 * the caret line so the caret lines up whatever the tab width. */
static void show_source(Diag *d, const Source *src, Loc loc) {
    if (!src || !src->text || loc.line <= 0)
        return;
    size_t len;
    const char *s = line_start(src, loc.line, &len);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        fputc(c == 0 || c == '\r' ? ' ' : c, d->out);
    }
    fputc('\n', d->out);
    int last = loc.end_line == loc.line && loc.end_col >= loc.col ? loc.end_col : (int)len;
    if (last < loc.col)
        last = loc.col;
    for (int col = 1; col < loc.col; col++)
        fputc((size_t)col - 1 < len && s[col - 1] == '\t' ? '\t' : ' ', d->out);
    fputc('^', d->out);
    for (int col = loc.col + 1; col <= last; col++)
        fputc('~', d->out);
    fputc('\n', d->out);
}

static void report(Diag *d, const Source *src, Loc loc, const char *kind, const char *fmt,
                   va_list ap) {
    if (src && loc.line > 0)
        fprintf(d->out, "%s:%d:%d: %s: ", src->name, loc.line + src->line_offset, loc.col, kind);
    else if (src)
        fprintf(d->out, "%s: %s: ", src->name, kind);
    else
        fprintf(d->out, "%s: %s: ", d->tool, kind);
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
    show_source(d, src, loc);
}

void diag_error(Diag *d, const Source *src, Loc loc, const char *fmt, ...) {
    if (++d->errors > d->max_errors) {
        if (d->errors == d->max_errors + 1)
            fprintf(d->out, "%s: fatal error: too many errors emitted, stopping now\n", d->tool);
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    report(d, src, loc, "error", fmt, ap);
    va_end(ap);
}

void diag_warning(Diag *d, const Source *src, Loc loc, const char *fmt, ...) {
    d->warnings++;
    va_list ap;
    va_start(ap, fmt);
    report(d, src, loc, "warning", fmt, ap);
    va_end(ap);
}

void diag_note(Diag *d, const Source *src, Loc loc, const char *fmt, ...) {
    if (d->errors > d->max_errors)
        return;
    va_list ap;
    va_start(ap, fmt);
    report(d, src, loc, "note", fmt, ap);
    va_end(ap);
}

void diag_plain(Diag *d, const char *fmt, ...) {
    d->errors++;
    va_list ap;
    va_start(ap, fmt);
    report(d, NULL, (Loc){0}, "error", fmt, ap);
    va_end(ap);
}
