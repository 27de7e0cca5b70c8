/* eval_tensor.c — the attn level's tensor ops: elementwise ops with
 * numpy broadcasting, hook regions run through a plan of slots, matmul
 * (rounding its running sum to the accumulator type after every product),
 * transposes, heads, reshapes, softmax and row reductions. */
#include "interp/eval.h"

#include <stdlib.h>
#include <string.h>

/* ---- elementwise ops over tensors with broadcasting ---------------------- */

/* Strides of t seen through a broadcast to a result of rank `rank`. */
void broadcast_strides(const Tensor *t, int rank, int64_t *strides) {
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

bool eval_elementwise(Interp *in, const Op *op) {
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    int n = op->noperands;
    int64_t strides[3][MAX_RANK];
    Tensor *args[3];
    for (int i = 0; i < n; i++) {
        args[i] = eval_get(in, op->operands[i]);
        broadcast_strides(args[i], r->rank, strides[i]);
    }
    ScalarKind k = op->operands[n - 1]->type->elem;
    Pred pred = op->kind == OP_CMP ? eval_pred(op) : P_LT;
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
        if (!eval_apply(in, op, pred, k, x, &v))
            return false;
        r->data[e] = eval_round(in, r->dtype, v);
        for (int d = r->rank - 1; d >= 0 && ++idx[d] == r->dims[d]; d--)
            idx[d] = 0;
    }
    return eval_set_result(in, op, r);
}

/* ---- hooks: a plan of slots, run once per score ------------------------- */

bool plan_region(Interp *in, const Block *b, Plan *plan) {
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
            p->pred = eval_pred(op);
        if (op->kind == OP_CONSTANT) {
            Attr *v = op_attr(op, "value");
            p->value = eval_round(in, op->results[0]->type->elem, v->kind == AT_FLOAT ? v->f : (double)v->i);
        } else if (op->kind == OP_DIM) {
            p->value = (double)(intptr_t)map_get(&in->bind->dims, op_attr(op, "name")->s);
            if (p->value <= 0)
                return eval_fail(in, op, "dimension '%s' is not bound", op_attr(op, "name")->s);
        } else if (op->kind == OP_EXTRACT) {
            p->tensor = eval_get(in, op->operands[0]);
            if (op->noperands - 1 > MAX_RANK)
                return eval_fail(in, op, "the interpreter reads tensors of at most %d dimensions in hooks", MAX_RANK);
            for (int i = 1; i < op->noperands; i++)
                p->operands[i - 1] = (int)(intptr_t)map_get(&slot, op->operands[i]) - 1;
        } else if (!op_kind_has(op->kind, OPF_ELEMENTWISE)) {
            return eval_fail(in, op, "cannot run inside a hook");
        }
        p->result = n;
        map_put(in->arena, &slot, op->results[0], (void *)(intptr_t)++n);
    }
    plan->nslots = n;
    plan->slots = NEW_ARRAY(in->arena, double, n + 1);
    return true;
}

/* A hook's read of a side tensor outside its bounds reads 0, as the
 * kernels' guarded loads and the tiled program's gathers do (doc/dsl.md,
 * "Side tensors"); the reference says so once per read and run, at the
 * read's place in the source: the mask or score it gave is then likely
 * not what the block meant. */
static void warn_read_outside(Interp *in, const Op *op, double ix, int dim, int64_t size) {
    PtrVec *seen = &in->bind->read_outside;
    for (int i = 0; i < seen->len; i++)
        if (seen->items[i] == op)
            return;
    vec_push(in->arena, seen, (void *)op);
    char msg[200];
    snprintf(msg, sizeof msg, "index %.0f is outside dimension %d (size %lld) of this tensor: the read gives 0",
             ix, dim, (long long)size);
    op_warn(in->diag, NULL, op, msg);
}

/* Runs the plan with the hook's arguments already in slots 0..nargs-1. */
bool run_plan(Interp *in, Plan *plan, double *result) {
    double *s = plan->slots;
    for (int i = 0; i < plan->nops; i++) {
        PlanOp *p = &plan->ops[i];
        const Op *op = p->op;
        double v = 0;
        if (op->kind == OP_CONSTANT || op->kind == OP_DIM) {
            v = p->value;
        } else if (op->kind == OP_EXTRACT) {
            int64_t off = 0;
            bool inside = true;
            for (int d = 0; d < p->tensor->rank && inside; d++) {
                double ix = s[p->operands[d]];
                inside = ix >= 0 && ix < (double)p->tensor->dims[d];
                if (!inside)
                    warn_read_outside(in, op, ix, d, p->tensor->dims[d]);
                off = off * p->tensor->dims[d] + (int64_t)ix;
            }
            v = inside ? p->tensor->data[off] : 0;
        } else {
            double x[3] = {0, 0, 0};
            for (int j = 0; j < op->noperands && j < 3; j++)
                x[j] = s[p->operands[j]];
            if (!eval_apply(in, op, p->pred, p->k, x, &v))
                return false;
        }
        s[p->result] = eval_round(in, op->results[0]->type->elem, v);
    }
    *result = s[plan->yield];
    return true;
}

/* attn.score_mod and attn.mask: the hook over every (b, h, i, j). */
bool eval_hook(Interp *in, const Op *op) {
    Tensor *x = eval_get(in, op->operands[0]);
    Tensor *r = eval_new_result(in, op);
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
                        plan.slots[0] = eval_round(in, SK_F32, x->data[e]);
                    a[0] = (double)b, a[1] = (double)h, a[2] = (double)i, a[3] = (double)j;
                    double v = 0;
                    if (!run_plan(in, &plan, &v))
                        return false;
                    r->data[e] = score ? eval_round(in, r->dtype, v) : v != 0 ? x->data[e] : -INFINITY;
                }
    return eval_set_result(in, op, r);
}

/* ---- structural tensor ops ---------------------------------------------- */

/* R[M, N] += A[M, K] · B[K, N], each element summed in order of k and
 * rounded to `acc` after every product (in emulated mode). Loops run m, k, n
 * so the inner loop streams rows; an f32 accumulator runs in float, which
 * rounds exactly as round_to(f32, sum + product) does (the product of two
 * 16-bit floats is exact in float). */
void matmul_acc(Interp *in, ScalarKind acc, const double *A, const double *B, double *R, int64_t M,
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
                R[m * N + n] = eval_round(in, acc, R[m * N + n] + x * B[k * N + n]);
        }
}

bool eval_matmul(Interp *in, const Op *op) {
    Tensor *a = eval_get(in, op->operands[0]), *b = eval_get(in, op->operands[1]);
    Tensor *r = eval_new_result(in, op);
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
            R[e] = eval_round(in, r->dtype, R[e]);
        for (int d = batch_rank - 1; d >= 0 && ++idx[d] == r->dims[d]; d--)
            idx[d] = 0;
    }
    return eval_set_result(in, op, r);
}

bool eval_transpose(Interp *in, const Op *op) {
    Tensor *x = eval_get(in, op->operands[0]);
    Tensor *r = eval_new_result(in, op);
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
    return eval_set_result(in, op, r);
}

bool eval_expand_heads(Interp *in, const Op *op) {
    Tensor *x = eval_get(in, op->operands[0]);
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    int64_t hk = x->dims[1], hq = r->dims[1];
    if (hq % hk)
        return eval_fail(in, op, "query heads (%lld) are not a multiple of kv heads (%lld)", (long long)hq,
                    (long long)hk);
    int64_t group = hq / hk, inner = r->dims[2] * r->dims[3];
    for (int64_t b = 0; b < r->dims[0]; b++)
        for (int64_t h = 0; h < hq; h++)
            memcpy(r->data + (b * hq + h) * inner, x->data + (b * hk + h / group) * inner,
                   sizeof(double) * (size_t)inner);
    return eval_set_result(in, op, r);
}

/* A paged cache read as [B, Hkv, Nk, D]: key j of batch b is row
 * j % page_size of page table[b, j // page_size]; a key at or past
 * lens[b], or on a page outside the cache, reads 0 (as a hook's read
 * outside a tensor does: the kernels never read outside the cache). */
bool eval_pages(Interp *in, const Op *op) {
    Tensor *c = eval_get(in, op->operands[0]), *table = eval_get(in, op->operands[1]);
    Tensor *lens = eval_get(in, op->operands[2]);
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    int64_t ps = c->dims[1], hk = c->dims[2], d = c->dims[3], maxp = table->dims[1];
    for (int64_t b = 0; b < r->dims[0]; b++)
        for (int64_t h = 0; h < hk; h++)
            for (int64_t j = 0; j < r->dims[2]; j++) {
                double *row = r->data + ((b * hk + h) * r->dims[2] + j) * d;
                double page = j / ps < maxp ? table->data[b * maxp + j / ps] : -1;
                if (j >= lens->data[b] || page < 0 || page >= (double)c->dims[0]) {
                    memset(row, 0, sizeof(double) * (size_t)d);
                    continue;
                }
                memcpy(row, c->data + (((int64_t)page * ps + j % ps) * hk + h) * d, sizeof(double) * (size_t)d);
            }
    return eval_set_result(in, op, r);
}

/* Sequence b of packed offsets cu: rows cu[b] to cu[b + 1] of a packed
 * tensor of `rows` rows; *len 0 where the offsets are out of order. */
static int64_t sequence_rows(const Tensor *cu, int64_t b, int64_t rows, int64_t *len) {
    int64_t start = (int64_t)cu->data[b], end = (int64_t)cu->data[b + 1];
    *len = end > start ? end - start : 0;
    if (start < 0 || start > rows)
        *len = 0;
    else if (*len > rows - start)
        *len = rows - start;
    return start;
}

/* Whether cu holds the B + 1 offsets of `batch` sequences (else the op
 * fails, saying so). */
static bool offsets_of_batch(Interp *in, const Op *op, const Tensor *cu, int64_t batch) {
    if (cu->dims[0] == batch + 1)
        return true;
    return eval_fail(in, op, "%lld sequence offsets for %lld sequences", (long long)cu->dims[0], (long long)batch);
}

/* attn.pad: packed [T, H, D] as [B, H, T, D] (an lse's [H, T] as [B, H,
 * T]), zero past each sequence's length, or the op's `fill` (rows past the
 * packed tensor's end count as past it). */
bool eval_pad(Interp *in, const Op *op) {
    Tensor *x = eval_get(in, op->operands[0]), *cu = eval_get(in, op->operands[1]);
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    if (!offsets_of_batch(in, op, cu, r->dims[0]))
        return false;
    bool lse = x->rank == 2;
    int64_t T = lse ? x->dims[1] : x->dims[0], H = lse ? x->dims[0] : x->dims[1], D = lse ? 1 : x->dims[2];
    Attr *fill = op_attr(op, "fill");
    for (int64_t e = 0; e < r->size; e++)
        r->data[e] = fill ? fill->f : 0;
    for (int64_t b = 0; b < r->dims[0]; b++) {
        int64_t len, start = sequence_rows(cu, b, T, &len);
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < len; i++)
                for (int64_t d = 0; d < D; d++) {
                    int64_t from = lse ? h * T + start + i : ((start + i) * H + h) * D + d;
                    r->data[((b * H + h) * T + i) * D + d] = x->data[from];
                }
    }
    return eval_set_result(in, op, r);
}

/* attn.unpad: [B, H, T, D] to packed [T, H, D] (an lse's [B, H, T] to [H,
 * T]); a row of no sequence is left as unwritten memory, as the kernels
 * leave it. */
bool eval_unpad(Interp *in, const Op *op) {
    Tensor *y = eval_get(in, op->operands[0]), *cu = eval_get(in, op->operands[1]);
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    if (!offsets_of_batch(in, op, cu, y->dims[0]))
        return false;
    bool lse = y->rank == 3;
    int64_t H = y->dims[1], T = y->dims[2], D = lse ? 1 : y->dims[3];
    for (int64_t e = 0; e < r->size; e++)
        r->data[e] = interp_poison();
    for (int64_t b = 0; b < y->dims[0]; b++) {
        int64_t len, start = sequence_rows(cu, b, T, &len);
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < len; i++)
                for (int64_t d = 0; d < D; d++) {
                    int64_t to = lse ? h * T + start + i : ((start + i) * H + h) * D + d;
                    r->data[to] = y->data[((b * H + h) * T + i) * D + d];
                }
    }
    return eval_set_result(in, op, r);
}

/* GQA's adjoint: each kv head gets the sum over its group of query heads,
 * summed exactly and rounded once. */
bool eval_sum_heads(Interp *in, const Op *op) {
    Tensor *x = eval_get(in, op->operands[0]);
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    int64_t hq = x->dims[1], hk = r->dims[1];
    if (hk == 0 || hq % hk)
        return eval_fail(in, op, "query heads (%lld) are not a multiple of kv heads (%lld)", (long long)hq,
                    (long long)hk);
    int64_t group = hq / hk, inner = r->dims[2] * r->dims[3];
    for (int64_t b = 0; b < r->dims[0]; b++)
        for (int64_t h = 0; h < hk; h++)
            for (int64_t e = 0; e < inner; e++) {
                double sum = 0;
                for (int64_t g = 0; g < group; g++)
                    sum += x->data[(b * hq + h * group + g) * inner + e];
                r->data[(b * hk + h) * inner + e] = eval_round(in, r->dtype, sum);
            }
    return eval_set_result(in, op, r);
}

bool eval_reshape(Interp *in, const Op *op) {
    Tensor *x = eval_get(in, op->operands[0]);
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    memcpy(r->data, x->data, sizeof(double) * (size_t)r->size);
    return eval_set_result(in, op, r);
}

/* softmax and reductions work on rows of the last dimension. */
bool eval_rows(Interp *in, const Op *op) {
    Tensor *x = eval_get(in, op->operands[0]);
    Tensor *r = eval_new_result(in, op);
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
            r->data[row] = eval_round(in, r->dtype, m);
            continue;
        }
        if (strcmp(kind, "sum") == 0 || strcmp(kind, "mean") == 0) {
            for (int64_t j = 0; j < n; j++)
                sum += v[j];
            r->data[row] = eval_round(in, r->dtype, kind[0] == 'm' ? sum / (double)n : sum);
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
            r->data[row] = eval_round(in, r->dtype, m + log(sum));
        else
            for (int64_t j = 0; j < n; j++)
                r->data[row * n + j] = eval_round(in, r->dtype, exp(v[j] - m) / sum);
    }
    return eval_set_result(in, op, r);
}

bool eval_scalar_op(Interp *in, const Op *op) {
    Tensor *r = eval_new_result(in, op);
    if (!r)
        return false;
    if (op->kind == OP_CONSTANT) {
        Attr *v = op_attr(op, "value");
        r->data[0] = eval_round(in, r->dtype, v->kind == AT_FLOAT ? v->f : (double)v->i);
    } else if (op->kind == OP_NUM_SMS) {
        r->data[0] = INTERP_NUM_SMS;
    } else {  /* attn.dim */
        intptr_t v = (intptr_t)map_get(&in->bind->dims, op_attr(op, "name")->s);
        if (v <= 0)
            return eval_fail(in, op, "dimension '%s' is not bound", op_attr(op, "name")->s);
        r->data[0] = (double)v;
    }
    return eval_set_result(in, op, r);
}
