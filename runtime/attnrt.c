/* attnrt.c — the runtime's errors and launches: the tensor maps, the
 * temporaries, grid.y in slices, persistent blocks and their tile counter,
 * and the memory helpers. The manifest is manifest.c's, the argument checks
 * check.c's, the grid expressions grid.c's (rt.h); the CUDA driver API is
 * reached through cuda_loader.c (dlopen). */
#include "runtime/rt.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/cuda_loader.h"

/* ---- errors ------------------------------------------------------------------ */

static _Thread_local char last_error[1024];

const char *attnrt_last_error(void) { return last_error; }

int rt_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

int attnrt_cuda_fail(int code, const char *what);   /* used by cuda_loader.c */
int attnrt_cuda_fail(int code, const char *what) { return rt_fail(ATTNRT_ERROR_CUDA, "%s", what), code; }

/* ---- running --------------------------------------------------------------------- */

/* The tensor map of tm for this launch's tensor (elem_strides: its
 * kernel_strides): encoded when its pointer, shape or strides changed since
 * the last launch. An empty tensor gets a map over one element at a
 * stand-in address: the kernel copies no box that starts past a tensor's
 * end, so it is never read (codegen/tma.c's TMA copy), but the driver
 * refuses size 0. */
static int encode_tmap(const Block *b, KernelSpec *k, TmapSpec *tm, void *const *ptrs, const int64_t *elem_strides,
                       Binding *bd) {
    const TensorSpec *ts = &b->tensors[tm->tensor];
    int64_t shape[ATTNRT_MAX_RANK];
    bool empty = false;
    for (int d = 0; d < ts->rank; d++)
        empty |= (shape[d] = dim_value(bd, &ts->dims[d])) == 0;
    void *ptr = empty ? (void *)(uintptr_t)256 : ptrs[tm->tensor];
    size_t rank_bytes = sizeof(int64_t) * (size_t)ts->rank;
    if (tm->ptr == ptr && memcmp(tm->shape, shape, rank_bytes) == 0 && memcmp(tm->strides, elem_strides, rank_bytes) == 0)
        return ATTNRT_OK;
    uint64_t dims[ATTNRT_MAX_RANK], strides[ATTNRT_MAX_RANK];
    unsigned box[ATTNRT_MAX_RANK];
    for (int i = 0; i < ts->rank; i++) {   /* innermost first; the driver takes the strides of dims 1 and on, in bytes */
        int d = ts->rank - 1 - i;
        dims[i] = empty ? 1 : (uint64_t)shape[d];
        box[i] = tm->box[d];
        if (i)
            strides[i - 1] = empty ? 16 * (uint64_t)i : (uint64_t)elem_strides[d] * (uint64_t)dtype_size(ts->dtype);
    }
    char what[sizeof k->name + sizeof ts->name + 32];   /* room for both names whole */
    snprintf(what, sizeof what, "(kernel %s, tensor '%s')", k->name, ts->name);
    tm->ptr = NULL;
    _Alignas(64) uint64_t map[16];   /* CUtensorMap's alignment */
    int rc = cuda_tensor_map(map, ts->dtype, ts->rank, ptr, dims, strides, box, tm->swizzle128, what);
    if (rc)
        return rc;
    memcpy(tm->map, map, sizeof map);
    tm->ptr = ptr;
    memcpy(tm->shape, shape, rank_bytes);
    memcpy(tm->strides, elem_strides, rank_bytes);
    return ATTNRT_OK;
}

int attnrt_run(attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs,
               const attnrt_tensor *outputs, int noutputs, void *stream) {
    Block *b;
    Binding bd;
    int rc = validate_call(m, block, inputs, ninputs, outputs, noutputs, 1, &b, &bd);
    if (rc)
        return rc;
    if (!m->cumod && (rc = cuda_module_load(m->ptx, &m->cumod)))
        return rc;
    int sms = 0;
    if (b->nlets && ((rc = cuda_sm_count(&sms)) || (rc = bind_lets(b, &bd, sms))))
        return rc;
    /* the kernels this call runs (a variant for other sizes does not: when=) */
    bool runs[MAX_KERNELS] = {0}, used[MAX_TENSORS] = {0};
    for (int ki = 0; ki < b->nkernels; ki++) {
        KernelSpec *k = &b->kernels[ki];
        int64_t holds = 1;
        if (k->when[0]) {
            EvalStatus st = eval_condition(k->when, &bd, &holds);
            char dims[256];
            if (st == EVAL_BAD)
                return rt_fail(ATTNRT_ERROR_MANIFEST, "block '%s', kernel %s: bad when= expression '%s'", b->name, k->name,
                            k->when);
            if (st == EVAL_OVERFLOW)
                return rt_fail(ATTNRT_ERROR_ARGUMENT, "block '%s', kernel %s: when= '%s' overflows 64-bit integers at %s",
                               b->name, k->name, k->when, binding_text(&bd, dims, sizeof dims));
        }
        runs[ki] = holds != 0;
        for (int i = 0; runs[ki] && i < k->nargs; i++)
            used[k->args[i]] = true;
    }
    /* every tensor's device pointer and strides (in elements, and in units
     * for the kernels): inputs, outputs, temporaries (contiguous; allocated
     * only where a kernel of this call takes them: the split's partials of
     * a prefill-sized call would be gigabytes) */
    void *ptrs[MAX_TENSORS] = {0};
    int64_t strides[MAX_TENSORS][ATTNRT_MAX_RANK], unit_strides[MAX_TENSORS][ATTNRT_MAX_RANK];
    size_t temp_bytes[MAX_TENSORS] = {0};   /* this call's size of each temporary (zero= clears that much) */
    int iin = 0, iout = 0;
    for (int t = 0; t < b->ntensors; t++) {
        const TensorSpec *s = &b->tensors[t];
        if (s->role != 2) {
            const attnrt_tensor *x = s->role == 0 ? &inputs[iin++] : &outputs[iout++];
            ptrs[t] = x->data;
            kernel_strides(x, strides[t]);
        } else {
            int64_t elems = 1;   /* contiguous, dims of size 0 or 1 given the next one's stride (kernel_strides) */
            bool empty = false;
            for (int d = s->rank - 1; d >= 0; d--) {
                int64_t n = dim_value(&bd, &s->dims[d]);
                strides[t][d] = elems;
                elems *= n > 1 ? n : 1;
                empty |= n == 0;
            }
            size_t bytes = temp_bytes[t] = empty || !used[t] ? 0 : (size_t)elems * (size_t)dtype_size(s->dtype);
            if (bytes && b->temp_bytes[t] < bytes) {
                if (b->temp[t]) {
                    cuda_free(b->temp[t]);
                    b->temp[t] = NULL;
                    b->temp_bytes[t] = 0;
                }
                if ((rc = cuda_malloc(&b->temp[t], bytes)))
                    return rc;
                b->temp_bytes[t] = bytes;
            }
            ptrs[t] = b->temp[t];
        }
        for (int d = 0; d < s->rank; d++)   /* whole: check.c and the layout above make it so */
            unit_strides[t][d] = strides[t][d] / s->stride_unit[d];
    }
    int64_t dimvals[MAX_DIMS];
    for (int i = 0; i < b->ndims; i++)
        dimvals[i] = *binding_lookup(&bd, b->dims[i]);
    for (int ki = 0; ki < b->nkernels; ki++) {
        KernelSpec *k = &b->kernels[ki];
        if (!runs[ki])   /* a variant for other sizes: not this call's */
            continue;
        int64_t grid[3];
        if ((rc = eval_grid(b, k, &bd, grid)))
            return rc;
        if (!grid[0] || !grid[1] || !grid[2])
            continue;
        if (!k->fn && (rc = cuda_get_function(m->cumod, k->name, k->smem, &k->fn)))
            return rc;
        for (int j = 0; j < k->ntmaps; j++)
            if ((rc = encode_tmap(b, k, &k->tmaps[j], ptrs, strides[k->tmaps[j].tensor], &bd)))
                return rc;
        for (int z = 0; z < k->nzero; z++)   /* temporaries only (manifest.c) */
            if (temp_bytes[k->zero[z]] && (rc = cuda_memset_async(ptrs[k->zero[z]], 0, temp_bytes[k->zero[z]], stream)))
                return rc;
        /* 4: y_offset, a persistent kernel's three */
        void *params[MAX_ARGS + MAX_DIMS + MAX_ARGS * (ATTNRT_MAX_RANK - 1) + 4 + MAX_TMAPS];
        int np = 0;
        for (int i = 0; i < k->nargs; i++)
            params[np++] = &ptrs[k->args[i]];
        for (int i = 0; i < b->ndims; i++)
            params[np++] = &dimvals[i];
        for (int i = 0; i < k->nargs; i++)   /* each tensor's strides but its innermost, in units */
            for (int d = 0; d + 1 < b->tensors[k->args[i]].rank; d++)
                params[np++] = &unit_strides[k->args[i]][d];
        /* grid.y is at most 65,535: a larger y (B·H) in slices, each told
         * its first y */
        int64_t y_total = grid[1], y_offset = 0;
        if (k->ysplit)
            params[np++] = &y_offset;
        if (k->persistent) {   /* grid[0] · grid[1] tiles (z is 1), as many blocks as fit the GPU at once */
            if (grid[0] * grid[1] > INT32_MAX / 2)   /* its tile counter is 32-bit */
                return rt_fail(ATTNRT_ERROR_ARGUMENT, "kernel %s: %lld tiles are more than a persistent kernel counts",
                            k->name, (long long)(grid[0] * grid[1]));
            if (!k->tile_counter && (rc = cuda_malloc(&k->tile_counter, 4)))
                return rc;
            if ((rc = cuda_memset_async(k->tile_counter, 0, 4, stream)))
                return rc;
            params[np++] = &grid[0];
            params[np++] = &grid[1];
            params[np++] = &k->tile_counter;
        }
        for (int j = 0; j < k->ntmaps; j++)
            params[np++] = k->tmaps[j].map;
        if (k->persistent) {
            if (!k->resident && (rc = cuda_resident_blocks(k->fn, k->threads, k->smem, &k->resident)))
                return rc;   /* asked once per kernel, like its function */
            int64_t tiles = grid[0] * grid[1] * grid[2];
            int64_t blocks[3] = {tiles < k->resident ? tiles : k->resident, 1, 1};
            if ((rc = cuda_launch(k->fn, blocks, k->threads, k->smem, stream, params)))
                return rc;
            continue;
        }
        for (; y_offset < y_total; y_offset += 65535) {
            int64_t slice[3] = {grid[0], y_total - y_offset < 65535 ? y_total - y_offset : 65535, grid[2]};
            if ((rc = cuda_launch(k->fn, slice, k->threads, k->smem, stream, params)))
                return rc;
        }
    }
    return ATTNRT_OK;
}

/* ---- memory helpers -------------------------------------------------------------- */

int attnrt_malloc(void **ptr, size_t bytes) { return cuda_malloc(ptr, bytes); }
int attnrt_free(void *ptr) { return ptr ? cuda_free(ptr) : ATTNRT_OK; }
int attnrt_memcpy_htod(void *dst, const void *src, size_t bytes) { return cuda_copy(dst, src, bytes, 1); }
int attnrt_memcpy_dtoh(void *dst, const void *src, size_t bytes) { return cuda_copy(dst, src, bytes, 0); }
int attnrt_memset(void *dst, unsigned char byte, size_t bytes) { return cuda_memset(dst, byte, bytes); }
int attnrt_synchronize(void) { return cuda_synchronize(); }
