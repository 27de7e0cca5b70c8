/* ast.c — `attnc -emit=ast`: the tree as parsed, one node a line, in the
 * manner of clang's -ast-dump, with each node's line:col. */
#include "frontend/ast.h"

static const char *const spellings[] = {
    [B_ADD] = "+", [B_SUB] = "-", [B_MUL] = "*", [B_DIV] = "/", [B_FLOORDIV] = "//",
    [B_REM] = "%", [B_MATMUL] = "@", [B_LT] = "<", [B_LE] = "<=", [B_GT] = ">",
    [B_GE] = ">=", [B_EQ] = "==", [B_NE] = "!=", [B_AND] = "&&", [B_OR] = "||",
    [U_NEG] = "-", [U_NOT] = "!",
};

const char *op_spelling(BinOp op) { return spellings[op]; }

static void pad(FILE *f, int depth) {
    for (int i = 0; i < depth; i++)
        fputs("  ", f);
}

static void dump_expr(FILE *f, const Expr *e, int depth) {
    pad(f, depth);
    switch (e->kind) {
    case E_INT: fprintf(f, "Int %lld", (long long)e->ival); break;
    case E_FLOAT: fputs("Float ", f); print_float(f, e->fval); break;
    case E_NAME: fprintf(f, "Name %s", e->name); break;
    case E_CALL: fprintf(f, "Call %s", e->name); break;
    case E_INDEX: fprintf(f, "Index %s", e->name); break;
    case E_UNARY: fprintf(f, "Unary '%s'", op_spelling(e->op)); break;
    case E_BINARY: fprintf(f, "Binary '%s'", op_spelling(e->op)); break;
    case E_COND: fputs("Cond", f); break;
    }
    fprintf(f, " <%d:%d>\n", e->loc.line, e->loc.col);
    for (int i = 0; i < e->nargs; i++)
        dump_expr(f, e->args[i], depth + 1);
}

static void dump_param(FILE *f, const char *role, const Param *p, int depth) {
    pad(f, depth);
    fprintf(f, "%s %s: %s[", role, p->name, p->type.dtype);
    for (int i = 0; i < p->type.rank; i++) {
        if (i)
            fputs(", ", f);
        if (p->type.dim_names[i])
            fputs(p->type.dim_names[i], f);
        else
            fprintf(f, "%lld", (long long)p->type.dim_sizes[i]);
    }
    fprintf(f, "] <%d:%d>\n", p->loc.line, p->loc.col);
}

static void dump_stmt(FILE *f, const Stmt *st, int depth) {
    static const char *const kinds[] = {"Acc", "Scale", "Mask", "Score", "Assign", "Call", "Error"};
    pad(f, depth);
    fputs(kinds[st->kind], f);
    if (st->kind == S_ACC || st->kind == S_ASSIGN || st->kind == S_CALL)
        fprintf(f, " %s", st->name);
    if (st->nvars) {
        fputs(" (", f);
        for (int i = 0; i < st->nvars; i++)
            fprintf(f, "%s%s", i ? ", " : "", st->vars[i]);
        fputc(')', f);
    }
    fprintf(f, " <%d:%d>\n", st->loc.line, st->loc.col);
    if (st->value)
        dump_expr(f, st->value, depth + 1);
}

void ast_dump(FILE *f, const Program *p) {
    fputs("Program\n", f);
    for (int i = 0; i < p->nitems; i++) {
        const Item *it = p->items[i];
        static const char *const kinds[] = {"Const", "Attention", "Mlp", "Schedule"};
        fprintf(f, "  %s %s", kinds[it->kind], it->name);
        if (it->kind == I_SCHEDULE)
            fprintf(f, " for %s", it->target);
        fprintf(f, " <%d:%d>\n", it->loc.line, it->loc.col);
        if (it->value)
            dump_expr(f, it->value, 2);
        for (int j = 0; j < it->ninputs; j++)
            dump_param(f, "Input", &it->inputs[j], 2);
        for (int j = 0; j < it->noutputs; j++)
            dump_param(f, "Output", &it->outputs[j], 2);
        for (int j = 0; j < it->nstmts; j++)
            dump_stmt(f, it->stmts[j], 2);
        for (int j = 0; j < it->ndirectives; j++) {
            const Directive *dr = &it->directives[j];
            fprintf(f, "    Directive %s(", dr->name);
            for (int k = 0; k < dr->nargs; k++)
                fprintf(f, "%s%lld", k ? ", " : "", (long long)dr->args[k]);
            fprintf(f, ") <%d:%d>\n", dr->loc.line, dr->loc.col);
        }
    }
}
