/* cuda_loader.c — libcuda through dlopen, so nothing links against it. The
 * types are the driver API's, declared here by size (CUresult is an int,
 * handles are pointers, CUdeviceptr is 64-bit). */
#include "runtime/cuda_loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/attnrt.h"

int attnrt_cuda_fail(int code, const char *what);

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_UNIFIED = 4,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

static struct {
    int state;   /* 0 not tried, 1 ready, -1 failed */
    char why[512];
    CUresult (*cuInit)(unsigned);
    CUresult (*cuGetErrorName)(CUresult, const char **);
    CUresult (*cuGetErrorString)(CUresult, const char **);
    CUresult (*cuCtxGetCurrent)(void **);
    CUresult (*cuCtxSetCurrent)(void *);
    CUresult (*cuDeviceGet)(int *, int);
    CUresult (*cuDevicePrimaryCtxRetain)(void **, int);
    CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr);
    CUresult (*cuModuleLoadDataEx)(void **, const void *, unsigned, int *, void **);
    CUresult (*cuModuleUnload)(void *);
    CUresult (*cuModuleGetFunction)(void **, void *, const char *);
    CUresult (*cuFuncSetAttribute)(void *, int, int);
    CUresult (*cuLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                               void **, void **);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, void *);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuCtxGetDevice)(int *);
    CUresult (*cuDeviceGetAttribute)(int *, int, int);
    CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, void *, int, size_t);
    /* CUDA 12 drivers and newer; NULL before (only sm_90a's TMA needs it) */
    CUresult (*cuTensorMapEncodeTiled)(void *, int, unsigned, void *, const uint64_t *, const uint64_t *,
                                       const unsigned *, const unsigned *, int, int, int, int);
} cu;

static int check(CUresult r, const char *call, const char *detail) {
    if (r == 0)
        return ATTNRT_OK;
    const char *name = "?", *text = "?";
    if (cu.cuGetErrorName)
        cu.cuGetErrorName(r, &name);
    if (cu.cuGetErrorString)
        cu.cuGetErrorString(r, &text);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s%s%s failed: %s (%d): %s", call, detail ? " " : "", detail ? detail : "", name, r,
             text);
    return attnrt_cuda_fail(ATTNRT_ERROR_CUDA, msg);
}

#define SYM(name, ver)                                                                                 \
    do {                                                                                               \
        *(void **)&cu.name = dlsym(h, #name ver);                                                      \
        if (!cu.name) {                                                                                \
            snprintf(cu.why, sizeof cu.why, "%s has no %s: the driver is too old", path, #name ver);    \
            cu.state = -1;                                                                             \
            return attnrt_cuda_fail(ATTNRT_ERROR_CUDA, cu.why);                                        \
        }                                                                                              \
    } while (0)

/* Opens libcuda, initialises it and makes a context current (the caller's if
 * it has one, else device 0's primary context). */
static int ready(void) {
    if (cu.state == 1)
        return ATTNRT_OK;
    if (cu.state == -1)
        return attnrt_cuda_fail(ATTNRT_ERROR_CUDA, cu.why);
    const char *path = getenv("ATTNRT_LIBCUDA");
    if (!path || !*path)
        path = "libcuda.so.1";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(cu.why, sizeof cu.why, "cannot load the CUDA driver (%s): %s; attnrt needs an NVIDIA GPU and driver",
                 path, dlerror());
        cu.state = -1;
        return attnrt_cuda_fail(ATTNRT_ERROR_CUDA, cu.why);
    }
    SYM(cuInit, "");
    SYM(cuGetErrorName, "");
    SYM(cuGetErrorString, "");
    SYM(cuCtxGetCurrent, "");
    SYM(cuCtxSetCurrent, "");
    SYM(cuDeviceGet, "");
    SYM(cuDevicePrimaryCtxRetain, "");
    SYM(cuPointerGetAttribute, "");
    SYM(cuModuleLoadDataEx, "");
    SYM(cuModuleUnload, "");
    SYM(cuModuleGetFunction, "");
    SYM(cuFuncSetAttribute, "");
    SYM(cuLaunchKernel, "");
    SYM(cuMemAlloc, "_v2");
    SYM(cuMemFree, "_v2");
    SYM(cuMemcpyHtoD, "_v2");
    SYM(cuMemcpyDtoH, "_v2");
    SYM(cuMemsetD8, "_v2");
    SYM(cuMemsetD8Async, "");
    SYM(cuCtxSynchronize, "");
    SYM(cuCtxGetDevice, "");
    SYM(cuDeviceGetAttribute, "");
    SYM(cuOccupancyMaxActiveBlocksPerMultiprocessor, "");
    *(void **)&cu.cuTensorMapEncodeTiled = dlsym(h, "cuTensorMapEncodeTiled");
    int rc = check(cu.cuInit(0), "cuInit", NULL);
    void *ctx = NULL;
    if (!rc)
        rc = check(cu.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent", NULL);
    if (!rc && !ctx) {
        int dev;
        rc = check(cu.cuDeviceGet(&dev, 0), "cuDeviceGet", NULL);
        if (!rc)
            rc = check(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain", NULL);
        if (!rc)
            rc = check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", NULL);
    }
    if (rc) {
        cu.state = -1;
        snprintf(cu.why, sizeof cu.why, "%s", attnrt_last_error());
        return rc;
    }
    cu.state = 1;
    return ATTNRT_OK;
}

int cuda_is_device_pointer(const void *p, int *is_device) {
    int rc = ready();
    if (rc)
        return rc;
    unsigned int type = 0;
    CUresult r = cu.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p);
    *is_device = r == 0 && (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED);
    return ATTNRT_OK;   /* an error here means "not CUDA memory" */
}

int cuda_module_load(const char *ptx, void **module) {
    int rc = ready();
    if (rc)
        return rc;
    static char log[8192];
    log[0] = 0;
    int opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[2] = {log, (void *)(uintptr_t)sizeof log};
    return check(cu.cuModuleLoadDataEx(module, ptx, 2, opts, vals), "cuModuleLoadDataEx (JIT of the PTX)",
                 log[0] ? log : NULL);
}

int cuda_module_unload(void *module) { return cu.state == 1 ? check(cu.cuModuleUnload(module), "cuModuleUnload", NULL) : 0; }

int cuda_get_function(void *module, const char *name, int64_t smem, void **fn) {
    int rc = check(cu.cuModuleGetFunction(fn, module, name), "cuModuleGetFunction", name);
    if (!rc && smem > 48 * 1024)
        rc = check(cu.cuFuncSetAttribute(*fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem),
                   "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", name);
    return rc;
}

int cuda_resident_blocks(void *fn, int threads, int64_t smem, int64_t *blocks) {
    int dev = 0, sms = 0, per_sm = 0;
    int rc = check(cu.cuCtxGetDevice(&dev), "cuCtxGetDevice", NULL);
    if (!rc)   /* 16: CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
        rc = check(cu.cuDeviceGetAttribute(&sms, 16, dev), "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", NULL);
    if (!rc)
        rc = check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, (size_t)smem),
                   "cuOccupancyMaxActiveBlocksPerMultiprocessor", NULL);
    if (!rc)   /* (left as it was on failure) */
        *blocks = (int64_t)sms * (per_sm > 0 ? per_sm : 1);
    return rc;
}

int cuda_sm_count(int *sms) {
    int dev = 0;
    int rc = check(cu.cuCtxGetDevice(&dev), "cuCtxGetDevice", NULL);
    if (!rc)   /* 16: CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
        rc = check(cu.cuDeviceGetAttribute(sms, 16, dev), "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", NULL);
    return rc;
}

int cuda_launch(void *fn, const int64_t grid[3], int threads, int64_t smem, void *stream, void **params) {
    return check(cu.cuLaunchKernel(fn, (unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2], (unsigned)threads, 1,
                                   1, (unsigned)smem, stream, params, NULL),
                 "cuLaunchKernel", NULL);
}

int cuda_malloc(void **p, size_t bytes) {
    int rc = ready();
    if (rc)
        return rc;
    CUdeviceptr d = 0;
    rc = check(cu.cuMemAlloc(&d, bytes ? bytes : 1), "cuMemAlloc", NULL);
    *p = (void *)(uintptr_t)d;
    return rc;
}

int cuda_free(void *p) { return cu.state == 1 ? check(cu.cuMemFree((CUdeviceptr)(uintptr_t)p), "cuMemFree", NULL) : 0; }

int cuda_copy(void *dst, const void *src, size_t bytes, int to_device) {
    int rc = ready();
    if (rc)
        return rc;
    if (to_device)
        return check(cu.cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, bytes), "cuMemcpyHtoD", NULL);
    return check(cu.cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, bytes), "cuMemcpyDtoH", NULL);
}

int cuda_memset(void *dst, unsigned char byte, size_t bytes) {
    int rc = ready();
    if (rc)
        return rc;
    return check(cu.cuMemsetD8((CUdeviceptr)(uintptr_t)dst, byte, bytes), "cuMemsetD8", NULL);
}

int cuda_memset_async(void *dst, unsigned char byte, size_t bytes, void *stream) {
    int rc = ready();
    if (rc)
        return rc;
    return check(cu.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst, byte, bytes, stream), "cuMemsetD8Async", NULL);
}

int cuda_synchronize(void) {
    int rc = ready();
    if (rc)
        return rc;
    return check(cu.cuCtxSynchronize(), "cuCtxSynchronize", NULL);
}

/* CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion (cuda.h) */
enum { TMAP_F16 = 6, TMAP_F32 = 7, TMAP_BF16 = 9, TMAP_SWIZZLE_NONE = 0, TMAP_SWIZZLE_128B = 3, TMAP_L2_256B = 3 };

int cuda_tensor_map(void *map, int dtype, int rank, void *addr, const uint64_t *dims, const uint64_t *strides,
                    const unsigned *box, bool swizzle128, const char *what) {
    int rc = ready();
    if (rc)
        return rc;
    if (!cu.cuTensorMapEncodeTiled)
        return attnrt_cuda_fail(ATTNRT_ERROR_CUDA, "the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 "
                                                   "driver or newer)");
    unsigned ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    /* interleave none, out-of-bounds elements read as zero */
    int type = dtype == ATTNRT_BF16 ? TMAP_BF16 : dtype == ATTNRT_F32 ? TMAP_F32 : TMAP_F16;
    return check(cu.cuTensorMapEncodeTiled(map, type, (unsigned)rank, addr, dims, strides, box,
                                           ones, 0, swizzle128 ? TMAP_SWIZZLE_128B : TMAP_SWIZZLE_NONE, TMAP_L2_256B, 0),
                 "cuTensorMapEncodeTiled", what);
}
