/* ast.h — the syntax tree of an .attn file, as parsed (parser.y) and then
 * annotated by sema.c. Every node keeps the source range it came from.
 *
 *   file     := (const | attention | mlp | schedule)*
 *   attention:= 'attention' NAME '(' params ')' '->' '(' params ')' '{' stmt* '}'
 *   mlp      := 'mlp' NAME '(' params ')' '->' '(' params ')' '{' stmt* '}'
 *   schedule := 'schedule' NAME 'for' TARGET '{' (NAME '(' INT, ... ')' ';')* '}'
 *
 * See doc/dsl.md for the whole grammar.
 */
#ifndef ATTNC_AST_H
#define ATTNC_AST_H

#include "ir/ir.h"

typedef enum ExprKind {
    E_INT, E_FLOAT, E_NAME, E_CALL, E_INDEX, E_UNARY, E_BINARY, E_COND,
} ExprKind;

/* Binary and unary operators; their spelling is in op_spelling(). */
typedef enum BinOp {
    B_ADD, B_SUB, B_MUL, B_DIV, B_FLOORDIV, B_REM, B_MATMUL,
    B_LT, B_LE, B_GT, B_GE, B_EQ, B_NE, B_AND, B_OR,
    U_NEG, U_NOT,
} BinOp;

typedef struct Expr Expr;
struct Expr {
    ExprKind kind;
    Loc loc;
    BinOp op;             /* E_UNARY, E_BINARY */
    int64_t ival;         /* E_INT */
    double fval;          /* E_FLOAT */
    const char *name;     /* E_NAME, E_CALL (callee), E_INDEX (tensor) */
    Loc name_loc;
    Expr **args;          /* E_CALL, E_INDEX; E_COND: cond, then, else; */
    int nargs;            /* E_BINARY/E_UNARY use args[0], args[1] */
};

typedef struct TypeSpec {
    const char *dtype;
    Loc dtype_loc;
    int rank;
    const char **dim_names;   /* NULL entry: a literal size */
    int64_t *dim_sizes;
    Loc *dim_locs;
    Loc loc;
} TypeSpec;

typedef struct Param {
    const char *name;
    Loc loc;
    TypeSpec type;
} Param;

typedef enum StmtKind { S_ACC, S_SCALE, S_MASK, S_SCORE, S_ASSIGN, S_CALL, S_ERROR } StmtKind;

typedef struct Stmt {
    StmtKind kind;
    Loc loc;              /* whole statement */
    const char *name;     /* S_ASSIGN target; S_ACC dtype name; S_CALL statement (pages) */
    Loc name_loc;
    const char **vars;    /* S_MASK, S_SCORE hook parameters; S_CALL arguments */
    Loc *var_locs;
    int nvars;
    Expr *value;
} Stmt;

typedef enum ItemKind { I_CONST, I_ATTENTION, I_MLP, I_SCHEDULE } ItemKind;

/* A directive argument whose literal the lexer already reported. */
#define DIRECTIVE_ARG_REPORTED INT64_MIN

typedef struct Directive {  /* tile(128, 64); inside a schedule */
    const char *name;
    Loc loc;
    int64_t *args;
    Loc *arg_locs;
    int nargs;
} Directive;

typedef struct Item {
    ItemKind kind;
    Loc loc;              /* the keyword */
    const char *name;
    Loc name_loc;
    /* I_CONST */
    Expr *value;
    /* I_ATTENTION, I_MLP */
    Param *inputs, *outputs;
    int ninputs, noutputs;
    Stmt **stmts;
    int nstmts;
    /* I_SCHEDULE */
    const char *target;
    Loc target_loc;
    Directive *directives;
    int ndirectives;
} Item;

typedef struct Program {
    Item **items;
    int nitems;
} Program;

/* parser.y: parses src; syntax errors go to d. Returns the program even when
 * there were errors (whatever was recovered), NULL only on a fatal error. */
Program *parse_program(Arena *a, Diag *d, const Source *src);

/* ast.c: the -emit=ast dump. */
void ast_dump(FILE *f, const Program *p);
const char *op_spelling(BinOp op);

#endif
