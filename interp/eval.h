/* eval.h — what the interpreter's evaluators share (interp/eval*.c).
 * Internal to the interpreter; interp.h is its interface.
 *
 *   eval.c         the op dispatch, blocks, functions; results, rounding,
 *                  failures; one element of each scalar op (eval_apply)
 *   eval_tensor.c  the attn level's tensor ops: elementwise with
 *                  broadcasting, hooks (a plan of slots), matmul, transposes,
 *                  heads, reshapes, softmax and reductions
 *   eval_fused.c   the fused ops the passes make: attention, its backward,
 *                  fused GEMMs
 *   eval_tile.c    the tile level: loads, stores, gathers, tiles in
 *                  registers, shared buffers and async copies, loops and
 *                  launches
 */
#ifndef ATTNC_EVAL_H
#define ATTNC_EVAL_H

#include "interp/interp.h"

#include <math.h>

typedef enum Pred { P_LT, P_LE, P_GT, P_GE, P_EQ, P_NE } Pred;

/* ---- eval.c ---- */
bool eval_fail(Interp *in, const Op *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
Tensor *eval_get(Interp *in, const Value *v);
Tensor *eval_new_result_n(Interp *in, const Op *op, int i);
Tensor *eval_new_result(Interp *in, const Op *op);
bool eval_set_result(Interp *in, const Op *op, Tensor *r);   /* binds op's (only) result */
double eval_round(Interp *in, ScalarKind k, double x);       /* to k's precision (emulated mode) */
Pred eval_pred(const Op *op);
bool eval_apply(Interp *in, const Op *op, Pred pred, ScalarKind k, const double *x, double *r);
bool eval_block(Interp *in, const Block *b, Tensor **yielded);
static inline double nan_max(double a, double b) { return isnan(a) ? a : isnan(b) ? b : a >= b ? a : b; }

/* ---- eval_tensor.c ---- */
typedef struct PlanOp {
    const Op *op;
    int result, operands[MAX_RANK];   /* (attn.extract: an index per dimension) */
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

void broadcast_strides(const Tensor *t, int rank, int64_t *strides);
bool plan_region(Interp *in, const Block *b, Plan *plan);
bool run_plan(Interp *in, Plan *plan, double *result);
void matmul_acc(Interp *in, ScalarKind acc, const double *A, const double *B, double *R, int64_t M, int64_t K,
                int64_t N);
bool eval_elementwise(Interp *in, const Op *op);
bool eval_hook(Interp *in, const Op *op);
bool eval_matmul(Interp *in, const Op *op);
bool eval_transpose(Interp *in, const Op *op);
bool eval_expand_heads(Interp *in, const Op *op);
bool eval_sum_heads(Interp *in, const Op *op);
bool eval_pages(Interp *in, const Op *op);
bool eval_pad(Interp *in, const Op *op);
bool eval_unpad(Interp *in, const Op *op);
bool eval_reshape(Interp *in, const Op *op);
bool eval_rows(Interp *in, const Op *op);
bool eval_scalar_op(Interp *in, const Op *op);

/* ---- eval_fused.c ---- */
bool eval_attention(Interp *in, const Op *op);
bool eval_attention_backward(Interp *in, const Op *op);
bool eval_fused_gemm(Interp *in, const Op *op);
bool eval_fused_map(Interp *in, const Op *op);

/* ---- eval_tile.c ---- */
/* A copy is only recorded when issued; it lands when a tile.wait for it (or
 * for a later copy: copies complete in order) runs. */
typedef struct Copy {
    Tensor *src, *dst;
    int64_t stage, src_index[MAX_RANK];
    const Op *op;
    int64_t seq;
    bool done;
} Copy;

Copy *waited_copy(Interp *in, const Op *wait);   /* the copy a tile.wait lands */
bool eval_load(Interp *in, const Op *op);
bool eval_store(Interp *in, const Op *op);
bool eval_atomic_add(Interp *in, const Op *op);
bool eval_gather(Interp *in, const Op *op);
bool eval_tile_misc(Interp *in, const Op *op);
bool eval_alloc(Interp *in, const Op *op);
bool eval_copy_async(Interp *in, const Op *op);
bool eval_wait(Interp *in, const Op *op);
bool eval_for(Interp *in, const Op *op);
bool eval_launch(Interp *in, const Op *op);

#endif
