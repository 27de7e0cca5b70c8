/* parse_ctx.h — what the scanner and the parser share. */
#ifndef ATTNC_PARSE_CTX_H
#define ATTNC_PARSE_CTX_H

#include "frontend/ast.h"

typedef struct ParseCtx {
    Arena *arena;
    Diag *diag;
    const Source *src;
    int line, col;
    PtrVec items;
} ParseCtx;

#endif
