/* rounding.c — exhaustive test of the interpreter's f16 and bf16 rounding.
 *
 * For every finite value v of the format (decoded from its bits, independently
 * of round_to): round_to(v) == v; the midpoint between v and the next value up
 * rounds to whichever of the two has an even mantissa; a hair above or below
 * the midpoint rounds up or down. Past the largest finite value, infinity.
 */
#include "interp/interp.h"

#include <math.h>
#include <string.h>

static int failures;

static void expect(const char *fmt, double got, double want, double input) {
    if (got == want || (isnan(got) && isnan(want)))
        return;
    if (failures++ < 10)
        fprintf(stderr, "%s: round(%.17g) = %.17g, want %.17g\n", fmt, input, got, want);
}

static double f16_value(unsigned bits) {
    int sign = bits >> 15 & 1, exp = bits >> 10 & 31, mant = bits & 1023;
    double v = exp == 0 ? ldexp(mant, -24) : exp == 31 ? (mant ? NAN : INFINITY) : ldexp(1024 + mant, exp - 25);
    return sign ? -v : v;
}

static double bf16_value(unsigned bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void check_format(const char *name, ScalarKind k, double (*value)(unsigned)) {
    for (unsigned bits = 0; bits < 0x7FFF; bits++) {   /* positive, below the top */
        double v = value(bits), next = value(bits + 1);
        if (!isfinite(v))
            continue;
        expect(name, round_to(k, v), v, v);
        expect(name, round_to(k, -v), -v, -v);
        double mid = v + (next - v) / 2;
        if (!isfinite(next))   /* past the largest finite: overflow at the midpoint */
            next = INFINITY, mid = v + (v - value(bits - 1)) / 2;
        double even = (bits & 1) ? next : v;
        expect(name, round_to(k, mid), even, mid);
        if (isfinite(next)) {
            expect(name, round_to(k, nextafter(mid, INFINITY)), next, nextafter(mid, INFINITY));
            expect(name, round_to(k, nextafter(mid, 0)), v, nextafter(mid, 0));
        }
    }
}

int main(void) {
    check_format("f16", SK_F16, f16_value);
    check_format("bf16", SK_BF16, bf16_value);
    expect("f16", round_to(SK_F16, 65519.99), 65504, 65519.99);
    expect("f16", round_to(SK_F16, 65520), INFINITY, 65520);
    expect("f16", round_to(SK_F16, 1e-9), 0, 1e-9);
    expect("f32", round_to(SK_F32, 1 + 0x1p-24), 1, 1 + 0x1p-24);
    expect("i32", round_to(SK_I32, -2.7), -2, -2.7);
    expect("i1", round_to(SK_I1, 0.5), 1, 0.5);
    if (failures) {
        fprintf(stderr, "%d rounding failures\n", failures);
        return 1;
    }
    puts("rounding: all f16 and bf16 values and midpoints ok");
    return 0;
}
