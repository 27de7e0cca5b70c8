/* frontend.h — from .attn text to the attn level of the IR.
 *
 *   lexer.l, parser.y   text -> AST (ast.h), syntax errors with recovery
 *   sema.c              checks every rule of doc/dsl.md while lowering the
 *                       AST to attn IR; keeps going to report several errors
 *   ast.c               the -emit=ast dump
 */
#ifndef ATTNC_FRONTEND_H
#define ATTNC_FRONTEND_H

#include "frontend/ast.h"

/* Parses and checks src. Returns the builtin.module, or NULL when there were
 * errors (all of them reported to d). *ast, when given, receives the tree. */
Op *frontend_compile(Arena *a, Diag *d, const Source *src, Program **ast);

/* sema.c */
Op *sema_lower(Arena *a, Diag *d, const Source *src, const Program *p);

#endif
