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
 *
 * Its files: sema.c (this: the walk over the program's items, messages in
 * the DSL's spelling, emitting ops, shapes and dtypes, constant folding),
 * sema_expr.c (names and expressions), sema_blocks.c (declarations, mlp and
 * attention blocks), sema_schedule.c (schedule items); sema.h what they share.
 */
#include "frontend/sema.h"

#include <math.h>

/* ---- types in messages: the DSL's own spelling ---------------------------- */

const char *sema_type_text(Sema *s, const Type *t) {
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

const char *sema_dim_text(Sema *s, Dim d) {
    return d.sym ? d.sym : arena_printf(s->a, "%lld", (long long)d.size);
}

const char *sema_val_text(Sema *s, Val v) {
    switch (v.kind) {
    case VAL_INT: return "an integer";
    case VAL_FLOAT: return "a number";
    case VAL_BOOL: return "a bool";
    case VAL_IR: return sema_type_text(s, v.v->type);
    default: return "an error";
    }
}

/* ---- emitting ops -------------------------------------------------------- */


bool sema_can_emit(Sema *s, Loc loc) {
    if (s->insert)
        return true;
    diag_error(s->d, s->src, loc, "%s must be a compile-time constant", s->const_context);
    return false;
}

Op *sema_emit_op(Sema *s, Loc loc, OpKind kind, int n, Value **operands, Type *result) {
    Op *op = op_create(s->a, kind, n, operands, result ? 1 : 0, &result, 0);
    op->loc = sema_srcloc(s, loc);
    block_append(s->insert, op);
    return op;
}

Value *sema_emit(Sema *s, Loc loc, OpKind kind, Type *result, Value *x, Value *y) {
    Value *ops[2] = {x, y};
    return sema_emit_op(s, loc, kind, y ? 2 : x ? 1 : 0, ops, result)->results[0];
}

Value *sema_emit_constant(Sema *s, Loc loc, Val c, ScalarKind k) {
    Op *op = sema_emit_op(s, loc, OP_CONSTANT, 0, NULL, type_scalar(s->a, k));
    Attr *value = k == SK_I1            ? attr_bool(s->a, c.i != 0)
                : scalar_is_float(k)    ? attr_float(s->a, c.kind == VAL_FLOAT ? c.f : (double)c.i)
                                        : attr_int(s->a, c.i);
    op_set_attr(s->a, op, "value", value);
    return op->results[0];
}

Value *sema_emit_cast(Sema *s, Loc loc, Value *v, ScalarKind to) {
    if (v->type->elem == to)
        return v;
    return sema_emit(s, loc, OP_CAST, type_with_elem(s->a, v->type, to), v, NULL);
}

/* ---- shapes and dtypes ---------------------------------------------------- */

/* The dtype two operands meet in: PyTorch's promotion for the types we have. */
ScalarKind sema_promote(ScalarKind x, ScalarKind y) {
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
bool sema_broadcast(Sema *s, const Type *x, const Type *y, int *rank, Dim **dims) {
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

Type *sema_result_type(Sema *s, const Type *x, const Type *y, ScalarKind elem, Loc loc, bool *ok) {
    int rank;
    Dim *dims;
    *ok = true;
    if (!sema_broadcast(s, x, y, &rank, &dims)) {
        diag_error(s->d, s->src, loc, "shapes %s and %s do not broadcast", sema_type_text(s, x),
                   sema_type_text(s, y));
        *ok = false;
        return NULL;
    }
    if (x->kind == TY_SCALAR && y->kind == TY_SCALAR)
        return type_scalar(s->a, elem);
    return type_shaped(s->a, TY_TENSOR, elem, rank, dims);
}

/* ---- constant folding ---------------------------------------------------- */


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

Val sema_fold_binary(Sema *s, BinOp op, Val x, Val y, Loc loc) {
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
                       sema_val_text(s, x), sema_val_text(s, y));
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


/* ---- the program ---------------------------------------------------------- */

static void lower_const(Sema *s, const Item *it) {
    Val v = sema_const_expr(s, it->value, arena_printf(s->a, "constant '%s'", it->name));
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
        sema_begin_block(&s);
        Op *func = sema_new_func(&s, it, it->kind == I_ATTENTION ? "attention" : "mlp");
        diag_hold(d);   /* a block's checks run in their own order; its errors print in the source's */
        if (it->kind == I_ATTENTION)
            sema_lower_attention(&s, it, func);
        else
            sema_lower_mlp(&s, it, func);
        diag_release(d);
        s.insert = NULL;
        map_put(a, &s.blocks, it->name, func);
        block_append(op_body(s.module), func);
    }
    for (int i = 0; i < p->nitems; i++)
        if (p->items[i]->kind == I_SCHEDULE)
            sema_lower_schedule(&s, p->items[i]);
    if (!s.items.len && !d->errors)   /* an empty file, or constants only: nothing to compile */
        diag_warning(d, src, (Loc){1, 1, 1, 1}, "the file defines no attention or mlp block");
    return s.module;
}
