/* tensor.c — tensors, dtype rounding and random numbers for the interpreter. */
#include "interp/interp.h"

#include <math.h>
#include <string.h>

Tensor *tensor_new(Arena *a, ScalarKind dtype, int rank, const int64_t *dims) {
    Tensor *t = NEW(a, Tensor);
    t->dtype = dtype;
    t->rank = rank;
    t->size = 1;
    for (int i = 0; i < rank; i++) {
        t->dims[i] = dims[i];
        t->size *= dims[i];
    }
    t->data = NEW_ARRAY(a, double, t->size ? t->size : 1);
    return t;
}

/* Round-to-nearest-even of x to a binary float with `mant` stored mantissa
 * bits, smallest normal exponent `emin` and largest finite value `max`.
 * Exact in double: scaling by a power of two is exact, nearbyint rounds to
 * even in the default rounding mode. */
static double round_binary(double x, int mant, int emin, double max) {
    if (x == 0 || !isfinite(x))
        return x;
    int e;
    frexp(x, &e);                   /* |x| in [2^(e-1), 2^e) */
    int lead = e - 1 < emin ? emin : e - 1;
    double quantum = ldexp(1.0, lead - mant);
    double r = nearbyint(x / quantum) * quantum;
    if (fabs(r) > max)
        return copysign(INFINITY, x);
    return r;
}

double round_to(ScalarKind dtype, double x) {
    switch (dtype) {
    case SK_F64: return x;
    case SK_F32: return (double)(float)x;
    case SK_F16: return round_binary(x, 10, -14, 65504.0);
    case SK_BF16: return round_binary(x, 7, -126, 3.3895313892515355e38);
    case SK_F8E4M3: return round_binary(x, 3, -6, 448.0);
    case SK_F8E5M2: return round_binary(x, 2, -14, 57344.0);
    case SK_I1: return x != 0;
    case SK_I32: return isfinite(x) ? (double)(int32_t)fmax(fmin(trunc(x), 2147483647.0), -2147483648.0) : 0;
    case SK_I64:
    case SK_INDEX: return isfinite(x) ? trunc(x) : 0;
    case SK_NONE: break;
    }
    unreachable();
}

static const uint64_t POISON_BITS = 0x7ff8dead0000beefull;   /* a quiet NaN */

double interp_poison(void) {
    double x;
    memcpy(&x, &POISON_BITS, sizeof x);
    return x;
}

bool interp_is_poison(double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits == POISON_BITS;
}

/* splitmix64: small, good enough, and the same on every machine. */
uint64_t rng_next(Rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(Rng *r) { return ((double)(rng_next(r) >> 11) + 0.5) * 0x1.0p-53; }

/* Box-Muller; one value per call keeps the sequence simple to reproduce. */
double rng_normal(Rng *r) {
    double u = rng_uniform(r), v = rng_uniform(r);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
