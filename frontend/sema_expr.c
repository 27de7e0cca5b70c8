/* sema_expr.c — names and expressions: each is checked and lowered to attn
 * ops in one step, or folded when it is a compile-time constant (operators,
 * matmul, conditionals, the builtin functions). */
#include "frontend/sema.h"

#include <math.h>
#include <string.h>

/* ---- names -------------------------------------------------------------- */

Symbol *sema_lookup_sym(Sema *s, const char *name) { return map_get(&s->syms, name); }

Symbol *sema_define_sym(Sema *s, SymKind kind, const char *name, Loc loc) {
    Symbol *old = sema_lookup_sym(s, name);
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


static Val lower_name(Sema *s, const Expr *e) {
    if (s->hook) {
        Value *v = map_get(&s->hook_vars, e->name);
        if (v)
            return ir_val(v);
    }
    Symbol *sym = sema_lookup_sym(s, e->name);
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
        Op *op = sema_emit_op(s, e->loc, OP_DIM, 0, NULL, type_scalar(s->a, SK_INDEX));
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
    Symbol *sym = sema_lookup_sym(s, e->name);
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
        diag_note(s->d, s->src, sym->loc, "'%s' is declared here as %s", e->name, sema_type_text(s, t));
        return ERROR_VAL;
    }
    Value **operands = NEW_ARRAY(s->a, Value *, e->nargs + 1);
    operands[0] = sym->value;
    bool ok = true;
    for (int i = 0; i < e->nargs; i++) {
        Val x = sema_lower_expr(s, e->args[i]);
        if (x.kind == VAL_INT) {
            operands[i + 1] = sema_emit_constant(s, e->args[i]->loc, x, SK_INDEX);
        } else if (x.kind == VAL_IR && x.v->type->kind == TY_SCALAR && scalar_is_int(x.v->type->elem)) {
            operands[i + 1] = sema_emit_cast(s, e->args[i]->loc, x.v, SK_INDEX);
        } else {
            if (x.kind != VAL_ERROR)
                diag_error(s->d, s->src, e->args[i]->loc, "an index must be an integer, not %s",
                           sema_val_text(s, x));
            ok = false;
        }
    }
    if (!ok)
        return ERROR_VAL;
    Op *op = sema_emit_op(s, e->loc, OP_EXTRACT, e->nargs + 1, operands, type_scalar(s->a, t->elem));
    Value *v = op->results[0];
    /* Hooks compute in f32 (floats) and index (integers). */
    if (scalar_is_float(t->elem))
        v = sema_emit_cast(s, e->loc, v, SK_F32);
    else if (scalar_is_int(t->elem))
        v = sema_emit_cast(s, e->loc, v, SK_INDEX);
    return ir_val(v);
}

/* ---- operators ---------------------------------------------------------- */

/* Turns a constant into a value of the element type `k` (for mixing with IR). */
Value *sema_materialize(Sema *s, Loc loc, Val c, ScalarKind k) {
    if (c.kind == VAL_IR)
        return c.v;
    return sema_emit_constant(s, loc, c, k);
}

ScalarKind sema_val_elem(Val v) {
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
ScalarKind sema_meet(Val x, Val y) {
    if (x.kind != VAL_IR)
        return sema_val_elem(y) == SK_INDEX && x.kind == VAL_FLOAT ? SK_F32 : sema_val_elem(y);
    if (y.kind != VAL_IR)
        return sema_val_elem(x) == SK_INDEX && y.kind == VAL_FLOAT ? SK_F32 : sema_val_elem(x);
    return sema_promote(sema_val_elem(x), sema_val_elem(y));
}

static bool check_not_bool(Sema *s, Val v, const Expr *e, const char *what) {
    if (sema_val_elem(v) == SK_I1) {
        diag_error(s->d, s->src, e->loc, "%s needs numbers, not %s", what, sema_val_text(s, v));
        return false;
    }
    return true;
}

/* Emits a binary elementwise op over x and y converted to `k`, its result
 * of element type `elem` and the operands' broadcast shape; NULL (reported)
 * if the shapes do not broadcast. */
static Value *emit_binary(Sema *s, const Expr *e, OpKind kind, Val x, const Expr *ex, Val y,
                          const Expr *ey, ScalarKind k, ScalarKind elem) {
    Value *vx = sema_emit_cast(s, ex->loc, sema_materialize(s, ex->loc, x, k), k);
    Value *vy = sema_emit_cast(s, ey->loc, sema_materialize(s, ey->loc, y, k), k);
    bool ok;
    Type *rt = sema_result_type(s, vx->type, vy->type, elem, e->loc, &ok);
    return ok ? sema_emit(s, e->loc, kind, rt, vx, vy) : NULL;
}

static Val lower_arith(Sema *s, const Expr *e, BinOp op, Val x, Val y) {
    const Expr *ex = e->args[0], *ey = e->args[1];
    if (!check_not_bool(s, x, ex, arena_printf(s->a, "'%s'", op_spelling(op))) ||
        !check_not_bool(s, y, ey, arena_printf(s->a, "'%s'", op_spelling(op))))
        return ERROR_VAL;
    if (is_num_const(x) && is_num_const(y))
        return sema_fold_binary(s, op, x, y, e->loc);
    if (!sema_can_emit(s, e->loc))
        return ERROR_VAL;
    ScalarKind k = sema_meet(x, y);
    if (op == B_DIV && !scalar_is_float(k))
        k = SK_F32;   /* '/' is true division; '//' is integer division */
    if ((op == B_FLOORDIV || op == B_REM) && !scalar_is_int(k)) {
        diag_error(s->d, s->src, e->loc, "'%s' needs integers, not %s and %s", op_spelling(op),
                   sema_val_text(s, x), sema_val_text(s, y));
        return ERROR_VAL;
    }
    if (s->hook == NO_HOOK && (!scalar_is_float(k))) {
        diag_error(s->d, s->src, e->loc, "'%s' needs float tensors, not %s and %s", op_spelling(op),
                   sema_val_text(s, x), sema_val_text(s, y));
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
        return sema_fold_binary(s, op, x, y, e->loc);
    if (!sema_can_emit(s, e->loc))
        return ERROR_VAL;
    Value *r = emit_binary(s, e, OP_CMP, x, e->args[0], y, e->args[1], sema_meet(x, y), SK_I1);
    if (!r)
        return ERROR_VAL;
    static const char *const preds[] = {[B_LT] = "lt", [B_LE] = "le", [B_GT] = "gt",
                                        [B_GE] = "ge", [B_EQ] = "eq", [B_NE] = "ne"};
    op_set_attr(s->a, r->def, "pred", attr_str(s->a, preds[op]));
    return ir_val(r);
}

bool sema_need_bool(Sema *s, Val v, const Expr *e, const char *what) {
    if (v.kind == VAL_ERROR)
        return false;
    if (sema_val_elem(v) != SK_I1) {
        diag_error(s->d, s->src, e->loc, "%s needs a bool, not %s", what, sema_val_text(s, v));
        return false;
    }
    return true;
}

static Val lower_logical(Sema *s, const Expr *e, BinOp op, Val x, Val y) {
    const char *what = arena_printf(s->a, "'%s'", op_spelling(op));
    bool okx = sema_need_bool(s, x, e->args[0], what), oky = sema_need_bool(s, y, e->args[1], what);
    if (!okx || !oky)
        return ERROR_VAL;
    if (x.kind == VAL_BOOL && y.kind == VAL_BOOL)
        return (Val){VAL_BOOL, op == B_AND ? (x.i && y.i) : (x.i || y.i), 0, NULL};
    if (!sema_can_emit(s, e->loc))
        return ERROR_VAL;
    Value *r = emit_binary(s, e, op == B_AND ? OP_AND : OP_OR, x, e->args[0], y, e->args[1], SK_I1, SK_I1);
    return r ? ir_val(r) : ERROR_VAL;
}

static Val lower_matmul(Sema *s, const Expr *e, Val x, Val y) {
    if (s->hook) {
        diag_error(s->d, s->src, e->loc, "'@' is a matrix product and cannot appear in a %s hook: "
                   "a hook sees one score at a time", hook_name(s->hook));
        return ERROR_VAL;
    }
    if (!sema_can_emit(s, e->loc))
        return ERROR_VAL;
    if (x.kind != VAL_IR || y.kind != VAL_IR || x.v->type->kind != TY_TENSOR ||
        y.v->type->kind != TY_TENSOR || x.v->type->rank < 2 || y.v->type->rank < 2) {
        diag_error(s->d, s->src, e->loc, "'@' needs two tensors of rank 2 or more, not %s and %s",
                   sema_val_text(s, x), sema_val_text(s, y));
        return ERROR_VAL;
    }
    const Type *a = x.v->type, *b = y.v->type;
    if (a->elem != b->elem || !scalar_is_float(a->elem)) {
        diag_error(s->d, s->src, e->loc, "'@' needs operands of one float dtype, not %s and %s",
                   scalar_name(a->elem), scalar_name(b->elem));
        return ERROR_VAL;
    }
    /* what the tensor cores take: refused here, at the source, rather than
     * by every code generator after `attnc run` has accepted it (batched
     * products are legal: written by hand, an attention fuses) */
    if (a->elem != SK_F16 && a->elem != SK_BF16) {
        diag_error(s->d, s->src, e->loc, "'@' takes f16 or bf16 operands (the tensor cores' types), not %s",
                   scalar_name(a->elem));
        return ERROR_VAL;
    }
    Dim k1 = a->dims[a->rank - 1], k2 = b->dims[b->rank - 2];
    if (!dim_equal(k1, k2)) {
        diag_error(s->d, s->src, e->loc, "'@' contracts %s with %s: inner dimensions %s and %s differ",
                   sema_type_text(s, a), sema_type_text(s, b), sema_dim_text(s, k1), sema_dim_text(s, k2));
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
    if (!sema_broadcast(s, &ba, &bb, &rank, &dims)) {
        diag_error(s->d, s->src, e->loc, "batch dimensions of %s and %s do not broadcast",
                   sema_type_text(s, a), sema_type_text(s, b));
        return ERROR_VAL;
    }
    Dim *rd = NEW_ARRAY(s->a, Dim, rank + 2);
    memcpy(rd, dims, sizeof(Dim) * (size_t)rank);
    rd[rank] = a->dims[a->rank - 2];
    rd[rank + 1] = b->dims[b->rank - 1];
    Value *ops[2] = {x.v, y.v};
    Op *mm = sema_emit_op(s, e->loc, OP_MATMUL, 2, ops, type_shaped(s->a, TY_TENSOR, a->elem, rank + 2, rd));
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
    Val acc = sema_lower_expr(s, chain[0]->args[0]);
    for (i = 0; i < n; i++)
        acc = lower_binary_op(s, chain[i], acc, sema_lower_expr(s, chain[i]->args[1]));
    return acc;
}

static Val lower_unary(Sema *s, const Expr *e) {
    Val x = sema_lower_expr(s, e->args[0]);
    if (x.kind == VAL_ERROR)
        return ERROR_VAL;
    if (e->op == U_NOT) {
        if (!sema_need_bool(s, x, e->args[0], "'!'"))
            return ERROR_VAL;
        if (x.kind == VAL_BOOL)
            return (Val){VAL_BOOL, !x.i, 0, NULL};
        return ir_val(sema_emit(s, e->loc, OP_NOT, x.v->type, x.v, NULL));
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
    return ir_val(sema_emit(s, e->loc, OP_NEG, x.v->type, x.v, NULL));
}

static Val lower_cond(Sema *s, const Expr *e) {
    Val c = sema_lower_expr(s, e->args[0]);
    Val x = sema_lower_expr(s, e->args[1]);
    Val y = sema_lower_expr(s, e->args[2]);
    if (c.kind == VAL_ERROR || x.kind == VAL_ERROR || y.kind == VAL_ERROR)
        return ERROR_VAL;
    if (!sema_need_bool(s, c, e->args[0], "the condition of '?:'"))
        return ERROR_VAL;
    if (c.kind == VAL_BOOL)
        return c.i ? x : y;
    bool xb = sema_val_elem(x) == SK_I1, yb = sema_val_elem(y) == SK_I1;
    if (xb != yb) {
        diag_error(s->d, s->src, e->loc, "the branches of '?:' differ: %s and %s", sema_val_text(s, x),
                   sema_val_text(s, y));
        return ERROR_VAL;
    }
    ScalarKind k = xb ? SK_I1 : sema_meet(x, y);
    Value *vx = sema_emit_cast(s, e->loc, sema_materialize(s, e->args[1]->loc, x, k), k);
    Value *vy = sema_emit_cast(s, e->loc, sema_materialize(s, e->args[2]->loc, y, k), k);
    bool ok;
    Type *t = sema_result_type(s, vx->type, vy->type, k, e->loc, &ok);
    if (!ok)
        return ERROR_VAL;
    t = sema_result_type(s, c.v->type, t, k, e->loc, &ok);
    if (!ok)
        return ERROR_VAL;
    Value *ops[3] = {c.v, vx, vy};
    return ir_val(sema_emit_op(s, e->loc, OP_SELECT, 3, ops, t)->results[0]);
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
Value *sema_float_operand(Sema *s, const Expr *e, Val x) {
    Value *v = sema_materialize(s, e->loc, x, SK_F32);
    return scalar_is_float(v->type->elem) ? v : sema_emit_cast(s, e->loc, v, SK_F32);
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
    Val x = sema_lower_expr(s, e->args[0]);
    Val y = fn->nargs > 1 ? sema_lower_expr(s, e->args[1]) : x;
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
        if (!sema_can_emit(s, e->loc))
            return ERROR_VAL;
        if (fn->op == OP_ABS && x.kind == VAL_IR && scalar_is_int(x.v->type->elem))
            return ir_val(sema_emit(s, e->loc, OP_ABS, x.v->type, x.v, NULL));
        {
            Value *v = sema_float_operand(s, e->args[0], x);
            return ir_val(sema_emit(s, e->loc, fn->op, v->type, v, NULL));
        }
    case FN_MINMAX: {
        if (is_num_const(x) && is_num_const(y)) {
            bool less = num(x) < num(y);
            return (fn->op == OP_MIN) == less ? x : y;
        }
        if (!sema_can_emit(s, e->loc))
            return ERROR_VAL;
        ScalarKind k = sema_meet(x, y);
        Value *r = emit_binary(s, e, fn->op, x, e->args[0], y, e->args[1], k, k);
        return r ? ir_val(r) : ERROR_VAL;
    }
    case FN_CAST:
        if (!sema_can_emit(s, e->loc))
            return ERROR_VAL;
        if (s->hook) {
            /* Rounds through the dtype; hooks keep computing in f32. */
            Value *v = sema_float_operand(s, e->args[0], x);
            return ir_val(sema_emit_cast(s, e->loc, sema_emit_cast(s, e->loc, v, fn->to), SK_F32));
        }
        if (x.kind != VAL_IR) {
            diag_error(s->d, s->src, e->loc, "'%s' converts tensors; write the number directly", fn->name);
            return ERROR_VAL;
        }
        return ir_val(sema_emit(s, e->loc, OP_CAST, type_with_elem(s->a, x.v->type, fn->to), x.v, NULL));
    default:
        break;
    }
    /* Whole-tensor functions: reductions, softmax, transpose. */
    if (!sema_can_emit(s, e->loc))
        return ERROR_VAL;
    if (x.kind != VAL_IR || x.v->type->kind != TY_TENSOR || x.v->type->rank < 1 ||
        !scalar_is_float(x.v->type->elem) || (fn->kind == FN_TRANSPOSE && x.v->type->rank < 2)) {
        diag_error(s->d, s->src, e->args[0]->loc, "'%s' needs a float tensor%s, not %s", fn->name,
                   fn->kind == FN_TRANSPOSE ? " of rank 2 or more" : "", sema_val_text(s, x));
        return ERROR_VAL;
    }
    const Type *t = x.v->type;
    if (fn->kind == FN_SOFTMAX)
        return ir_val(sema_emit(s, e->loc, OP_SOFTMAX, x.v->type, x.v, NULL));
    if (fn->kind == FN_REDUCE) {
        /* Reduces the last axis and keeps it as 1, so the result broadcasts back. */
        Type *rt = type_shaped(s->a, TY_TENSOR, t->elem, t->rank, t->dims);
        rt->dims[t->rank - 1] = (Dim){NULL, 1};
        Value *ops[1] = {x.v};
        Op *op = sema_emit_op(s, e->loc, OP_REDUCE, 1, ops, rt);
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
    Op *op = sema_emit_op(s, e->loc, OP_TRANSPOSE, 1, ops, rt);
    op_set_attr(s->a, op, "perm", attr_array(s->a, t->rank, perm));
    return ir_val(op->results[0]);
}

static Val lower_expr_at_depth(Sema *s, const Expr *e);

/* Bounds recursion: no real expression nests 200 deep, and a fuzzer's may
 * (a flat chain a + b + ... does not nest: lower_binary). */
Val sema_lower_expr(Sema *s, const Expr *e) {
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
Val sema_const_expr(Sema *s, const Expr *e, const char *context) {
    Block *saved = s->insert;
    const char *saved_ctx = s->const_context;
    s->insert = NULL;
    s->const_context = context;
    Val v = sema_lower_expr(s, e);
    s->insert = saved;
    s->const_context = saved_ctx;
    return v;
}
