/* eval.c — evaluates a builtin.func op by op.
 *
 * Every value is a Tensor of doubles (scalars are rank 0). In emulated mode
 * each result is rounded to its IR element type, matmuls round their running
 * sum to the accumulator type after every product, and hooks compute in f32;
 * in exact mode nothing is rounded (integers and bools stay exact either way).
 * Reductions and softmax compute in double and round once. Hook regions run
 * once per score, through a precomputed plan of slots (no lookups per element).
 *
 * This file holds the op dispatch, blocks and functions, results, rounding
 * and failures, and one element of each scalar op (eval_apply); the ops
 * themselves are in eval_tensor.c, eval_fused.c and eval_tile.c (eval.h).
 */
#include "interp/eval.h"

#include <string.h>

bool eval_fail(Interp *in, const Op *op, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char full[600];
    snprintf(full, sizeof full, "while running '%s': %s", op ? op_info[op->kind].name : "?", msg);
    if (op)
        op_diag(in->diag, NULL, op, full);
    else
        diag_plain(in->diag, "%s", full);
    in->failed = true;
    return false;
}

bool concrete_shape(Interp *in, const Type *t, int64_t *dims) {
    if (t->kind == TY_SCALAR)
        return true;
    if (t->rank > MAX_RANK) {
        diag_plain(in->diag, "the interpreter handles at most %d dimensions", MAX_RANK);
        return false;
    }
    for (int i = 0; i < t->rank; i++) {
        if (!t->dims[i].sym) {
            dims[i] = t->dims[i].size;
            continue;
        }
        intptr_t v = (intptr_t)map_get(&in->bind->dims, t->dims[i].sym);
        if (v <= 0) {
            diag_plain(in->diag, "dimension '%s' is not bound (use -D %s=VALUE)", t->dims[i].sym,
                       t->dims[i].sym);
            return false;
        }
        dims[i] = v;
    }
    /* every tensor is held as doubles: at most INTERP_MAX_ELEMENTS of them */
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        if (dims[i] < 0 || (dims[i] > 0 && n > INTERP_MAX_ELEMENTS / dims[i])) {
            n = -1;
            break;
        }
        n *= dims[i];
    }
    if (n < 0 || n > INTERP_MAX_ELEMENTS) {
        char shape[256] = "";
        for (int i = 0; i < t->rank; i++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", i ? ", " : "",
                     (long long)dims[i]);
        diag_plain(in->diag,
                   "a tensor of shape [%s] is too large for the interpreter (at most %lld elements, %lld MiB "
                   "as doubles); bind smaller sizes with -D",
                   shape, (long long)INTERP_MAX_ELEMENTS, (long long)(INTERP_MAX_ELEMENTS * 8 >> 20));
        return false;
    }
    return true;
}

/* max and min propagate NaN, as PyTorch's do (torch.maximum, amax, softmax
 * of a row holding a NaN): a hook that yields NaN makes its row NaN. The NaN
 * kept is an operand's, so poison (interp_poison) stays poison. */
static double nan_min(double a, double b) { return isnan(a) ? a : isnan(b) ? b : a <= b ? a : b; }

static int type_rank(const Type *t) { return t->kind == TY_SCALAR ? 0 : t->rank; }

Tensor *eval_get(Interp *in, const Value *v) {
    Tensor *t = map_get(&in->values, v);
    if (!t)
        die("interpreter: value without a tensor");
    return t;
}

Tensor *eval_new_result_n(Interp *in, const Op *op, int i) {
    const Type *t = op->results[i]->type;
    int64_t dims[MAX_RANK];
    if (!concrete_shape(in, t, dims))
        return NULL;
    return tensor_new(in->arena, t->elem, type_rank(t), dims);
}

Tensor *eval_new_result(Interp *in, const Op *op) { return eval_new_result_n(in, op, 0); }

/* Binds op's (only) result; for the evaluators' last line. */
bool eval_set_result(Interp *in, const Op *op, Tensor *r) {
    map_put(in->arena, &in->values, op->results[0], r);
    return true;
}

/* Rounding of a computed value to its type: floats only in emulated mode. */
double eval_round(Interp *in, ScalarKind k, double x) {
    if (in->exact && scalar_is_float(k))
        return x;
    return round_to(k, x);
}

/* ---- scalar semantics, shared by tensors and hooks ---------------------- */

Pred eval_pred(const Op *op) {
    static const char *const names[] = {"lt", "le", "gt", "ge", "eq", "ne"};
    Attr *a = op_attr(op, "pred");
    for (int i = 0; i < 6; i++)
        if (strcmp(a->s, names[i]) == 0)
            return (Pred)i;
    unreachable();
}

static double gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double gelu_tanh(double x) {
    return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

/* One element of an elementwise op; k is the operands' element type. */
bool eval_apply(Interp *in, const Op *op, Pred pred, ScalarKind k, const double *x, double *r) {
    bool ints = scalar_is_int(k);
    switch (op->kind) {
    case OP_ADD: *r = x[0] + x[1]; return true;
    case OP_SUB: *r = x[0] - x[1]; return true;
    case OP_MUL: *r = x[0] * x[1]; return true;
    case OP_DIV:
        if (ints && x[1] == 0)
            return eval_fail(in, op, "integer division by zero");
        *r = ints ? trunc(x[0] / x[1]) : x[0] / x[1];
        return true;
    case OP_FLOORDIV:
    case OP_REM:
        if (x[1] == 0)
            return eval_fail(in, op, "integer division by zero");
        *r = floor(x[0] / x[1]);
        if (op->kind == OP_REM)
            *r = x[0] - *r * x[1];
        return true;
    case OP_MIN: *r = nan_min(x[0], x[1]); return true;
    case OP_MAX: *r = nan_max(x[0], x[1]); return true;
    case OP_NEG: *r = -x[0]; return true;
    case OP_CMP:
        switch (pred) {
        case P_LT: *r = x[0] < x[1]; return true;
        case P_LE: *r = x[0] <= x[1]; return true;
        case P_GT: *r = x[0] > x[1]; return true;
        case P_GE: *r = x[0] >= x[1]; return true;
        case P_EQ: *r = x[0] == x[1]; return true;
        case P_NE: *r = x[0] != x[1]; return true;
        }
        unreachable();
    case OP_AND: *r = x[0] != 0 && x[1] != 0; return true;
    case OP_OR: *r = x[0] != 0 || x[1] != 0; return true;
    case OP_NOT: *r = x[0] == 0; return true;
    case OP_SELECT: *r = x[0] != 0 ? x[1] : x[2]; return true;
    case OP_CAST: *r = x[0]; return true;   /* the rounding to the result type converts */
    case OP_EXP: *r = exp(x[0]); return true;
    case OP_EXP2: *r = exp2(x[0]); return true;
    case OP_LOG: *r = log(x[0]); return true;
    case OP_SQRT: *r = sqrt(x[0]); return true;
    case OP_RSQRT: *r = 1 / sqrt(x[0]); return true;
    case OP_TANH: *r = tanh(x[0]); return true;
    case OP_ABS: *r = fabs(x[0]); return true;
    case OP_SIGMOID: *r = 1 / (1 + exp(-x[0])); return true;
    case OP_SILU: *r = x[0] / (1 + exp(-x[0])); return true;
    case OP_GELU: *r = gelu(x[0]); return true;
    case OP_GELU_TANH: *r = gelu_tanh(x[0]); return true;
    case OP_RELU: *r = x[0] > 0 ? x[0] : 0; return true;
    default: break;
    }
    return eval_fail(in, op, "not an elementwise op");
}

static bool eval_op(Interp *in, const Op *op) {
    switch (op->kind) {
    case OP_MATMUL: return eval_matmul(in, op);
    case OP_TRANSPOSE: return eval_transpose(in, op);
    case OP_EXPAND_HEADS: return eval_expand_heads(in, op);
    case OP_SUM_HEADS: return eval_sum_heads(in, op);
    case OP_PAGES: return eval_pages(in, op);
    case OP_PAD: return eval_pad(in, op);
    case OP_UNPAD: return eval_unpad(in, op);
    case OP_RESHAPE: return eval_reshape(in, op);
    case OP_SCORE_MOD:
    case OP_MASK: return eval_hook(in, op);
    case OP_SOFTMAX:
    case OP_REDUCE: return eval_rows(in, op);
    case OP_CONSTANT:
    case OP_NUM_SMS:
    case OP_DIM: return eval_scalar_op(in, op);
    case OP_DEFINE_DIM: {   /* bound from here on, as the runtime's let line binds it */
        double v = eval_get(in, op->operands[0])->data[0];
        if (v < 0)
            return eval_fail(in, op, "dimension '%s' would be %g", op_attr(op, "name")->s, v);
        map_put(in->arena, &in->bind->dims, op_attr(op, "name")->s, (void *)(intptr_t)v);
        return true;
    }
    case OP_ATTENTION: return eval_attention(in, op);
    case OP_FUSED_GEMM: return eval_fused_gemm(in, op);
    case OP_FUSED_MAP: return eval_fused_map(in, op);
    case OP_LAUNCH: return eval_launch(in, op);
    case OP_CHOOSE:   /* both sides ran; the chosen one's results go on (tests take sizes on each side) */
        map_put(in->arena, &in->values, op->results[0],
                eval_get(in, op->operands[eval_get(in, op->operands[0])->data[0] != 0 ? 1 : 2]));
        return true;
    case OP_ALLOC: return eval_alloc(in, op);
    case OP_COPY_ASYNC: return eval_copy_async(in, op);
    case OP_WAIT: return eval_wait(in, op);
    case OP_ASSERT:
        if (eval_get(in, op->operands[0])->data[0] == 0)
            return eval_fail(in, op, "%s", op_attr(op, "message")->s);
        return true;
    case OP_FOR: return eval_for(in, op);
    case OP_LOAD: return eval_load(in, op);
    case OP_STORE: return eval_store(in, op);
    case OP_ATOMIC_ADD: return eval_atomic_add(in, op);
    case OP_ATTENTION_BWD: return eval_attention_backward(in, op);
    case OP_GATHER: return eval_gather(in, op);
    case OP_SPLAT:
    case OP_IOTA:
    case OP_TRANS:
    case OP_DOT:
    case OP_TILE_REDUCE:
    case OP_LANE_SUM: return eval_tile_misc(in, op);
    default:
        if (op_kind_has(op->kind, OPF_ELEMENTWISE))
            return eval_elementwise(in, op);
        return eval_fail(in, op, "the interpreter cannot run this op");
    }
}

/* A stage the consumers release (warp-roles' nv.free_after) holds poison
 * from then on: the producer may be filling it again. */
static void poison_stage(Copy *c) {
    int64_t n = 1;
    for (int a = 1; a < c->dst->rank; a++)
        n *= c->dst->dims[a];
    for (int64_t e = 0; e < n; e++)
        c->dst->data[c->stage * n + e] = interp_poison();
}

/* Runs a block up to its terminator; the terminator's operands go to
 * `yielded` (when given). */
bool eval_block(Interp *in, const Block *b, Tensor **yielded) {
    enum { MAX_HELD = 16 };
    struct Held {
        Copy *copy;
        int64_t ops_left;
    } held[MAX_HELD];   /* stages to release, as ops pass */
    int nheld = 0;
    for_each_op(op, b) {
        if (op_info[op->kind].flags & OPF_TERMINATOR) {
            for (int i = 0; yielded && i < op->noperands; i++)
                yielded[i] = eval_get(in, op->operands[i]);
            return true;
        }
        if (!eval_op(in, op))
            return false;
        for (int i = 0; i < nheld; i++)
            if (--held[i].ops_left == 0) {
                poison_stage(held[i].copy);
                held[i--] = held[--nheld];
            }
        Attr *after = op->kind == OP_WAIT ? op_attr(op, "nv.free_after") : NULL;
        Copy *c = after ? waited_copy(in, op) : NULL;
        if (c && after->i == 0)
            poison_stage(c);
        else if (c && nheld < MAX_HELD)
            held[nheld++] = (struct Held){c, after->i};
        else if (c)
            return eval_fail(in, op, "more than 16 stages held at once");
    }
    return eval_fail(in, b->parent ? b->parent->parent : NULL, "a block without a terminator");
}

bool interp_func(Interp *in, const Op *func, Tensor **inputs, Tensor **outputs) {
    const Block *body = op_body(func);
    for (int i = 0; i < body->nargs; i++)
        map_put(in->arena, &in->values, body->args[i], inputs[i]);
    return eval_block(in, body, outputs);
}
