/* frontend.c — parse, then check and lower. */
#include "frontend/frontend.h"

Op *frontend_compile(Arena *a, Diag *d, const Source *src, Program **ast, FrontendOptions opts) {
    int errors_before = d->errors;
    d->source = *src;   /* later errors at an op's position show this text */
    Program *p = parse_program(a, d, src);
    if (ast)
        *ast = p;
    if (!p)
        return NULL;
    /* Semantic errors are worth reporting even after syntax errors: the
     * parser recovered whole items, and sema only sees those. */
    Op *module = sema_lower(a, d, src, p, opts.consts);
    return d->errors > errors_before ? NULL : module;
}
