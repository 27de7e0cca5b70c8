/* grid.c — the manifest's expressions over the dims: a small
 * recursive-descent evaluator (integers, + - * // %, comparisons, && ||)
 * for kernel grids, asserts and the conditions that choose a kernel. */
#include "runtime/rt.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- grids: the manifest's expressions over the dims ------------------------------- */

typedef struct Expr {
    const char *p;
    Binding *bd;
    bool bad;        /* not an expression */
    bool overflow;   /* a step leaves 64-bit integers at these dims */
} Expr;

/* x op y, or e->overflow set (and 0) where the result leaves int64_t. */
static int64_t checked(Expr *e, char op, int64_t x, int64_t y) {
    int64_t r = 0;
    bool over = op == '+' ? __builtin_add_overflow(x, y, &r)
              : op == '-' ? __builtin_sub_overflow(x, y, &r)
                          : __builtin_mul_overflow(x, y, &r);
    e->overflow |= over;
    return over ? 0 : r;
}

static int64_t expr_sum(Expr *e);
static int64_t expr_logic(Expr *e);

static int64_t expr_atom(Expr *e) {
    const char *p = e->p;
    if (*p == '(') {
        e->p++;
        int64_t v = expr_logic(e);
        if (*e->p != ')')
            e->bad = true;
        else
            e->p++;
        return v;
    }
    if (*p >= '0' && *p <= '9') {
        char *end;
        errno = 0;
        int64_t v = strtoll(p, &end, 10);
        e->overflow |= errno == ERANGE;
        e->p = end;
        return v;
    }
    char name[MAX_NAME];
    int n = 0;
    while (((n == 0 && p[n] == '$') || p[n] == '_' || (p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') ||
            (p[n] >= '0' && p[n] <= '9')) && n < MAX_NAME - 1)
        n++;
    if (n == 0) {
        e->bad = true;
        return 0;
    }
    memcpy(name, p, (size_t)n);
    name[n] = 0;
    e->p = p + n;
    if ((strcmp(name, "min") == 0 || strcmp(name, "max") == 0) && *e->p == '(') {
        e->p++;
        int64_t x = expr_sum(e);
        if (*e->p++ != ',')
            e->bad = true;
        int64_t y = expr_sum(e);
        if (*e->p++ != ')')
            e->bad = true;
        return name[1] == 'i' ? (x < y ? x : y) : (x > y ? x : y);
    }
    int64_t *v = binding_lookup(e->bd, name);
    if (!v)
        e->bad = true;
    return v ? *v : 0;
}

static int64_t floordiv(int64_t x, int64_t y) {
    int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
}

static int64_t expr_prod(Expr *e) {
    int64_t v = expr_atom(e);
    while (*e->p == '*' || *e->p == '/' || *e->p == '%') {
        char op = *e->p++;
        int64_t r = expr_atom(e);
        if (op == '*')
            v = checked(e, '*', v, r);
        else if (r == 0)
            e->bad = true;
        else if (v == INT64_MIN && r == -1)   /* the one quotient int64_t cannot hold (x % -1 is 0) */
            v = op == '/' ? (e->overflow = true, 0) : 0;
        else
            v = op == '/' ? floordiv(v, r) : v - floordiv(v, r) * r;
    }
    return v;
}

static int64_t expr_sum(Expr *e) {
    int64_t v = expr_prod(e);
    while (*e->p == '+' || *e->p == '-') {
        char op = *e->p++;
        int64_t r = expr_prod(e);
        v = checked(e, op, v, r);
    }
    return v;
}

/* Comparisons give 1 or 0; && and || combine them (no short cut needed:
 * the operands are pure). */
static int64_t expr_cmp(Expr *e) {
    int64_t v = expr_sum(e);
    static const char *ops[] = {"==", "!=", "<=", ">=", "<", ">"};
    for (int i = 0; i < 6; i++)
        if (strncmp(e->p, ops[i], strlen(ops[i])) == 0) {
            e->p += strlen(ops[i]);
            int64_t r = expr_sum(e);
            switch (i) {
            case 0: return v == r;
            case 1: return v != r;
            case 2: return v <= r;
            case 3: return v >= r;
            case 4: return v < r;
            default: return v > r;
            }
        }
    return v;
}

static int64_t expr_logic(Expr *e) {
    int64_t v = expr_cmp(e);
    while (strncmp(e->p, "&&", 2) == 0 || strncmp(e->p, "||", 2) == 0) {
        bool and = e->p[0] == '&';
        e->p += 2;
        int64_t r = expr_cmp(e);
        v = and ? (v && r) : (v || r);
    }
    return v;
}

/* A condition of the dims (an assert's, a kernel's when=; a let's value) into *holds:
 * EVAL_OK, EVAL_BAD (the text is not an expression) or EVAL_OVERFLOW (a
 * step leaves 64-bit integers at these dims). */
EvalStatus eval_condition(const char *text, Binding *bd, int64_t *holds) {
    Expr e = {text, bd, false, false};
    *holds = expr_logic(&e);
    return e.bad || *e.p ? EVAL_BAD : e.overflow ? EVAL_OVERFLOW : EVAL_OK;
}

/* "N = 5, B = 2": the dims of a binding, for messages. */
const char *binding_text(const Binding *bd, char *buf, size_t size) {
    buf[0] = 0;
    for (int d = 0; d < bd->n; d++)
        snprintf(buf + strlen(buf), size - strlen(buf), "%s%s = %lld", d ? ", " : "", bd->names[d],
                 (long long)bd->values[d]);
    return buf;
}

int eval_grid(const Block *b, const KernelSpec *k, Binding *bd, int64_t *grid) {
    for (int g = 0; g < 3; g++) {
        Expr e = {k->grid[g], bd, false, false};
        grid[g] = expr_sum(&e);
        if (e.bad || *e.p)
            return rt_fail(ATTNRT_ERROR_MANIFEST, "block '%s', kernel %s: bad grid expression '%s'", b->name, k->name,
                        k->grid[g]);
        char dims[256];
        if (e.overflow)
            return rt_fail(ATTNRT_ERROR_ARGUMENT, "block '%s', kernel %s: the grid size '%s' overflows 64-bit "
                           "integers at %s", b->name, k->name, k->grid[g], binding_text(bd, dims, sizeof dims));
        /* y over 65,535 (B·H of a decode batch): launched in slices, below */
        int64_t most = g == 0 || (g == 1 && k->ysplit) ? 2147483647LL : 65535;
        if (grid[g] < 0 || grid[g] > most)
            return rt_fail(ATTNRT_ERROR_ARGUMENT, "block '%s', kernel %s: grid size %lld (from '%s') is out of range",
                        b->name, k->name, (long long)grid[g], k->grid[g]);
    }
    return ATTNRT_OK;
}

int bind_lets(const Block *b, Binding *bd, int64_t sms) {
    if (!b->nlets)
        return ATTNRT_OK;
    snprintf(bd->names[bd->n], MAX_NAME, "$sms");   /* (the binding has room for it past MAX_DIMS) */
    bd->values[bd->n] = sms;
    bd->from[bd->n++] = "the device";
    for (int i = 0; i < b->nlets; i++) {
        const Let *l = &b->lets[i];
        int64_t v;
        EvalStatus st = eval_condition(l->expr, bd, &v);
        char dims[256];
        if (st == EVAL_BAD)
            return rt_fail(ATTNRT_ERROR_MANIFEST, "block '%s': bad let expression '%s' for %s", b->name, l->expr,
                           b->dims[l->dim]);
        if (st == EVAL_OVERFLOW || v < 1)
            return rt_fail(ATTNRT_ERROR_ARGUMENT, "block '%s': dim %s = %s is %s at %s", b->name, b->dims[l->dim],
                           l->expr, st == EVAL_OVERFLOW ? "out of 64-bit integers" : "below 1",
                           binding_text(bd, dims, sizeof dims));
        snprintf(bd->names[bd->n], MAX_NAME, "%s", b->dims[l->dim]);
        bd->values[bd->n] = v;
        bd->from[bd->n++] = "its let";
    }
    return ATTNRT_OK;
}

/* A declared dim's value under the binding (which check_all made complete). */
int64_t dim_value(Binding *bd, const Dim *d) { return d->sym[0] ? *binding_lookup(bd, d->sym) : d->size; }
