/* sema.c — checks an .attn program and lowers it to the attn level of the IR.
 *
 * Checking and lowering are one walk (as in cproc): every expression is
 * checked and turned into IR ops at once, or folded when it is a compile-time
 * constant. After an error the walk goes on with an "error" value that
 * silences follow-on errors, so one run reports every independent mistake.
 * The IR built alongside is dropped if any error was reported.
 *
 * The rules (doc/dsl.md, "Semantics"):
 *   names      inputs, locals and outputs of a block; consts; dimensions;
 *              hook parameters; no redefinitions
 *   shapes     symbolic dims are equal only when they are the same name;
 *              numpy broadcasting for elementwise ops; matmul [.., M, K] @ [.., K, N]
 *   dtypes     f16/bf16/f32 tensors, i32/i64 index tensors; f16 op f32 -> f32;
 *              f16 op bf16 -> f32; a number adopts the other operand's dtype
 *   attention  q, k, v are the first three inputs, rank 4 [B, H, N, D];
 *              query heads a multiple of kv heads; head dims are constants;
 *              outputs o [B, Hq, Nq, Dv] and optionally lse f32[B, Hq, Nq]
 *   hooks      mask(b, h, i, j) -> bool, score(s, b, h, i, j) -> number;
 *              pure and elementwise: no reductions, no q/k/v, tensors indexed
 */
#include "frontend/frontend.h"
#include "target/schedule.h"
#include "target/target.h"

#include <math.h>
#include <string.h>

/* ---- values seen by the checker ----------------------------------------- */

typedef enum ValKind { VAL_ERROR, VAL_INT, VAL_FLOAT, VAL_BOOL, VAL_IR } ValKind;

typedef struct Val {
    ValKind kind;
    int64_t i;     /* VAL_INT, VAL_BOOL */
    double f;      /* VAL_FLOAT */
    Value *v;      /* VAL_IR */
} Val;

static const Val ERROR_VAL = {VAL_ERROR, 0, 0, NULL};

typedef enum SymKind { SYM_INPUT, SYM_LOCAL, SYM_OUTPUT, SYM_HOOK_VAR } SymKind;

typedef struct Symbol {
    SymKind kind;
    const char *name;
    Loc loc;            /* where it was defined */
    Value *value;       /* NULL for an output not yet assigned */
    const Param *param; /* inputs and outputs */
    bool attention_operand;  /* q, k, v of an attention block */
    bool used;
} Symbol;

typedef struct ConstDef {
    Val val;
    Loc loc;
} ConstDef;

typedef enum HookKind { NO_HOOK, HOOK_MASK, HOOK_SCORE } HookKind;

typedef struct Sema {
    Arena *a;
    Diag *d;
    const Source *src;
    Op *module;
    Map consts;     /* name -> ConstDef */
    Map blocks;     /* name -> Op (builtin.func) */
    Map items;      /* name -> Item */
    /* the block being checked */
    Map syms;       /* name -> Symbol */
    PtrVec sym_list;
    Map dims;       /* dimension name -> (void *)1: names seen in the block's types */
    Block *insert;  /* where ops go; NULL in a constant context */
    const char *const_context;  /* what needs a constant, for the message */
    HookKind hook;
    Map hook_vars;  /* name -> Value* while lowering a hook */
    ScalarKind acc;
    int block_errors;   /* errors reported before this block */
    bool incomplete;    /* the block lost a statement to a syntax error */
    int depth;          /* of expression nesting */
    bool too_deep;      /* reported that once */
    const Map *overrides;  /* constants replaced from the command line */
} Sema;

static const char *hook_name(HookKind h) { return h == HOOK_MASK ? "mask" : "score"; }

/* ---- types in messages: the DSL's own spelling ---------------------------- */

static const char *type_text(Sema *s, const Type *t) {
    if (t->kind == TY_SCALAR) {
        if (t->elem == SK_INDEX || scalar_is_int(t->elem))
            return "an integer";
        if (t->elem == SK_I1)
            return "a bool";
        return scalar_name(t->elem);
    }
    StrBuf b;
    strbuf_open(&b);
    fprintf(b.f, "%s[", t->elem == SK_I1 ? "bool" : scalar_name(t->elem));
    for (int i = 0; i < t->rank; i++) {
        if (i)
            fputs(", ", b.f);
        print_dim(b.f, t->dims[i]);
    }
    fputc(']', b.f);
    return strbuf_finish(&b, s->a, NULL);
}

static const char *dim_text(Sema *s, Dim d) {
    return d.sym ? d.sym : arena_printf(s->a, "%lld", (long long)d.size);
}

static const char *val_text(Sema *s, Val v) {
    switch (v.kind) {
    case VAL_INT: return "an integer";
    case VAL_FLOAT: return "a number";
    case VAL_BOOL: return "a bool";
    case VAL_IR: return type_text(s, v.v->type);
    default: return "an error";
    }
}

/* ---- emitting ops -------------------------------------------------------- */

static Val ir_val(Value *v) { return (Val){VAL_IR, 0, 0, v}; }

static bool can_emit(Sema *s, Loc loc) {
    if (s->insert)
        return true;
    diag_error(s->d, s->src, loc, "%s must be a compile-time constant", s->const_context);
    return false;
}

static Op *emit_op(Sema *s, Loc loc, OpKind kind, int n, Value **operands, Type *result) {
    Op *op = op_create(s->a, kind, n, operands, result ? 1 : 0, &result, 0);
    op->loc = (SrcLoc){s->src->name, loc.line + s->src->line_offset, loc.col};
    block_append(s->insert, op);
    return op;
}

static Value *emit(Sema *s, Loc loc, OpKind kind, Type *result, Value *x, Value *y) {
    Value *ops[2] = {x, y};
    return emit_op(s, loc, kind, y ? 2 : x ? 1 : 0, ops, result)->results[0];
}

static Value *emit_constant(Sema *s, Loc loc, Val c, ScalarKind k) {
    Op *op = emit_op(s, loc, OP_CONSTANT, 0, NULL, type_scalar(s->a, k));
    Attr *value = k == SK_I1            ? attr_bool(s->a, c.i != 0)
                : scalar_is_float(k)    ? attr_float(s->a, c.kind == VAL_FLOAT ? c.f : (double)c.i)
                                        : attr_int(s->a, c.i);
    op_set_attr(s->a, op, "value", value);
    return op->results[0];
}

static Value *emit_cast(Sema *s, Loc loc, Value *v, ScalarKind to) {
    if (v->type->elem == to)
        return v;
    return emit(s, loc, OP_CAST, type_with_elem(s->a, v->type, to), v, NULL);
}

/* ---- shapes and dtypes ---------------------------------------------------- */

/* The dtype two operands meet in: PyTorch's promotion for the types we have. */
static ScalarKind promote(ScalarKind x, ScalarKind y) {
    if (x == y)
        return x;
    if (scalar_is_float(x) && scalar_is_float(y))
        return SK_F32;       /* f16+f32, bf16+f32, f16+bf16 */
    if (scalar_is_float(x))
        return x;
    if (scalar_is_float(y))
        return y;
    return SK_INDEX;         /* integers meet as index */
}

/* numpy broadcasting of two shapes; false if they do not broadcast. */
static bool broadcast(Sema *s, const Type *x, const Type *y, int *rank, Dim **dims) {
    int xr = x->kind == TY_SCALAR ? 0 : x->rank, yr = y->kind == TY_SCALAR ? 0 : y->rank;
    *rank = xr > yr ? xr : yr;
    *dims = NEW_ARRAY(s->a, Dim, *rank + 1);
    for (int i = 1; i <= *rank; i++) {
        Dim one = {NULL, 1};
        Dim dx = i <= xr ? x->dims[xr - i] : one, dy = i <= yr ? y->dims[yr - i] : one;
        bool x1 = !dx.sym && dx.size == 1, y1 = !dy.sym && dy.size == 1;
        if (dim_equal(dx, dy) || y1)
            (*dims)[*rank - i] = dx;
        else if (x1)
            (*dims)[*rank - i] = dy;
        else
            return false;
    }
    return true;
}

static Type *result_type(Sema *s, const Type *x, const Type *y, ScalarKind elem, Loc loc, bool *ok) {
    int rank;
    Dim *dims;
    *ok = true;
    if (!broadcast(s, x, y, &rank, &dims)) {
        diag_error(s->d, s->src, loc, "shapes %s and %s do not broadcast", type_text(s, x),
                   type_text(s, y));
        *ok = false;
        return NULL;
    }
    if (x->kind == TY_SCALAR && y->kind == TY_SCALAR)
        return type_scalar(s->a, elem);
    return type_shaped(s->a, TY_TENSOR, elem, rank, dims);
}

/* ---- constant folding ---------------------------------------------------- */

static double num(Val v) { return v.kind == VAL_FLOAT ? v.f : (double)v.i; }
static bool is_num_const(Val v) { return v.kind == VAL_INT || v.kind == VAL_FLOAT; }

static int64_t floor_div(int64_t x, int64_t y) {
    int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
}

/* Finite operands whose result is not (1e308 * 10): an error, not a silent inf. */
static Val finite_result(Sema *s, Val r, Loc loc) {
    if (isfinite(r.f))
        return r;
    diag_error(s->d, s->src, loc, "floating-point overflow in constant expression");
    return ERROR_VAL;
}

static Val fold_binary(Sema *s, BinOp op, Val x, Val y, Loc loc) {
    bool ints = x.kind == VAL_INT && y.kind == VAL_INT;
    double a = num(x), b = num(y);
    Val r = {VAL_FLOAT, 0, 0, NULL};
    switch (op) {
    case B_ADD: case B_SUB: case B_MUL:
        if (ints) {
            int64_t out;
            bool overflow = op == B_ADD ? __builtin_add_overflow(x.i, y.i, &out)
                          : op == B_SUB ? __builtin_sub_overflow(x.i, y.i, &out)
                                        : __builtin_mul_overflow(x.i, y.i, &out);
            if (overflow) {
                diag_error(s->d, s->src, loc, "integer overflow in constant expression");
                return ERROR_VAL;
            }
            return (Val){VAL_INT, out, 0, NULL};
        }
        r.f = op == B_ADD ? a + b : op == B_SUB ? a - b : a * b;
        return finite_result(s, r, loc);
    case B_DIV:
        if (b == 0) {
            diag_error(s->d, s->src, loc, "division by zero in constant expression");
            return ERROR_VAL;
        }
        r.f = a / b;
        return finite_result(s, r, loc);
    case B_FLOORDIV: case B_REM:
        if (!ints) {
            diag_error(s->d, s->src, loc, "'%s' needs integers, not %s and %s", op_spelling(op),
                       val_text(s, x), val_text(s, y));
            return ERROR_VAL;
        }
        if (y.i == 0) {
            diag_error(s->d, s->src, loc, "division by zero in constant expression");
            return ERROR_VAL;
        }
        r.kind = VAL_INT;
        if (y.i == -1) {   /* x // -1 = -x, which overflows for INT64_MIN; x % -1 = 0 */
            if (op == B_FLOORDIV && x.i == INT64_MIN) {
                diag_error(s->d, s->src, loc, "integer overflow in constant expression");
                return ERROR_VAL;
            }
            r.i = op == B_FLOORDIV ? -x.i : 0;
            return r;
        }
        r.i = op == B_FLOORDIV ? floor_div(x.i, y.i) : x.i - floor_div(x.i, y.i) * y.i;
        return r;
    case B_LT: r.i = a < b; break;
    case B_LE: r.i = a <= b; break;
    case B_GT: r.i = a > b; break;
    case B_GE: r.i = a >= b; break;
    case B_EQ: r.i = a == b; break;
    case B_NE: r.i = a != b; break;
    default: unreachable();
    }
    r.kind = VAL_BOOL;
    return r;
}

/* ---- names -------------------------------------------------------------- */

static Symbol *lookup_sym(Sema *s, const char *name) { return map_get(&s->syms, name); }

static Symbol *define_sym(Sema *s, SymKind kind, const char *name, Loc loc) {
    Symbol *old = lookup_sym(s, name);
    if (old) {
        diag_error(s->d, s->src, loc, "redefinition of '%s'", name);
        diag_note(s->d, s->src, old->loc, "'%s' was defined here", name);
        return NULL;
    }
    Symbol *sym = NEW(s->a, Symbol);
    sym->kind = kind;
    sym->name = name;
    sym->loc = loc;
    map_put(s->a, &s->syms, name, sym);
    vec_push(s->a, &s->sym_list, sym);
    return sym;
}

static Val lower_expr(Sema *s, const Expr *e);

static Val lower_name(Sema *s, const Expr *e) {
    if (s->hook) {
        Value *v = map_get(&s->hook_vars, e->name);
        if (v)
            return ir_val(v);
    }
    Symbol *sym = lookup_sym(s, e->name);
    if (sym) {
        sym->used = true;
        if (s->hook) {
            if (sym->attention_operand || sym->kind == SYM_OUTPUT) {
                diag_error(s->d, s->src, e->loc,
                           "a %s hook cannot read '%s': hooks see one score at a time",
                           hook_name(s->hook), e->name);
                return ERROR_VAL;
            }
            diag_error(s->d, s->src, e->loc, "tensor '%s' must be indexed inside a hook, as %s[...]",
                       e->name, e->name);
            return ERROR_VAL;
        }
        if (!s->insert) {
            diag_error(s->d, s->src, e->loc, "%s must be a compile-time constant; '%s' is a tensor",
                       s->const_context, e->name);
            return ERROR_VAL;
        }
        if (!sym->value) {
            diag_error(s->d, s->src, e->loc, "'%s' is used before it is assigned", e->name);
            return ERROR_VAL;
        }
        return ir_val(sym->value);
    }
    ConstDef *c = map_get(&s->consts, e->name);
    if (c)
        return c->val;
    if (map_get(&s->dims, e->name)) {
        if (!s->insert) {
            diag_error(s->d, s->src, e->loc, "%s must be a compile-time constant; '%s' is a symbolic dimension",
                       s->const_context, e->name);
            return ERROR_VAL;
        }
        if (!s->hook) {
            diag_error(s->d, s->src, e->loc,
                       "dimension '%s' can only be used as a value inside a hook", e->name);
            return ERROR_VAL;
        }
        Op *op = emit_op(s, e->loc, OP_DIM, 0, NULL, type_scalar(s->a, SK_INDEX));
        op_set_attr(s->a, op, "name", attr_str(s->a, e->name));
        return ir_val(op->results[0]);
    }
    diag_error(s->d, s->src, e->loc, "unknown name '%s'", e->name);
    return ERROR_VAL;
}

/* tensor[i, j, ...] inside a hook: one element of a side input. */
static Val lower_index(Sema *s, const Expr *e) {
    if (!s->hook) {
        diag_error(s->d, s->src, e->loc, "indexing is only allowed inside mask and score hooks");
        return ERROR_VAL;
    }
    Symbol *sym = lookup_sym(s, e->name);
    if (!sym || sym->kind != SYM_INPUT) {
        if (sym && sym->kind == SYM_OUTPUT)
            diag_error(s->d, s->src, e->name_loc, "a %s hook cannot read '%s': hooks see one score at a time",
                       hook_name(s->hook), e->name);
        else
            diag_error(s->d, s->src, e->name_loc, "unknown tensor '%s'", e->name);
        return ERROR_VAL;
    }
    sym->used = true;
    if (sym->attention_operand) {
        diag_error(s->d, s->src, e->name_loc, "a %s hook cannot read '%s': hooks see one score at a time",
                   hook_name(s->hook), e->name);
        return ERROR_VAL;
    }
    const Type *t = sym->value->type;
    if (e->nargs != t->rank) {
        diag_error(s->d, s->src, e->loc, "'%s' has %d dimension%s but is indexed with %d", e->name,
                   t->rank, t->rank == 1 ? "" : "s", e->nargs);
        diag_note(s->d, s->src, sym->loc, "'%s' is declared here as %s", e->name, type_text(s, t));
        return ERROR_VAL;
    }
    Value **operands = NEW_ARRAY(s->a, Value *, e->nargs + 1);
    operands[0] = sym->value;
    bool ok = true;
    for (int i = 0; i < e->nargs; i++) {
        Val x = lower_expr(s, e->args[i]);
        if (x.kind == VAL_INT) {
            operands[i + 1] = emit_constant(s, e->args[i]->loc, x, SK_INDEX);
        } else if (x.kind == VAL_IR && x.v->type->kind == TY_SCALAR && scalar_is_int(x.v->type->elem)) {
            operands[i + 1] = emit_cast(s, e->args[i]->loc, x.v, SK_INDEX);
        } else {
            if (x.kind != VAL_ERROR)
                diag_error(s->d, s->src, e->args[i]->loc, "an index must be an integer, not %s",
                           val_text(s, x));
            ok = false;
        }
    }
    if (!ok)
        return ERROR_VAL;
    Op *op = emit_op(s, e->loc, OP_EXTRACT, e->nargs + 1, operands, type_scalar(s->a, t->elem));
    Value *v = op->results[0];
    /* Hooks compute in f32 (floats) and index (integers). */
    if (scalar_is_float(t->elem))
        v = emit_cast(s, e->loc, v, SK_F32);
    else if (scalar_is_int(t->elem))
        v = emit_cast(s, e->loc, v, SK_INDEX);
    return ir_val(v);
}

/* ---- operators ---------------------------------------------------------- */

/* Turns a constant into a value of the element type `k` (for mixing with IR). */
static Value *materialize(Sema *s, Loc loc, Val c, ScalarKind k) {
    if (c.kind == VAL_IR)
        return c.v;
    return emit_constant(s, loc, c, k);
}

static ScalarKind val_elem(Val v) {
    switch (v.kind) {
    case VAL_INT: return SK_INDEX;
    case VAL_FLOAT: return SK_F32;
    case VAL_BOOL: return SK_I1;
    case VAL_IR: return v.v->type->elem;
    default: return SK_NONE;
    }
}

/* The element type two operands meet in: a number adopts the other side's
 * type (a float number turns an integer side into f32); IR values promote. */
static ScalarKind meet(Val x, Val y) {
    if (x.kind != VAL_IR)
        return val_elem(y) == SK_INDEX && x.kind == VAL_FLOAT ? SK_F32 : val_elem(y);
    if (y.kind != VAL_IR)
        return val_elem(x) == SK_INDEX && y.kind == VAL_FLOAT ? SK_F32 : val_elem(x);
    return promote(val_elem(x), val_elem(y));
}

static bool check_not_bool(Sema *s, Val v, const Expr *e, const char *what) {
    if (val_elem(v) == SK_I1) {
        diag_error(s->d, s->src, e->loc, "%s needs numbers, not %s", what, val_text(s, v));
        return false;
    }
    return true;
}

/* Emits a binary elementwise op over x and y converted to `k`, its result
 * of element type `elem` and the operands' broadcast shape; NULL (reported)
 * if the shapes do not broadcast. */
static Value *emit_binary(Sema *s, const Expr *e, OpKind kind, Val x, const Expr *ex, Val y,
                          const Expr *ey, ScalarKind k, ScalarKind elem) {
    Value *vx = emit_cast(s, ex->loc, materialize(s, ex->loc, x, k), k);
    Value *vy = emit_cast(s, ey->loc, materialize(s, ey->loc, y, k), k);
    bool ok;
    Type *rt = result_type(s, vx->type, vy->type, elem, e->loc, &ok);
    return ok ? emit(s, e->loc, kind, rt, vx, vy) : NULL;
}

static Val lower_arith(Sema *s, const Expr *e, BinOp op, Val x, Val y) {
    const Expr *ex = e->args[0], *ey = e->args[1];
    if (!check_not_bool(s, x, ex, arena_printf(s->a, "'%s'", op_spelling(op))) ||
        !check_not_bool(s, y, ey, arena_printf(s->a, "'%s'", op_spelling(op))))
        return ERROR_VAL;
    if (is_num_const(x) && is_num_const(y))
        return fold_binary(s, op, x, y, e->loc);
    if (!can_emit(s, e->loc))
        return ERROR_VAL;
    ScalarKind k = meet(x, y);
    if (op == B_DIV && !scalar_is_float(k))
        k = SK_F32;   /* '/' is true division; '//' is integer division */
    if ((op == B_FLOORDIV || op == B_REM) && !scalar_is_int(k)) {
        diag_error(s->d, s->src, e->loc, "'%s' needs integers, not %s and %s", op_spelling(op),
                   val_text(s, x), val_text(s, y));
        return ERROR_VAL;
    }
    if (s->hook == NO_HOOK && (!scalar_is_float(k))) {
        diag_error(s->d, s->src, e->loc, "'%s' needs float tensors, not %s and %s", op_spelling(op),
                   val_text(s, x), val_text(s, y));
        return ERROR_VAL;
    }
    static const OpKind kinds[] = {[B_ADD] = OP_ADD, [B_SUB] = OP_SUB, [B_MUL] = OP_MUL,
                                   [B_DIV] = OP_DIV, [B_FLOORDIV] = OP_FLOORDIV, [B_REM] = OP_REM};
    Value *r = emit_binary(s, e, kinds[op], x, ex, y, ey, k, k);
    return r ? ir_val(r) : ERROR_VAL;
}

static Val lower_compare(Sema *s, const Expr *e, BinOp op, Val x, Val y) {
    if (!check_not_bool(s, x, e->args[0], "a comparison") ||
        !check_not_bool(s, y, e->args[1], "a comparison"))
        return ERROR_VAL;
    if (is_num_const(x) && is_num_const(y))
        return fold_binary(s, op, x, y, e->loc);
    if (!can_emit(s, e->loc))
        return ERROR_VAL;
    Value *r = emit_binary(s, e, OP_CMP, x, e->args[0], y, e->args[1], meet(x, y), SK_I1);
    if (!r)
        return ERROR_VAL;
    static const char *const preds[] = {[B_LT] = "lt", [B_LE] = "le", [B_GT] = "gt",
                                        [B_GE] = "ge", [B_EQ] = "eq", [B_NE] = "ne"};
    op_set_attr(s->a, r->def, "pred", attr_str(s->a, preds[op]));
    return ir_val(r);
}

static bool need_bool(Sema *s, Val v, const Expr *e, const char *what) {
    if (v.kind == VAL_ERROR)
        return false;
    if (val_elem(v) != SK_I1) {
        diag_error(s->d, s->src, e->loc, "%s needs a bool, not %s", what, val_text(s, v));
        return false;
    }
    return true;
}

static Val lower_logical(Sema *s, const Expr *e, BinOp op, Val x, Val y) {
    const char *what = arena_printf(s->a, "'%s'", op_spelling(op));
    bool okx = need_bool(s, x, e->args[0], what), oky = need_bool(s, y, e->args[1], what);
    if (!okx || !oky)
        return ERROR_VAL;
    if (x.kind == VAL_BOOL && y.kind == VAL_BOOL)
        return (Val){VAL_BOOL, op == B_AND ? (x.i && y.i) : (x.i || y.i), 0, NULL};
    if (!can_emit(s, e->loc))
        return ERROR_VAL;
    Value *r = emit_binary(s, e, op == B_AND ? OP_AND : OP_OR, x, e->args[0], y, e->args[1], SK_I1, SK_I1);
    return r ? ir_val(r) : ERROR_VAL;
}

static Val lower_matmul(Sema *s, const Expr *e, Val x, Val y) {
    if (s->hook) {
        diag_error(s->d, s->src, e->loc, "'@' is a reduction and cannot appear in a %s hook: "
                   "a hook sees one score at a time", hook_name(s->hook));
        return ERROR_VAL;
    }
    if (!can_emit(s, e->loc))
        return ERROR_VAL;
    if (x.kind != VAL_IR || y.kind != VAL_IR || x.v->type->kind != TY_TENSOR ||
        y.v->type->kind != TY_TENSOR || x.v->type->rank < 2 || y.v->type->rank < 2) {
        diag_error(s->d, s->src, e->loc, "'@' needs two tensors of rank 2 or more, not %s and %s",
                   val_text(s, x), val_text(s, y));
        return ERROR_VAL;
    }
    const Type *a = x.v->type, *b = y.v->type;
    if (a->elem != b->elem || !scalar_is_float(a->elem)) {
        diag_error(s->d, s->src, e->loc, "'@' needs operands of one float dtype, not %s and %s",
                   scalar_name(a->elem), scalar_name(b->elem));
        return ERROR_VAL;
    }
    Dim k1 = a->dims[a->rank - 1], k2 = b->dims[b->rank - 2];
    if (!dim_equal(k1, k2)) {
        diag_error(s->d, s->src, e->loc, "'@' contracts %s with %s: inner dimensions %s and %s differ",
                   type_text(s, a), type_text(s, b), dim_text(s, k1), dim_text(s, k2));
        return ERROR_VAL;
    }
    if (s->acc == SK_F16 && a->elem != SK_F16) {
        diag_error(s->d, s->src, e->loc, "an f16 accumulator needs f16 operands, not %s",
                   scalar_name(a->elem));
        return ERROR_VAL;
    }
    Type ba = *a, bb = *b;  /* batch dims */
    ba.rank -= 2;
    bb.rank -= 2;
    int rank;
    Dim *dims;
    if (!broadcast(s, &ba, &bb, &rank, &dims)) {
        diag_error(s->d, s->src, e->loc, "batch dimensions of %s and %s do not broadcast",
                   type_text(s, a), type_text(s, b));
        return ERROR_VAL;
    }
    Dim *rd = NEW_ARRAY(s->a, Dim, rank + 2);
    memcpy(rd, dims, sizeof(Dim) * (size_t)rank);
    rd[rank] = a->dims[a->rank - 2];
    rd[rank + 1] = b->dims[b->rank - 1];
    Value *ops[2] = {x.v, y.v};
    Op *mm = emit_op(s, e->loc, OP_MATMUL, 2, ops, type_shaped(s->a, TY_TENSOR, a->elem, rank + 2, rd));
    op_set_attr(s->a, mm, "acc", attr_type(s->a, type_scalar(s->a, s->acc)));
    return ir_val(mm->results[0]);
}

static Val lower_binary_op(Sema *s, const Expr *e, Val x, Val y) {
    if (x.kind == VAL_ERROR || y.kind == VAL_ERROR)
        return ERROR_VAL;
    switch (e->op) {
    case B_ADD: case B_SUB: case B_MUL: case B_DIV: case B_FLOORDIV: case B_REM:
        return lower_arith(s, e, e->op, x, y);
    case B_MATMUL: return lower_matmul(s, e, x, y);
    case B_LT: case B_LE: case B_GT: case B_GE: case B_EQ: case B_NE:
        return lower_compare(s, e, e->op, x, y);
    case B_AND: case B_OR: return lower_logical(s, e, e->op, x, y);
    default: unreachable();
    }
}

/* A chain of left-associative operators (a + b + c + ...: the parser nests
 * it on the left) is lowered in a loop, not by recursion, so a flat
 * expression of any length is fine; only real nesting (parentheses on the
 * right, calls) counts against lower_expr's depth limit. */
static Val lower_binary(Sema *s, const Expr *e) {
    int n = 0;
    for (const Expr *x = e; x->kind == E_BINARY; x = x->args[0])
        n++;
    const Expr **chain = NEW_ARRAY(s->a, const Expr *, n);
    int i = n;
    for (const Expr *x = e; x->kind == E_BINARY; x = x->args[0])
        chain[--i] = x;   /* innermost first */
    Val acc = lower_expr(s, chain[0]->args[0]);
    for (i = 0; i < n; i++)
        acc = lower_binary_op(s, chain[i], acc, lower_expr(s, chain[i]->args[1]));
    return acc;
}

static Val lower_unary(Sema *s, const Expr *e) {
    Val x = lower_expr(s, e->args[0]);
    if (x.kind == VAL_ERROR)
        return ERROR_VAL;
    if (e->op == U_NOT) {
        if (!need_bool(s, x, e->args[0], "'!'"))
            return ERROR_VAL;
        if (x.kind == VAL_BOOL)
            return (Val){VAL_BOOL, !x.i, 0, NULL};
        return ir_val(emit(s, e->loc, OP_NOT, x.v->type, x.v, NULL));
    }
    if (!check_not_bool(s, x, e->args[0], "'-'"))
        return ERROR_VAL;
    if (x.kind == VAL_INT) {
        if (x.i == INT64_MIN) {
            diag_error(s->d, s->src, e->loc, "integer overflow in constant expression");
            return ERROR_VAL;
        }
        return (Val){VAL_INT, -x.i, 0, NULL};
    }
    if (x.kind == VAL_FLOAT)
        return (Val){VAL_FLOAT, 0, -x.f, NULL};
    return ir_val(emit(s, e->loc, OP_NEG, x.v->type, x.v, NULL));
}

static Val lower_cond(Sema *s, const Expr *e) {
    Val c = lower_expr(s, e->args[0]);
    Val x = lower_expr(s, e->args[1]);
    Val y = lower_expr(s, e->args[2]);
    if (c.kind == VAL_ERROR || x.kind == VAL_ERROR || y.kind == VAL_ERROR)
        return ERROR_VAL;
    if (!need_bool(s, c, e->args[0], "the condition of '?:'"))
        return ERROR_VAL;
    if (c.kind == VAL_BOOL)
        return c.i ? x : y;
    bool xb = val_elem(x) == SK_I1, yb = val_elem(y) == SK_I1;
    if (xb != yb) {
        diag_error(s->d, s->src, e->loc, "the branches of '?:' differ: %s and %s", val_text(s, x),
                   val_text(s, y));
        return ERROR_VAL;
    }
    ScalarKind k = xb ? SK_I1 : meet(x, y);
    Value *vx = emit_cast(s, e->loc, materialize(s, e->args[1]->loc, x, k), k);
    Value *vy = emit_cast(s, e->loc, materialize(s, e->args[2]->loc, y, k), k);
    bool ok;
    Type *t = result_type(s, vx->type, vy->type, k, e->loc, &ok);
    if (!ok)
        return ERROR_VAL;
    t = result_type(s, c.v->type, t, k, e->loc, &ok);
    if (!ok)
        return ERROR_VAL;
    Value *ops[3] = {c.v, vx, vy};
    return ir_val(emit_op(s, e->loc, OP_SELECT, 3, ops, t)->results[0]);
}

/* ---- function calls ------------------------------------------------------ */

typedef enum FnKind { FN_MATH, FN_MINMAX, FN_REDUCE, FN_SOFTMAX, FN_TRANSPOSE, FN_CAST } FnKind;

typedef struct Builtin {
    const char *name;
    FnKind kind;
    int nargs;
    OpKind op;          /* FN_MATH, FN_MINMAX */
    const char *reduce; /* FN_REDUCE */
    ScalarKind to;      /* FN_CAST */
    double (*fold)(double);
} Builtin;

static double fold_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double fold_relu(double x) { return x > 0 ? x : 0; }
static double fold_rsqrt(double x) { return 1 / sqrt(x); }

static const Builtin builtins[] = {
    {"exp", FN_MATH, 1, OP_EXP, NULL, SK_NONE, exp},
    {"exp2", FN_MATH, 1, OP_EXP2, NULL, SK_NONE, exp2},
    {"log", FN_MATH, 1, OP_LOG, NULL, SK_NONE, log},
    {"sqrt", FN_MATH, 1, OP_SQRT, NULL, SK_NONE, sqrt},
    {"rsqrt", FN_MATH, 1, OP_RSQRT, NULL, SK_NONE, fold_rsqrt},
    {"tanh", FN_MATH, 1, OP_TANH, NULL, SK_NONE, tanh},
    {"abs", FN_MATH, 1, OP_ABS, NULL, SK_NONE, fabs},
    {"sigmoid", FN_MATH, 1, OP_SIGMOID, NULL, SK_NONE, fold_sigmoid},
    {"silu", FN_MATH, 1, OP_SILU, NULL, SK_NONE, NULL},
    {"gelu", FN_MATH, 1, OP_GELU, NULL, SK_NONE, NULL},
    {"gelu_tanh", FN_MATH, 1, OP_GELU_TANH, NULL, SK_NONE, NULL},
    {"relu", FN_MATH, 1, OP_RELU, NULL, SK_NONE, fold_relu},
    {"min", FN_MINMAX, 2, OP_MIN, NULL, SK_NONE, NULL},
    {"max", FN_MINMAX, 2, OP_MAX, NULL, SK_NONE, NULL},
    {"sum", FN_REDUCE, 1, OP__COUNT, "sum", SK_NONE, NULL},
    {"mean", FN_REDUCE, 1, OP__COUNT, "mean", SK_NONE, NULL},
    {"amax", FN_REDUCE, 1, OP__COUNT, "max", SK_NONE, NULL},
    {"logsumexp", FN_REDUCE, 1, OP__COUNT, "logsumexp", SK_NONE, NULL},
    {"softmax", FN_SOFTMAX, 1, OP__COUNT, NULL, SK_NONE, NULL},
    {"transpose", FN_TRANSPOSE, 1, OP__COUNT, NULL, SK_NONE, NULL},
    {"f16", FN_CAST, 1, OP__COUNT, NULL, SK_F16, NULL},
    {"bf16", FN_CAST, 1, OP__COUNT, NULL, SK_BF16, NULL},
    {"f32", FN_CAST, 1, OP__COUNT, NULL, SK_F32, NULL},
};

static const Builtin *find_builtin(const char *name) {
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (strcmp(builtins[i].name, name) == 0)
            return &builtins[i];
    return NULL;
}

/* A float operand for a math function: numbers and integers become f32. */
static Value *float_operand(Sema *s, const Expr *e, Val x) {
    Value *v = materialize(s, e->loc, x, SK_F32);
    return scalar_is_float(v->type->elem) ? v : emit_cast(s, e->loc, v, SK_F32);
}

static Val lower_call(Sema *s, const Expr *e) {
    const Builtin *fn = find_builtin(e->name);
    if (!fn) {
        diag_error(s->d, s->src, e->name_loc, "unknown function '%s'", e->name);
        return ERROR_VAL;
    }
    if (e->nargs != fn->nargs) {
        diag_error(s->d, s->src, e->loc, "'%s' takes %d argument%s, not %d", fn->name, fn->nargs,
                   fn->nargs == 1 ? "" : "s", e->nargs);
        return ERROR_VAL;
    }
    bool elementwise = fn->kind == FN_MATH || fn->kind == FN_MINMAX || fn->kind == FN_CAST;
    if (s->hook && !elementwise) {
        diag_error(s->d, s->src, e->name_loc, "'%s' %s and cannot appear in a %s hook: "
                   "a hook sees one score at a time", fn->name,
                   fn->kind == FN_TRANSPOSE ? "moves data across scores" : "is a reduction",
                   hook_name(s->hook));
        return ERROR_VAL;
    }
    Val x = lower_expr(s, e->args[0]);
    Val y = fn->nargs > 1 ? lower_expr(s, e->args[1]) : x;
    if (x.kind == VAL_ERROR || y.kind == VAL_ERROR)
        return ERROR_VAL;
    if (!check_not_bool(s, x, e->args[0], arena_printf(s->a, "'%s'", fn->name)) ||
        !check_not_bool(s, y, e->args[fn->nargs - 1], arena_printf(s->a, "'%s'", fn->name)))
        return ERROR_VAL;
    switch (fn->kind) {
    case FN_MATH:
        if (is_num_const(x) && fn->fold) {
            double r = fn->fold(num(x));
            if (!isfinite(r)) {
                diag_error(s->d, s->src, e->loc, "'%s' of %g is not a finite number", fn->name, num(x));
                return ERROR_VAL;
            }
            if (fn->op == OP_ABS && x.kind == VAL_INT) {
                if (x.i == INT64_MIN) {   /* |INT64_MIN| is not an int64 */
                    diag_error(s->d, s->src, e->loc, "integer overflow in constant expression");
                    return ERROR_VAL;
                }
                return (Val){VAL_INT, x.i < 0 ? -x.i : x.i, 0, NULL};
            }
            return (Val){VAL_FLOAT, 0, r, NULL};
        }
        if (!can_emit(s, e->loc))
            return ERROR_VAL;
        if (fn->op == OP_ABS && x.kind == VAL_IR && scalar_is_int(x.v->type->elem))
            return ir_val(emit(s, e->loc, OP_ABS, x.v->type, x.v, NULL));
        {
            Value *v = float_operand(s, e->args[0], x);
            return ir_val(emit(s, e->loc, fn->op, v->type, v, NULL));
        }
    case FN_MINMAX: {
        if (is_num_const(x) && is_num_const(y)) {
            bool less = num(x) < num(y);
            return (fn->op == OP_MIN) == less ? x : y;
        }
        if (!can_emit(s, e->loc))
            return ERROR_VAL;
        ScalarKind k = meet(x, y);
        Value *r = emit_binary(s, e, fn->op, x, e->args[0], y, e->args[1], k, k);
        return r ? ir_val(r) : ERROR_VAL;
    }
    case FN_CAST:
        if (!can_emit(s, e->loc))
            return ERROR_VAL;
        if (s->hook) {
            /* Rounds through the dtype; hooks keep computing in f32. */
            Value *v = float_operand(s, e->args[0], x);
            return ir_val(emit_cast(s, e->loc, emit_cast(s, e->loc, v, fn->to), SK_F32));
        }
        if (x.kind != VAL_IR) {
            diag_error(s->d, s->src, e->loc, "'%s' converts tensors; write the number directly", fn->name);
            return ERROR_VAL;
        }
        return ir_val(emit(s, e->loc, OP_CAST, type_with_elem(s->a, x.v->type, fn->to), x.v, NULL));
    default:
        break;
    }
    /* Whole-tensor functions: reductions, softmax, transpose. */
    if (!can_emit(s, e->loc))
        return ERROR_VAL;
    if (x.kind != VAL_IR || x.v->type->kind != TY_TENSOR || x.v->type->rank < 1 ||
        !scalar_is_float(x.v->type->elem) || (fn->kind == FN_TRANSPOSE && x.v->type->rank < 2)) {
        diag_error(s->d, s->src, e->args[0]->loc, "'%s' needs a float tensor%s, not %s", fn->name,
                   fn->kind == FN_TRANSPOSE ? " of rank 2 or more" : "", val_text(s, x));
        return ERROR_VAL;
    }
    const Type *t = x.v->type;
    if (fn->kind == FN_SOFTMAX)
        return ir_val(emit(s, e->loc, OP_SOFTMAX, x.v->type, x.v, NULL));
    if (fn->kind == FN_REDUCE) {
        /* Reduces the last axis and keeps it as 1, so the result broadcasts back. */
        Type *rt = type_shaped(s->a, TY_TENSOR, t->elem, t->rank, t->dims);
        rt->dims[t->rank - 1] = (Dim){NULL, 1};
        Value *ops[1] = {x.v};
        Op *op = emit_op(s, e->loc, OP_REDUCE, 1, ops, rt);
        op_set_attr(s->a, op, "kind", attr_str(s->a, fn->reduce));
        return ir_val(op->results[0]);
    }
    /* transpose: swaps the last two dimensions */
    Type *rt = type_shaped(s->a, TY_TENSOR, t->elem, t->rank, t->dims);
    rt->dims[t->rank - 2] = t->dims[t->rank - 1];
    rt->dims[t->rank - 1] = t->dims[t->rank - 2];
    Attr **perm = NEW_ARRAY(s->a, Attr *, t->rank);
    for (int i = 0; i < t->rank; i++)
        perm[i] = attr_int(s->a, i < t->rank - 2 ? i : i == t->rank - 2 ? t->rank - 1 : t->rank - 2);
    Value *ops[1] = {x.v};
    Op *op = emit_op(s, e->loc, OP_TRANSPOSE, 1, ops, rt);
    op_set_attr(s->a, op, "perm", attr_array(s->a, t->rank, perm));
    return ir_val(op->results[0]);
}

static Val lower_expr_at_depth(Sema *s, const Expr *e);

/* Bounds recursion: no real expression nests 200 deep, and a fuzzer's may
 * (a flat chain a + b + ... does not nest: lower_binary). */
static Val lower_expr(Sema *s, const Expr *e) {
    if (s->depth >= 200) {
        if (!s->too_deep)
            diag_error(s->d, s->src, e->loc,
                       "expression is nested too deeply (more than 200 levels of parentheses or calls)");
        s->too_deep = true;
        return ERROR_VAL;
    }
    s->depth++;
    Val v = lower_expr_at_depth(s, e);
    s->depth--;
    return v;
}

static Val lower_expr_at_depth(Sema *s, const Expr *e) {
    switch (e->kind) {
    case E_INT: return (Val){VAL_INT, e->ival, 0, NULL};
    case E_FLOAT: return (Val){VAL_FLOAT, 0, e->fval, NULL};
    case E_NAME: return lower_name(s, e);
    case E_INDEX: return lower_index(s, e);
    case E_CALL: return lower_call(s, e);
    case E_UNARY: return lower_unary(s, e);
    case E_BINARY: return lower_binary(s, e);
    case E_COND: return lower_cond(s, e);
    }
    unreachable();
}

/* Evaluates e where only a compile-time constant makes sense. */
static Val const_expr(Sema *s, const Expr *e, const char *context) {
    Block *saved = s->insert;
    const char *saved_ctx = s->const_context;
    s->insert = NULL;
    s->const_context = context;
    Val v = lower_expr(s, e);
    s->insert = saved;
    s->const_context = saved_ctx;
    return v;
}

/* ---- declarations: types and parameters ----------------------------------- */

static Type *resolve_type(Sema *s, const TypeSpec *ts) {
    ScalarKind k = scalar_from_name(ts->dtype);
    bool ok = true;
    if (k == SK_NONE || k == SK_INDEX || k == SK_I1 || k == SK_F64) {
        diag_error(s->d, s->src, ts->dtype_loc, "unknown dtype '%s'", ts->dtype);
        diag_note(s->d, s->src, ts->dtype_loc, "dtypes are f16, bf16, f32, i32 and i64");
        ok = false;
    } else if (k == SK_F8E4M3 || k == SK_F8E5M2) {
        diag_error(s->d, s->src, ts->dtype_loc, "dtype '%s' is reserved for a later version of attnc",
                   ts->dtype);
        ok = false;
    }
    Dim *dims = NEW_ARRAY(s->a, Dim, ts->rank + 1);
    for (int i = 0; i < ts->rank; i++) {
        const char *name = ts->dim_names[i];
        if (!name) {
            if (ts->dim_sizes[i] <= 0) {
                diag_error(s->d, s->src, ts->dim_locs[i], "a dimension must be positive, not %lld",
                           (long long)ts->dim_sizes[i]);
                ok = false;
            }
            dims[i].size = ts->dim_sizes[i];
            continue;
        }
        ConstDef *c = map_get(&s->consts, name);
        if (!c) {
            dims[i].sym = name;   /* symbolic: bound at run time */
            map_put(s->a, &s->dims, name, (void *)1);
        } else if (c->val.kind != VAL_INT || c->val.i <= 0) {
            diag_error(s->d, s->src, ts->dim_locs[i],
                       "constant '%s' is used as a dimension but is not a positive integer", name);
            if (c->val.kind == VAL_FLOAT)
                diag_note(s->d, s->src, c->loc, "'%s' is the number %g: '/' divides exactly, "
                          "'//' gives an integer", name, c->val.f);
            else
                diag_note(s->d, s->src, c->loc, "'%s' is defined here", name);
            ok = false;
        } else {
            dims[i].size = c->val.i;
        }
    }
    return ok ? type_shaped(s->a, TY_TENSOR, k, ts->rank, dims) : NULL;
}

/* Declares a block's inputs (as block arguments) and outputs. */
static bool declare_params(Sema *s, const Item *it, Block *body) {
    bool ok = true;
    for (int i = 0; i < it->ninputs + it->noutputs; i++) {
        bool input = i < it->ninputs;
        const Param *p = input ? &it->inputs[i] : &it->outputs[i - it->ninputs];
        Type *t = resolve_type(s, &p->type);
        Symbol *sym = define_sym(s, input ? SYM_INPUT : SYM_OUTPUT, p->name, p->loc);
        if (!t || !sym) {
            ok = false;
            continue;
        }
        sym->param = p;
        if (input)
            sym->value = block_add_arg(s->a, body, t, p->name);
    }
    return ok;
}

static Type *declared_type(Sema *s, const Param *p) {
    Symbol *sym = lookup_sym(s, p->name);
    return sym && sym->value ? sym->value->type : resolve_type(s, &p->type);
}

/* ---- statements common to both blocks ------------------------------------- */

/* acc f32; / acc f16; — at most once, before it matters. */
static void check_acc(Sema *s, const Item *it) {
    const Stmt *seen = NULL;
    s->acc = SK_F32;
    for (int i = 0; i < it->nstmts; i++) {
        const Stmt *st = it->stmts[i];
        if (st->kind != S_ACC)
            continue;
        if (seen) {
            diag_error(s->d, s->src, st->loc, "the accumulator precision is set twice");
            diag_note(s->d, s->src, seen->loc, "first set here");
            continue;
        }
        seen = st;
        ScalarKind k = scalar_from_name(st->name);
        if (k != SK_F32 && k != SK_F16)
            diag_error(s->d, s->src, st->name_loc, "the accumulator must be f32 or f16, not '%s'", st->name);
        else
            s->acc = k;
    }
}

static void warn_unused(Sema *s) {
    if (s->d->errors > s->block_errors || s->incomplete)
        return;   /* an error may have hidden the use */
    for (int i = 0; i < s->sym_list.len; i++) {
        Symbol *sym = s->sym_list.items[i];
        if (sym->kind == SYM_INPUT && !sym->used && !sym->attention_operand)
            diag_warning(s->d, s->src, sym->loc, "input '%s' is never used", sym->name);
        if (sym->kind == SYM_LOCAL && !sym->used)
            diag_warning(s->d, s->src, sym->loc, "'%s' is assigned but never used", sym->name);
    }
}

static void begin_block(Sema *s) {
    s->block_errors = s->d->errors;
    s->incomplete = false;
    map_init(&s->syms, true);
    map_init(&s->dims, true);
    s->sym_list = (PtrVec){0};
    s->hook = NO_HOOK;
}

static Op *new_func(Sema *s, const Item *it, const char *kind) {
    Op *f = op_create(s->a, OP_FUNC, 0, NULL, 0, NULL, 1);
    f->loc = (SrcLoc){s->src->name, it->loc.line + s->src->line_offset, it->loc.col};
    region_add_block(s->a, &f->regions[0]);
    op_set_attr(s->a, f, "sym_name", attr_str(s->a, it->name));
    op_set_attr(s->a, f, "kind", attr_str(s->a, kind));
    Attr **in = NEW_ARRAY(s->a, Attr *, it->ninputs + 1), **out = NEW_ARRAY(s->a, Attr *, it->noutputs + 1);
    for (int i = 0; i < it->ninputs; i++)
        in[i] = attr_str(s->a, it->inputs[i].name);
    for (int i = 0; i < it->noutputs; i++)
        out[i] = attr_str(s->a, it->outputs[i].name);
    op_set_attr(s->a, f, "inputs", attr_array(s->a, it->ninputs, in));
    op_set_attr(s->a, f, "outputs", attr_array(s->a, it->noutputs, out));
    return f;
}

static void emit_return(Sema *s, const Item *it, Value **values, int n) {
    Op *ret = op_create(s->a, OP_RETURN, n, values, 0, NULL, 0);
    ret->loc = (SrcLoc){s->src->name, it->loc.line + s->src->line_offset, it->loc.col};
    block_append(s->insert, ret);
}

/* ---- mlp blocks ---------------------------------------------------------- */

static void check_output_type(Sema *s, const Stmt *st, Symbol *out, Value *v) {
    Type *want = declared_type(s, out->param);
    if (want && !type_equal(want, v->type)) {
        diag_error(s->d, s->src, st->value->loc, "'%s' is declared %s but assigned %s", out->name,
                   type_text(s, want), type_text(s, v->type));
        diag_note(s->d, s->src, out->loc, "'%s' is declared here", out->name);
    }
}

static void lower_mlp(Sema *s, const Item *it, Op *func) {
    Block *body = op_body(func);
    if (!declare_params(s, it, body))
        return;
    check_acc(s, it);
    s->insert = body;
    bool incomplete = false;   /* a statement was lost to a syntax error */
    for (int i = 0; i < it->nstmts; i++) {
        const Stmt *st = it->stmts[i];
        if (st->kind == S_ACC)
            continue;
        if (st->kind == S_ERROR) {
            incomplete = true;
            continue;
        }
        if (st->kind != S_ASSIGN) {
            diag_error(s->d, s->src, st->name_loc, "'%s' is only allowed in an attention block",
                       st->kind == S_SCALE ? "scale" : st->name);
            continue;
        }
        Val v = lower_expr(s, st->value);
        Symbol *sym = lookup_sym(s, st->name);
        if (sym && sym->kind == SYM_INPUT) {
            diag_error(s->d, s->src, st->name_loc, "cannot assign to input '%s'", st->name);
            diag_note(s->d, s->src, sym->loc, "'%s' is declared here", st->name);
            continue;
        }
        if (sym && sym->value) {
            diag_error(s->d, s->src, st->name_loc, "'%s' is assigned twice", st->name);
            diag_note(s->d, s->src, sym->loc,
                      "'%s' is %s here", st->name, sym->kind == SYM_LOCAL ? "first assigned" : "declared");
            continue;
        }
        if (v.kind == VAL_ERROR) {
            if (sym)
                sym->used = true;   /* assigned, if wrongly: no "never assigned" too */
            continue;
        }
        if (v.kind != VAL_IR || v.v->type->kind != TY_TENSOR) {
            if (sym)
                sym->used = true;
            diag_error(s->d, s->src, st->value->loc, "'%s' must be a tensor, not %s", st->name,
                       val_text(s, v));
            continue;
        }
        if (!sym)
            sym = define_sym(s, SYM_LOCAL, st->name, st->name_loc);
        else
            check_output_type(s, st, sym, v.v);
        /* The value takes the statement's name in the printed IR. Values
         * that already carry a name (an input assigned to an output) get a
         * copy through a no-op cast so both names survive. */
        if (v.v->name)
            v.v = emit(s, st->loc, OP_CAST, v.v->type, v.v, NULL);
        v.v->name = st->name;
        sym->value = v.v;
    }
    Value **outs = NEW_ARRAY(s->a, Value *, it->noutputs + 1);
    bool complete = true;
    for (int i = 0; i < it->noutputs; i++) {
        Symbol *sym = lookup_sym(s, it->outputs[i].name);
        if (!sym || sym->kind != SYM_OUTPUT)
            complete = false;
        else if (!sym->value) {
            if (!sym->used && !incomplete)
                diag_error(s->d, s->src, it->outputs[i].loc, "output '%s' is never assigned", sym->name);
            complete = false;
        } else {
            outs[i] = sym->value;
        }
    }
    s->incomplete = incomplete;
    if (it->noutputs == 0)
        diag_error(s->d, s->src, it->name_loc, "block '%s' has no outputs", it->name);
    if (complete)
        emit_return(s, it, outs, it->noutputs);
    warn_unused(s);
}

/* ---- attention blocks ---------------------------------------------------- */

typedef struct AttnShape {
    Symbol *q, *k, *v;
    Dim batch, hq, hkv, nq, nk, d, dv;
    ScalarKind dtype;
} AttnShape;

static bool same_dim(Sema *s, Dim want, Dim got, const char *what, Symbol *who, Symbol *ref, int axis) {
    if (dim_equal(want, got))
        return true;
    diag_error(s->d, s->src, who->param->type.dim_locs[axis], "%s of '%s' (%s) differs from '%s' (%s)",
               what, who->name, dim_text(s, got), ref->name, dim_text(s, want));
    return false;
}

static bool check_attention_operands(Sema *s, const Item *it, AttnShape *sh) {
    if (it->ninputs < 3) {
        diag_error(s->d, s->src, it->name_loc,
                   "attention block '%s' needs q, k and v as its first three inputs", it->name);
        return false;
    }
    Symbol *qkv[3];
    bool ok = true;
    for (int i = 0; i < 3; i++) {
        qkv[i] = lookup_sym(s, it->inputs[i].name);
        if (!qkv[i] || !qkv[i]->value)
            return false;
        qkv[i]->attention_operand = true;
        const Type *t = qkv[i]->value->type;
        if (t->rank != 4) {
            diag_error(s->d, s->src, it->inputs[i].type.loc,
                       "'%s' must have rank 4 [batch, heads, seq, head_dim], not %d", qkv[i]->name, t->rank);
            ok = false;
        } else if (t->elem != SK_F16 && t->elem != SK_BF16) {
            diag_error(s->d, s->src, it->inputs[i].type.dtype_loc,
                       "attention operands must be f16 or bf16, not %s", scalar_name(t->elem));
            ok = false;
        }
    }
    if (!ok)
        return false;
    sh->q = qkv[0]; sh->k = qkv[1]; sh->v = qkv[2];
    const Type *q = sh->q->value->type, *k = sh->k->value->type, *v = sh->v->value->type;
    sh->dtype = q->elem;
    for (int i = 1; i < 3; i++)
        if (qkv[i]->value->type->elem != sh->dtype) {
            diag_error(s->d, s->src, it->inputs[i].type.dtype_loc, "'%s' is %s but '%s' is %s",
                       qkv[i]->name, scalar_name(qkv[i]->value->type->elem), sh->q->name,
                       scalar_name(sh->dtype));
            ok = false;
        }
    sh->batch = q->dims[0]; sh->hq = q->dims[1]; sh->nq = q->dims[2]; sh->d = q->dims[3];
    sh->hkv = k->dims[1]; sh->nk = k->dims[2]; sh->dv = v->dims[3];
    ok &= same_dim(s, sh->batch, k->dims[0], "batch", sh->k, sh->q, 0);
    ok &= same_dim(s, sh->batch, v->dims[0], "batch", sh->v, sh->q, 0);
    ok &= same_dim(s, sh->hkv, v->dims[1], "head count", sh->v, sh->k, 1);
    ok &= same_dim(s, sh->nk, v->dims[2], "sequence length", sh->v, sh->k, 2);
    ok &= same_dim(s, sh->d, k->dims[3], "head dimension", sh->k, sh->q, 3);
    for (int i = 0; i < 3; i += 2) {
        Dim hd = i == 0 ? sh->d : sh->dv;
        if (hd.sym) {
            diag_error(s->d, s->src, qkv[i]->param->type.dim_locs[3],
                       "the head dimension of '%s' must be a compile-time constant, not '%s'",
                       qkv[i]->name, hd.sym);
            ok = false;
        }
    }
    /* GQA/MQA: query heads are groups of kv heads. Provable now when both are
     * numbers; when either is symbolic the runtime checks it on binding. */
    if (!dim_equal(sh->hq, sh->hkv) && !sh->hq.sym && !sh->hkv.sym && sh->hq.size % sh->hkv.size) {
        diag_error(s->d, s->src, sh->k->param->type.dim_locs[1],
                   "query heads (%lld) are not a multiple of kv heads (%lld)", (long long)sh->hq.size,
                   (long long)sh->hkv.size);
        diag_note(s->d, s->src, sh->q->param->type.dim_locs[1], "query heads are declared here");
        ok = false;
    }
    return ok;
}

static bool check_attention_outputs(Sema *s, const Item *it, const AttnShape *sh) {
    if (it->noutputs < 1 || it->noutputs > 2) {
        diag_error(s->d, s->src, it->name_loc,
                   "attention block '%s' has %d outputs; it needs o, and optionally lse", it->name,
                   it->noutputs);
        return false;
    }
    bool ok = true;
    Dim o_dims[4] = {sh->batch, sh->hq, sh->nq, sh->dv};
    Type *o_want = type_shaped(s->a, TY_TENSOR, sh->dtype, 4, o_dims);
    Type *lse_want = type_shaped(s->a, TY_TENSOR, SK_F32, 3, o_dims);
    for (int i = 0; i < it->noutputs; i++) {
        Type *want = i == 0 ? o_want : lse_want;
        Type *got = declared_type(s, &it->outputs[i]);
        if (got && !type_equal(got, want)) {
            diag_error(s->d, s->src, it->outputs[i].type.loc, "%s '%s' must be %s, not %s",
                       i == 0 ? "the attention output" : "the log-sum-exp output", it->outputs[i].name,
                       type_text(s, want), type_text(s, got));
            ok = false;
        }
    }
    return ok;
}

/* Lowers one hook into the region of `op`: block arguments are the hook's
 * parameters, the body computes the expression, attn.yield returns it. */
static bool lower_hook(Sema *s, const Stmt *st, Op *op, HookKind kind) {
    int want = kind == HOOK_MASK ? 4 : 5;
    if (st->nvars != want) {
        diag_error(s->d, s->src, st->name_loc, "a %s hook takes %d parameters (%s), not %d",
                   hook_name(kind), want, kind == HOOK_MASK ? "b, h, i, j" : "s, b, h, i, j", st->nvars);
        return false;
    }
    Block *saved = s->insert;
    Block *b = region_add_block(s->a, &op->regions[0]);
    map_init(&s->hook_vars, true);
    bool ok = true;
    for (int i = 0; i < st->nvars; i++) {
        if (map_get(&s->hook_vars, st->vars[i])) {
            diag_error(s->d, s->src, st->var_locs[i], "hook parameter '%s' is named twice", st->vars[i]);
            ok = false;
        }
        bool score = kind == HOOK_SCORE && i == 0;
        Value *arg = block_add_arg(s->a, b, type_scalar(s->a, score ? SK_F32 : SK_INDEX), st->vars[i]);
        map_put(s->a, &s->hook_vars, st->vars[i], arg);
    }
    s->insert = b;
    s->hook = kind;
    Val v = lower_expr(s, st->value);
    Value *result = NULL;
    if (v.kind != VAL_ERROR) {
        if (kind == HOOK_MASK) {
            if (need_bool(s, v, st->value, "a mask hook"))
                result = materialize(s, st->value->loc, v, SK_I1);
        } else if (val_elem(v) == SK_I1) {
            diag_error(s->d, s->src, st->value->loc, "a score hook must give a number, not a bool");
            diag_note(s->d, s->src, st->value->loc, "to hide scores, write a mask hook");
        } else {
            result = float_operand(s, st->value, v);
        }
    }
    if (result) {
        Value *ops[1] = {result};
        emit_op(s, st->value->loc, OP_YIELD, 1, ops, NULL);
    }
    s->hook = NO_HOOK;
    s->insert = saved;
    return ok && result;
}

static void lower_attention(Sema *s, const Item *it, Op *func) {
    Block *body = op_body(func);
    if (!declare_params(s, it, body))
        return;
    AttnShape sh;
    if (!check_attention_operands(s, it, &sh) || !check_attention_outputs(s, it, &sh))
        return;
    check_acc(s, it);
    if (s->acc == SK_F16 && sh.dtype != SK_F16) {
        diag_error(s->d, s->src, it->inputs[0].type.dtype_loc,
                   "an f16 accumulator needs f16 operands, not %s", scalar_name(sh.dtype));
        return;
    }
    const Stmt *scale = NULL, *mask = NULL, *score = NULL;
    for (int i = 0; i < it->nstmts; i++) {
        const Stmt *st = it->stmts[i];
        const Stmt **slot = st->kind == S_SCALE ? &scale : st->kind == S_MASK ? &mask
                          : st->kind == S_SCORE ? &score : NULL;
        if (st->kind == S_ASSIGN)
            diag_error(s->d, s->src, st->name_loc,
                       "assignments are only allowed in mlp blocks; an attention block "
                       "takes acc, scale, mask and score");
        if (!slot)
            continue;
        if (*slot) {
            diag_error(s->d, s->src, st->name_loc, "'%s' is given twice", st->kind == S_SCALE ? "scale" : st->name);
            diag_note(s->d, s->src, (*slot)->name_loc, "first given here");
            continue;
        }
        *slot = st;
    }
    double scale_value = 1 / sqrt((double)sh.d.size);
    if (scale) {
        Val v = const_expr(s, scale->value, "the scale");
        if (v.kind == VAL_ERROR)
            return;
        if (!is_num_const(v) || !(num(v) > 0) || !isfinite(num(v))) {
            diag_error(s->d, s->src, scale->value->loc, "the scale must be a positive number, not %s",
                       is_num_const(v) ? arena_printf(s->a, "%g", num(v)) : val_text(s, v));
            return;
        }
        /* the kernels multiply by it in f32 */
        if (!isfinite((float)num(v)) || (float)num(v) == 0) {
            diag_error(s->d, s->src, scale->value->loc, "the scale %g is %s in f32", num(v),
                       (float)num(v) == 0 ? "zero" : "infinite");
            return;
        }
        scale_value = num(v);
    }
    s->insert = body;
    Loc loc = it->loc;
    Value *q = sh.q->value, *k = sh.k->value, *v = sh.v->value;
    if (!dim_equal(sh.hq, sh.hkv)) {  /* GQA: each kv head serves Hq/Hkv query heads */
        Dim kd[4] = {sh.batch, sh.hq, sh.nk, sh.d}, vd[4] = {sh.batch, sh.hq, sh.nk, sh.dv};
        k = emit(s, sh.k->loc, OP_EXPAND_HEADS, type_shaped(s->a, TY_TENSOR, sh.dtype, 4, kd), k, NULL);
        v = emit(s, sh.v->loc, OP_EXPAND_HEADS, type_shaped(s->a, TY_TENSOR, sh.dtype, 4, vd), v, NULL);
    }
    Dim kt_dims[4] = {sh.batch, sh.hq, sh.d, sh.nk};
    Value *kt_ops[1] = {k};
    Op *kt = emit_op(s, loc, OP_TRANSPOSE, 1, kt_ops, type_shaped(s->a, TY_TENSOR, sh.dtype, 4, kt_dims));
    Attr *perm[4] = {attr_int(s->a, 0), attr_int(s->a, 1), attr_int(s->a, 3), attr_int(s->a, 2)};
    op_set_attr(s->a, kt, "perm", attr_array(s->a, 4, perm));
    Dim s_dims[4] = {sh.batch, sh.hq, sh.nq, sh.nk};
    Type *scores_t = type_shaped(s->a, TY_TENSOR, s->acc, 4, s_dims);
    Value *qk[2] = {q, kt->results[0]};
    Op *mm = emit_op(s, loc, OP_MATMUL, 2, qk, scores_t);
    op_set_attr(s->a, mm, "acc", attr_type(s->a, type_scalar(s->a, s->acc)));
    Value *scores = emit(s, scale ? scale->loc : loc, OP_MUL, scores_t, mm->results[0],
                         emit_constant(s, loc, (Val){VAL_FLOAT, 0, scale_value, NULL}, s->acc));
    Op *hooks[2] = {NULL, NULL};
    const Stmt *hook_stmts[2] = {score, mask};
    bool ok = true;
    for (int h = 0; h < 2; h++) {
        if (!hook_stmts[h])
            continue;
        Value *ops[1] = {scores};
        Type *rt = scores_t;
        hooks[h] = op_create(s->a, h ? OP_MASK : OP_SCORE_MOD, 1, ops, 1, &rt, 1);
        hooks[h]->loc = (SrcLoc){s->src->name, hook_stmts[h]->loc.line + s->src->line_offset,
                                 hook_stmts[h]->loc.col};
        ok &= lower_hook(s, hook_stmts[h], hooks[h], h ? HOOK_MASK : HOOK_SCORE);
        block_append(body, hooks[h]);
        scores = hooks[h]->results[0];
    }
    if (!ok)
        return;
    Value *probs = emit(s, loc, OP_SOFTMAX, scores_t, scores, NULL);
    Value *p = emit_cast(s, loc, probs, sh.dtype);
    Dim o_dims[4] = {sh.batch, sh.hq, sh.nq, sh.dv};
    Value *pv[2] = {p, v};
    Op *o = emit_op(s, loc, OP_MATMUL, 2, pv, type_shaped(s->a, TY_TENSOR, sh.dtype, 4, o_dims));
    op_set_attr(s->a, o, "acc", attr_type(s->a, type_scalar(s->a, s->acc)));
    o->results[0]->name = it->outputs[0].name;
    Value *outs[2] = {o->results[0], NULL};
    if (it->noutputs == 2) {
        Value *s32 = emit_cast(s, loc, scores, SK_F32);
        Value *ops[1] = {s32};
        Op *lse = emit_op(s, loc, OP_REDUCE, 1, ops, type_shaped(s->a, TY_TENSOR, SK_F32, 3, o_dims));
        op_set_attr(s->a, lse, "kind", attr_str(s->a, "logsumexp"));
        lse->results[0]->name = it->outputs[1].name;
        outs[1] = lse->results[0];
    }
    emit_return(s, it, outs, it->noutputs);
    warn_unused(s);
}

/* ---- schedules ----------------------------------------------------------- */

static void lower_schedule(Sema *s, const Item *it) {
    Op *func = map_get(&s->blocks, it->name);
    const Item *block = map_get(&s->items, it->name);
    if (!func || !block) {
        diag_error(s->d, s->src, it->name_loc, "schedule for unknown block '%s'", it->name);
        return;
    }
    if (!target_lookup(it->target)) {
        diag_error(s->d, s->src, it->target_loc, "unknown target '%s'", it->target);
        diag_note(s->d, s->src, it->target_loc, "targets are %s", target_names());
        return;
    }
    Attr *all = op_attr(func, "schedule");
    if (!all)
        all = attr_dict(s->a);
    if (attrs_get(all->entries, all->n, it->target)) {
        diag_error(s->d, s->src, it->target_loc, "block '%s' already has a schedule for %s", it->name,
                   it->target);
        return;
    }
    Attr *sched = attr_dict(s->a);
    bool mlp = block->kind == I_MLP;
    for (int i = 0; i < it->ndirectives; i++) {
        const Directive *dr = &it->directives[i];
        const ScheduleInfo *info = schedule_lookup(dr->name);
        if (!info) {
            diag_error(s->d, s->src, dr->loc, "unknown schedule directive '%s'", dr->name);
            diag_note(s->d, s->src, dr->loc, "directives are %s", schedule_names());
            continue;
        }
        int want = mlp ? info->mlp_args : info->attn_args;
        if (want < 0) {
            diag_error(s->d, s->src, dr->loc, "'%s' is a schedule directive of %s blocks (%s)", dr->name,
                       mlp ? "attention" : "mlp", info->what);
            continue;
        }
        if (info->target && strcmp(it->target, info->target) != 0) {
            diag_error(s->d, s->src, dr->loc, "'%s' is a schedule directive of %s only (%s)", dr->name, info->target,
                       info->what);
            continue;
        }
        int64_t lo = info->lo, hi = info->hi;
        if (attrs_get(sched->entries, sched->n, dr->name)) {
            diag_error(s->d, s->src, dr->loc, "'%s' is given twice in one schedule", dr->name);
            continue;
        }
        if (dr->nargs != want) {
            diag_error(s->d, s->src, dr->loc, "'%s' takes %d value%s%s, not %d", dr->name, want,
                       want == 1 ? "" : "s",
                       info != &schedule_info[SCHED_TILE] ? "" : mlp ? " (M, N, K) for an mlp block"
                                                           : " (query rows, key rows) for an attention block",
                       dr->nargs);
            continue;
        }
        Attr **vals = NEW_ARRAY(s->a, Attr *, want);
        bool ok = true;
        for (int j = 0; j < want; j++) {
            int64_t x = dr->args[j];
            if (x == DIRECTIVE_ARG_REPORTED) {
                ok = false;
                continue;
            }
            bool pow2 = x > 0 && (x & (x - 1)) == 0;
            if ((info->flags & SD_SWITCH) && (x < lo || x > hi)) {
                diag_error(s->d, s->src, dr->arg_locs[j], "%s must be 0 (off) or 1 (on), not %lld", dr->name,
                           (long long)x);
                ok = false;
            } else if (x < lo || x > hi || ((info->flags & SD_MULTIPLE_16) && x % 16) ||
                       ((info->flags & SD_POW2) && !pow2)) {
                diag_error(s->d, s->src, dr->arg_locs[j], "%s must be %s between %lld and %lld, not %lld",
                           dr->name,
                           info->flags & SD_MULTIPLE_16 ? "a multiple of 16"
                           : info->flags & SD_POW2      ? "a power of two"
                                                        : "a count",
                           (long long)lo, (long long)hi, (long long)x);
                ok = false;
            }
            vals[j] = attr_int(s->a, x);
        }
        if (ok)
            attrs_set(s->a, &sched->entries, &sched->n, dr->name,
                      want == 0 ? attr_bool(s->a, true) : want == 1 ? vals[0] : attr_array(s->a, want, vals));
    }
    attrs_set(s->a, &all->entries, &all->n, it->target, sched);
    op_set_attr(s->a, func, "schedule", all);
}

/* ---- the program ---------------------------------------------------------- */

static void lower_const(Sema *s, const Item *it) {
    Val v = const_expr(s, it->value, arena_printf(s->a, "constant '%s'", it->name));
    ConstDef *old = map_get(&s->consts, it->name);
    if (old) {
        diag_error(s->d, s->src, it->name_loc, "redefinition of constant '%s'", it->name);
        diag_note(s->d, s->src, old->loc, "'%s' was defined here", it->name);
        return;
    }
    if (map_get(&s->items, it->name)) {
        diag_error(s->d, s->src, it->name_loc, "'%s' is already the name of a block", it->name);
        return;
    }
    ConstDef *c = NEW(s->a, ConstDef);
    if (s->overrides && map_get(s->overrides, it->name))
        v = (Val){VAL_INT, (int64_t)(intptr_t)map_get(s->overrides, it->name), 0, NULL};
    c->val = v;
    c->loc = it->name_loc;
    map_put(s->a, &s->consts, it->name, c);
}

Op *sema_lower(Arena *a, Diag *d, const Source *src, const Program *p, const Map *consts) {
    Sema s = {.a = a, .d = d, .src = src, .overrides = consts};
    map_init(&s.consts, true);
    map_init(&s.blocks, true);
    map_init(&s.items, true);
    s.module = module_create(a);
    for (int i = 0; i < p->nitems; i++) {
        const Item *it = p->items[i];
        if (it->kind == I_CONST) {
            lower_const(&s, it);
            continue;
        }
        if (it->kind == I_SCHEDULE)
            continue;
        const Item *old = map_get(&s.items, it->name);
        if (old || map_get(&s.consts, it->name)) {
            diag_error(d, src, it->name_loc, "redefinition of '%s'", it->name);
            if (old)
                diag_note(d, src, old->name_loc, "'%s' was defined here", it->name);
            continue;
        }
        map_put(a, &s.items, it->name, (void *)it);
        begin_block(&s);
        Op *func = new_func(&s, it, it->kind == I_ATTENTION ? "attention" : "mlp");
        if (it->kind == I_ATTENTION)
            lower_attention(&s, it, func);
        else
            lower_mlp(&s, it, func);
        s.insert = NULL;
        map_put(a, &s.blocks, it->name, func);
        block_append(op_body(s.module), func);
    }
    for (int i = 0; i < p->nitems; i++)
        if (p->items[i]->kind == I_SCHEDULE)
            lower_schedule(&s, p->items[i]);
    if (!s.items.len && !d->errors)   /* an empty file, or constants only: nothing to compile */
        diag_warning(d, src, (Loc){1, 1, 1, 1}, "the file defines no attention or mlp block");
    return s.module;
}
