/* schedule.c — the schedule directive table (schedule.def). */
#include "target/schedule.h"

#include <stdio.h>
#include <stdlib.h>   /* qsort */
#include <string.h>

const ScheduleInfo schedule_info[SCHED__COUNT] = {
#define SCHEDULE(id, name, attn_args, mlp_args, lo, hi, flags, target, what) \
    {name, attn_args, mlp_args, lo, hi, flags, target, what},
#include "target/schedule.def"
#undef SCHEDULE
};

const ScheduleInfo *schedule_lookup(const char *name) {
    for (int i = 0; i < SCHED__COUNT; i++)
        if (strcmp(schedule_info[i].name, name) == 0)
            return &schedule_info[i];
    return NULL;
}

const char *schedule_names(void) {
    static char buf[256];
    size_t len = 0;
    for (int i = 0; i < SCHED__COUNT && len < sizeof buf; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s",
                                i == 0 ? "" : i == SCHED__COUNT - 1 ? " and " : ", ", schedule_info[i].name);
    return buf;
}

Attr *schedule_directive(const Op *func, const char *arch, ScheduleId id) {
    Attr *all = op_attr(func, "schedule");
    Attr *s = all && arch ? attrs_get(all->entries, all->n, arch) : NULL;
    return s ? attrs_get(s->entries, s->n, schedule_info[id].name) : NULL;
}

/* The builtin.func an op is nested in (or the op itself), or NULL. */
static const Op *enclosing_func(const Op *op) {
    while (op && op->kind != OP_FUNC)
        op = op->parent && op->parent->parent ? op->parent->parent->parent : NULL;
    return op;
}

static int by_position(const void *a, const void *b) {
    const SrcLoc *x = &(*(const NamedAttr *const *)a)->value->loc, *y = &(*(const NamedAttr *const *)b)->value->loc;
    return x->line != y->line ? (x->line > y->line) - (x->line < y->line) : (x->col > y->col) - (x->col < y->col);
}

void schedule_note(Diag *d, const Op *op, const char *arch) {
    const Op *func = enclosing_func(op);
    Attr *all = func ? op_attr(func, "schedule") : NULL;
    Attr *s = all && arch ? attrs_get(all->entries, all->n, arch) : NULL;
    if (!s || !s->loc.file || !s->n || s->n > SCHED__COUNT)   /* (sema's: each directive at most once) */
        return;
    /* its directives as written, in source order */
    const NamedAttr *order[SCHED__COUNT];
    for (int i = 0; i < s->n; i++)
        order[i] = &s->entries[i];
    qsort(order, (size_t)s->n, sizeof *order, by_position);
    char text[512];
    size_t len = (size_t)snprintf(text, sizeof text, "the schedule for %s sets", arch);
    for (int i = 0; i < s->n && len < sizeof text; i++) {
        const Attr *v = order[i]->value;
        len += (size_t)snprintf(text + len, sizeof text - len, "%s %s", i ? "," : "", order[i]->name);
        if (v->kind == AT_INT && len < sizeof text)
            len += (size_t)snprintf(text + len, sizeof text - len, "(%lld)", (long long)v->i);
        for (int j = 0; v->kind == AT_ARRAY && j < v->n && len < sizeof text; j++)
            len += (size_t)snprintf(text + len, sizeof text - len, "%s%lld%s", j ? ", " : "(",
                                    (long long)v->elems[j]->i, j + 1 == v->n ? ")" : "");
    }
    srcloc_note(d, s->loc, text);
}

const char *schedule_launch_attr(ScheduleId id) {
    static const char *names[SCHED__COUNT] = {
#define SCHEDULE(id, name, attn_args, mlp_args, lo, hi, flags, target, what) "schedule." name,
#include "target/schedule.def"
#undef SCHEDULE
    };
    return names[id];
}
