/* schedule.h — the schedule directives (schedule.def) and how the passes
 * read a block's schedule. A block's directives live on its func as
 * `schedule = {TARGET = {NAME = VALUE, ...}, ...}` (made by sema). */
#ifndef ATTNC_SCHEDULE_H
#define ATTNC_SCHEDULE_H

#include "ir/ir.h"

enum { SD_MULTIPLE_16 = 1, SD_POW2 = 2, SD_SWITCH = 4, SD_ON_LAUNCH = 8, SD_ROW_TILES = 16 };

typedef enum ScheduleId {
#define SCHEDULE(id, name, attn_args, mlp_args, lo, hi, flags, target, what) SCHED_##id,
#include "target/schedule.def"
#undef SCHEDULE
    SCHED__COUNT
} ScheduleId;

typedef struct ScheduleInfo {
    const char *name;
    int attn_args, mlp_args;   /* -1: not a directive of that kind of block */
    int64_t lo, hi;
    int flags;
    const char *target;        /* NULL: every target */
    const char *what;
} ScheduleInfo;

extern const ScheduleInfo schedule_info[SCHED__COUNT];

/* The directive of that name, or NULL. */
const ScheduleInfo *schedule_lookup(const char *name);
/* "tile, stages, ... and deterministic", for messages. */
const char *schedule_names(void);
/* The value of directive id in func's schedule for arch, or NULL. */
Attr *schedule_directive(const Op *func, const char *arch, ScheduleId id);
/* After an error the target lowering or code generation reports at op:
 * a note at the block's schedule for arch, if it has one, naming what it
 * sets (the error's cause may be a tile or stage count it chose). */
void schedule_note(Diag *d, const Op *op, const char *arch);
/* The name a launch attribute of directive id has (tiling records it there
 * for the target lowering): "schedule.NAME". */
const char *schedule_launch_attr(ScheduleId id);

#endif
