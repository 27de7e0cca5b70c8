/* schedule.c — the schedule directive table (schedule.def). */
#include "target/schedule.h"

#include <stdio.h>
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

const char *schedule_launch_attr(ScheduleId id) {
    static const char *names[SCHED__COUNT] = {
#define SCHEDULE(id, name, attn_args, mlp_args, lo, hi, flags, target, what) "schedule." name,
#include "target/schedule.def"
#undef SCHEDULE
    };
    return names[id];
}
