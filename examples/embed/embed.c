/* embed.c — a C program that runs a kernel compiled by attnc, through
 * libattnrt only: no CUDA headers, no libcuda at link time, no compiler.
 *
 *   attnc examples/mha.attn -arch sm_70 -o attn.ptx
 *   attnc-embed attn.ptx [B N]
 *
 * It takes the first block of attn.ptx, which must be a plain attention
 * (q, k, v: f16[B, H, N, D] -> o: f16[B, H, N, D], scale 1/sqrt(D), no mask,
 * as examples/mha.attn), fills q, k, v with random numbers, poisons o, runs
 * the block and compares o with a float64 reference on the CPU (every row
 * up to N = 256, else every (N/256)-th row, so large runs stay quick). Exit
 * status 0 if every element checked is within 2e-3 + 1e-2·|ref|.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnrt.h"

static float half_to_float(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
    if (e == 0) {
        if (m == 0)
            bits = s;
        else {   /* subnormal: normalise */
            e = 113;
            while (!(m & 1024)) {
                m <<= 1;
                e--;
            }
            bits = s | (e << 23) | ((m & 1023) << 13);
        }
    } else if (e == 31) {
        bits = s | 0x7f800000u | (m << 13);
    } else {
        bits = s | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_half(float f) {   /* round to nearest even; |f| < 65504 here */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t s = (x >> 16) & 0x8000, e = (x >> 23) & 255, m = x & 0x7fffff;
    int he = (int)e - 112;
    if (he >= 31)
        return (uint16_t)(s | 0x7c00);
    if (he <= 0) {   /* subnormal half */
        if (he < -10)
            return (uint16_t)s;
        m |= 0x800000;
        int shift = 14 - he;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (uint16_t)(s | r);
    }
    uint32_t r = ((uint32_t)he << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
        r++;
    return (uint16_t)(s | r);
}

static int die(const char *what) {
    fprintf(stderr, "attnc-embed: %s: %s\n", what, attnrt_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "attn.ptx";
    int64_t B = argc > 3 ? atoll(argv[2]) : 2, N = argc > 3 ? atoll(argv[3]) : 100;
    attnrt_module *m;
    if (attnrt_load_file(path, &m))
        return die("load");
    const char *block = attnrt_block_name(m, 0);
    int nin, nout;
    attnrt_block_arity(m, block, &nin, &nout);
    if (nin != 3 || nout < 1) {
        fprintf(stderr, "attnc-embed: block '%s' is not a plain attention (q, k, v -> o)\n", block);
        return 1;
    }
    /* H and D are numbers in the manifest; B and N are ours to pick */
    const char *qname;
    attnrt_dtype qt;
    int rank;
    int64_t decl[ATTNRT_MAX_RANK];
    attnrt_block_tensor(m, block, 0, 0, &qname, &qt, &rank, decl);
    if (rank != 4 || qt != ATTNRT_F16 || decl[1] < 0 || decl[3] < 0) {
        fprintf(stderr, "attnc-embed: q of block '%s' is not f16[B, H, N, D] with numeric H and D\n", block);
        return 1;
    }
    int64_t H = decl[1], D = decl[3];
    attnrt_tensor t[4];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 3; i++) {
        t[i] = (attnrt_tensor){.data = NULL, .dtype = ATTNRT_F16, .rank = 4, .shape = {B, H, N, D}};
        t[i].strides[3] = 1, t[i].strides[2] = D, t[i].strides[1] = N * D, t[i].strides[0] = H * N * D;
    }
    size_t n = (size_t)(B * H * N * D), bytes = n * 2;
    uint16_t *host[4];
    srand(1234);
    for (int i = 0; i < 4; i++) {
        host[i] = malloc(bytes);
        for (size_t e = 0; e < n; e++)
            host[i][e] = float_to_half((float)((double)rand() / RAND_MAX * 2 - 1));
        if (attnrt_malloc(&t[i].data, bytes))
            return die("malloc");
        if (i < 3 && attnrt_memcpy_htod(t[i].data, host[i], bytes))
            return die("copy");
    }
    t[3].dtype = ATTNRT_F16;
    t[3].rank = 4;
    memcpy(t[3].shape, t[0].shape, sizeof t[0].shape);
    memcpy(t[3].strides, t[0].strides, sizeof t[0].strides);
    if (attnrt_memset(t[3].data, 0xff, bytes))   /* NaN everywhere: unwritten elements show */
        return die("memset");
    if (attnrt_run(m, block, t, 3, &t[3], 1, NULL) || attnrt_synchronize())
        return die("run");
    if (attnrt_memcpy_dtoh(host[3], t[3].data, bytes))
        return die("copy back");
    double worst = 0, scale = 1 / sqrt((double)D);
    double *s = malloc(sizeof(double) * (size_t)N);
    long bad = 0;
    int64_t step = N > 256 ? N / 256 : 1;
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int64_t i = 0; i < N; i += step) {
            const uint16_t *q = host[0] + (bh * N + i) * D;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < N; j++) {
                const uint16_t *k = host[1] + (bh * N + j) * D;
                double acc = 0;
                for (int64_t d = 0; d < D; d++)
                    acc += (double)half_to_float(q[d]) * half_to_float(k[d]);
                s[j] = acc * scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int64_t j = 0; j < N; j++)
                sum += s[j] = exp(s[j] - mx);
            for (int64_t d = 0; d < D; d++) {
                double ref = 0;
                for (int64_t j = 0; j < N; j++)
                    ref += s[j] * half_to_float(host[2][(bh * N + j) * D + d]);
                ref /= sum;
                double got = half_to_float(host[3][(bh * N + i) * D + d]), e = fabs(got - ref);
                if (!(e <= 2e-3 + 1e-2 * fabs(ref)))
                    bad++;
                if (!(e <= worst))
                    worst = e;   /* NaN sticks */
            }
        }
    printf("attnc-embed: block %s, B=%lld H=%lld N=%lld D=%lld: max |error| %.3g, %ld bad elements: %s\n", block,
           (long long)B, (long long)H, (long long)N, (long long)D, worst, bad, bad ? "FAIL" : "ok");
    for (int i = 0; i < 4; i++) {
        attnrt_free(t[i].data);
        free(host[i]);
    }
    free(s);
    attnrt_unload(m);
    return bad ? 1 : 0;
}
