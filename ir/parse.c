/* parse.c — reads the generic textual form printed by print.c.
 *
 * Recursive descent over a small hand-written lexer. Stops at the first
 * error (like mlir-opt) and reports it as file:line:col with a caret.
 * Value names are scoped: a region's names vanish when it closes, and an
 * OPF_ISOLATED op (module, func) sees none from outside.
 */
#include "ir.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum Tok {
    T_EOF, T_VALUE /* %x */, T_LABEL /* ^bb0 */, T_IDENT, T_INT, T_FLOAT, T_STRING, T_PUNCT,
    T_ERROR,
} Tok;

enum { MAX_DEPTH = 200 };

typedef struct Parser {
    Arena *arena;
    Diag *diag;
    const Source *src;
    const char *p, *end;
    int line, col;
    /* current token */
    Tok tok;
    const char *text;  /* its text (arena copy; for strings, the unescaped value) */
    char punct;
    int64_t ival;
    double fval;
    Loc loc;
    /* names */
    Map scope;         /* name -> Value*, NULL once out of scope */
    int depth;
    bool failed;
} Parser;

static void error_at(Parser *ps, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void error_at(Parser *ps, Loc loc, const char *fmt, ...) {
    if (ps->failed)
        return;
    ps->failed = true;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_error(ps->diag, ps->src, loc, "%s", msg);
}

/* ---- lexer ------------------------------------------------------------- */

static int peekc(Parser *ps) { return ps->p < ps->end ? (unsigned char)*ps->p : -1; }

static void advance(Parser *ps) {
    if (*ps->p == '\n') {
        ps->line++;
        ps->col = 1;
    } else {
        ps->col++;
    }
    ps->p++;
}

static bool is_name_char(int c) { return c >= 0 && (isalnum(c) || c == '_' || c == '.' || c == '$' || c == '-'); }
static bool is_ident_char(int c) { return c >= 0 && (isalnum(c) || c == '_' || c == '.'); }

static const char *describe(Parser *ps) {
    switch (ps->tok) {
    case T_EOF: return "end of file";
    case T_STRING: return "a string";
    default: return arena_printf(ps->arena, "'%s'", ps->text);
    }
}

static void lex_string(Parser *ps) {
    advance(ps);  /* opening quote */
    StrBuf b;
    strbuf_open(&b);
    for (;;) {
        int c = peekc(ps);
        if (c < 0 || c == '\n') {
            strbuf_finish(&b, ps->arena, NULL);
            ps->loc.end_col = ps->loc.col;
            error_at(ps, ps->loc, "unterminated string");
            ps->tok = T_ERROR;
            ps->text = "";
            return;
        }
        advance(ps);
        if (c == '"')
            break;
        if (c == '\\') {
            int e = peekc(ps);
            if (e == '"' || e == '\\') {
                fputc(e, b.f);
                advance(ps);
            } else if (isxdigit(e) && ps->p + 1 < ps->end && isxdigit((unsigned char)ps->p[1])) {
                char hex[3] = {ps->p[0], ps->p[1], 0};
                fputc((int)strtol(hex, NULL, 16), b.f);
                advance(ps);
                advance(ps);
            } else {
                Loc l = {ps->line, ps->col, ps->line, ps->col};
                strbuf_finish(&b, ps->arena, NULL);
                error_at(ps, l, "invalid escape in string");
                ps->tok = T_ERROR;
                ps->text = "";
                return;
            }
        } else {
            fputc(c, b.f);
        }
    }
    size_t len;
    ps->text = strbuf_finish(&b, ps->arena, &len);
    if (strlen(ps->text) != len) {
        error_at(ps, ps->loc, "string contains a NUL byte");
        ps->tok = T_ERROR;
        return;
    }
    ps->tok = T_STRING;
}

static void lex_number(Parser *ps, const char *start) {
    bool is_float = false;
    if (peekc(ps) == '-')
        advance(ps);
    if (!(peekc(ps) >= 0 && isdigit(peekc(ps)))) {   /* "-inf" or a stray '-' */
        while (is_ident_char(peekc(ps)))
            advance(ps);
        ps->text = arena_strndup(ps->arena, start, (size_t)(ps->p - start));
        if (strcmp(ps->text, "-inf") == 0) {
            ps->tok = T_FLOAT;
            ps->fval = -INFINITY;
        } else {
            ps->tok = T_PUNCT;
            ps->punct = '-';
            if (strcmp(ps->text, "-") != 0) {
                error_at(ps, ps->loc, "invalid token '%s'", ps->text);
                ps->tok = T_ERROR;
            }
        }
        return;
    }
    while (peekc(ps) >= 0 && isdigit(peekc(ps)))
        advance(ps);
    if (peekc(ps) == '.') {
        is_float = true;
        advance(ps);
        while (peekc(ps) >= 0 && isdigit(peekc(ps)))
            advance(ps);
    }
    if (peekc(ps) == 'e' || peekc(ps) == 'E') {
        is_float = true;
        advance(ps);
        if (peekc(ps) == '+' || peekc(ps) == '-')
            advance(ps);
        if (!(peekc(ps) >= 0 && isdigit(peekc(ps)))) {
            ps->text = arena_strndup(ps->arena, start, (size_t)(ps->p - start));
            error_at(ps, ps->loc, "malformed number '%s'", ps->text);
            ps->tok = T_ERROR;
            return;
        }
        while (peekc(ps) >= 0 && isdigit(peekc(ps)))
            advance(ps);
    }
    ps->text = arena_strndup(ps->arena, start, (size_t)(ps->p - start));
    errno = 0;
    if (is_float) {
        ps->tok = T_FLOAT;
        ps->fval = strtod(ps->text, NULL);
    } else {
        ps->tok = T_INT;
        ps->ival = strtoll(ps->text, NULL, 10);
        if (errno == ERANGE) {
            error_at(ps, ps->loc, "integer '%s' does not fit in 64 bits", ps->text);
            ps->tok = T_ERROR;
        }
    }
}

static void next(Parser *ps) {
    for (;;) {  /* whitespace and // comments */
        int c = peekc(ps);
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            advance(ps);
        } else if (c == '/' && ps->p + 1 < ps->end && ps->p[1] == '/') {
            while (peekc(ps) >= 0 && peekc(ps) != '\n')
                advance(ps);
        } else {
            break;
        }
    }
    const char *start = ps->p;
    ps->loc = (Loc){ps->line, ps->col, ps->line, ps->col};
    int c = peekc(ps);
    if (c < 0) {
        ps->tok = T_EOF;
        ps->text = "";
        return;
    }
    if (c == '"') {
        lex_string(ps);
    } else if (c == '%' || c == '^') {
        advance(ps);
        const char *name = ps->p;
        while (is_name_char(peekc(ps)))
            advance(ps);
        ps->text = arena_strndup(ps->arena, name, (size_t)(ps->p - name));
        ps->tok = c == '%' ? T_VALUE : T_LABEL;
        if (!ps->text[0]) {
            error_at(ps, ps->loc, "expected a name after '%c'", c);
            ps->tok = T_ERROR;
        }
    } else if (isdigit(c) || c == '-') {
        lex_number(ps, start);
    } else if (isalpha(c) || c == '_') {
        while (is_ident_char(peekc(ps)))
            advance(ps);
        ps->text = arena_strndup(ps->arena, start, (size_t)(ps->p - start));
        ps->tok = T_IDENT;
        if (strcmp(ps->text, "inf") == 0 || strcmp(ps->text, "nan") == 0) {
            ps->tok = T_FLOAT;
            ps->fval = ps->text[0] == 'i' ? INFINITY : NAN;
        }
    } else if (strchr("(){}[]<>,:=", c)) {
        advance(ps);
        ps->tok = T_PUNCT;
        ps->punct = (char)c;
        ps->text = arena_strndup(ps->arena, start, 1);
    } else {
        advance(ps);
        ps->text = isprint(c) ? arena_printf(ps->arena, "%c", c) : arena_printf(ps->arena, "\\x%02X", c);
        error_at(ps, ps->loc, "invalid character '%s'", ps->text);
        ps->tok = T_ERROR;
    }
    ps->loc.end_col = ps->col - 1 >= ps->loc.col ? ps->col - 1 : ps->loc.col;
    ps->loc.end_line = ps->line == ps->loc.line ? ps->line : ps->loc.line;
}

static bool is_punct(Parser *ps, char c) { return ps->tok == T_PUNCT && ps->punct == c; }

static bool expect(Parser *ps, char c) {
    if (!is_punct(ps, c)) {
        error_at(ps, ps->loc, "expected '%c', saw %s", c, describe(ps));
        return false;
    }
    next(ps);
    return true;
}

static bool accept(Parser *ps, char c) {
    if (!is_punct(ps, c))
        return false;
    next(ps);
    return true;
}

/* ---- types ------------------------------------------------------------- */

/* elem '[' dim (',' dim)* ']' */
static bool parse_shape(Parser *ps, ScalarKind *elem, int *rank, Dim **dims) {
    if (ps->tok != T_IDENT || (*elem = scalar_from_name(ps->text)) == SK_NONE) {
        error_at(ps, ps->loc, "expected an element type, saw %s", describe(ps));
        return false;
    }
    next(ps);
    if (!expect(ps, '['))
        return false;
    PtrVec v = {0};
    while (!is_punct(ps, ']') && !ps->failed) {
        Dim *d = NEW(ps->arena, Dim);
        if (ps->tok == T_INT && ps->ival > 0) {
            d->size = ps->ival;
        } else if (ps->tok == T_IDENT || (ps->tok == T_FLOAT && isalpha((unsigned char)ps->text[0]))) {
            d->sym = ps->text;   /* (a dimension may be named inf or nan, which elsewhere are floats) */
        } else {
            error_at(ps, ps->loc, "expected a positive size or a dimension name, saw %s", describe(ps));
            return false;
        }
        vec_push(ps->arena, &v, d);
        next(ps);
        if (!is_punct(ps, ']') && !expect(ps, ','))
            return false;
    }
    if (!expect(ps, ']'))
        return false;
    *rank = v.len;
    *dims = NEW_ARRAY(ps->arena, Dim, v.len ? v.len : 1);
    for (int i = 0; i < v.len; i++)
        (*dims)[i] = *(Dim *)v.items[i];
    return true;
}

static Type *parse_type(Parser *ps) {
    if (ps->tok != T_IDENT) {
        error_at(ps, ps->loc, "expected a type, saw %s", describe(ps));
        return NULL;
    }
    const char *name = ps->text;
    Loc loc = ps->loc;
    ScalarKind sk = scalar_from_name(name);
    if (sk != SK_NONE) {
        next(ps);
        return type_scalar(ps->arena, sk);
    }
    TypeKind kind;
    if (strcmp(name, "token") == 0 || strcmp(name, "mbarrier") == 0) {
        next(ps);
        Type *t = NEW(ps->arena, Type);
        t->kind = name[0] == 't' ? TY_TOKEN : TY_MBARRIER;
        return t;
    } else if (strcmp(name, "tensor") == 0) {
        kind = TY_TENSOR;
    } else if (strcmp(name, "tile") == 0) {
        kind = TY_TILE;
    } else if (strcmp(name, "memref") == 0) {
        kind = TY_MEMREF;
    } else if (strcmp(name, "frag") == 0) {
        kind = TY_FRAG;
    } else {
        error_at(ps, loc, "unknown type '%s'", name);
        return NULL;
    }
    next(ps);
    ScalarKind elem;
    int rank;
    Dim *dims;
    if (!expect(ps, '<') || !parse_shape(ps, &elem, &rank, &dims))
        return NULL;
    Type *t = type_shaped(ps->arena, kind, elem, rank, dims);
    if (kind == TY_MEMREF) {
        if (!expect(ps, ','))
            return NULL;
        static const char *const spaces[] = {"global", "shared", "register"};
        int s = 0;
        while (s < 3 && !(ps->tok == T_IDENT && strcmp(ps->text, spaces[s]) == 0))
            s++;
        if (s == 3) {
            error_at(ps, ps->loc, "expected an address space (global, shared, register), saw %s",
                     describe(ps));
            return NULL;
        }
        t->space = (AddrSpace)s;
        next(ps);
    } else if (kind == TY_FRAG) {
        if (!expect(ps, ','))
            return NULL;
        if (ps->tok != T_STRING) {
            error_at(ps, ps->loc, "expected a fragment layout string, saw %s", describe(ps));
            return NULL;
        }
        t->layout = ps->text;
        next(ps);
    }
    return expect(ps, '>') ? t : NULL;
}

/* ---- attributes -------------------------------------------------------- */

static Attr *parse_attr(Parser *ps);

/* '{' (key '=' attr (',' key '=' attr)*)? '}' into a sorted list */
static bool parse_attr_dict(Parser *ps, NamedAttr **list, int *n) {
    if (!expect(ps, '{'))
        return false;
    if (++ps->depth > MAX_DEPTH) {
        error_at(ps, ps->loc, "attributes nested too deeply");
        return false;
    }
    while (!is_punct(ps, '}') && !ps->failed) {
        if (ps->tok != T_IDENT) {
            error_at(ps, ps->loc, "expected an attribute name, saw %s", describe(ps));
            return false;
        }
        const char *key = ps->text;
        Loc key_loc = ps->loc;
        next(ps);
        if (!expect(ps, '='))
            return false;
        Attr *value = parse_attr(ps);
        if (!value)
            return false;
        if (attrs_get(*list, *n, key)) {
            error_at(ps, key_loc, "duplicate attribute '%s'", key);
            return false;
        }
        attrs_set(ps->arena, list, n, key, value);
        if (!is_punct(ps, '}') && !expect(ps, ','))
            return false;
    }
    ps->depth--;
    return expect(ps, '}');
}

static Attr *parse_attr(Parser *ps) {
    Attr *a = NULL;
    switch (ps->tok) {
    case T_INT: a = attr_int(ps->arena, ps->ival); next(ps); return a;
    case T_FLOAT: a = attr_float(ps->arena, ps->fval); next(ps); return a;
    case T_STRING: a = attr_str(ps->arena, ps->text); next(ps); return a;
    case T_IDENT:
        if (strcmp(ps->text, "true") == 0 || strcmp(ps->text, "false") == 0) {
            a = attr_bool(ps->arena, ps->text[0] == 't');
            next(ps);
            return a;
        } else {
            Type *t = parse_type(ps);
            return t ? attr_type(ps->arena, t) : NULL;
        }
    case T_PUNCT:
        if (is_punct(ps, '[')) {
            next(ps);
            if (++ps->depth > MAX_DEPTH) {
                error_at(ps, ps->loc, "attributes nested too deeply");
                return NULL;
            }
            PtrVec elems = {0};
            while (!is_punct(ps, ']') && !ps->failed) {
                Attr *e = parse_attr(ps);
                if (!e)
                    return NULL;
                vec_push(ps->arena, &elems, e);
                if (!is_punct(ps, ']') && !expect(ps, ','))
                    return NULL;
            }
            ps->depth--;
            if (!expect(ps, ']'))
                return NULL;
            return attr_array(ps->arena, elems.len, (Attr **)elems.items);
        }
        if (is_punct(ps, '{')) {
            a = attr_dict(ps->arena);
            return parse_attr_dict(ps, &a->entries, &a->n) ? a : NULL;
        }
        break;
    default: break;
    }
    error_at(ps, ps->loc, "expected an attribute value, saw %s", describe(ps));
    return NULL;
}

/* ---- ops, blocks, regions --------------------------------------------- */

typedef struct Defined {  /* names defined in one region, undone when it closes */
    PtrVec names;
} Defined;

static Value *lookup(Parser *ps, const char *name) { return map_get(&ps->scope, name); }

static bool define(Parser *ps, Defined *defs, const char *name, Value *v, Loc loc) {
    if (lookup(ps, name)) {
        error_at(ps, loc, "redefinition of value '%%%s'", name);
        return false;
    }
    map_put(ps->arena, &ps->scope, name, v);
    vec_push(ps->arena, &defs->names, (void *)name);
    bool numbered = true;
    for (const char *c = name; *c; c++)
        numbered &= isdigit((unsigned char)*c) != 0;
    v->name = numbered ? NULL : name;
    return true;
}

static Op *parse_op(Parser *ps, Defined *defs);

static bool at_op_start(Parser *ps) { return ps->tok == T_VALUE || ps->tok == T_IDENT; }

static bool parse_block_body(Parser *ps, Block *b, Defined *defs) {
    while (at_op_start(ps) && !ps->failed) {
        Op *op = parse_op(ps, defs);
        if (!op)
            return false;
        block_append(b, op);
    }
    return !ps->failed;
}

/* '{' ( '^' label ('(' %arg ':' type, ... ')')? ':' op* )* '}' or '{' op+ '}' */
static bool parse_region(Parser *ps, Region *r) {
    if (!expect(ps, '{'))
        return false;
    if (++ps->depth > MAX_DEPTH) {
        error_at(ps, ps->loc, "regions nested too deeply");
        return false;
    }
    Defined defs = {0};
    if (at_op_start(ps) && !parse_block_body(ps, region_add_block(ps->arena, r), &defs))
        return false;
    while (ps->tok == T_LABEL && !ps->failed) {
        Block *b = region_add_block(ps->arena, r);
        next(ps);
        if (accept(ps, '(')) {
            while (!is_punct(ps, ')') && !ps->failed) {
                if (ps->tok != T_VALUE) {
                    error_at(ps, ps->loc, "expected a block argument, saw %s", describe(ps));
                    return false;
                }
                const char *name = ps->text;
                Loc loc = ps->loc;
                next(ps);
                if (!expect(ps, ':'))
                    return false;
                Type *t = parse_type(ps);
                if (!t)
                    return false;
                if (!define(ps, &defs, name, block_add_arg(ps->arena, b, t, NULL), loc))
                    return false;
                if (!is_punct(ps, ')') && !expect(ps, ','))
                    return false;
            }
            if (!expect(ps, ')'))
                return false;
        }
        if (!expect(ps, ':') || !parse_block_body(ps, b, &defs))
            return false;
    }
    for (int i = 0; i < defs.names.len; i++)
        map_put(ps->arena, &ps->scope, defs.names.items[i], NULL);
    ps->depth--;
    return expect(ps, '}');
}

/* '(' region (',' region)* ')' into a list of regions */
static bool parse_regions(Parser *ps, PtrVec *regions) {
    next(ps);  /* '(' */
    do {
        Region *r = NEW(ps->arena, Region);
        vec_push(ps->arena, regions, r);
        if (!parse_region(ps, r))
            return false;
    } while (accept(ps, ','));
    return expect(ps, ')');
}

static Op *parse_op(Parser *ps, Defined *defs) {
    /* results */
    PtrVec result_names = {0}, result_locs = {0};
    while (ps->tok == T_VALUE) {
        vec_push(ps->arena, &result_names, (void *)ps->text);
        Loc *l = NEW(ps->arena, Loc);
        *l = ps->loc;
        vec_push(ps->arena, &result_locs, l);
        next(ps);
        if (!accept(ps, ','))
            break;
    }
    if (result_names.len && !expect(ps, '='))
        return NULL;
    if (ps->tok != T_IDENT) {
        error_at(ps, ps->loc, "expected an operation name, saw %s", describe(ps));
        return NULL;
    }
    Loc name_loc = ps->loc;
    OpKind kind = op_kind_from_name(ps->text);
    if (kind == OP__COUNT) {
        error_at(ps, ps->loc, "unknown operation '%s'", ps->text);
        return NULL;
    }
    next(ps);
    /* operands */
    PtrVec operands = {0};
    if (is_punct(ps, '(')) {
        const char *q = ps->p;
        while (q < ps->end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
            q++;
        if (q < ps->end && *q != '{') {
            next(ps);
            while (!is_punct(ps, ')') && !ps->failed) {
                if (ps->tok != T_VALUE) {
                    error_at(ps, ps->loc, "expected an operand, saw %s", describe(ps));
                    return NULL;
                }
                Value *v = lookup(ps, ps->text);
                if (!v) {
                    error_at(ps, ps->loc, "use of undefined value '%%%s'", ps->text);
                    return NULL;
                }
                vec_push(ps->arena, &operands, v);
                next(ps);
                if (!is_punct(ps, ')') && !expect(ps, ','))
                    return NULL;
            }
            if (!expect(ps, ')'))
                return NULL;
        }
    }
    /* regions: '(' followed by '{' */
    PtrVec regions = {0};
    if (is_punct(ps, '(')) {
        Map saved = ps->scope;
        if (op_info[kind].flags & OPF_ISOLATED)
            map_init(&ps->scope, true);
        if (!parse_regions(ps, &regions))
            return NULL;
        if (op_info[kind].flags & OPF_ISOLATED)
            ps->scope = saved;
    }
    /* attributes */
    NamedAttr *attrs = NULL;
    int nattrs = 0;
    if (is_punct(ps, '{') && !parse_attr_dict(ps, &attrs, &nattrs))
        return NULL;
    /* result types */
    PtrVec types = {0};
    if (accept(ps, ':')) {
        do {
            Type *t = parse_type(ps);
            if (!t)
                return NULL;
            vec_push(ps->arena, &types, t);
        } while (accept(ps, ','));
    }
    if (types.len != result_names.len) {
        error_at(ps, name_loc, "'%s' has %d result name%s but %d result type%s", op_info[kind].name,
                 result_names.len, result_names.len == 1 ? "" : "s", types.len,
                 types.len == 1 ? "" : "s");
        return NULL;
    }
    Op *op = op_create(ps->arena, kind, operands.len, (Value **)operands.items, types.len,
                       (Type **)types.items, regions.len);
    for (int i = 0; i < regions.len; i++) {
        Region *r = &op->regions[i];
        *r = *(Region *)regions.items[i];
        r->parent = op;
        for (int b = 0; b < r->nblocks; b++)
            r->blocks[b]->parent = r;
    }
    op->attrs = attrs;
    op->nattrs = nattrs;
    op->text_loc = name_loc;
    /* location */
    if (ps->tok == T_IDENT && strcmp(ps->text, "loc") == 0) {
        next(ps);
        if (!expect(ps, '('))
            return NULL;
        if (ps->tok != T_STRING) {
            error_at(ps, ps->loc, "expected a file name string in loc(...), saw %s", describe(ps));
            return NULL;
        }
        op->loc.file = ps->text;
        next(ps);
        int parts[2];
        for (int i = 0; i < 2; i++) {
            if (!expect(ps, ':'))
                return NULL;
            if (ps->tok != T_INT || ps->ival < 0 || ps->ival > 1 << 30) {
                error_at(ps, ps->loc, "expected a line or column number, saw %s", describe(ps));
                return NULL;
            }
            parts[i] = (int)ps->ival;
            next(ps);
        }
        op->loc.line = parts[0];
        op->loc.col = parts[1];
        if (!expect(ps, ')'))
            return NULL;
    }
    for (int i = 0; i < result_names.len; i++)
        if (!define(ps, defs, result_names.items[i], op->results[i], *(Loc *)result_locs.items[i]))
            return NULL;
    return op;
}

Op *ir_parse(Arena *a, Diag *d, const Source *src) {
    Parser ps = {.arena = a, .diag = d, .src = src, .p = src->text, .end = src->text + src->len,
                 .line = 1, .col = 1};
    map_init(&ps.scope, true);
    next(&ps);
    Defined top = {0};
    if (ps.tok == T_EOF) {
        error_at(&ps, ps.loc, "expected an operation, saw end of file");
        return NULL;
    }
    Op *op = ps.failed ? NULL : parse_op(&ps, &top);
    if (op && !ps.failed && ps.tok != T_EOF)
        error_at(&ps, ps.loc, "expected end of file after the top-level operation, saw %s",
                 describe(&ps));
    return ps.failed ? NULL : op;
}
