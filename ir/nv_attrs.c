/* nv_attrs.c — checks an `nv.*` attribute against its row(s) of
 * nv_attrs.def: its name, the op it sits on, the target and its value. */
#include "ir.h"

#include <stdio.h>
#include <string.h>

#define INT AT_INT
#define STR AT_STR
#define BOOL AT_BOOL

typedef struct NvAttr {
    const char *name, *ops;
    AttrKind kind;
    const char *values;
    int64_t lo, hi;
    const char *targets;
} NvAttr;

static const NvAttr nv_attrs[] = {
#define NV_ATTR(name, ops, kind, values, lo, hi, targets) {name, ops, kind, values, lo, hi, targets},
#include "nv_attrs.def"
#undef NV_ATTR
};
enum { NV_ATTRS = sizeof nv_attrs / sizeof nv_attrs[0] };

/* Whether `word` is one of the space-separated words of `list`. */
static bool has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ' ');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, word, n) == 0)
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

/* s against the pattern [p, pend): literals, '*' for one or more decimal
 * digits, {a,b} for one of a or b. */
static bool match(const char *p, const char *pend, const char *s) {
    if (p == pend)
        return *s == '\0';
    if (*p == '*') {
        for (int k = 0; s[k] >= '0' && s[k] <= '9';)
            if (match(p + 1, pend, s + ++k))
                return true;
        return false;
    }
    if (*p == '{') {
        const char *close = memchr(p, '}', (size_t)(pend - p));
        for (const char *alt = p + 1;; ) {
            const char *comma = memchr(alt, ',', (size_t)(close - alt));
            const char *aend = comma ? comma : close;
            size_t n = (size_t)(aend - alt);
            if (strncmp(alt, s, n) == 0 && match(close + 1, pend, s + n))
                return true;
            if (!comma)
                return false;
            alt = comma + 1;
        }
    }
    return *p == *s && match(p + 1, pend, s + 1);
}

/* Whether value matches one of the '|'-separated alternatives of values. */
static bool matches(const char *values, const char *value) {
    for (const char *p = values;;) {
        const char *bar = strchr(p, '|');
        const char *end = bar ? bar : p + strlen(p);
        if (match(p, end, value))
            return true;
        if (!bar)
            return false;
        p = bar + 1;
    }
}

static size_t edit_distance(const char *a, const char *b) {
    size_t n = strlen(b), row[64];
    if (n >= 64)
        return 64;
    for (size_t j = 0; j <= n; j++)
        row[j] = j;
    for (size_t i = 1; a[i - 1]; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= n; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            if (up + 1 < best)
                best = up + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[n];
}

static const char *kind_name(AttrKind k) {
    return k == AT_INT ? "an integer" : k == AT_STR ? "a string" : k == AT_BOOL ? "a boolean" : "another kind";
}

bool nv_attr_check(const Op *op, const NamedAttr *at, const char *target, char *msg, size_t size) {
    const char *opname = op_info[op->kind].name;
    const NvAttr *named = NULL, *on_op = NULL, *row = NULL;
    char targets[64] = "";   /* of the rows for this op */
    for (int i = 0; i < NV_ATTRS; i++) {
        const NvAttr *r = &nv_attrs[i];
        if (strcmp(r->name, at->name) != 0)
            continue;
        named = named ? named : r;
        if (strcmp(r->ops, "*") != 0 && !has_word(r->ops, opname))
            continue;
        on_op = on_op ? on_op : r;
        size_t used = strlen(targets);
        snprintf(targets + used, sizeof targets - used, "%s%s", used ? " " : "", r->targets);
        /* the module's own attributes name the target: not filtered by it */
        if (op->kind == OP_MODULE || (target && has_word(r->targets, target))) {
            row = r;
            break;
        }
    }
    if (!named) {
        const char *near = NULL;
        size_t best = 3;
        for (int i = 0; i < NV_ATTRS; i++) {
            size_t d = edit_distance(at->name, nv_attrs[i].name);
            if (d < best)
                best = d, near = nv_attrs[i].name;
        }
        if (near)
            snprintf(msg, size, "has unknown attribute '%s'; did you mean '%s'?", at->name, near);
        else
            snprintf(msg, size, "has unknown attribute '%s' (nv attributes: ir/nv_attrs.def)", at->name);
        return false;
    }
    if (!on_op) {
        snprintf(msg, size, "cannot carry '%s' (it goes on %s)", at->name, named->ops);
        return false;
    }
    if (!target && op->kind != OP_MODULE) {
        snprintf(msg, size, "carries '%s', but the module is not nv IR (it has no nv.target)", at->name);
        return false;
    }
    if (!row) {
        snprintf(msg, size, "carries '%s', which %s does not have (it is for %s)", at->name, target, targets);
        return false;
    }
    const Attr *v = at->value;
    char where[40] = "";
    if (op->kind != OP_MODULE)
        snprintf(where, sizeof where, " on %s", target);
    if (v->kind != row->kind) {
        snprintf(msg, size, "attribute '%s' must be %s, not %s", at->name, kind_name(row->kind), kind_name(v->kind));
        return false;
    }
    if (v->kind == AT_STR && !matches(row->values, v->s)) {
        snprintf(msg, size, "attribute '%s' takes %s%s, not \"%s\"", at->name, row->values, where, v->s);
        return false;
    }
    if (v->kind == AT_INT) {
        char digits[32];
        snprintf(digits, sizeof digits, "%lld", (long long)v->i);
        bool ok = row->values ? matches(row->values, digits) : v->i >= row->lo && v->i <= row->hi;
        if (!ok) {
            if (row->values)
                snprintf(msg, size, "attribute '%s' takes %s%s, not %lld", at->name, row->values, where,
                         (long long)v->i);
            else
                snprintf(msg, size, "attribute '%s' is in %lld..%lld, not %lld", at->name, (long long)row->lo,
                         (long long)row->hi, (long long)v->i);
            return false;
        }
    }
    return true;
}
