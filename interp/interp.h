/* interp.h — the CPU reference interpreter: executes IR on small inputs so
 * that CI, which has no GPU, can prove a pass keeps a program's meaning.
 *
 *   tensor.c   tensors, dtype rounding (f16/bf16/f32 emulated exactly),
 *              the random inputs, comparison against a reference
 *   eval.c     op-by-op evaluation of a builtin.func (with eval_tensor.c,
 *              eval_fused.c, eval_tile.c; eval.h)
 *   run.c      `attnc run`: bind dims, make inputs, run, check
 *
 * Two modes: emulated (every value rounded to its IR type, accumulators in
 * the declared precision, as the GPU will compute) and exact (float64
 * everywhere: the reference). See doc/interpreter.md.
 */
#ifndef ATTNC_INTERP_H
#define ATTNC_INTERP_H

#include "ir/ir.h"

enum { MAX_RANK = 8 };

typedef struct Tensor {
    ScalarKind dtype;
    int rank;
    int64_t dims[MAX_RANK];
    int64_t size;      /* number of elements */
    double *data;      /* row-major; integers and bools stored exactly */
} Tensor;

/* ---- tensor.c ----------------------------------------------------------- */

Tensor *tensor_new(Arena *a, ScalarKind dtype, int rank, const int64_t *dims);
/* Rounds x to dtype: IEEE round-to-nearest-even with subnormals and
 * overflow to infinity for f16, bf16 and f32; truncation for integers. */
double round_to(ScalarKind dtype, double x);

/* What memory holds before anything writes it (new buffers, a kernel's
 * outputs): a NaN with its own payload, so that the check can tell an
 * element nobody wrote from a NaN the program computed. */
double interp_poison(void);

/* The most elements one tensor may have (2^27: 1 GiB as doubles); larger
 * sizes are an error, never an out-of-memory abort (doc/interpreter.md). */
#define INTERP_MAX_ELEMENTS ((int64_t)1 << 27)
bool interp_is_poison(double x);

/* tile.num_sms in the interpreter: an H100's or H200's 132 SMs, so that the
 * runtime's plans (the split count of decode's keys) are checked as a GPU
 * of that size would take them (doc/interpreter.md). */
#define INTERP_NUM_SMS 132

typedef struct Rng {
    uint64_t state;
} Rng;
double rng_normal(Rng *r);
uint64_t rng_next(Rng *r);

/* ---- eval.c ------------------------------------------------------------- */

typedef struct Bindings {
    Map dims;          /* symbolic dimension name -> (void *)(intptr_t)value */
    PtrVec read_outside;   /* the hook reads that warned of an index outside their tensor (once a run) */
} Bindings;

typedef struct Interp {
    Arena *arena;
    Diag *diag;
    bool exact;        /* float64 reference: no rounding anywhere */
    Bindings *bind;
    Map values;        /* Value* -> Tensor* */
    PtrVec copies;     /* async copies issued by the running program, in order */
    bool failed;
} Interp;

/* The concrete shape of type t under the bindings; false (reported) when a
 * dimension is unbound or the rank is too large. */
bool concrete_shape(Interp *in, const Type *t, int64_t *dims);

/* Runs func on inputs (one per input, in order); fills outputs (one per
 * output). False (reported) on a run-time error. */
bool interp_func(Interp *in, const Op *func, Tensor **inputs, Tensor **outputs);

/* ---- run.c -------------------------------------------------------------- */

typedef struct RunOptions {
    const char **bind_names;
    int64_t *bind_values;
    int nbinds;
    uint64_t seed;
    bool check;
    bool quiet;        /* only failures */
    const Map *consts; /* the program's constant names, which -D may also set */
    Map *cache;        /* when set: inputs and reference outputs per block, kept
                          across calls (checking after every pass) */
    const char *dump_dir; /* when set: inputs, outputs and references written
                             there as BLOCK.{in,out,ref}.NAME.npy */
} RunOptions;

/* Runs every func of `lowered` on random inputs; with opts.check, compares
 * each output with the exact evaluation of the same func in `reference`.
 * Prints a line per output to out. Returns false on any failure. */
/* Warns of each -D that names neither a dimension nor a constant of module.
 * Said once per command, not per run (--check-each-pass runs after every pass). */
void interp_warn_unused_binds(Arena *a, Diag *d, const Op *module, const RunOptions *opts);

bool interp_run_module(Arena *a, Diag *d, const Op *reference, const Op *lowered,
                       const RunOptions *opts, FILE *out);

#endif
