/* eval.c — evaluates a builtin.func op by op.
 *
 * Every value is a Tensor of doubles (scalars are rank 0). In emulated mode
 * each result is rounded to its IR element type, matmuls round their running
 * sum to the accumulator type after every product, and hooks compute in f32;
 * in exact mode nothing is rounded (integers and bools stay exact either way).
 * Reductions and softmax compute in double and round once. Hook regions run
 * once per score, through a precomputed plan of slots (no lookups per element).
 */
#include "interp/interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool fail(Interp *in, const Op *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(Interp *in, const Op *op, const char *fmt, ...) {
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
static double nan_max(double a, double b) { return isnan(a) ? a : isnan(b) ? b : a >= b ? a : b; }
static double nan_min(double a, double b) { return isnan(a) ? a : isnan(b) ? b : a <= b ? a : b; }

static int type_rank(const Type *t) { return t->kind == TY_SCALAR ? 0 : t->rank; }

static Tensor *get(Interp *in, const Value *v) {
    Tensor *t = map_get(&in->values, v);
    if (!t)
        die("interpreter: value without a tensor");
    return t;
}

static Tensor *new_result_n(Interp *in, const Op *op, int i) {
    const Type *t = op->results[i]->type;
    int64_t dims[MAX_RANK];
    if (!concrete_shape(in, t, dims))
        return NULL;
    return tensor_new(in->arena, t->elem, type_rank(t), dims);
}

static Tensor *new_result(Interp *in, const Op *op) { return new_result_n(in, op, 0); }

/* Binds op's (only) result; for the evaluators' last line. */
static bool set_result(Interp *in, const Op *op, Tensor *r) {
    map_put(in->arena, &in->values, op->results[0], r);
    return true;
}

/* Rounding of a computed value to its type: floats only in emulated mode. */
static double store(Interp *in, ScalarKind k, double x) {
    if (in->exact && scalar_is_float(k))
        return x;
    return round_to(k, x);
}

/* ---- scalar semantics, shared by tensors and hooks ---------------------- */

typedef enum Pred { P_LT, P_LE, P_GT, P_GE, P_EQ, P_NE } Pred;

static Pred pred_of(const Op *op) {
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
static bool apply(Interp *in, const Op *op, Pred pred, ScalarKind k, const double *x, double *r) {
    bool ints = scalar_is_int(k);
    switch (op->kind) {
    case OP_ADD: *r = x[0] + x[1]; return true;
    case OP_SUB: *r = x[0] - x[1]; return true;
    case OP_MUL: *r = x[0] * x[1]; return true;
    case OP_DIV:
        if (ints && x[1] == 0)
            return fail(in, op, "integer division by zero");
        *r = ints ? trunc(x[0] / x[1]) : x[0] / x[1];
        return true;
    case OP_FLOORDIV:
    case OP_REM:
        if (x[1] == 0)
            return fail(in, op, "integer division by zero");
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
    return fail(in, op, "not an elementwise op");
}

/* ---- elementwise ops over tensors with broadcasting ---------------------- */

/* Strides of t seen through a broadcast to a result of rank `rank`. */
static void broadcast_strides(const Tensor *t, int rank, int64_t *strides) {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        int ti = i - (rank - t->rank);
        if (ti < 0) {
            strides[i] = 0;
            continue;
        }
        strides[i] = t->dims[ti] == 1 ? 0 : s;
        s *= t->dims[ti];
    }
}

static bool eval_elementwise(Interp *in, const Op *op) {
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    int n = op->noperands;
    int64_t strides[3][MAX_RANK];
    Tensor *args[3];
    for (int i = 0; i < n; i++) {
        args[i] = get(in, op->operands[i]);
        broadcast_strides(args[i], r->rank, strides[i]);
    }
    ScalarKind k = op->operands[n - 1]->type->elem;
    Pred pred = op->kind == OP_CMP ? pred_of(op) : P_LT;
    int64_t idx[MAX_RANK] = {0};
    for (int64_t e = 0; e < r->size; e++) {
        double x[3];
        for (int i = 0; i < n; i++) {
            int64_t off = 0;
            for (int d = 0; d < r->rank; d++)
                off += idx[d] * strides[i][d];
            x[i] = args[i]->data[off];
        }
        double v = 0;
        if (!apply(in, op, pred, k, x, &v))
            return false;
        r->data[e] = store(in, r->dtype, v);
        for (int d = r->rank - 1; d >= 0 && ++idx[d] == r->dims[d]; d--)
            idx[d] = 0;
    }
    return set_result(in, op, r);
}

/* ---- hooks: a plan of slots, run once per score ------------------------- */

typedef struct PlanOp {
    const Op *op;
    int result, operands[4];
    Pred pred;
    ScalarKind k;          /* operands' element type */
    double value;          /* constants and dims */
    Tensor *tensor;        /* attn.extract */
} PlanOp;

typedef struct Plan {
    int nslots, nops;
    PlanOp *ops;
    int yield;             /* slot of the yielded value */
    double *slots;
} Plan;

static bool plan_region(Interp *in, const Block *b, Plan *plan) {
    Map slot;
    map_init(&slot, false);
    int n = 0;
    for (int i = 0; i < b->nargs; i++)
        map_put(in->arena, &slot, b->args[i], (void *)(intptr_t)++n);
    int nops = 0;
    for_each_op(op, b) nops++;
    plan->ops = NEW_ARRAY(in->arena, PlanOp, nops);
    plan->nops = 0;
    for_each_op(op, b) {
        if (op->kind == OP_YIELD) {
            plan->yield = (int)(intptr_t)map_get(&slot, op->operands[0]) - 1;
            break;
        }
        PlanOp *p = &plan->ops[plan->nops++];
        p->op = op;
        for (int i = 0; i < op->noperands && i < 4; i++)
            p->operands[i] = (int)(intptr_t)map_get(&slot, op->operands[i]) - 1;
        p->k = op->noperands ? op->operands[op->noperands - 1]->type->elem : SK_NONE;
        if (op->kind == OP_CMP)
            p->pred = pred_of(op);
        if (op->kind == OP_CONSTANT) {
            Attr *v = op_attr(op, "value");
            p->value = store(in, op->results[0]->type->elem, v->kind == AT_FLOAT ? v->f : (double)v->i);
        } else if (op->kind == OP_DIM) {
            p->value = (double)(intptr_t)map_get(&in->bind->dims, op_attr(op, "name")->s);
            if (p->value <= 0)
                return fail(in, op, "dimension '%s' is not bound", op_attr(op, "name")->s);
        } else if (op->kind == OP_EXTRACT) {
            p->tensor = get(in, op->operands[0]);
            if (op->noperands - 1 > 4)
                return fail(in, op, "the interpreter reads tensors of at most 4 dimensions in hooks");
            for (int i = 1; i < op->noperands; i++)
                p->operands[i - 1] = (int)(intptr_t)map_get(&slot, op->operands[i]) - 1;
        } else if (!op_kind_has(op->kind, OPF_ELEMENTWISE)) {
            return fail(in, op, "cannot run inside a hook");
        }
        p->result = n;
        map_put(in->arena, &slot, op->results[0], (void *)(intptr_t)++n);
    }
    plan->nslots = n;
    plan->slots = NEW_ARRAY(in->arena, double, n + 1);
    return true;
}

/* Runs the plan with the hook's arguments already in slots 0..nargs-1. */
static bool run_plan(Interp *in, Plan *plan, double *result) {
    double *s = plan->slots;
    for (int i = 0; i < plan->nops; i++) {
        PlanOp *p = &plan->ops[i];
        const Op *op = p->op;
        double v = 0;
        if (op->kind == OP_CONSTANT || op->kind == OP_DIM) {
            v = p->value;
        } else if (op->kind == OP_EXTRACT) {
            int64_t off = 0;
            for (int d = 0; d < p->tensor->rank; d++) {
                double ix = s[p->operands[d]];
                if (ix < 0 || ix >= (double)p->tensor->dims[d])
                    return fail(in, op, "index %.0f is out of bounds for dimension %d of size %lld", ix,
                                d, (long long)p->tensor->dims[d]);
                off = off * p->tensor->dims[d] + (int64_t)ix;
            }
            v = p->tensor->data[off];
        } else {
            double x[3] = {0, 0, 0};
            for (int j = 0; j < op->noperands && j < 3; j++)
                x[j] = s[p->operands[j]];
            if (!apply(in, op, p->pred, p->k, x, &v))
                return false;
        }
        s[p->result] = store(in, op->results[0]->type->elem, v);
    }
    *result = s[plan->yield];
    return true;
}

/* attn.score_mod and attn.mask: the hook over every (b, h, i, j). */
static bool eval_hook(Interp *in, const Op *op) {
    Tensor *x = get(in, op->operands[0]);
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    Plan plan = {0};
    if (!plan_region(in, op->regions[0].blocks[0], &plan))
        return false;
    bool score = op->kind == OP_SCORE_MOD;
    int64_t e = 0;
    for (int64_t b = 0; b < x->dims[0]; b++)
        for (int64_t h = 0; h < x->dims[1]; h++)
            for (int64_t i = 0; i < x->dims[2]; i++)
                for (int64_t j = 0; j < x->dims[3]; j++, e++) {
                    double *a = plan.slots + (score ? 1 : 0);
                    if (score)
                        plan.slots[0] = store(in, SK_F32, x->data[e]);
                    a[0] = (double)b, a[1] = (double)h, a[2] = (double)i, a[3] = (double)j;
                    double v = 0;
                    if (!run_plan(in, &plan, &v))
                        return false;
                    r->data[e] = score ? store(in, r->dtype, v) : v != 0 ? x->data[e] : -INFINITY;
                }
    return set_result(in, op, r);
}

/* ---- structural tensor ops ---------------------------------------------- */

/* R[M, N] += A[M, K] · B[K, N], each element summed in order of k and
 * rounded to `acc` after every product (in emulated mode). Loops run m, k, n
 * so the inner loop streams rows; an f32 accumulator runs in float, which
 * rounds exactly as round_to(f32, sum + product) does (the product of two
 * 16-bit floats is exact in float). */
static void matmul_acc(Interp *in, ScalarKind acc, const double *A, const double *B, double *R, int64_t M,
                       int64_t K, int64_t N) {
    if (in->exact || acc == SK_F64) {
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++) {
                double x = A[m * K + k];
                for (int64_t n = 0; n < N; n++)
                    R[m * N + n] += x * B[k * N + n];
            }
        return;
    }
    if (acc == SK_F32) {
        int64_t kn = K * N;
        float *row = malloc(sizeof(float) * (size_t)(N > 0 ? N : 1));
        float *bf = malloc(sizeof(float) * (size_t)(kn > 0 ? kn : 1));
        bool exact_in_float = true;   /* inputs of 16-bit types convert exactly */
        for (int64_t e = 0; e < K * N; e++) {
            bf[e] = (float)B[e];
            exact_in_float &= (double)bf[e] == B[e] || isnan(B[e]);
        }
        for (int64_t e = 0; e < M * K && exact_in_float; e++)
            exact_in_float = (double)(float)A[e] == A[e] || isnan(A[e]);
        if (exact_in_float) {
            for (int64_t m = 0; m < M; m++) {
                for (int64_t n = 0; n < N; n++)
                    row[n] = (float)R[m * N + n];
                for (int64_t k = 0; k < K; k++) {
                    float x = (float)A[m * K + k];
                    for (int64_t n = 0; n < N; n++)
                        row[n] = row[n] + x * bf[k * N + n];
                }
                for (int64_t n = 0; n < N; n++)
                    R[m * N + n] = row[n];
            }
            free(row);
            free(bf);
            return;
        }
        free(row);
        free(bf);
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            double x = A[m * K + k];
            for (int64_t n = 0; n < N; n++)
                R[m * N + n] = store(in, acc, R[m * N + n] + x * B[k * N + n]);
        }
}

static bool eval_matmul(Interp *in, const Op *op) {
    Tensor *a = get(in, op->operands[0]), *b = get(in, op->operands[1]);
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    ScalarKind acc = op_attr(op, "acc")->type->elem;
    int64_t M = a->dims[a->rank - 2], K = a->dims[a->rank - 1], N = b->dims[b->rank - 1];
    int batch_rank = r->rank - 2;
    /* batch strides of a and b (in matrices), broadcast to the result's batch */
    Tensor ab = *a, bb = *b;
    ab.rank -= 2;
    bb.rank -= 2;
    int64_t sa[MAX_RANK], sb[MAX_RANK], idx[MAX_RANK] = {0};
    broadcast_strides(&ab, batch_rank, sa);
    broadcast_strides(&bb, batch_rank, sb);
    int64_t mn = M * N, nbatch = mn > 0 ? r->size / mn : 0;
    for (int64_t bt = 0; bt < nbatch; bt++) {
        int64_t oa = 0, ob = 0;
        for (int d = 0; d < batch_rank; d++) {
            oa += idx[d] * sa[d];
            ob += idx[d] * sb[d];
        }
        const double *A = a->data + oa * M * K, *B = b->data + ob * K * N;
        double *R = r->data + bt * M * N;
        memset(R, 0, sizeof(double) * (size_t)(M * N));
        matmul_acc(in, acc, A, B, R, M, K, N);
        for (int64_t e = 0; e < M * N; e++)
            R[e] = store(in, r->dtype, R[e]);
        for (int d = batch_rank - 1; d >= 0 && ++idx[d] == r->dims[d]; d--)
            idx[d] = 0;
    }
    return set_result(in, op, r);
}

static bool eval_transpose(Interp *in, const Op *op) {
    Tensor *x = get(in, op->operands[0]);
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    Attr *perm = op_attr(op, "perm");
    int64_t xs[MAX_RANK], idx[MAX_RANK] = {0};
    int64_t s = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        xs[d] = s;
        s *= x->dims[d];
    }
    for (int64_t e = 0; e < r->size; e++) {
        int64_t off = 0;
        for (int d = 0; d < r->rank; d++)
            off += idx[d] * xs[perm->elems[d]->i];
        r->data[e] = x->data[off];
        for (int d = r->rank - 1; d >= 0 && ++idx[d] == r->dims[d]; d--)
            idx[d] = 0;
    }
    return set_result(in, op, r);
}

static bool eval_expand_heads(Interp *in, const Op *op) {
    Tensor *x = get(in, op->operands[0]);
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    int64_t hk = x->dims[1], hq = r->dims[1];
    if (hq % hk)
        return fail(in, op, "query heads (%lld) are not a multiple of kv heads (%lld)", (long long)hq,
                    (long long)hk);
    int64_t group = hq / hk, inner = r->dims[2] * r->dims[3];
    for (int64_t b = 0; b < r->dims[0]; b++)
        for (int64_t h = 0; h < hq; h++)
            memcpy(r->data + (b * hq + h) * inner, x->data + (b * hk + h / group) * inner,
                   sizeof(double) * (size_t)inner);
    return set_result(in, op, r);
}

/* GQA's adjoint: each kv head gets the sum over its group of query heads,
 * summed exactly and rounded once. */
static bool eval_sum_heads(Interp *in, const Op *op) {
    Tensor *x = get(in, op->operands[0]);
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    int64_t hq = x->dims[1], hk = r->dims[1];
    if (hk == 0 || hq % hk)
        return fail(in, op, "query heads (%lld) are not a multiple of kv heads (%lld)", (long long)hq,
                    (long long)hk);
    int64_t group = hq / hk, inner = r->dims[2] * r->dims[3];
    for (int64_t b = 0; b < r->dims[0]; b++)
        for (int64_t h = 0; h < hk; h++)
            for (int64_t e = 0; e < inner; e++) {
                double sum = 0;
                for (int64_t g = 0; g < group; g++)
                    sum += x->data[(b * hq + h * group + g) * inner + e];
                r->data[(b * hk + h) * inner + e] = store(in, r->dtype, sum);
            }
    return set_result(in, op, r);
}

static bool eval_reshape(Interp *in, const Op *op) {
    Tensor *x = get(in, op->operands[0]);
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    memcpy(r->data, x->data, sizeof(double) * (size_t)r->size);
    return set_result(in, op, r);
}

/* softmax and reductions work on rows of the last dimension. */
static bool eval_rows(Interp *in, const Op *op) {
    Tensor *x = get(in, op->operands[0]);
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    int64_t n = x->dims[x->rank - 1], rows = n ? x->size / n : 0;
    const char *kind = op->kind == OP_REDUCE ? op_attr(op, "kind")->s : "softmax";
    for (int64_t row = 0; row < rows; row++) {
        const double *v = x->data + row * n;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++)
            m = nan_max(m, v[j]);
        if (strcmp(kind, "max") == 0) {
            r->data[row] = store(in, r->dtype, m);
            continue;
        }
        if (strcmp(kind, "sum") == 0 || strcmp(kind, "mean") == 0) {
            for (int64_t j = 0; j < n; j++)
                sum += v[j];
            r->data[row] = store(in, r->dtype, kind[0] == 'm' ? sum / (double)n : sum);
            continue;
        }
        /* softmax / logsumexp; a row of only -inf is all masked */
        if (m == -INFINITY) {
            if (op->kind == OP_SOFTMAX)
                memset(r->data + row * n, 0, sizeof(double) * (size_t)n);
            else
                r->data[row] = -INFINITY;
            continue;
        }
        for (int64_t j = 0; j < n; j++)
            sum += exp(v[j] - m);
        if (op->kind == OP_REDUCE)
            r->data[row] = store(in, r->dtype, m + log(sum));
        else
            for (int64_t j = 0; j < n; j++)
                r->data[row * n + j] = store(in, r->dtype, exp(v[j] - m) / sum);
    }
    return set_result(in, op, r);
}

static bool eval_scalar_op(Interp *in, const Op *op) {
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    if (op->kind == OP_CONSTANT) {
        Attr *v = op_attr(op, "value");
        r->data[0] = store(in, r->dtype, v->kind == AT_FLOAT ? v->f : (double)v->i);
    } else {  /* attn.dim */
        intptr_t v = (intptr_t)map_get(&in->bind->dims, op_attr(op, "name")->s);
        if (v <= 0)
            return fail(in, op, "dimension '%s' is not bound", op_attr(op, "name")->s);
        r->data[0] = (double)v;
    }
    return set_result(in, op, r);
}

/* ---- fused ops: the same arithmetic, in the same order, as the ops they
 * replace, so that fusion keeps results bit for bit in emulation ---------- */

/* A score after the hooks, as attn.score_mod and attn.mask give it: the
 * score hook on the f32 score `x` (rounded back to acc), then -inf where the
 * mask hides it. NULL plans: no such hook. False on a run-time error. */
static bool hooked_score(Interp *in, Plan *score, Plan *mask, ScalarKind acc, double x, int64_t b, int64_t h,
                         int64_t i, int64_t j, double *out) {
    if (score) {
        score->slots[0] = store(in, SK_F32, x);
        score->slots[1] = (double)b, score->slots[2] = (double)h;
        score->slots[3] = (double)i, score->slots[4] = (double)j;
        if (!run_plan(in, score, &x))
            return false;
        x = store(in, acc, x);
    }
    if (mask) {
        double keep;
        mask->slots[0] = (double)b, mask->slots[1] = (double)h;
        mask->slots[2] = (double)i, mask->slots[3] = (double)j;
        if (!run_plan(in, mask, &keep))
            return false;
        if (keep == 0)
            x = -INFINITY;
    }
    *out = x;
    return true;
}

/* attn.attention: per (b, h, i), the score row in `acc`, the hooks, the
 * softmax, P rounded to q's type, P·V in `acc`; lse from the masked row. */
static bool eval_attention(Interp *in, const Op *op) {
    Tensor *q = get(in, op->operands[0]), *k = get(in, op->operands[1]), *v = get(in, op->operands[2]);
    Tensor *o = new_result(in, op);
    Tensor *lse = NULL;
    if (!o)
        return false;
    if (op->nresults == 2) {
        int64_t dims[MAX_RANK];
        if (!concrete_shape(in, op->results[1]->type, dims))
            return false;
        lse = tensor_new(in->arena, SK_F32, 3, dims);
    }
    ScalarKind acc = op_attr(op, "acc")->type->elem;
    double scale = store(in, acc, op_attr(op, "scale")->f);
    Plan score = {0}, mask = {0};
    bool has_score = op->regions[0].nblocks > 0, has_mask = op->regions[1].nblocks > 0;
    if ((has_score && !plan_region(in, op->regions[0].blocks[0], &score)) ||
        (has_mask && !plan_region(in, op->regions[1].blocks[0], &mask)))
        return false;
    int64_t B = q->dims[0], H = q->dims[1], NQ = q->dims[2], D = q->dims[3];
    int64_t HK = k->dims[1], NK = k->dims[2], DV = v->dims[3];
    if (H % HK)
        return fail(in, op, "query heads (%lld) are not a multiple of kv heads (%lld)", (long long)H,
                    (long long)HK);
    double *s = NEW_ARRAY(in->arena, double, NK + 1), *p = NEW_ARRAY(in->arena, double, NK + 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            int64_t kh = h / (H / HK);
            const double *Q = q->data + (b * H + h) * NQ * D;
            const double *K = k->data + (b * HK + kh) * NK * D, *V = v->data + (b * HK + kh) * NK * DV;
            for (int64_t i = 0; i < NQ; i++) {
                double m = -INFINITY;
                for (int64_t j = 0; j < NK; j++) {
                    double sum = 0;
                    for (int64_t d = 0; d < D; d++)
                        sum = store(in, acc, sum + Q[i * D + d] * K[j * D + d]);
                    double x;
                    if (!hooked_score(in, has_score ? &score : NULL, has_mask ? &mask : NULL, acc,
                                      store(in, acc, sum * scale), b, h, i, j, &x))
                        return false;
                    s[j] = x;
                    m = nan_max(m, x);
                }
                double total = 0;
                for (int64_t j = 0; j < NK && m != -INFINITY; j++)
                    total += exp(s[j] - m);
                for (int64_t j = 0; j < NK; j++)  /* softmax in acc, then P in q's type */
                    p[j] = m == -INFINITY ? 0 : store(in, q->dtype, store(in, acc, exp(s[j] - m) / total));
                if (lse) {
                    double lm = -INFINITY, lt = 0;   /* logsumexp of the f32 scores */
                    for (int64_t j = 0; j < NK; j++) {
                        s[j] = store(in, SK_F32, s[j]);
                        lm = nan_max(lm, s[j]);
                    }
                    for (int64_t j = 0; j < NK && lm != -INFINITY; j++)
                        lt += exp(s[j] - lm);
                    lse->data[(b * H + h) * NQ + i] = lm == -INFINITY ? -INFINITY : store(in, SK_F32, lm + log(lt));
                }
                double *O = o->data + ((b * H + h) * NQ + i) * DV;
                matmul_acc(in, acc, p, V, O, 1, NK, DV);   /* O starts at 0: a new tensor */
                for (int64_t d = 0; d < DV; d++)
                    O[d] = store(in, o->dtype, O[d]);
            }
        }
    map_put(in->arena, &in->values, op->results[0], o);
    if (lse)
        map_put(in->arena, &in->values, op->results[1], lse);
    return true;
}

/* attn.attention_backward: per (b, h), the unfused backward's arithmetic
 * (passes/backward.c) in the same roundings: S in acc, P = exp(S' − lse)
 * in f32, the products in acc rounded to f32, dS in f32 then q's type; dk
 * and dv summed over each kv head's group exactly, rounded once. */
static bool eval_attention_backward(Interp *in, const Op *op) {
    Tensor *q = get(in, op->operands[0]), *k = get(in, op->operands[1]), *v = get(in, op->operands[2]);
    Tensor *o = get(in, op->operands[3]), *lse = get(in, op->operands[4]), *dout = get(in, op->operands[5]);
    Tensor *dq = new_result_n(in, op, 0), *dk = new_result_n(in, op, 1), *dv = new_result_n(in, op, 2);
    if (!dq || !dk || !dv)
        return false;
    ScalarKind acc = op_attr(op, "acc")->type->elem, dt = q->dtype, F = SK_F32;
    double scale = store(in, acc, op_attr(op, "scale")->f), scale32 = store(in, F, op_attr(op, "scale")->f);
    Plan score = {0}, grad = {0}, mask = {0};
    bool has_score = op->regions[0].nblocks > 0, has_mask = op->regions[2].nblocks > 0;
    if ((has_score && (!plan_region(in, op->regions[0].blocks[0], &score) ||
                       !plan_region(in, op->regions[1].blocks[0], &grad))) ||
        (has_mask && !plan_region(in, op->regions[2].blocks[0], &mask)))
        return false;
    int64_t B = q->dims[0], H = q->dims[1], NQ = q->dims[2], D = q->dims[3];
    int64_t HK = k->dims[1], NK = k->dims[2], DV = v->dims[3];
    if (H % HK)
        return fail(in, op, "query heads (%lld) are not a multiple of kv heads (%lld)", (long long)H,
                    (long long)HK);
    int64_t G = H / HK;
    double *P = NEW_ARRAY(in->arena, double, NQ * NK + 1), *DS = NEW_ARRAY(in->arena, double, NQ * NK + 1);
    double *T = NEW_ARRAY(in->arena, double, NQ * NK + 1);   /* a transposed operand */
    double *R = NEW_ARRAY(in->arena, double, (NQ > NK ? NQ : NK) * (D > DV ? D : DV) + 1);
    double *dkx = NEW_ARRAY(in->arena, double, NK * D + 1), *dvx = NEW_ARRAY(in->arena, double, NK * DV + 1);
    for (int64_t b = 0; b < B; b++)
        for (int64_t kh = 0; kh < HK; kh++) {
            memset(dkx, 0, sizeof(double) * (size_t)(NK * D));
            memset(dvx, 0, sizeof(double) * (size_t)(NK * DV));
            const double *K = k->data + (b * HK + kh) * NK * D, *V = v->data + (b * HK + kh) * NK * DV;
            for (int64_t h = kh * G; h < kh * G + G; h++) {
                const double *Q = q->data + (b * H + h) * NQ * D, *O = o->data + (b * H + h) * NQ * DV;
                const double *dO = dout->data + (b * H + h) * NQ * DV, *L = lse->data + (b * H + h) * NQ;
                for (int64_t i = 0; i < NQ; i++) {
                    double delta = 0;
                    for (int64_t d = 0; d < DV; d++)
                        delta += store(in, F, dO[i * DV + d] * O[i * DV + d]);
                    delta = store(in, F, delta);
                    double lz = L[i] == -INFINITY ? 0 : L[i];
                    for (int64_t j = 0; j < NK; j++) {
                        double sum = 0, dp = 0;
                        for (int64_t d = 0; d < D; d++)
                            sum = store(in, acc, sum + Q[i * D + d] * K[j * D + d]);
                        for (int64_t d = 0; d < DV; d++)
                            dp = store(in, acc, dp + dO[i * DV + d] * V[j * DV + d]);
                        dp = store(in, F, dp);
                        double pre = store(in, acc, sum * scale), x, g = 1;
                        if (!hooked_score(in, has_score ? &score : NULL, has_mask ? &mask : NULL, acc, pre, b, h,
                                          i, j, &x))
                            return false;
                        if (has_score) {   /* the derivative, at the same arguments */
                            memcpy(grad.slots, score.slots, sizeof(double) * 5);
                            if (!run_plan(in, &grad, &g))
                                return false;
                            g = store(in, F, g);
                        }
                        double p = store(in, F, exp(store(in, F, store(in, F, x) - lz)));
                        double ds = store(in, F, p * store(in, F, dp - delta));
                        if (has_score)
                            ds = store(in, F, ds * g);
                        P[i * NK + j] = store(in, dt, p);
                        DS[i * NK + j] = store(in, dt, ds);
                    }
                }
                /* dq = scale · dS @ k */
                memset(R, 0, sizeof(double) * (size_t)(NQ * D));
                matmul_acc(in, acc, DS, K, R, NQ, NK, D);
                double *DQ = dq->data + (b * H + h) * NQ * D;
                for (int64_t e = 0; e < NQ * D; e++)
                    DQ[e] = store(in, dt, store(in, F, store(in, F, R[e]) * scale32));
                /* dk += dSᵀ @ q, dv += Pᵀ @ do (each head's rounded to f32) */
                for (int64_t i = 0; i < NQ; i++)
                    for (int64_t j = 0; j < NK; j++)
                        T[j * NQ + i] = DS[i * NK + j];
                memset(R, 0, sizeof(double) * (size_t)(NK * D));
                matmul_acc(in, acc, T, Q, R, NK, NQ, D);
                for (int64_t e = 0; e < NK * D; e++)
                    dkx[e] += store(in, F, R[e]);
                for (int64_t i = 0; i < NQ; i++)
                    for (int64_t j = 0; j < NK; j++)
                        T[j * NQ + i] = P[i * NK + j];
                memset(R, 0, sizeof(double) * (size_t)(NK * DV));
                matmul_acc(in, acc, T, dO, R, NK, NQ, DV);
                for (int64_t e = 0; e < NK * DV; e++)
                    dvx[e] += store(in, F, R[e]);
            }
            double *DK = dk->data + (b * HK + kh) * NK * D, *DVo = dv->data + (b * HK + kh) * NK * DV;
            for (int64_t e = 0; e < NK * D; e++)
                DK[e] = store(in, dt, store(in, F, store(in, F, dkx[e]) * scale32));
            for (int64_t e = 0; e < NK * DV; e++)
                DVo[e] = store(in, dt, store(in, F, dvx[e]));
        }
    for (int i = 0; i < 3; i++)
        map_put(in->arena, &in->values, op->results[i], i == 0 ? dq : i == 1 ? dk : dv);
    return true;
}

/* attn.fused_gemm: each product a @ b_i (b_i a 2-D weight) as attn.matmul
 * computes it, rounded to the region's argument type; then the region per
 * output element. */
static bool eval_fused_gemm(Interp *in, const Op *op) {
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    const Block *blk = op->regions[0].blocks[0];
    int n = (int)op_attr(op, "num_b")->i, nextra = op->noperands - 1 - n;
    ScalarKind acc = op_attr(op, "acc")->type->elem;
    Tensor *a = get(in, op->operands[0]);
    int64_t M = a->dims[a->rank - 2], K = a->dims[a->rank - 1], N = r->dims[r->rank - 1];
    Tensor **prod = NEW_ARRAY(in->arena, Tensor *, n);
    for (int i = 0; i < n; i++) {
        Tensor *b = get(in, op->operands[1 + i]);
        prod[i] = tensor_new(in->arena, blk->args[i]->type->elem, r->rank, r->dims);
        int64_t mn = M * N, nbatch = mn > 0 ? r->size / mn : 0;
        for (int64_t bt = 0; bt < nbatch; bt++) {   /* b is a 2-D weight: no batch */
            const double *A = a->data + bt * M * K, *Bm = b->data;
            for (int64_t m = 0; m < M; m++)
                for (int64_t c = 0; c < N; c++) {
                    double sum = 0;
                    for (int64_t k2 = 0; k2 < K; k2++)
                        sum = store(in, acc, sum + A[m * K + k2] * Bm[k2 * N + c]);
                    prod[i]->data[(bt * M + m) * N + c] = store(in, prod[i]->dtype, sum);
                }
        }
    }
    Plan plan = {0};
    if (!plan_region(in, blk, &plan))
        return false;
    int64_t strides[16][MAX_RANK], idx[MAX_RANK] = {0};
    if (nextra > 16)
        return fail(in, op, "the interpreter takes at most 16 extra operands");
    Tensor **extra = NEW_ARRAY(in->arena, Tensor *, nextra + 1);
    for (int i = 0; i < nextra; i++) {
        extra[i] = get(in, op->operands[1 + n + i]);
        broadcast_strides(extra[i], r->rank, strides[i]);
    }
    for (int64_t e = 0; e < r->size; e++) {
        for (int i = 0; i < n; i++)
            plan.slots[i] = prod[i]->data[e];
        for (int i = 0; i < nextra; i++) {
            int64_t off = 0;
            for (int d = 0; d < r->rank; d++)
                off += idx[d] * strides[i][d];
            plan.slots[n + i] = extra[i]->data[off];
        }
        double x;
        if (!run_plan(in, &plan, &x))
            return false;
        r->data[e] = store(in, r->dtype, x);
        for (int d = r->rank - 1; d >= 0 && ++idx[d] == r->dims[d]; d--)
            idx[d] = 0;
    }
    return set_result(in, op, r);
}

/* ---- the tile level ------------------------------------------------------- */

static bool eval_block(Interp *in, const Block *b, Tensor **yielded);

static Tensor *scalar_tensor(Interp *in, ScalarKind k, double x) {
    Tensor *t = tensor_new(in->arena, k, 0, NULL);
    t->data[0] = x;
    return t;
}

static int64_t index_operand(Interp *in, const Op *op, int i) {
    return (int64_t)get(in, op->operands[i])->data[0];
}

/* A box of a memref at the op's indices (tile.load, tile.store): the base
 * coordinates, read once, and which memref dimension each tile axis walks. */
typedef struct Box {
    const Tensor *mem, *tile;
    int64_t base[MAX_RANK];
    int axis_dim[MAX_RANK];
} Box;

static void box_init(Interp *in, const Op *op, const Tensor *mem, const Tensor *tile, int first_index, Box *b) {
    Attr *dims = op_attr(op, "dims");
    b->mem = mem;
    b->tile = tile;
    for (int d = 0; d < mem->rank; d++)
        b->base[d] = index_operand(in, op, first_index + d);
    for (int a = 0; a < tile->rank; a++)
        b->axis_dim[a] = (int)dims->elems[a]->i;
}

/* The memref offset of tile element `e`; -1 when it falls outside the memref. */
static int64_t box_offset(const Box *b, int64_t e) {
    int64_t coord[MAX_RANK];
    memcpy(coord, b->base, sizeof(int64_t) * (size_t)b->mem->rank);
    for (int a = b->tile->rank - 1; a >= 0; a--) {
        int64_t t = e % b->tile->dims[a];
        e /= b->tile->dims[a];
        if (b->axis_dim[a] >= 0)
            coord[b->axis_dim[a]] += t;
    }
    int64_t off = 0;
    for (int d = 0; d < b->mem->rank; d++) {
        if (coord[d] < 0 || coord[d] >= b->mem->dims[d])
            return -1;
        off = off * b->mem->dims[d] + coord[d];
    }
    return off;
}

static bool eval_load(Interp *in, const Op *op) {
    Tensor *mem = get(in, op->operands[0]), *r = new_result(in, op);
    if (!r)
        return false;
    Attr *pad = op_attr(op, "pad");
    double fill = pad ? (pad->kind == AT_FLOAT ? pad->f : (double)pad->i) : 0;
    Box box;
    box_init(in, op, mem, r, 1, &box);
    for (int64_t e = 0; e < r->size; e++) {
        int64_t off = box_offset(&box, e);
        r->data[e] = off < 0 ? fill : mem->data[off];
        /* memory nothing wrote: a stage read before its copy landed (a
         * missing or misplaced tile.wait), a temporary read before its kernel */
        if (off >= 0 && interp_is_poison(r->data[e]))
            return fail(in, op, "reads memory that nothing wrote (a copy not waited for, or a buffer not yet "
                                "stored)");
    }
    return set_result(in, op, r);
}

static bool eval_store(Interp *in, const Op *op) {
    Tensor *mem = get(in, op->operands[0]), *t = get(in, op->operands[1]);
    Box box;
    box_init(in, op, mem, t, 2, &box);
    for (int64_t e = 0; e < t->size; e++) {
        int64_t off = box_offset(&box, e);
        if (off >= 0)
            mem->data[off] = store(in, mem->dtype, t->data[e]);
    }
    return true;
}

/* tile.atomic_add: adds the tile into the memref (rounding each sum to the
 * memref's type); programs run one at a time here, so atomicity is free. */
static bool eval_atomic_add(Interp *in, const Op *op) {
    Tensor *mem = get(in, op->operands[0]), *t = get(in, op->operands[1]);
    Box box;
    box_init(in, op, mem, t, 2, &box);
    for (int64_t e = 0; e < t->size; e++) {
        int64_t off = box_offset(&box, e);
        if (off >= 0)
            mem->data[off] = store(in, mem->dtype, mem->data[off] + t->data[e]);
    }
    return true;
}

/* tile.gather: element-wise reads at index tiles; outside the memref reads 0
 * (padding lanes of a tile compute on indices past the end). */
static bool eval_gather(Interp *in, const Op *op) {
    Tensor *mem = get(in, op->operands[0]), *r = new_result(in, op);
    if (!r)
        return false;
    int64_t strides[MAX_RANK][MAX_RANK], idx[MAX_RANK] = {0};
    Tensor *ix[MAX_RANK];
    for (int d = 0; d < mem->rank; d++) {
        ix[d] = get(in, op->operands[1 + d]);
        broadcast_strides(ix[d], r->rank, strides[d]);
    }
    for (int64_t e = 0; e < r->size; e++) {
        int64_t off = 0;
        bool inside = true;
        for (int d = 0; d < mem->rank; d++) {
            int64_t o = 0;
            for (int a = 0; a < r->rank; a++)
                o += idx[a] * strides[d][a];
            int64_t c = (int64_t)ix[d]->data[o];
            inside &= c >= 0 && c < mem->dims[d];
            off = off * mem->dims[d] + c;
        }
        r->data[e] = inside ? mem->data[off] : 0;
        for (int a = r->rank - 1; a >= 0 && ++idx[a] == r->dims[a]; a--)
            idx[a] = 0;
    }
    return set_result(in, op, r);
}

static bool eval_tile_misc(Interp *in, const Op *op) {
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    if (op->kind == OP_SPLAT) {
        double x = get(in, op->operands[0])->data[0];
        for (int64_t e = 0; e < r->size; e++)
            r->data[e] = x;
    } else if (op->kind == OP_IOTA) {
        int axis = (int)op_attr(op, "axis")->i;
        int64_t inner = 1;
        for (int d = axis + 1; d < r->rank; d++)
            inner *= r->dims[d];
        for (int64_t e = 0; e < r->size; e++)
            r->data[e] = (double)((e / inner) % r->dims[axis]);
    } else if (op->kind == OP_LANE_SUM) {   /* the target's bookkeeping: the value is the operand's */
        memcpy(r->data, get(in, op->operands[0])->data, sizeof(double) * (size_t)r->size);
    } else if (op->kind == OP_TRANS) {
        Tensor *x = get(in, op->operands[0]);
        for (int64_t i = 0; i < r->dims[0]; i++)
            for (int64_t j = 0; j < r->dims[1]; j++)
                r->data[i * r->dims[1] + j] = x->data[j * x->dims[1] + i];
    } else if (op->kind == OP_DOT) {
        Tensor *a = get(in, op->operands[0]), *b = get(in, op->operands[1]), *c = get(in, op->operands[2]);
        memcpy(r->data, c->data, sizeof(double) * (size_t)r->size);
        matmul_acc(in, r->dtype, a->data, b->data, r->data, a->dims[0], a->dims[1], b->dims[1]);
    } else {  /* tile.reduce over each row */
        Tensor *x = get(in, op->operands[0]);
        bool max = strcmp(op_attr(op, "kind")->s, "max") == 0;
        int64_t n = x->dims[1];
        for (int64_t i = 0; i < r->dims[0]; i++) {
            double acc = max ? -INFINITY : 0;
            for (int64_t j = 0; j < n; j++) {
                double v = x->data[i * n + j];
                acc = max ? nan_max(acc, v) : store(in, r->dtype, acc + v);
            }
            r->data[i] = acc;
        }
    }
    return set_result(in, op, r);
}

/* ---- shared buffers and async copies ---------------------------------------
 * A copy is only recorded when issued; it lands when a tile.wait for it (or
 * for a later copy: copies complete in order) runs. Until then the stage
 * holds whatever it held (NaN in a new buffer), so a missing wait or a wrong
 * stage index reads the wrong data, as it would on the GPU. */

typedef struct Copy {
    Tensor *src, *dst;
    int64_t stage, src_index[MAX_RANK];
    const Op *op;
    int64_t seq;
    bool done;
} Copy;

static bool eval_alloc(Interp *in, const Op *op) {
    Tensor *r = new_result(in, op);
    if (!r)
        return false;
    for (int64_t e = 0; e < r->size; e++)
        r->data[e] = interp_poison();
    return set_result(in, op, r);
}

static bool eval_copy_async(Interp *in, const Op *op) {
    Copy *c = NEW(in->arena, Copy);
    c->src = get(in, op->operands[0]);
    c->dst = get(in, op->operands[1]);
    c->stage = index_operand(in, op, 2);
    for (int d = 0; d < c->src->rank; d++)
        c->src_index[d] = index_operand(in, op, 3 + d);
    c->op = op;
    c->seq = in->copies.len;
    if (c->stage < 0 || c->stage >= c->dst->dims[0])
        return fail(in, op, "stage %lld is outside the buffer's %lld stages", (long long)c->stage,
                    (long long)c->dst->dims[0]);
    vec_push(in->arena, &in->copies, c);
    Tensor *tok = scalar_tensor(in, SK_INDEX, (double)c->seq);
    tok->dtype = SK_NONE;
    map_put(in->arena, &in->values, op->results[0], tok);
    return true;
}

static void land(Copy *c) {
    Attr *dims = op_attr(c->op, "dims");
    int64_t box[MAX_RANK], n = 1;
    int rank = c->dst->rank - 1;
    for (int a = 0; a < rank; a++)
        n *= box[a] = c->dst->dims[1 + a];
    for (int64_t e = 0; e < n; e++) {
        int64_t t[MAX_RANK], r = e, coord[MAX_RANK], off = 0;
        for (int a = rank - 1; a >= 0; a--) {
            t[a] = r % box[a];
            r /= box[a];
        }
        memcpy(coord, c->src_index, sizeof coord);
        for (int a = 0; a < rank; a++)
            if (dims->elems[a]->i >= 0)
                coord[dims->elems[a]->i] += t[a];
        bool inside = true;
        for (int d = 0; d < c->src->rank; d++) {
            inside &= coord[d] >= 0 && coord[d] < c->src->dims[d];
            off = off * c->src->dims[d] + coord[d];
        }
        c->dst->data[c->stage * n + e] = inside ? c->src->data[off] : 0;
    }
    c->done = true;
}

/* The copy a tile.wait waited for. */
static Copy *waited_copy(Interp *in, const Op *wait) {
    int64_t seq = (int64_t)get(in, wait->operands[0])->data[0];
    return seq >= 0 && seq < in->copies.len ? in->copies.items[seq] : NULL;
}

/* tile.wait lands its copy and every earlier one (copies complete in
 * order). With nv.pending = P (sm_80's cp.async.wait_group P) it lands all
 * but the P copies issued last instead, whichever copy it names: a P that
 * leaves the named copy in flight reads an unlanded stage. A TMA copy
 * (nv.copy "tma", sm_90a) completes on its own stage's mbarrier: the wait
 * lands that copy only. */
static bool eval_wait(Interp *in, const Op *op) {
    int64_t seq = (int64_t)get(in, op->operands[0])->data[0];
    Copy *mine = waited_copy(in, op);
    Attr *how = mine ? op_attr(mine->op, "nv.copy") : NULL;
    if (how && how->kind == AT_STR && strcmp(how->s, "tma") == 0) {
        if (!mine->done)
            land(mine);
        return true;
    }
    Attr *pending = op_attr(op, "nv.pending");
    if (pending) {
        if (pending->kind != AT_INT || pending->i < 0)
            return fail(in, op, "nv.pending must be a count of copies");
        seq = in->copies.len - 1 - pending->i;
    }
    for (int i = 0; i <= seq && i < in->copies.len; i++) {
        Copy *c = in->copies.items[i];
        if (!c->done)
            land(c);
    }
    return true;
}

static bool eval_for(Interp *in, const Op *op) {
    int64_t lb = index_operand(in, op, 0), ub = index_operand(in, op, 1), step = index_operand(in, op, 2);
    if (step <= 0)
        return fail(in, op, "the step must be positive, not %lld", (long long)step);
    int n = op->noperands - 3;
    const Block *b = op->regions[0].blocks[0];
    Tensor **carried = NEW_ARRAY(in->arena, Tensor *, n + 1);
    for (int i = 0; i < n; i++)
        carried[i] = get(in, op->operands[3 + i]);
    for (int64_t iv = lb; iv < ub; iv += step) {
        map_put(in->arena, &in->values, b->args[0], scalar_tensor(in, SK_INDEX, (double)iv));
        for (int i = 0; i < n; i++)
            map_put(in->arena, &in->values, b->args[1 + i], carried[i]);
        if (!eval_block(in, b, carried))
            return false;
    }
    for (int i = 0; i < n; i++)
        map_put(in->arena, &in->values, op->results[i], carried[i]);
    return true;
}

/* A persistent launch's tile t (of tiles_x · tiles_y) as pid (x, y), in
 * the order warp-roles' nv.scheduler takes them (codegen/warp_specialise.c
 * emits the same): FlashAttention-3's longest-first order, the y tiles in
 * sections of S = max(1, section_tiles / tiles_x) and a section's tiles
 * from the last x to the first, each x over the section's heads. */
static void tile_order(int64_t t, int64_t tiles_x, int64_t tiles_y, int64_t section_tiles, int64_t pid[2]) {
    int64_t s = section_tiles / tiles_x > 0 ? section_tiles / tiles_x : 1;
    int64_t first_y = t / (s * tiles_x) * s;
    int64_t heads = tiles_y - first_y < s ? tiles_y - first_y : s;
    int64_t r = t - first_y * tiles_x;
    pid[0] = tiles_x - 1 - r / heads;
    pid[1] = first_y + r % heads;
}

/* The programs of a launch in the order they run: the grid's, or a
 * persistent launch's scheduler's (which must visit every tile once; z is
 * then 1). NULL after an error. */
typedef struct { int64_t id[3]; } Pid;

static Pid *launch_order(Interp *in, const Op *op, const int64_t grid[3], int64_t *n) {
    *n = grid[0] * grid[1] * grid[2];
    Pid *pids = NEW_ARRAY(in->arena, Pid, *n > 0 ? *n : 1);
    Attr *sched = op_attr(op, "nv.scheduler"), *section = op_attr(op, "nv.section_tiles");
    if (!sched) {
        int64_t i = 0;
        for (int64_t z = 0; z < grid[2]; z++)
            for (int64_t y = 0; y < grid[1]; y++)
                for (int64_t x = 0; x < grid[0]; x++, i++)
                    pids[i] = (Pid){{x, y, z}};
        return pids;
    }
    if (grid[2] != 1 || !section)
        return fail(in, op, "nv.scheduler needs grid z = 1 and nv.section_tiles"), NULL;
    bool *seen = NEW_ARRAY(in->arena, bool, *n > 0 ? *n : 1);
    for (int64_t t = 0; t < *n; t++) {
        int64_t pid[2];
        tile_order(t, grid[0], grid[1], section->i, pid);
        if (pid[0] < 0 || pid[0] >= grid[0] || pid[1] < 0 || pid[1] >= grid[1] || seen[pid[1] * grid[0] + pid[0]])
            return fail(in, op, "nv.scheduler's tile %lld is (%lld, %lld): outside the grid or taken before",
                        (long long)t, (long long)pid[0], (long long)pid[1]), NULL;
        seen[pid[1] * grid[0] + pid[0]] = true;
        pids[t] = (Pid){{pid[0], pid[1], 0}};
    }
    return pids;
}

/* tile.launch: outputs start poisoned (NaN), so an element no program writes
 * shows; each program runs alone, with its own scratch memory. */
static bool eval_launch(Interp *in, const Op *op) {
    int64_t grid[3];
    for (int i = 0; i < 3; i++)
        grid[i] = index_operand(in, op, i);
    int nin = op->noperands - 3;
    Tensor **outs = NEW_ARRAY(in->arena, Tensor *, op->nresults + 1);
    Attr *zeroed = op_attr(op, "zeroed");   /* outputs that start at 0 (accumulated into) */
    for (int i = 0; i < op->nresults; i++) {
        if (!(outs[i] = new_result_n(in, op, i)))
            return false;
        bool zero = false;
        for (int z = 0; zeroed && z < zeroed->n; z++)
            zero |= zeroed->elems[z]->i == i;
        for (int64_t e = 0; e < outs[i]->size; e++)
            outs[i]->data[e] = zero ? 0 : interp_poison();
    }
    const Block *b = op->regions[0].blocks[0];
    int64_t n;
    Pid *pids = launch_order(in, op, grid, &n);
    if (!pids)
        return false;
    for (int64_t t = 0; t < n; t++) {
        Arena scratch = {0};
        Interp prog = *in;
        prog.arena = &scratch;
        prog.copies = (PtrVec){0};   /* a program's copies are its own */
        map_init(&prog.values, false);
        for (int i = 0; i < 3; i++)
            map_put(&scratch, &prog.values, b->args[i], scalar_tensor(&prog, SK_INDEX, (double)pids[t].id[i]));
        for (int i = 0; i < nin; i++)
            map_put(&scratch, &prog.values, b->args[3 + i], get(in, op->operands[3 + i]));
        for (int i = 0; i < op->nresults; i++)
            map_put(&scratch, &prog.values, b->args[3 + nin + i], outs[i]);
        bool ok = eval_block(&prog, b, NULL);
        arena_free(&scratch);
        if (!ok) {
            in->failed = true;
            return false;
        }
    }
    for (int i = 0; i < op->nresults; i++)
        map_put(in->arena, &in->values, op->results[i], outs[i]);
    return true;
}

static bool eval_op(Interp *in, const Op *op) {
    switch (op->kind) {
    case OP_MATMUL: return eval_matmul(in, op);
    case OP_TRANSPOSE: return eval_transpose(in, op);
    case OP_EXPAND_HEADS: return eval_expand_heads(in, op);
    case OP_SUM_HEADS: return eval_sum_heads(in, op);
    case OP_RESHAPE: return eval_reshape(in, op);
    case OP_SCORE_MOD:
    case OP_MASK: return eval_hook(in, op);
    case OP_SOFTMAX:
    case OP_REDUCE: return eval_rows(in, op);
    case OP_CONSTANT:
    case OP_DIM: return eval_scalar_op(in, op);
    case OP_ATTENTION: return eval_attention(in, op);
    case OP_FUSED_GEMM: return eval_fused_gemm(in, op);
    case OP_LAUNCH: return eval_launch(in, op);
    case OP_CHOOSE:   /* (both launches ran: each variant is checked at every size) */
        map_put(in->arena, &in->values, op->results[0],
                get(in, op->operands[get(in, op->operands[0])->data[0] != 0 ? 1 : 2]));
        return true;
    case OP_ALLOC: return eval_alloc(in, op);
    case OP_COPY_ASYNC: return eval_copy_async(in, op);
    case OP_WAIT: return eval_wait(in, op);
    case OP_ASSERT:
        if (get(in, op->operands[0])->data[0] == 0)
            return fail(in, op, "%s", op_attr(op, "message")->s);
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
        return fail(in, op, "the interpreter cannot run this op");
    }
}

/* Runs a block up to its terminator; the terminator's operands go to
 * `yielded` (when given). */
/* A stage the consumers release (warp-roles' nv.free_after) holds poison
 * from then on: the producer may be filling it again. */
static void poison_stage(Copy *c) {
    int64_t n = 1;
    for (int a = 1; a < c->dst->rank; a++)
        n *= c->dst->dims[a];
    for (int64_t e = 0; e < n; e++)
        c->dst->data[c->stage * n + e] = interp_poison();
}

static bool eval_block(Interp *in, const Block *b, Tensor **yielded) {
    enum { MAX_HELD = 16 };
    struct Held {
        Copy *copy;
        int64_t ops_left;
    } held[MAX_HELD];   /* stages to release, as ops pass */
    int nheld = 0;
    for_each_op(op, b) {
        if (op_info[op->kind].flags & OPF_TERMINATOR) {
            for (int i = 0; yielded && i < op->noperands; i++)
                yielded[i] = get(in, op->operands[i]);
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
            return fail(in, op, "more than 16 stages held at once");
    }
    return fail(in, b->parent ? b->parent->parent : NULL, "a block without a terminator");
}

bool interp_func(Interp *in, const Op *func, Tensor **inputs, Tensor **outputs) {
    const Block *body = op_body(func);
    for (int i = 0; i < body->nargs; i++)
        map_put(in->arena, &in->values, body->args[i], inputs[i]);
    return eval_block(in, body, outputs);
}
