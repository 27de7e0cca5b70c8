/* check.c — the tensors a call passes, checked against the block's
 * declarations (dtype, rank, shape, strides, device pointers, overlap),
 * each mismatch a message naming the argument and what was expected; the
 * dims bound from them. */
#include "runtime/rt.h"

#include <stdio.h>
#include <string.h>

#include "runtime/cuda_loader.h"

int64_t *binding_lookup(Binding *bd, const char *name) {
    for (int i = 0; i < bd->n; i++)
        if (strcmp(bd->names[i], name) == 0)
            return &bd->values[i];
    return NULL;
}

static void shape_text(const TensorSpec *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%s[", attnrt_dtype_name(t->dtype));
    for (int i = 0; i < t->rank && k < n; i++) {
        if (t->dims[i].sym[0])
            k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", t->dims[i].sym);
        else
            k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->dims[i].size);
    }
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

static size_t tensor_bytes(const attnrt_tensor *x) {
    size_t n = (size_t)dtype_size(x->dtype);
    for (int i = 0; i < x->rank; i++)
        n *= (size_t)(x->shape[i] > 0 ? x->shape[i] : 0);
    return n;
}

void kernel_strides(const attnrt_tensor *x, int64_t *strides) {
    int64_t contiguous = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
        strides[i] = x->shape[i] > 1 ? x->strides[i] : contiguous;
        contiguous = strides[i] * (x->shape[i] > 1 ? x->shape[i] : 1);
    }
}

/* The bytes from x's first element to one past its last (0 if empty). */
static uint64_t tensor_span(const attnrt_tensor *x) {
    if (!tensor_bytes(x))
        return 0;
    uint64_t last = 0;
    for (int i = 0; i < x->rank; i++)
        last += (uint64_t)(x->shape[i] - 1) * (uint64_t)x->strides[i];
    return (last + 1) * (uint64_t)dtype_size(x->dtype);
}

/* Whether two elements of x share an address: with its dims of size > 1
 * ordered by stride, each stride must pass the last element of the dims
 * inside it (PyTorch's test for a tensor it may write). */
static bool self_overlapping(const attnrt_tensor *x) {
    int order[ATTNRT_MAX_RANK], n = 0;
    for (int i = 0; i < x->rank; i++)
        if (x->shape[i] > 1) {
            int j = n++;
            for (; j > 0 && x->strides[order[j - 1]] > x->strides[i]; j--)
                order[j] = order[j - 1];
            order[j] = i;
        }
    int64_t reach = 0;   /* the largest offset the dims inside reach */
    for (int j = 0; j < n; j++) {
        int i = order[j];
        if (x->strides[i] <= reach)
            return true;
        reach += (x->shape[i] - 1) * x->strides[i];
    }
    return false;
}

/* The layout rules (doc/runtime.md): any strides ≥ 0 with the innermost 1
 * and each other a multiple of its unit; an output's elements at distinct
 * addresses. Dims of size 0 or 1 are not checked (never stepped along). */
static int check_strides(const Block *b, const TensorSpec *s, const attnrt_tensor *x, const char *kind,
                         const char *want) {
    if (!tensor_bytes(x))   /* an empty tensor has no layout */
        return ATTNRT_OK;
    for (int i = s->rank - 1; i >= 0; i--) {   /* innermost first: its rule is the first to tell */
        int64_t st = x->strides[i], unit = s->stride_unit[i];
        if (x->shape[i] <= 1)
            continue;
        if (i == s->rank - 1 && st != 1)
            return rt_fail(ATTNRT_ERROR_ARGUMENT,
                           "%s '%s' of block '%s': stride %d (the innermost) is %lld; expected 1 (%s with any "
                           "strides but a unit innermost one)",
                           kind, s->name, b->name, i, (long long)st, want);
        if (st < 0 || st % unit)
            return rt_fail(ATTNRT_ERROR_ARGUMENT,
                           "%s '%s' of block '%s': stride %d is %lld; expected a multiple of %lld >= 0 (%s: rows "
                           "start %lld-byte aligned)",
                           kind, s->name, b->name, i, (long long)st, (long long)unit, want,
                           (long long)(unit * dtype_size(s->dtype)));
        if (st > (INT64_C(1) << 40) / dtype_size(s->dtype))   /* (a tensor map's limit too) */
            return rt_fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s': stride %d is %lld, past 2^40 bytes (%s)",
                           kind, s->name, b->name, i, (long long)st, want);
    }
    if (s->role == 1 && self_overlapping(x))
        return rt_fail(ATTNRT_ERROR_ARGUMENT,
                       "output '%s' of block '%s': its strides put two elements at one address (%s); an output's "
                       "elements must not overlap",
                       s->name, b->name, want);
    return ATTNRT_OK;
}

static int check_tensor(const Block *b, const TensorSpec *s, const attnrt_tensor *x, Binding *bd, bool bind) {
    char want[256];
    shape_text(s, want, sizeof want);
    const char *kind = s->role == 0 ? "input" : "output";
    if (!x)
        return rt_fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s' is NULL (expected %s)", kind, s->name, b->name,
                    want);
    if (x->dtype != s->dtype)
        return rt_fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s' has dtype %s; expected %s", kind, s->name,
                    b->name, attnrt_dtype_name(x->dtype), want);
    if (x->rank != s->rank)
        return rt_fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s' has rank %d; expected %d (%s)", kind, s->name,
                    b->name, x->rank, s->rank, want);
    for (int i = 0; i < s->rank; i++) {
        int64_t got = x->shape[i];
        if (got < 0)
            return rt_fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s': dimension %d is %lld; expected %s with sizes >= 0",
                        kind, s->name, b->name, i, (long long)got, want);
        if (!s->dims[i].sym[0]) {
            if (got != s->dims[i].size)
                return rt_fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s': dimension %d is %lld; expected %lld (%s)",
                            kind, s->name, b->name, i, (long long)got, (long long)s->dims[i].size, want);
            continue;
        }
        int64_t *v = binding_lookup(bd, s->dims[i].sym);
        if (v && *v != got) {
            const char *from = bd->from[v - bd->values];
            return rt_fail(ATTNRT_ERROR_ARGUMENT,
                        "%s '%s' of block '%s': dimension %d (%s) is %lld, but %s is %lld from '%s' (expected %s)", kind,
                        s->name, b->name, i, s->dims[i].sym, (long long)got, s->dims[i].sym, (long long)*v, from, want);
        }
        if (!v) {
            if (!bind)
                return rt_fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s': dim %s is not bound by any input", kind,
                            s->name, b->name, s->dims[i].sym);
            snprintf(bd->names[bd->n], MAX_NAME, "%s", s->dims[i].sym);
            bd->values[bd->n] = got;
            bd->from[bd->n++] = s->name;
        }
    }
    int rc = check_strides(b, s, x, kind, want);
    if (rc)
        return rc;
    if (tensor_bytes(x) && (uintptr_t)x->data % 16)   /* an empty tensor's pointer is never used */
        return rt_fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s': data pointer %p is not 16-byte aligned", kind,
                    s->name, b->name, x->data);
    return ATTNRT_OK;
}

/* PyTorch's rule for out=: an output may share memory with no input and no
 * other output (a kernel would read what another thread already wrote).
 * Tested on the spans from first to last element, so interleaved tensors
 * (two outputs in the halves of each row of one buffer) are refused too. */
static int check_overlap(const Block *b, const attnrt_tensor *in, int nin, const attnrt_tensor *out, int nout) {
    for (int o = 0; o < nout; o++) {
        uintptr_t lo = (uintptr_t)out[o].data, hi = lo + tensor_span(&out[o]);
        for (int j = 0; j < nin + o; j++) {
            const attnrt_tensor *x = j < nin ? &in[j] : &out[j - nin];
            uintptr_t xlo = (uintptr_t)x->data, xhi = xlo + tensor_span(x);
            if (lo < hi && xlo < xhi && lo < xhi && xlo < hi)
                return rt_fail(ATTNRT_ERROR_ARGUMENT,
                            "output '%s' of block '%s' overlaps %s '%s' in memory; outputs may not share memory "
                            "with inputs or other outputs (as PyTorch's out=)",
                            nth_role(b, 1, o)->name, b->name, j < nin ? "input" : "output",
                            j < nin ? nth_role(b, 0, j)->name : nth_role(b, 1, j - nin)->name);
        }
    }
    return ATTNRT_OK;
}

static int check_all(const Block *b, const attnrt_tensor *in, int nin, const attnrt_tensor *out, int nout,
                     Binding *bd) {
    memset(bd, 0, sizeof *bd);
    int want_in = count_role(b, 0), want_out = count_role(b, 1);
    if (nin != want_in || (out && nout != want_out))
        return rt_fail(ATTNRT_ERROR_ARGUMENT, "block '%s' takes %d inputs and %d outputs; got %d and %d", b->name, want_in,
                    want_out, nin, nout);
    if (nin && !in)
        return rt_fail(ATTNRT_ERROR_ARGUMENT, "inputs is NULL");
    for (int i = 0; i < nin; i++) {
        int rc = check_tensor(b, nth_role(b, 0, i), &in[i], bd, true);
        if (rc)
            return rc;
    }
    for (int i = 0; out && i < nout; i++) {
        int rc = check_tensor(b, nth_role(b, 1, i), &out[i], bd, false);
        if (rc)
            return rc;
    }
    if (out) {
        int rc = check_overlap(b, in, nin, out, nout);
        if (rc)
            return rc;
    }
    for (int i = 0; i < b->ndims; i++)
        if (!dim_is_let(b, i) && !binding_lookup(bd, b->dims[i]))
            return rt_fail(ATTNRT_ERROR_ARGUMENT, "block '%s': dim %s is not bound by any input", b->name, b->dims[i]);
    for (int i = 0; i < b->nasserts; i++) {
        int64_t holds;
        EvalStatus st = eval_condition(b->asserts[i].expr, bd, &holds);
        char dims[256];
        if (st == EVAL_BAD)
            return rt_fail(ATTNRT_ERROR_MANIFEST, "block '%s': bad check '%s'", b->name, b->asserts[i].expr);
        if (st == EVAL_OVERFLOW)
            return rt_fail(ATTNRT_ERROR_ARGUMENT, "block '%s': the check '%s' overflows 64-bit integers at %s", b->name,
                           b->asserts[i].expr, binding_text(bd, dims, sizeof dims));
        if (!holds) {
            binding_text(bd, dims, sizeof dims);
            return rt_fail(ATTNRT_ERROR_ARGUMENT, "block '%s': %s (%s; the check is %s)", b->name,
                        b->asserts[i].message, dims, b->asserts[i].expr);
        }
    }
    return ATTNRT_OK;
}

int attnrt_output_shape(const attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs, int i,
                        int *rank, int64_t *shape) {
    Block *b = find_block(m, block);
    if (!b)
        return ATTNRT_ERROR_ARGUMENT;
    Binding bd;
    int rc = check_all(b, inputs, ninputs, NULL, count_role(b, 1), &bd);
    if (rc)
        return rc;
    const TensorSpec *t = nth_role(b, 1, i);
    if (!t)
        return rt_fail(ATTNRT_ERROR_ARGUMENT, "block '%s' has no output %d", block, i);
    *rank = t->rank;
    for (int d = 0; d < t->rank; d++)
        shape[d] = dim_value(&bd, &t->dims[d]);
    return ATTNRT_OK;
}

/* attnrt_validate, giving back the block and the bound dims. */
int validate_call(const attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs,
                    const attnrt_tensor *outputs, int noutputs, int check_pointers, Block **bp, Binding *bd) {
    Block *b = *bp = find_block(m, block);
    if (!b)
        return ATTNRT_ERROR_ARGUMENT;
    if (!outputs && noutputs)
        return rt_fail(ATTNRT_ERROR_ARGUMENT, "outputs is NULL");
    int rc = check_all(b, inputs, ninputs, outputs, noutputs, bd);
    if (rc || !check_pointers)
        return rc;
    for (int i = 0; i < ninputs + noutputs; i++) {
        const attnrt_tensor *x = i < ninputs ? &inputs[i] : &outputs[i - ninputs];
        const TensorSpec *s = i < ninputs ? nth_role(b, 0, i) : nth_role(b, 1, i - ninputs);
        if (!tensor_bytes(x))   /* empty: its pointer is never used (PyTorch's may be 0) */
            continue;
        int dev = 0;
        if ((rc = cuda_is_device_pointer(x->data, &dev)))
            return rc;
        if (!dev)
            return rt_fail(ATTNRT_ERROR_ARGUMENT, "%s '%s' of block '%s': %p is not a CUDA device pointer",
                        i < ninputs ? "input" : "output", s->name, b->name, x->data);
    }
    return ATTNRT_OK;
}

int attnrt_validate(const attnrt_module *m, const char *block, const attnrt_tensor *inputs, int ninputs,
                    const attnrt_tensor *outputs, int noutputs, int check_pointers) {
    Block *b;
    Binding bd;
    return validate_call(m, block, inputs, ninputs, outputs, noutputs, check_pointers, &b, &bd);
}
