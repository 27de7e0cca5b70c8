/* rt.h — what the runtime's files share (the .c files of runtime/); internal to
 * libattnrt (attnrt.h is its interface, and nothing here is exported).
 *
 *   attnrt.c      errors, launches (tensor maps, temporaries, the grid's
 *                 slices and persistent blocks), memory helpers
 *   manifest.c    the manifest: parsing it, loading a module, its blocks
 *   grid.c        the manifest's expressions over the dims (grids, asserts,
 *                 kernel conditions)
 *   check.c       checking the tensors a call passes and binding the dims
 *   cuda_loader.c the CUDA driver API, dlopen'ed
 */
#ifndef ATTNC_RT_H
#define ATTNC_RT_H

#include "runtime/attnrt.h"

#include <stdbool.h>
#include <stdint.h>

#include "runtime/manifest.h"

/* Sets the thread's last error (attnrt_last_error) and returns code. */
int rt_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the manifest (manifest.c) ---- */

_Static_assert(ATTNRT_MAX_RANK == MANIFEST_MAX_RANK, "attnrt.h and manifest.h disagree on a tensor's rank");
enum { MAX_NAME = MANIFEST_MAX_NAME, MAX_DIMS = MANIFEST_MAX_DIMS, MAX_TENSORS = MANIFEST_MAX_TENSORS,
       MAX_KERNELS = MANIFEST_MAX_KERNELS, MAX_ARGS = MANIFEST_MAX_ARGS, MAX_TMAPS = MANIFEST_MAX_TMAPS };

typedef struct Dim {
    char sym[MAX_NAME];   /* "" for a number */
    int64_t size;
} Dim;

typedef struct TensorSpec {
    char name[MAX_NAME];
    int role;             /* 0 in, 1 out, 2 temporary */
    attnrt_dtype dtype;
    int rank;
    Dim dims[ATTNRT_MAX_RANK];
    int64_t stride_unit[ATTNRT_MAX_RANK];   /* each dim's stride is a multiple of it; kernels take stride / unit
                                               (manifest stride_units=; the innermost's stride is 1) */
} TensorSpec;

/* A tensor map a kernel takes by value (sm_90a TMA; manifest "tmap"): over
 * tensor `tensor`, boxes of box[] elements (outermost first), encoded at
 * launch and kept while the tensor's pointer and shape stay the same. */
typedef struct TmapSpec {
    int tensor;
    unsigned box[ATTNRT_MAX_RANK];
    bool swizzle128;                    /* SWIZZLE_128B, else none (manifest's swizzle=128 or none) */
    void *ptr;                          /* the cached map's */
    int64_t shape[ATTNRT_MAX_RANK], strides[ATTNRT_MAX_RANK];
    uint64_t map[16];                   /* a CUtensorMap (a copy: the module is malloc'd, 16-byte aligned) */
} TmapSpec;

typedef struct KernelSpec {
    char name[128];
    char grid[3][256];
    char when[256];       /* launched only where this expression of the dims holds ("": always): one
                             variant of a block's kernels per size range (tile.choose) */
    int threads;
    int64_t smem;
    bool ysplit;          /* takes its first y as a last parameter: grid.y is launched in slices */
    bool persistent;      /* loops over the grid's tiles itself: launched with one block per resident
                             slot, told the grid's x and y (after the first y) */
    int64_t resident;     /* persistent: its blocks the GPU holds at once (0: not asked yet) */
    void *tile_counter;   /* persistent: the tiles its blocks have taken (a device word, zeroed in the
                             stream before each launch; shared by its launches, like the temporaries) */
    int nargs;
    int args[MAX_ARGS];   /* tensor indices */
    void *fn;             /* CUfunction, once loaded */
    int ntmaps;           /* tensor maps, passed after the other parameters */
    TmapSpec tmaps[MAX_TMAPS];
    int nzero;            /* tensors cleared (in the stream) before the launch: accumulated into */
    int zero[MAX_ARGS];
} KernelSpec;

typedef struct Assert {
    char expr[256], message[256];
} Assert;

/* A dim the runtime computes from the bound ones at each run (manifest
 * "let"): decode's split count, from the dims and the GPU's SMs ($sms). */
typedef struct Let {
    int dim;              /* its index in the block's dims */
    char expr[256];
} Let;

typedef struct Block {
    char name[MAX_NAME];
    int nasserts;
    Assert asserts[8];
    int nlets;
    Let lets[4];
    int ndims;
    char dims[MAX_DIMS][MAX_NAME];
    int ntensors;
    TensorSpec tensors[MAX_TENSORS];
    int nkernels;
    KernelSpec kernels[MAX_KERNELS];
    void *temp[MAX_TENSORS];      /* device buffers of temporaries */
    size_t temp_bytes[MAX_TENSORS];
} Block;

struct attnrt_module {
    char *ptx;
    size_t len;
    char target[16];
    int nblocks;
    Block *blocks;
    void *cumod;   /* CUmodule, loaded on first run */
};

int dtype_size(attnrt_dtype t);
Block *find_block(const attnrt_module *m, const char *name);
int count_role(const Block *b, int role);                    /* tensors of role 0 in, 1 out, 2 temporary */
const TensorSpec *nth_role(const Block *b, int role, int i);

/* ---- the dims a call binds (check.c) ---- */

typedef struct Binding {
    int n;
    char names[MAX_DIMS + 1][MAX_NAME];   /* + 1: the lets' $sms */
    int64_t values[MAX_DIMS + 1];
    const char *from[MAX_DIMS + 1];   /* which tensor bound it */
} Binding;

int64_t *binding_lookup(Binding *bd, const char *name);
/* The strides a kernel is given for x (elements): x's own, except that a
 * dim of size 0 or 1 gets the stride a contiguous layout would give it
 * (PyTorch leaves those arbitrary; a tensor map needs them valid). */
void kernel_strides(const attnrt_tensor *x, int64_t *strides);
/* attnrt_validate, giving back the block and the bound dims. */
int validate_call(const attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs,
                  const attnrt_tensor *outputs, int noutputs, int check_pointers, Block **bp, Binding *bd);

/* ---- expressions over the dims (grid.c) ---- */

/* A condition's value under the binding (*holds), whether malformed or overflowing. */
typedef enum { EVAL_OK, EVAL_BAD, EVAL_OVERFLOW } EvalStatus;
EvalStatus eval_condition(const char *text, Binding *bd, int64_t *holds);
const char *binding_text(const Binding *bd, char *buf, size_t size);
int eval_grid(const Block *b, const KernelSpec *k, Binding *bd, int64_t *grid);
int64_t dim_value(Binding *bd, const Dim *d);   /* a declared dim's value under a complete binding */
/* Binds the block's let dims after the tensors' (validate_call's), in
 * order, with $sms the current device's multiprocessors. */
int bind_lets(const Block *b, Binding *bd, int64_t sms);
/* Whether dim i of b is a let's (bound by bind_lets, not by a tensor). */
bool dim_is_let(const Block *b, int i);

#endif
