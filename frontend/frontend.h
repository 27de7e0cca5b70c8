/* frontend.h — from .attn text to the attn level of the IR.
 *
 *   lexer.l, parser.y   text -> AST (ast.h), syntax errors with recovery
 *   sema.c              checks every rule of doc/dsl.md while lowering the
 *                       AST to attn IR; keeps going to report several errors
 *                       (with sema_expr.c: expressions, sema_blocks.c: the
 *                       blocks, sema_schedule.c: schedules; sema.h)
 *   ast.c               the -emit=ast dump
 */
#ifndef ATTNC_FRONTEND_H
#define ATTNC_FRONTEND_H

#include "frontend/ast.h"

/* Parses and checks src. Returns the builtin.module, or NULL when there were
 * errors (all of them reported to d). *ast, when given, receives the tree. */
typedef struct FrontendOptions {
    /* maps constant names to integer values that replace the file's own
     * (`attnc run -D`): name -> (void *)(intptr_t)value; may be NULL */
    const Map *consts;
} FrontendOptions;
Op *frontend_compile(Arena *a, Diag *d, const Source *src, Program **ast, FrontendOptions opts);

/* sema.c */
Op *sema_lower(Arena *a, Diag *d, const Source *src, const Program *p, const Map *consts);

#endif
