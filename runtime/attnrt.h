/* attnrt.h — libattnrt: load attnc's PTX and run its blocks.
 *
 * attnc writes a PTX file whose head is a manifest (doc/codegen.md): the
 * blocks in it, each block's input and output tensors with their dtypes and
 * shapes (numbers or symbolic dims such as B and N), and the kernels that
 * compute it, in order. libattnrt reads that, checks the tensors a caller
 * hands it against the manifest, binds the dims, allocates temporaries,
 * computes each grid and launches the kernels on the caller's stream.
 *
 * libcuda.so.1 is opened with dlopen the first time the GPU is needed, so a
 * program linked with libattnrt builds, loads manifests and validates
 * arguments on a machine without a GPU; anything that needs CUDA then fails
 * with a message instead.
 *
 * Every function returns ATTNRT_OK (0) or an error code; the message of the
 * last error on the calling thread is attnrt_last_error(). Tensors are
 * described by attnrt_tensor (device pointer, dtype, shape, strides in
 * elements); attnc's kernels need them contiguous (row-major) and 16-byte
 * aligned.
 *
 * Thread safety: a module may be used by one thread at a time (it caches
 * temporaries and loaded functions).
 */
#ifndef ATTNRT_H
#define ATTNRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNRT_MAX_RANK 8
#define ATTNRT_API __attribute__((visibility("default")))

typedef enum attnrt_status {
    ATTNRT_OK = 0,
    ATTNRT_ERROR_IO,         /* a file could not be read */
    ATTNRT_ERROR_MANIFEST,   /* the PTX has no manifest, or a malformed one */
    ATTNRT_ERROR_ARGUMENT,   /* a tensor or argument does not match the manifest */
    ATTNRT_ERROR_CUDA,       /* libcuda is missing, or a CUDA call failed */
} attnrt_status;

typedef enum attnrt_dtype {
    ATTNRT_F16, ATTNRT_BF16, ATTNRT_F32, ATTNRT_I32, ATTNRT_I64,
} attnrt_dtype;

typedef struct attnrt_tensor {
    void *data;                         /* device pointer */
    attnrt_dtype dtype;
    int rank;
    int64_t shape[ATTNRT_MAX_RANK];
    int64_t strides[ATTNRT_MAX_RANK];   /* in elements */
} attnrt_tensor;

typedef struct attnrt_module attnrt_module;

/* Loads PTX with its manifest, from a file or from memory (copied). */
ATTNRT_API int attnrt_load_file(const char *path, attnrt_module **out);
ATTNRT_API int attnrt_load_data(const char *ptx, size_t len, attnrt_module **out);
ATTNRT_API void attnrt_unload(attnrt_module *m);

/* The message of the last failure on this thread ("" if none). */
ATTNRT_API const char *attnrt_last_error(void);

/* The blocks of a module, and their tensors. */
ATTNRT_API int attnrt_block_count(const attnrt_module *m);
ATTNRT_API const char *attnrt_block_name(const attnrt_module *m, int i);
ATTNRT_API int attnrt_block_arity(const attnrt_module *m, const char *block, int *ninputs, int *noutputs);
/* Name, dtype and declared shape of input (is_output 0) or output i; a
 * symbolic dim (B, N, ...) reads -1. rank and shape may be NULL. */
ATTNRT_API int attnrt_block_tensor(const attnrt_module *m, const char *block, int is_output, int i,
                                   const char **name, attnrt_dtype *dtype, int *rank, int64_t *shape);

/* The shape output i will have for these inputs (checks the inputs). */
ATTNRT_API int attnrt_output_shape(const attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs,
                        int i, int *rank, int64_t *shape);

/* Checks every tensor against the manifest; no GPU needed except for the
 * device-pointer check, which is skipped when check_pointers is 0. */
ATTNRT_API int attnrt_validate(const attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs,
                    const attnrt_tensor *outputs, int noutputs, int check_pointers);

/* Validates, then launches the block's kernels in order on `stream` (a
 * CUstream; NULL for the default stream). Does not wait for them. */
ATTNRT_API int attnrt_run(attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs,
               const attnrt_tensor *outputs, int noutputs, void *stream);

/* Device memory helpers for programs that do not use CUDA themselves. They
 * use (and on first use make current) the primary context of device 0. */
ATTNRT_API int attnrt_malloc(void **ptr, size_t bytes);
ATTNRT_API int attnrt_free(void *ptr);
ATTNRT_API int attnrt_memcpy_htod(void *dst, const void *src, size_t bytes);
ATTNRT_API int attnrt_memcpy_dtoh(void *dst, const void *src, size_t bytes);
ATTNRT_API int attnrt_memset(void *dst, unsigned char byte, size_t bytes);
ATTNRT_API int attnrt_synchronize(void);

ATTNRT_API const char *attnrt_dtype_name(attnrt_dtype t);

#ifdef __cplusplus
}
#endif
#endif
