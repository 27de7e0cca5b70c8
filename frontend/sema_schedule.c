/* sema_schedule.c — schedule items: each directive checked against
 * target/schedule.def (its arguments, range and targets) and recorded on
 * its block for the passes. */
#include "frontend/sema.h"
#include "target/schedule.h"
#include "target/target.h"

#include <string.h>

/* ---- schedules ----------------------------------------------------------- */

/* The head dim of an attention block's q (its first input's last dim), or
 * -1 where it is not a number. */
static int64_t block_head_dim(const Op *func) {
    const Block *body = func->nregions && func->regions[0].nblocks ? func->regions[0].blocks[0] : NULL;
    const Type *q = body && body->nargs ? body->args[0]->type : NULL;
    if (!q || q->rank < 1 || q->dims[q->rank - 1].sym)
        return -1;
    return q->dims[q->rank - 1].size;
}

void sema_lower_schedule(Sema *s, const Item *it) {
    Op *func = map_get(&s->blocks, it->name);
    const Item *block = map_get(&s->items, it->name);
    if (!func || !block) {
        diag_error(s->d, s->src, it->name_loc, "schedule for unknown block '%s'", it->name);
        return;
    }
    if (!target_lookup(it->target)) {
        diag_error(s->d, s->src, it->target_loc, "unknown target '%s'", it->target);
        diag_note(s->d, s->src, it->target_loc, "targets are %s", target_names());
        return;
    }
    Attr *all = op_attr(func, "schedule");
    if (!all)
        all = attr_dict(s->a);
    if (attrs_get(all->entries, all->n, it->target)) {
        diag_error(s->d, s->src, it->target_loc, "block '%s' already has a schedule for %s", it->name,
                   it->target);
        return;
    }
    Attr *sched = attr_dict(s->a);
    bool mlp = block->kind == I_MLP;
    for (int i = 0; i < it->ndirectives; i++) {
        const Directive *dr = &it->directives[i];
        const ScheduleInfo *info = schedule_lookup(dr->name);
        if (!info) {
            diag_error(s->d, s->src, dr->loc, "unknown schedule directive '%s'", dr->name);
            diag_note(s->d, s->src, dr->loc, "directives are %s", schedule_names());
            continue;
        }
        int want = mlp ? info->mlp_args : info->attn_args;
        if (want < 0) {
            diag_error(s->d, s->src, dr->loc, "'%s' is a schedule directive of %s blocks (%s)", dr->name,
                       mlp ? "attention" : "mlp", info->what);
            continue;
        }
        if (info->target && strcmp(it->target, info->target) != 0) {
            diag_error(s->d, s->src, dr->loc, "'%s' is a schedule directive of %s only (%s)", dr->name, info->target,
                       info->what);
            continue;
        }
        int64_t lo = info->lo, hi = info->hi;
        if (attrs_get(sched->entries, sched->n, dr->name)) {
            diag_error(s->d, s->src, dr->loc, "'%s' is given twice in one schedule", dr->name);
            continue;
        }
        if (dr->nargs != want) {
            diag_error(s->d, s->src, dr->loc, "'%s' takes %d value%s%s, not %d", dr->name, want,
                       want == 1 ? "" : "s",
                       info != &schedule_info[SCHED_TILE] ? "" : mlp ? " (M, N, K) for an mlp block"
                                                           : " (query rows, key rows) for an attention block",
                       dr->nargs);
            continue;
        }
        Attr **vals = NEW_ARRAY(s->a, Attr *, want);
        bool ok = true;
        for (int j = 0; j < want; j++) {
            int64_t x = dr->args[j];
            if (x == DIRECTIVE_ARG_REPORTED) {
                ok = false;
                continue;
            }
            bool pow2 = x > 0 && (x & (x - 1)) == 0;
            if ((info->flags & SD_SWITCH) && (x < lo || x > hi)) {
                diag_error(s->d, s->src, dr->arg_locs[j], "%s must be 0 (off) or 1 (on), not %lld", dr->name,
                           (long long)x);
                ok = false;
            } else if (x < lo || x > hi || ((info->flags & SD_MULTIPLE_16) && x % 16) ||
                       ((info->flags & SD_POW2) && !pow2)) {
                diag_error(s->d, s->src, dr->arg_locs[j], "%s must be %s between %lld and %lld, not %lld",
                           dr->name,
                           info->flags & SD_MULTIPLE_16 ? "a multiple of 16"
                           : info->flags & SD_POW2      ? "a power of two"
                                                        : "a count",
                           (long long)lo, (long long)hi, (long long)x);
                ok = false;
            }
            vals[j] = attr_int(s->a, x);
        }
        int64_t head_dim = block_head_dim(func);
        if (ok && (info->flags & SD_ROW_TILES) && want == 2 && vals[0]->i != vals[1]->i && vals[1]->i != head_dim) {
            diag_error(s->d, s->src, dr->arg_locs[1],
                       "%s takes two equal values (%s), or keys equal to the head dim (%lld), not %lld and %lld",
                       dr->name, info->what, (long long)head_dim, (long long)vals[0]->i, (long long)vals[1]->i);
            diag_note(s->d, s->src, dr->loc, "the backward's key-tile kernel keeps its score tiles (N key rows) and "
                                             "its dQ tile (M query rows, or transposed, head-dim rows) in one row "
                                             "layout");
            ok = false;
        }
        if (ok) {
            Attr *v = want == 0 ? attr_bool(s->a, true) : want == 1 ? vals[0] : attr_array(s->a, want, vals);
            v->loc = sema_srcloc(s, dr->loc);
            attrs_set(s->a, &sched->entries, &sched->n, dr->name, v);
        }
    }
    sched->loc = sema_srcloc(s, it->loc);   /* for the notes on what it caused (schedule_note) */
    attrs_set(s->a, &all->entries, &all->n, it->target, sched);
    op_set_attr(s->a, func, "schedule", all);
}
