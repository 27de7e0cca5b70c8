/* diag.c — diagnostics in clang's form:
 *
 *   model.attn:14:19: error: query heads (32) are not a multiple of kv heads (6)
 *       k: f16[B, 6, N, 128],
 *                 ^
 */
#include "support.h"

#include <limits.h>
#include <stdlib.h>
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

/* The length of the well-formed UTF-8 sequence at s (at most n bytes), or
 * 0 if there is none (a stray or overlong byte, a truncated sequence). */
int utf8_sequence_length(const unsigned char *s, size_t n) {
    int len = s[0] >= 0xC2 && s[0] <= 0xDF   ? 2
              : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
              : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4
                                             : 0;   /* 0x80..0xC1 and 0xF5..0xFF never start one */
    if (!len || (size_t)len > n)
        return 0;
    for (int i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90) ||
        (s[0] == 0xED && s[1] >= 0xA0))
        return 0;   /* overlong, past U+10FFFF, or a surrogate */
    return len;
}

/* How byte i of the line is shown: printable ASCII and tabs as they are,
 * well-formed UTF-8 as it is (one column), a control byte as <U+XXXX> and a
 * byte that is not UTF-8 as <XX>, so that nothing the file holds reaches
 * the terminal raw (clang's rule). Returns the bytes consumed; *cols the
 * columns shown. */
static size_t show_char(const unsigned char *s, size_t n, char *out, int *cols) {
    unsigned char c = s[0];
    if ((c >= 32 && c < 127) || c == '\t') {
        out[0] = (char)c, out[1] = 0, *cols = 1;
        return 1;
    }
    if (c == 0 || c == '\r') {
        out[0] = ' ', out[1] = 0, *cols = 1;
        return 1;
    }
    if (c < 32 || c == 127) {
        *cols = snprintf(out, 16, "<U+%04X>", c);
        return 1;
    }
    int len = utf8_sequence_length(s, n);
    if (len) {
        memcpy(out, s, (size_t)len);
        out[len] = 0, *cols = 1;
        return (size_t)len;
    }
    *cols = snprintf(out, 16, "<%02X>", c);
    return 1;
}

enum { SHOW_WIDTH = 160 };   /* a longer line is shown as a window around the caret */

/* Prints the source line and a caret range under loc. Tabs are copied into
 * the caret line so the caret lines up whatever the tab width; a line over
 * SHOW_WIDTH bytes is clipped to a window around the caret ("..." marks the
 * cut). */
static void show_source(Diag *d, const Source *src, Loc loc) {
    if (!src || !src->text || loc.line <= 0)
        return;
    size_t len;
    const char *s = line_start(src, loc.line, &len);
    int col = loc.col;
    if (s == src->text && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {   /* a BOM: not shown */
        s += 3, len -= 3, col -= 3;
    }
    int last = loc.end_line == loc.line && loc.end_col >= loc.col ? loc.end_col - (loc.col - col) : (int)len;
    if (last < col)
        last = col;
    size_t from = 0, to = len;
    if (len > SHOW_WIDTH) {
        from = col > SHOW_WIDTH / 2 ? (size_t)col - SHOW_WIDTH / 2 : 0;
        to = from + SHOW_WIDTH < len ? from + SHOW_WIDTH : len;
        while (from > 0 && ((unsigned char)s[from] & 0xC0) == 0x80)   /* not inside a character */
            from--;
        if (last > (int)to)
            last = (int)to;
    }
    /* the line, and for each byte before the caret the columns it took */
    char buf[16];
    int cols;
    if (from > 0)
        fputs("...", d->out);
    for (size_t i = from; i < to;) {
        size_t used = show_char((const unsigned char *)s + i, len - i, buf, &cols);
        fputs(buf, d->out);
        i += used;
    }
    if (to < len)
        fputs("...", d->out);
    fputc('\n', d->out);
    if (from > 0)
        fputs("   ", d->out);
    for (size_t i = from; i < (size_t)col - 1 && i < to;) {
        size_t used = show_char((const unsigned char *)s + i, len - i, buf, &cols);
        if (s[i] == '\t')
            fputc('\t', d->out);
        else
            fprintf(d->out, "%*s", cols, "");
        i += used;
    }
    /* ^ and ~ under every column the range [col, last] is shown in */
    int width = 0;
    for (size_t i = (size_t)col - 1; i < (size_t)last && i < to;) {
        i += show_char((const unsigned char *)s + i, len - i, buf, &cols);
        width += cols;
    }
    fputc('^', d->out);
    for (int c = 1; c < width; c++)
        fputc('~', d->out);
    fputc('\n', d->out);
}

/* s as show_char shows a source line: a file name (or a message quoting
 * one) holding an escape sequence must not drive the terminal either. */
static void put_escaped(FILE *out, const char *s) {
    size_t n = strlen(s);
    char buf[16];
    int cols;
    for (size_t i = 0; i < n;) {
        i += show_char((const unsigned char *)s + i, n - i, buf, &cols);
        fputs(buf, out);
    }
}

static void report_to_out(Diag *d, const Source *src, Loc loc, const char *kind, const char *fmt, va_list ap);

/* A held report: written to memory, then kept (a note joins the report
 * before it). */
static void hold(Diag *d, const Source *src, Loc loc, const char *kind, const char *fmt, va_list ap) {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len), *out = d->out;
    if (!mem) {
        report_to_out(d, src, loc, kind, fmt, ap);
        return;
    }
    d->out = mem;
    report_to_out(d, src, loc, kind, fmt, ap);
    fclose(mem);
    d->out = out;
    if (strcmp(kind, "note") == 0 && d->nheld) {
        DiagHeld *h = &d->held[d->nheld - 1];
        char *joined = realloc(h->text, h->len + len + 1);
        if (joined) {
            memcpy(joined + h->len, buf, len + 1);
            h->text = joined, h->len += len;
        }
        free(buf);
        return;
    }
    if (d->nheld == d->held_cap) {
        int cap = d->held_cap ? 2 * d->held_cap : 16;
        DiagHeld *grown = realloc(d->held, sizeof *grown * (size_t)cap);
        if (!grown) {
            fwrite(buf, 1, len, out);
            free(buf);
            return;
        }
        d->held = grown, d->held_cap = cap;
    }
    bool placed = src && loc.line > 0;
    d->held[d->nheld] = (DiagHeld){placed ? loc.line + src->line_offset : INT_MAX, placed ? loc.col : 0, d->nheld,
                                   buf, len};
    d->nheld++;
}

void diag_hold(Diag *d) { d->holding = true; }

static int by_position(const void *x, const void *y) {
    const DiagHeld *a = x, *b = y;
    return a->line != b->line ? (a->line < b->line ? -1 : 1)
           : a->col != b->col ? (a->col < b->col ? -1 : 1)
                              : a->seq - b->seq;
}

void diag_release(Diag *d) {
    d->holding = false;
    if (d->nheld)   /* (qsort's base may not be NULL, even for no elements) */
        qsort(d->held, (size_t)d->nheld, sizeof *d->held, by_position);
    for (int i = 0; i < d->nheld; i++) {
        fwrite(d->held[i].text, 1, d->held[i].len, d->out);
        free(d->held[i].text);
    }
    free(d->held);
    d->held = NULL, d->nheld = d->held_cap = 0;
}

static void report(Diag *d, const Source *src, Loc loc, const char *kind, const char *fmt, va_list ap) {
    if (d->holding)
        hold(d, src, loc, kind, fmt, ap);
    else
        report_to_out(d, src, loc, kind, fmt, ap);
}

static void report_to_out(Diag *d, const Source *src, Loc loc, const char *kind, const char *fmt,
                          va_list ap) {
    if (src) {
        put_escaped(d->out, src->name);
        if (loc.line > 0)
            fprintf(d->out, ":%d:%d", loc.line + src->line_offset, loc.col);
        fprintf(d->out, ": %s: ", kind);
    } else {
        fprintf(d->out, "%s: %s: ", d->tool, kind);
    }
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *msg = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (msg) {
        vsnprintf(msg, (size_t)n + 1, fmt, again);
        put_escaped(d->out, msg);
        free(msg);
    }
    va_end(again);
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
