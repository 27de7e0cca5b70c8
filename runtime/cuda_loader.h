/* cuda_loader.h — the few CUDA driver calls libattnrt makes, through
 * dlopen("libcuda.so.1") (or $ATTNRT_LIBCUDA). Each returns ATTNRT_OK or
 * ATTNRT_ERROR_CUDA with the message set: which call failed, CUDA's name and
 * text for the error. Internal to the runtime. */
#ifndef ATTNRT_CUDA_LOADER_H
#define ATTNRT_CUDA_LOADER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int cuda_is_device_pointer(const void *p, int *is_device);
int cuda_module_load(const char *ptx, void **module);
int cuda_module_unload(void *module);
int cuda_get_function(void *module, const char *name, int64_t smem, void **fn);
/* SMs × the blocks of fn one SM holds at once: a persistent kernel's grid. */
int cuda_resident_blocks(void *fn, int threads, int64_t smem, int64_t *blocks);
/* The current context's device's multiprocessors (the manifest's $sms). */
int cuda_sm_count(int *sms);
int cuda_launch(void *fn, const int64_t grid[3], int threads, int64_t smem, void *stream, void **params);
int cuda_malloc(void **p, size_t bytes);
int cuda_free(void *p);
int cuda_copy(void *dst, const void *src, size_t bytes, int to_device);
int cuda_memset(void *dst, unsigned char byte, size_t bytes);
int cuda_memset_async(void *dst, unsigned char byte, size_t bytes, void *stream);   /* ordered in the stream */
int cuda_synchronize(void);
/* A CUtensorMap (128 bytes, 64-byte aligned) over a tensor of dtype (an
 * attnrt_dtype: f16, bf16 or f32) for TMA:
 * dims and box innermost first, strides in bytes of dims 1.., SWIZZLE_128B
 * (swizzle128) or none. */
int cuda_tensor_map(void *map, int dtype, int rank, void *addr, const uint64_t *dims, const uint64_t *strides,
                    const unsigned *box, bool swizzle128, const char *what);
#endif
