/* parse_ctx.h — what the scanner and the parser share. */
#ifndef ATTNC_PARSE_CTX_H
#define ATTNC_PARSE_CTX_H

#include "frontend/ast.h"

typedef struct ParseCtx {
    Arena *arena;
    Diag *diag;
    const Source *src;
    int line, col;
    Loc last;          /* the last token read: where end of file is reported */
    Loc bad_literal;   /* the last integer literal already reported (too large) */
    PtrVec items;
} ParseCtx;

#endif
