/* parser.y — the grammar of .attn files (doc/dsl.md has it in prose).
 * A pure, reentrant parser: no globals; errors as "expected X, saw Y" at the
 * offending token, with recovery at ';' and '}' so one run reports several. */
%define api.pure full
%define parse.error custom
%define api.location.type {Loc}
%locations
%param {void *scanner}
%parse-param {ParseCtx *ctx}

%code requires {
#include "frontend/parse_ctx.h"
}

%code provides {
#define YY_DECL int yylex(YYSTYPE *yylval_param, YYLTYPE *yylloc_param, void *yyscanner)
YY_DECL;
}

%code {
#include <string.h>

#define YYLLOC_DEFAULT(Cur, Rhs, N)                                  \
    do {                                                             \
        if (N) {                                                     \
            (Cur).line = YYRHSLOC(Rhs, 1).line;                      \
            (Cur).col = YYRHSLOC(Rhs, 1).col;                        \
            (Cur).end_line = YYRHSLOC(Rhs, N).end_line;              \
            (Cur).end_col = YYRHSLOC(Rhs, N).end_col;                \
        } else {                                                     \
            (Cur).line = (Cur).end_line = YYRHSLOC(Rhs, 0).end_line; \
            (Cur).col = (Cur).end_col = YYRHSLOC(Rhs, 0).end_col;    \
        }                                                            \
    } while (0)

/* The parser's stack bounds nesting; deeper input is an error, not a crash. */
#define YYMAXDEPTH 2000

static void yyerror(Loc *loc, void *scanner, ParseCtx *ctx, const char *msg) {
    (void)scanner;
    if (strcmp(msg, "memory exhausted") == 0)
        msg = "input is nested too deeply";
    diag_error(ctx->diag, ctx->src, *loc, "%s", msg);
}

static Expr *new_expr(ParseCtx *ctx, ExprKind kind, Loc loc) {
    Expr *e = NEW(ctx->arena, Expr);
    e->kind = kind;
    e->loc = loc;
    return e;
}

static Expr *binary(ParseCtx *ctx, BinOp op, Expr *l, Expr *r, Loc loc) {
    Expr *e = new_expr(ctx, E_BINARY, loc);
    e->op = op;
    e->args = NEW_ARRAY(ctx->arena, Expr *, 2);
    e->args[0] = l;
    e->args[1] = r;
    e->nargs = 2;
    return e;
}

static Expr *unary(ParseCtx *ctx, BinOp op, Expr *x, Loc loc) {
    Expr *e = new_expr(ctx, E_UNARY, loc);
    e->op = op;
    e->args = NEW_ARRAY(ctx->arena, Expr *, 1);
    e->args[0] = x;
    e->nargs = 1;
    return e;
}

static Item *new_item(ParseCtx *ctx, ItemKind kind, Loc loc, const char *name, Loc name_loc) {
    Item *it = NEW(ctx->arena, Item);
    it->kind = kind;
    it->loc = loc;
    it->name = name;
    it->name_loc = name_loc;
    return it;
}

/* Params are collected as pointers and stored in the Item as an array. */
/* A statement of `kind` whose names (hook parameters, a call's
 * arguments: E_NAME expressions of `idents`) are the list `names`. */
static Stmt *named_stmt(ParseCtx *ctx, StmtKind kind, Loc loc, const char *name, Loc name_loc, PtrVec names) {
    Stmt *st = NEW(ctx->arena, Stmt);
    st->kind = kind; st->loc = loc; st->name = name; st->name_loc = name_loc;
    st->nvars = names.len;
    st->vars = NEW_ARRAY(ctx->arena, const char *, names.len + 1);
    st->var_locs = NEW_ARRAY(ctx->arena, Loc, names.len + 1);
    for (int i = 0; i < names.len; i++) {
        Expr *v = names.items[i];
        st->vars[i] = v->name; st->var_locs[i] = v->loc;
    }
    return st;
}

static Param *param_array(ParseCtx *ctx, PtrVec v) {
    Param *out = NEW_ARRAY(ctx->arena, Param, v.len + 1);
    for (int i = 0; i < v.len; i++)
        out[i] = *(Param *)v.items[i];
    return out;
}
}

%union {
    int64_t ival;
    double fval;
    const char *str;
    Expr *expr;
    Stmt *stmt;
    Item *item;
    Param *param;
    PtrVec list;
    TypeSpec *type;
    Directive *directive;
}

%token ATTENTION "'attention'" MLP "'mlp'" SCHEDULE "'schedule'" FOR "'for'"
%token CONST "'const'" ACC "'acc'" SCALE "'scale'" MASK "'mask'" SCORE "'score'"
%token <str> IDENT "identifier"
%token <ival> INT "integer"
%token <fval> FLOAT "number"
%token ARROW "'->'" LE "'<='" GE "'>='" EQ "'=='" NE "'!='" AND "'&&'" OR "'||'" FLOORDIV "'//'"

%type <item> item block_item const_item schedule_item
%type <list> params param_list stmts idents exprs expr_list dims dim_list directives ints
%type <param> param
%type <type> type
%type <stmt> stmt
%type <expr> expr primary
%type <directive> directive

%right '?' ':'
%left OR
%left AND
%nonassoc EQ NE
%nonassoc '<' LE '>' GE
%left '+' '-'
%left '*' '/' FLOORDIV '%' '@'
%right UNARY

%%

file:
    %empty
  | file item           { if ($2) vec_push(ctx->arena, &ctx->items, $2); }
  ;

item:
    const_item
  | block_item
  | schedule_item
  | error ';'           { $$ = NULL; }
  | error '}'           { $$ = NULL; }
  ;

/* const NAME = expr ; */
const_item:
    CONST IDENT '=' expr ';' {
        $$ = new_item(ctx, I_CONST, @1, $2, @2);
        $$->value = $4;
    }
  ;

/* (attention | mlp) NAME '(' params ')' '->' '(' params ')' '{' stmt* '}' */
block_item:
    ATTENTION IDENT '(' params ')' ARROW '(' params ')' '{' stmts '}' {
        $$ = new_item(ctx, I_ATTENTION, @1, $2, @2);
        $$->ninputs = $4.len;  $$->inputs = param_array(ctx, $4);
        $$->noutputs = $8.len; $$->outputs = param_array(ctx, $8);
        $$->nstmts = $11.len;  $$->stmts = (Stmt **)$11.items;
    }
  | MLP IDENT '(' params ')' ARROW '(' params ')' '{' stmts '}' {
        $$ = new_item(ctx, I_MLP, @1, $2, @2);
        $$->ninputs = $4.len;  $$->inputs = param_array(ctx, $4);
        $$->noutputs = $8.len; $$->outputs = param_array(ctx, $8);
        $$->nstmts = $11.len;  $$->stmts = (Stmt **)$11.items;
    }
  ;

params:
    %empty              { $$ = (PtrVec){0}; }
  | param_list
  | param_list ','
  ;

param_list:
    param               { $$ = (PtrVec){0}; vec_push(ctx->arena, &$$, $1); }
  | param_list ',' param { $$ = $1; vec_push(ctx->arena, &$$, $3); }
  ;

/* NAME ':' type */
param:
    IDENT ':' type {
        $$ = NEW(ctx->arena, Param);
        $$->name = $1; $$->loc = @1; $$->type = *$3;
    }
  ;

/* DTYPE '[' dims ']' */
type:
    IDENT '[' dims ']' {
        $$ = NEW(ctx->arena, TypeSpec);
        $$->dtype = $1; $$->dtype_loc = @1; $$->loc = @$;
        $$->rank = $3.len;
        $$->dim_names = NEW_ARRAY(ctx->arena, const char *, $3.len + 1);
        $$->dim_sizes = NEW_ARRAY(ctx->arena, int64_t, $3.len + 1);
        $$->dim_locs = NEW_ARRAY(ctx->arena, Loc, $3.len + 1);
        for (int i = 0; i < $3.len; i++) {
            Expr *d = $3.items[i];
            $$->dim_names[i] = d->kind == E_NAME ? d->name : NULL;
            $$->dim_sizes[i] = d->ival;
            $$->dim_locs[i] = d->loc;
        }
    }
  ;

dims:
    %empty              { $$ = (PtrVec){0}; }
  | dim_list
  ;

dim_list:
    IDENT               { $$ = (PtrVec){0}; Expr *e = new_expr(ctx, E_NAME, @1); e->name = $1; vec_push(ctx->arena, &$$, e); }
  | INT                 { $$ = (PtrVec){0}; Expr *e = new_expr(ctx, E_INT, @1); e->ival = $1; vec_push(ctx->arena, &$$, e); }
  | dim_list ',' IDENT  { $$ = $1; Expr *e = new_expr(ctx, E_NAME, @3); e->name = $3; vec_push(ctx->arena, &$$, e); }
  | dim_list ',' INT    { $$ = $1; Expr *e = new_expr(ctx, E_INT, @3); e->ival = $3; vec_push(ctx->arena, &$$, e); }
  ;

stmts:
    %empty              { $$ = (PtrVec){0}; }
  | stmts stmt          { $$ = $1; if ($2) vec_push(ctx->arena, &$$, $2); }
  ;

stmt:
    ACC IDENT ';' {
        $$ = NEW(ctx->arena, Stmt);
        $$->kind = S_ACC; $$->loc = @$; $$->name = $2; $$->name_loc = @2;
    }
  | SCALE expr ';' {
        $$ = NEW(ctx->arena, Stmt);
        $$->kind = S_SCALE; $$->loc = @$; $$->name_loc = @1; $$->value = $2;
    }
  | MASK '(' idents ')' '=' expr ';' {
        $$ = named_stmt(ctx, S_MASK, @$, "mask", @1, $3);
        $$->value = $6;
    }
  | SCORE '(' idents ')' '=' expr ';' {
        $$ = named_stmt(ctx, S_SCORE, @$, "score", @1, $3);
        $$->value = $6;
    }
  | IDENT '(' idents ')' ';' {   /* a named statement of names: pages(table, lens); sema knows the names */
        $$ = named_stmt(ctx, S_CALL, @$, $1, @1, $3);
    }
  | IDENT '=' expr ';' {
        $$ = NEW(ctx->arena, Stmt);
        $$->kind = S_ASSIGN; $$->loc = @$; $$->name = $1; $$->name_loc = @1; $$->value = $3;
    }
  | error ';' {
        /* Kept so that sema knows the block is incomplete and stays quiet
         * about what the lost statement may have defined or used. */
        $$ = NEW(ctx->arena, Stmt);
        $$->kind = S_ERROR; $$->loc = @$;
    }
  ;

idents:
    IDENT               { $$ = (PtrVec){0}; Expr *e = new_expr(ctx, E_NAME, @1); e->name = $1; vec_push(ctx->arena, &$$, e); }
  | idents ',' IDENT    { $$ = $1; Expr *e = new_expr(ctx, E_NAME, @3); e->name = $3; vec_push(ctx->arena, &$$, e); }
  ;

/* schedule NAME for TARGET { directive* } */
schedule_item:
    SCHEDULE IDENT FOR IDENT '{' directives '}' {
        $$ = new_item(ctx, I_SCHEDULE, @1, $2, @2);
        $$->target = $4; $$->target_loc = @4;
        $$->ndirectives = $6.len;
        $$->directives = NEW_ARRAY(ctx->arena, Directive, $6.len + 1);
        for (int i = 0; i < $6.len; i++)
            $$->directives[i] = *(Directive *)$6.items[i];
    }
  ;

directives:
    %empty              { $$ = (PtrVec){0}; }
  | directives directive { $$ = $1; if ($2) vec_push(ctx->arena, &$$, $2); }
  ;

/* NAME '(' INT (',' INT)* ')' ';'  |  NAME ';' (a switch: deterministic) */
directive:
    IDENT ';' {
        $$ = NEW(ctx->arena, Directive);
        $$->name = $1; $$->loc = @1; $$->nargs = 0;
        $$->args = NEW_ARRAY(ctx->arena, int64_t, 1);
        $$->arg_locs = NEW_ARRAY(ctx->arena, Loc, 1);
    }
  |
    IDENT '(' ints ')' ';' {
        $$ = NEW(ctx->arena, Directive);
        $$->name = $1; $$->loc = @1; $$->nargs = $3.len;
        $$->args = NEW_ARRAY(ctx->arena, int64_t, $3.len + 1);
        $$->arg_locs = NEW_ARRAY(ctx->arena, Loc, $3.len + 1);
        for (int i = 0; i < $3.len; i++) {
            Expr *e = $3.items[i];
            $$->args[i] = e->ival; $$->arg_locs[i] = e->loc;
            if (e->loc.line == ctx->bad_literal.line && e->loc.col == ctx->bad_literal.col)
                $$->args[i] = DIRECTIVE_ARG_REPORTED;   /* too large: said once, not again by sema */
        }
    }
  | error ';'           { $$ = NULL; }
  ;

ints:
    INT                 { $$ = (PtrVec){0}; Expr *e = new_expr(ctx, E_INT, @1); e->ival = $1; vec_push(ctx->arena, &$$, e); }
  | ints ',' INT        { $$ = $1; Expr *e = new_expr(ctx, E_INT, @3); e->ival = $3; vec_push(ctx->arena, &$$, e); }
  ;

expr:
    expr '+' expr       { $$ = binary(ctx, B_ADD, $1, $3, @$); }
  | expr '-' expr       { $$ = binary(ctx, B_SUB, $1, $3, @$); }
  | expr '*' expr       { $$ = binary(ctx, B_MUL, $1, $3, @$); }
  | expr '/' expr       { $$ = binary(ctx, B_DIV, $1, $3, @$); }
  | expr FLOORDIV expr  { $$ = binary(ctx, B_FLOORDIV, $1, $3, @$); }
  | expr '%' expr       { $$ = binary(ctx, B_REM, $1, $3, @$); }
  | expr '@' expr       { $$ = binary(ctx, B_MATMUL, $1, $3, @$); }
  | expr '<' expr       { $$ = binary(ctx, B_LT, $1, $3, @$); }
  | expr LE expr        { $$ = binary(ctx, B_LE, $1, $3, @$); }
  | expr '>' expr       { $$ = binary(ctx, B_GT, $1, $3, @$); }
  | expr GE expr        { $$ = binary(ctx, B_GE, $1, $3, @$); }
  | expr EQ expr        { $$ = binary(ctx, B_EQ, $1, $3, @$); }
  | expr NE expr        { $$ = binary(ctx, B_NE, $1, $3, @$); }
  | expr AND expr       { $$ = binary(ctx, B_AND, $1, $3, @$); }
  | expr OR expr        { $$ = binary(ctx, B_OR, $1, $3, @$); }
  | '-' expr %prec UNARY { $$ = unary(ctx, U_NEG, $2, @$); }
  | '!' expr %prec UNARY { $$ = unary(ctx, U_NOT, $2, @$); }
  | expr '?' expr ':' expr {
        $$ = new_expr(ctx, E_COND, @$);
        $$->args = NEW_ARRAY(ctx->arena, Expr *, 3);
        $$->args[0] = $1; $$->args[1] = $3; $$->args[2] = $5; $$->nargs = 3;
    }
  | primary
  ;

primary:
    INT                 { $$ = new_expr(ctx, E_INT, @1); $$->ival = $1; }
  | FLOAT               { $$ = new_expr(ctx, E_FLOAT, @1); $$->fval = $1; }
  | IDENT               { $$ = new_expr(ctx, E_NAME, @1); $$->name = $1; $$->name_loc = @1; }
  | IDENT '(' exprs ')' {
        $$ = new_expr(ctx, E_CALL, @$); $$->name = $1; $$->name_loc = @1;
        $$->args = (Expr **)$3.items; $$->nargs = $3.len;
    }
  | IDENT '[' exprs ']' {
        $$ = new_expr(ctx, E_INDEX, @$); $$->name = $1; $$->name_loc = @1;
        $$->args = (Expr **)$3.items; $$->nargs = $3.len;
    }
  | '(' expr ')'        { $$ = $2; }
  ;

exprs:
    %empty              { $$ = (PtrVec){0}; }
  | expr_list
  ;

expr_list:
    expr                { $$ = (PtrVec){0}; vec_push(ctx->arena, &$$, $1); }
  | expr_list ',' expr  { $$ = $1; vec_push(ctx->arena, &$$, $3); }
  ;

%%

/* The text a token covers, for "saw 'x'". */
static const char *token_text(ParseCtx *ctx, Loc loc) {
    const char *p = ctx->src->text, *end = p + ctx->src->len;
    for (int l = 1; l < loc.line && p < end; p++)
        if (*p == '\n')
            l++;
    p += loc.col - 1;
    int n = loc.end_line == loc.line ? loc.end_col - loc.col + 1 : 1;
    if (p >= end || n <= 0)
        return "end of file";
    if (n > 40)
        n = 40;
    if (p + n > end)
        n = (int)(end - p);
    return arena_printf(ctx->arena, "'%.*s'", n, p);
}

static const char *symbol_text(yysymbol_kind_t sym) {
    return sym == YYSYMBOL_YYEOF ? "end of file" : yysymbol_name(sym);
}

/* Whether the parser would have taken the token bison names `name`. */
static bool expects(const yysymbol_kind_t *list, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(yysymbol_name(list[i]), name) == 0)
            return true;
    return false;
}

/* "expected X, saw Y": the expected tokens when there are a few; otherwise
 * the one that most likely went missing (';', '}', an expression). */
static int yyreport_syntax_error(const yypcontext_t *pc, void *scanner, ParseCtx *ctx) {
    (void)scanner;
    enum { MAX_LISTED = 4, MAX_EXPECTED = 128 };
    yysymbol_kind_t expected[MAX_EXPECTED];
    int n = yypcontext_expected_tokens(pc, expected, MAX_EXPECTED);
    yysymbol_kind_t saw_sym = yypcontext_token(pc);
    Loc loc = *yypcontext_location(pc);
    const char *saw = saw_sym == YYSYMBOL_YYEOF ? "end of file" : token_text(ctx, loc);
    StrBuf b;
    strbuf_open(&b);
    if (n > 0 && n <= MAX_LISTED) {
        fputs("expected ", b.f);
        for (int i = 0; i < n; i++)
            fprintf(b.f, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", symbol_text(expected[i]));
        fprintf(b.f, ", saw %s", saw);
    } else if (saw_sym == YYSYMBOL_YYEOF && expects(expected, n, "'}'")) {
        fprintf(b.f, "expected '}', saw %s", saw);
    } else if (expects(expected, n, "';'")) {
        fprintf(b.f, "expected ';', saw %s", saw);
    } else if (expects(expected, n, "identifier") && expects(expected, n, "integer")) {
        fprintf(b.f, "expected an expression, saw %s", saw);
    } else {
        fprintf(b.f, "unexpected %s", saw);
    }
    const char *msg = strbuf_finish(&b, ctx->arena, NULL);
    diag_error(ctx->diag, ctx->src, loc, "%s", msg);
    return 0;
}

typedef void *yyscan_t;
int yylex_init_extra(ParseCtx *extra, yyscan_t *scanner);
int yylex_destroy(yyscan_t scanner);
struct yy_buffer_state *yy_scan_bytes(const char *bytes, int len, yyscan_t scanner);

Program *parse_program(Arena *a, Diag *d, const Source *src) {
    ParseCtx ctx = {.arena = a, .diag = d, .src = src, .line = 1, .col = 1};
    yyscan_t scanner;
    if (yylex_init_extra(&ctx, &scanner) != 0)
        die("cannot create the scanner");
    if (src->len > (size_t)1 << 30) {
        diag_error(d, src, (Loc){0}, "file is too large");
        yylex_destroy(scanner);
        return NULL;
    }
    /* a UTF-8 byte order mark is allowed and skipped (columns still count
     * its bytes, as the line shown under an error has them) */
    bool bom = src->len >= 3 && memcmp(src->text, "\xEF\xBB\xBF", 3) == 0 && src->line_offset == 0;
    if (bom)
        ctx.col = 4;
    yy_scan_bytes(src->text + (bom ? 3 : 0), (int)src->len - (bom ? 3 : 0), scanner);
    yyparse(scanner, &ctx);
    yylex_destroy(scanner);
    Program *p = NEW(a, Program);
    p->items = (Item **)ctx.items.items;
    p->nitems = ctx.items.len;
    return p;
}
