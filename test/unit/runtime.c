/* runtime.c — libattnrt's checks, without a GPU: every bad tensor is refused
 * with a message naming it and what was expected, and with libcuda absent a
 * valid call fails with a clear error. Prints one line per case for
 * FileCheck (test/runtime/validate.test).
 *
 * GQA_PTX: a block g(q: f16[B, H, N, 64], k, v: f16[B, HKV, N, 64]) whose
 * manifest checks that H is a multiple of HKV. PAGED_PTX:
 * examples/paged_decode.attn (a paged KV cache: pages(block_table,
 * cache_len)), whose table and lengths are checked like any input.
 *
 *   attnrt-unit MHA_PTX [GQA_PTX [PAGED_PTX]]
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "attnrt.h"

static char buf[4][1 << 15] __attribute__((aligned(16)));   /* 2·16·5·64 f16 = 20 KiB each */

static attnrt_tensor t4(void *p, attnrt_dtype dt, int64_t b, int64_t h, int64_t n, int64_t d) {
    attnrt_tensor t = {.data = p, .dtype = dt, .rank = 4, .shape = {b, h, n, d}};
    t.strides[3] = 1, t.strides[2] = d, t.strides[1] = n * d, t.strides[0] = h * n * d;
    return t;
}

/* A contiguous tensor of any rank (validation reads no element). */
static attnrt_tensor tn(void *p, attnrt_dtype dt, int rank, const int64_t *shape) {
    attnrt_tensor t = {.data = p, .dtype = dt, .rank = rank};
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.strides[d] = stride;
        stride *= shape[d];
    }
    return t;
}

static void report(const char *name, int rc) { printf("%s: rc=%d %s\n", name, rc, rc ? attnrt_last_error() : "ok"); }

int main(int argc, char **argv) {
    attnrt_module *m = NULL;
    report("missing-file", attnrt_load_file("/nonexistent/attn.ptx", &m));
    const char junk[] = ".version 6.4\n.target sm_70\n";
    report("no-manifest", attnrt_load_data(junk, sizeof junk - 1, &m));
    const char badver[] = "// attnc-manifest 7\n";
    report("bad-version", attnrt_load_data(badver, sizeof badver - 1, &m));
    const char v1[] = "// attnc-manifest 1\n// target sm_70\n// block mha attention\n";
    report("old-version", attnrt_load_data(v1, sizeof v1 - 1, &m));
    /* a key this runtime does not know (a later target's cluster launch) */
    const char unknown[] = "// attnc-manifest 4\n// target name=sm_90a\n// block name=b kind=attention\n"
                           "// dims names=N\n// tensor role=in name=q dtype=f16 shape=N,64 stride_units=8\n"
                           "// kernel name=b_k0 grid=1;1;1 threads=128 smem=0 args=q cluster=2,1,1\n// end\n";
    report("unknown-key", attnrt_load_data(unknown, sizeof unknown - 1, &m));
    const char missing[] = "// attnc-manifest 4\n// target name=sm_80\n// block name=b kind=attention\n"
                           "// tensor role=in name=q dtype=f16\n";
    report("missing-key", attnrt_load_data(missing, sizeof missing - 1, &m));
    const char positional[] = "// attnc-manifest 4\n// target sm_80\n";
    report("positional", attnrt_load_data(positional, sizeof positional - 1, &m));
    /* tensor maps (sm_90a TMA): each follows its kernel's line, a box size per dim in 1..256, a swizzle this
     * runtime knows */
#define TMAP_HEAD "// attnc-manifest 4\n// target name=sm_90a\n// block name=b kind=attention\n// dims names=N\n" \
                  "// tensor role=in name=k dtype=f16 shape=N,64 stride_units=8\n// kernel name=b_k0 grid=1;1;1 threads=128 smem=0 args=k\n"
    const char tmap_good[] = TMAP_HEAD "// tmap kernel=b_k0 tensor=k box=64,64 swizzle=128\n// end\n";
    report("tmap-good", attnrt_load_data(tmap_good, sizeof tmap_good - 1, &m));
    attnrt_unload(m);
    m = NULL;
    const char tmap_kernel[] = TMAP_HEAD "// tmap kernel=b_k1 tensor=k box=64,64 swizzle=128\n";
    report("tmap-kernel", attnrt_load_data(tmap_kernel, sizeof tmap_kernel - 1, &m));
    const char tmap_box[] = TMAP_HEAD "// tmap kernel=b_k0 tensor=k box=64 swizzle=128\n";
    report("tmap-box-rank", attnrt_load_data(tmap_box, sizeof tmap_box - 1, &m));
    const char tmap_big[] = TMAP_HEAD "// tmap kernel=b_k0 tensor=k box=512,64 swizzle=128\n";
    report("tmap-box-size", attnrt_load_data(tmap_big, sizeof tmap_big - 1, &m));
    const char tmap_none[] = TMAP_HEAD "// tmap kernel=b_k0 tensor=k box=1,64 swizzle=none\n// end\n";
    report("tmap-swizzle-none", attnrt_load_data(tmap_none, sizeof tmap_none - 1, &m));
    attnrt_unload(m);
    m = NULL;
    const char tmap_swz[] = TMAP_HEAD "// tmap kernel=b_k0 tensor=k box=64,64 swizzle=64\n";
    report("tmap-swizzle", attnrt_load_data(tmap_swz, sizeof tmap_swz - 1, &m));
    /* f32 tensors take maps too (the backward's accumulators, added into by bulk reduce-adds); i32 ones do not */
#define TMAP_TYPED(T) "// attnc-manifest 4\n// target name=sm_90a\n// block name=b kind=attention\n// dims names=N\n" \
                      "// tensor role=in name=a dtype=" T " shape=N,64 stride_units=4\n" \
                      "// kernel name=b_k0 grid=1;1;1 threads=128 smem=0 args=a\n// tmap kernel=b_k0 tensor=a box=64,32 swizzle=128\n// end\n"
    const char tmap_f32[] = TMAP_TYPED("f32");
    report("tmap-f32", attnrt_load_data(tmap_f32, sizeof tmap_f32 - 1, &m));
    attnrt_unload(m);
    m = NULL;
    const char tmap_i32[] = TMAP_TYPED("i32");
    report("tmap-i32", attnrt_load_data(tmap_i32, sizeof tmap_i32 - 1, &m));
    /* persistent=counter: blocks that loop over the grid's x and y (sm_90a), so z must be 1;
     * another kind (an older attnc's persistent=1 took no tile counter) is refused */
#define PERSISTENT_HEAD "// attnc-manifest 4\n// target name=sm_90a\n// block name=b kind=attention\n" \
                        "// dims names=N\n// tensor role=in name=k dtype=f16 shape=N,64 stride_units=8\n"
    const char persistent_good[] = PERSISTENT_HEAD "// kernel name=b_k0 grid=N;2;1 threads=384 smem=0 args=k persistent=counter\n"
                                                   "// end\n";
    report("persistent-good", attnrt_load_data(persistent_good, sizeof persistent_good - 1, &m));
    attnrt_unload(m);
    m = NULL;
    const char persistent_z[] = PERSISTENT_HEAD "// kernel name=b_k0 grid=N;2;N threads=384 smem=0 args=k persistent=counter\n";
    report("persistent-z", attnrt_load_data(persistent_z, sizeof persistent_z - 1, &m));
    const char persistent_old[] = PERSISTENT_HEAD "// kernel name=b_k0 grid=N;2;1 threads=384 smem=0 args=k persistent=1\n";
    report("persistent-kind", attnrt_load_data(persistent_old, sizeof persistent_old - 1, &m));
    /* when=: a kernel launched only where an expression of the dims holds (a variant per size range) */
    const char when_good[] = PERSISTENT_HEAD "// kernel name=b_k0 grid=N;2;1 threads=384 smem=0 args=k when=((N<=1024)==0)\n"
                                             "// kernel name=b_k1 grid=N;2;1 threads=128 smem=0 args=k when=(N<=1024)\n// end\n";
    report("when-good", attnrt_load_data(when_good, sizeof when_good - 1, &m));
    attnrt_unload(m);
    m = NULL;
    char when_long[1024];
    snprintf(when_long, sizeof when_long, PERSISTENT_HEAD "// kernel name=b_k0 grid=N;2;1 threads=384 smem=0 args=k when=(N<=%0300d)\n", 1);
    report("when-long", attnrt_load_data(when_long, strlen(when_long), &m));
    /* zero=: tensors the runtime clears before a launch (the backward's dQ accumulator) */
#define ZERO_HEAD "// attnc-manifest 4\n// target name=sm_80\n// block name=b kind=attention_backward\n// dims names=N\n" \
                  "// tensor role=in name=k dtype=f16 shape=N,64 stride_units=8\n// tensor role=tmp name=tmp0 dtype=f32 shape=N,64 stride_units=4\n"
    const char zero_good[] = ZERO_HEAD "// kernel name=b_k0 grid=1;1;1 threads=128 smem=0 args=k,tmp0 zero=tmp0\n// end\n";
    report("zero-good", attnrt_load_data(zero_good, sizeof zero_good - 1, &m));
    attnrt_unload(m);
    m = NULL;
    /* let: a dim computed at each run from the others and $sms (decode's split count); a tensor
     * binds it never, the dims line names it, a let names it once */
#define LET_HEAD "// attnc-manifest 4\n// target name=sm_90a\n// block name=b kind=attention\n// dims names=N,S\n" \
                 "// tensor role=in name=k dtype=f16 shape=N,64 stride_units=8\n"
    const char let_good[] = LET_HEAD "// let name=S expr=max(1,min($sms/N,128))\n"
                                     "// tensor role=tmp name=tmp0 dtype=f32 shape=S,N,64 stride_units=4,4\n"
                                     "// kernel name=b_k0 grid=N;1;S threads=128 smem=0 args=k,tmp0 when=(S>1)\n// end\n";
    report("let-good", attnrt_load_data(let_good, sizeof let_good - 1, &m));
    {
        static _Alignas(16) char kbuf[5 * 64 * 2];
        attnrt_tensor k = {.data = kbuf, .dtype = ATTNRT_F16, .rank = 2, .shape = {5, 64}, .strides = {64, 1}};
        report("let-validate", attnrt_validate(m, "b", &k, 1, NULL, 0, 0));
    }
    attnrt_unload(m);
    m = NULL;
    const char let_unknown[] = LET_HEAD "// let name=T expr=1\n";
    report("let-unknown", attnrt_load_data(let_unknown, sizeof let_unknown - 1, &m));
    const char let_twice[] = LET_HEAD "// let name=S expr=1\n// let name=S expr=2\n";
    report("let-twice", attnrt_load_data(let_twice, sizeof let_twice - 1, &m));
    /* a manifest cut short inside its block (mid-line or between lines): refused, not loaded as it is */
    const char cut_mid[] = ZERO_HEAD "// kernel name=b_k0 grid=1;1;1 threads=128 smem=0 args=k";
    report("cut-mid-line", attnrt_load_data(cut_mid, sizeof cut_mid - 1, &m));
    const char cut_between[] = ZERO_HEAD;
    report("cut-between-lines", attnrt_load_data(cut_between, sizeof cut_between - 1, &m));
    /* what the runtime cannot hold is refused whole, never cut to fit: a 17th dim, a name past 63
     * characters, a dim no dims line names (which the shape lookup would not find) */
    const char dims17[] = "// attnc-manifest 4\n// target name=sm_80\n// block name=b kind=attention\n"
                          "// dims names=A,B,C,D,E,F,G,H,I,J,K,L,M,N,O,P,Q\n// end\n";
    report("dims-17", attnrt_load_data(dims17, sizeof dims17 - 1, &m));
    char long_name[512];
    snprintf(long_name, sizeof long_name, "// attnc-manifest 4\n// target name=sm_80\n// block name=b kind=attention\n"
             "// dims names=N\n// tensor role=in name=%070d dtype=f16 shape=N,64 stride_units=8\n// end\n", 7);
    report("name-too-long", attnrt_load_data(long_name, strlen(long_name), &m));
    const char undeclared[] = "// attnc-manifest 4\n// target name=sm_80\n// block name=b kind=attention\n"
                              "// dims names=N\n// tensor role=out name=o dtype=f16 shape=M,64 stride_units=8\n// end\n";
    report("dim-undeclared", attnrt_load_data(undeclared, sizeof undeclared - 1, &m));
    const char zero_bad[] = ZERO_HEAD "// kernel name=b_k0 grid=1;1;1 threads=128 smem=0 args=k,tmp0 zero=tmp9\n";
    report("zero-unknown", attnrt_load_data(zero_bad, sizeof zero_bad - 1, &m));
    /* zero= clears a temporary whole (a memset); a caller's tensor, maybe strided, is not its to clear */
    const char zero_input[] = ZERO_HEAD "// kernel name=b_k0 grid=1;1;1 threads=128 smem=0 args=k,tmp0 zero=k\n";
    report("zero-input", attnrt_load_data(zero_input, sizeof zero_input - 1, &m));
    /* stride_units=: a power of two of at most 16 bytes for each dim but the innermost */
#define UNITS(U) "// attnc-manifest 4\n// target name=sm_80\n// block name=b kind=attention\n// dims names=N\n" \
                 "// tensor role=in name=q dtype=f16 shape=2,N,64" U "\n// end\n"
    const char *units_bad[] = {UNITS(""), UNITS(" stride_units=8"), UNITS(" stride_units=8,3"),
                               UNITS(" stride_units=8,16"), UNITS(" stride_units=8,8,8")};
    for (int i = 0; i < 5; i++)
        report("units-bad", attnrt_load_data(units_bad[i], strlen(units_bad[i]), &m));
    if (argc < 2 || attnrt_load_file(argv[1], &m)) {
        fprintf(stderr, "attnrt-unit: %s\n", attnrt_last_error());
        return 1;
    }
    printf("blocks: %d %s\n", attnrt_block_count(m), attnrt_block_name(m, 0));
    attnrt_tensor in[3], out[1];
    for (int i = 0; i < 3; i++)
        in[i] = t4(buf[i], ATTNRT_F16, 2, 16, 5, 64);
    out[0] = t4(buf[3], ATTNRT_F16, 2, 16, 5, 64);

    report("good", attnrt_validate(m, "mha", in, 3, out, 1, 0));
    int rank;
    int64_t shape[8];
    int rc = attnrt_output_shape(m, "mha", in, 3, 0, &rank, shape);
    printf("output-shape: rc=%d rank=%d [%lld, %lld, %lld, %lld]\n", rc, rank, (long long)shape[0],
           (long long)shape[1], (long long)shape[2], (long long)shape[3]);
    report("wrong-block", attnrt_validate(m, "mla", in, 3, out, 1, 0));
    report("wrong-count", attnrt_validate(m, "mha", in, 2, out, 1, 0));

    attnrt_tensor bad[3];
    memcpy(bad, in, sizeof in);
    bad[0].dtype = ATTNRT_F32;
    report("dtype", attnrt_validate(m, "mha", bad, 3, out, 1, 0));
    memcpy(bad, in, sizeof in);
    bad[1].rank = 3;
    report("rank", attnrt_validate(m, "mha", bad, 3, out, 1, 0));
    memcpy(bad, in, sizeof in);
    bad[2] = t4(buf[2], ATTNRT_F16, 2, 8, 5, 64);
    report("fixed-dim", attnrt_validate(m, "mha", bad, 3, out, 1, 0));
    memcpy(bad, in, sizeof in);
    bad[1] = t4(buf[1], ATTNRT_F16, 2, 16, 6, 64);
    report("inconsistent-dim", attnrt_validate(m, "mha", bad, 3, out, 1, 0));
    /* any strides with a unit innermost one and 16-byte aligned rows (this block's units are 8 f16):
     * [B, N, H, D] transposed to [B, H, N, D], a slice of a fused QKV [B, N, 3, H, D], rows padded */
    attnrt_tensor view[3];
    memcpy(view, in, sizeof in);
    int64_t H = 16, N = 5, D = 64;
    view[0].strides[0] = N * H * D, view[0].strides[1] = D, view[0].strides[2] = H * D;
    view[1].strides[0] = N * 3 * H * D, view[1].strides[1] = D, view[1].strides[2] = 3 * H * D;
    view[2].strides[2] = 72, view[2].strides[1] = N * 72, view[2].strides[0] = H * N * 72;
    report("strided-views", attnrt_validate(m, "mha", view, 3, out, 1, 0));
    memcpy(bad, in, sizeof in);
    bad[0].shape[0] = 1, bad[0].strides[0] = 3;   /* a dim of size 1: its stride is never stepped along */
    bad[1].shape[0] = 1, bad[2].shape[0] = 1;
    attnrt_tensor one_out = t4(buf[3], ATTNRT_F16, 1, 16, 5, 64);
    report("size-one-stride", attnrt_validate(m, "mha", bad, 3, &one_out, 1, 0));
    memcpy(bad, in, sizeof in);
    bad[0].strides[3] = 2;
    report("strides-inner", attnrt_validate(m, "mha", bad, 3, out, 1, 0));
    memcpy(bad, in, sizeof in);
    bad[0].strides[2] = 100;
    report("strides-unit", attnrt_validate(m, "mha", bad, 3, out, 1, 0));
    memcpy(bad, in, sizeof in);
    bad[1].strides[1] = -320;
    report("strides-negative", attnrt_validate(m, "mha", bad, 3, out, 1, 0));
    memcpy(bad, in, sizeof in);
    bad[1].strides[1] = 0;   /* an input may repeat memory (PyTorch's expand) */
    report("input-stride-0", attnrt_validate(m, "mha", bad, 3, out, 1, 0));
    attnrt_tensor self_overlap = out[0];
    self_overlap.strides[1] = 0;   /* 16 heads written to one place */
    report("out-self-overlap", attnrt_validate(m, "mha", in, 3, &self_overlap, 1, 0));
    /* q and o as the two halves of each row of one [B, H, N, 128] buffer: interleaved, refused as overlapping */
    attnrt_tensor halves[2] = {t4(buf[0], ATTNRT_F16, 2, 16, 5, 64), t4(buf[0] + 128, ATTNRT_F16, 2, 16, 5, 64)};
    for (int i = 0; i < 2; i++)
        halves[i].strides[2] = 128, halves[i].strides[1] = 5 * 128, halves[i].strides[0] = 16 * 5 * 128;
    attnrt_tensor half_in[3] = {halves[0], in[1], in[2]};
    report("out-interleaved", attnrt_validate(m, "mha", half_in, 3, &halves[1], 1, 0));
    memcpy(bad, in, sizeof in);
    bad[1].data = buf[1] + 2;
    report("alignment", attnrt_validate(m, "mha", bad, 3, out, 1, 0));
    /* N = 0, as PyTorch allows: empty tensors (their pointers never used) */
    attnrt_tensor empty_in[3], empty_out[1];
    for (int i = 0; i < 3; i++)
        empty_in[i] = t4(NULL, ATTNRT_F16, 2, 16, 0, 64);
    empty_out[0] = t4(NULL, ATTNRT_F16, 2, 16, 0, 64);
    empty_in[0].strides[1] = 64;   /* strides of an empty tensor mean nothing (PyTorch's vary) */
    report("empty", attnrt_validate(m, "mha", empty_in, 3, empty_out, 1, 0));
    memcpy(bad, in, sizeof in);
    bad[0].shape[2] = -1;
    report("negative", attnrt_validate(m, "mha", bad, 3, out, 1, 0));
    /* out= aliasing an input, or overlapping it by part */
    report("out-is-input", attnrt_validate(m, "mha", in, 3, &in[0], 1, 0));
    attnrt_tensor shifted = t4(buf[1] + 32, ATTNRT_F16, 2, 16, 5, 64);
    report("out-overlaps", attnrt_validate(m, "mha", in, 3, &shifted, 1, 0));
    attnrt_tensor badout = t4(buf[3], ATTNRT_F16, 2, 16, 4, 64);
    report("output-shape-mismatch", attnrt_validate(m, "mha", in, 3, &badout, 1, 0));
    /* everything right, but no GPU: the device-pointer check needs libcuda */
    report("run-without-cuda", attnrt_run(m, "mha", in, 3, out, 1, NULL));
    report("malloc-without-cuda", attnrt_malloc(&(void *){0}, 16));
    attnrt_unload(m);
    /* a check whose arithmetic leaves 64 bits at these dims (N = 5): an error that says so, not a SIGFPE
     * (INT64_MIN / -1) or a wrapped value */
#define CHECK_BLOCK(E) "// attnc-manifest 4\n// target name=sm_80\n// block name=c kind=attention\n// dims names=B,N\n" \
                       "// tensor role=in name=q dtype=f16 shape=B,16,N,64 stride_units=8,8,8\n// assert expr=" E " message=never\n// end\n"
    const char *overflowing[] = {CHECK_BLOCK("(((N-5)-9223372036854775807-1)/(0-1))>0"),
                                 CHECK_BLOCK("(N*9223372036854775807)>0"), CHECK_BLOCK("(N+9223372036854775807)>0"),
                                 CHECK_BLOCK("(N-9223372036854775807-9)>0"), CHECK_BLOCK("(N-99999999999999999999)>0")};
    for (int i = 0; i < (int)(sizeof overflowing / sizeof *overflowing); i++) {
        m = NULL;
        if (attnrt_load_data(overflowing[i], strlen(overflowing[i]), &m)) {
            report("check-overflow-load", ATTNRT_ERROR_MANIFEST);
            continue;
        }
        report("check-overflow", attnrt_validate(m, "c", in, 1, NULL, 0, 0));
        attnrt_unload(m);
    }
    m = NULL;
    if (argc > 2) {
        if (attnrt_load_file(argv[2], &m)) {
            fprintf(stderr, "attnrt-unit: %s\n", attnrt_last_error());
            return 1;
        }
        attnrt_tensor g[4] = {t4(buf[0], ATTNRT_F16, 1, 8, 3, 64), t4(buf[1], ATTNRT_F16, 1, 2, 3, 64),
                              t4(buf[2], ATTNRT_F16, 1, 2, 3, 64), t4(buf[3], ATTNRT_F16, 1, 8, 3, 64)};
        report("heads-8-2", attnrt_validate(m, "g", g, 3, &g[3], 1, 0));
        g[1] = t4(buf[1], ATTNRT_F16, 1, 3, 3, 64);
        g[2] = t4(buf[2], ATTNRT_F16, 1, 3, 3, 64);
        report("heads-8-3", attnrt_validate(m, "g", g, 3, &g[3], 1, 0));
        attnrt_unload(m);
    }
    m = NULL;
    if (argc > 3) {   /* a paged cache: B = 2, NQ = 1, 6 pages of 64 keys, 3 a batch */
        if (attnrt_load_file(argv[3], &m)) {
            fprintf(stderr, "attnrt-unit: %s\n", attnrt_last_error());
            return 1;
        }
        char *mem = aligned_alloc(256, 8 << 20);   /* never read: distinct addresses for each tensor */
        enum { MB = 1 << 20 };
        attnrt_tensor p[5] = {tn(mem, ATTNRT_F16, 4, (int64_t[]){2, 32, 1, 128}),
                              tn(mem + 1 * MB, ATTNRT_F16, 4, (int64_t[]){6, 64, 8, 128}),
                              tn(mem + 3 * MB, ATTNRT_F16, 4, (int64_t[]){6, 64, 8, 128}),
                              tn(mem + 5 * MB, ATTNRT_I32, 2, (int64_t[]){2, 3}),
                              tn(mem + 5 * MB + 4096, ATTNRT_I32, 1, (int64_t[]){2})};
        attnrt_tensor po[2] = {tn(mem + 6 * MB, ATTNRT_F16, 4, (int64_t[]){2, 32, 1, 128}),
                               tn(mem + 7 * MB, ATTNRT_F32, 3, (int64_t[]){2, 32, 1})};
        attnrt_tensor pbad[5];
        report("paged-good", attnrt_validate(m, "paged_decode", p, 5, po, 2, 0));
        memcpy(pbad, p, sizeof p);
        pbad[3].dtype = ATTNRT_I64;
        report("paged-table-dtype", attnrt_validate(m, "paged_decode", pbad, 5, po, 2, 0));
        memcpy(pbad, p, sizeof p);
        pbad[3] = tn(mem + 5 * MB, ATTNRT_I32, 2, (int64_t[]){3, 3});
        report("paged-table-batch", attnrt_validate(m, "paged_decode", pbad, 5, po, 2, 0));
        memcpy(pbad, p, sizeof p);
        pbad[4] = tn(mem + 5 * MB + 4096, ATTNRT_I32, 1, (int64_t[]){1});
        report("paged-lens-size", attnrt_validate(m, "paged_decode", pbad, 5, po, 2, 0));
        memcpy(pbad, p, sizeof p);
        pbad[4] = tn(mem + 5 * MB + 4096, ATTNRT_I32, 2, (int64_t[]){2, 1});
        report("paged-lens-rank", attnrt_validate(m, "paged_decode", pbad, 5, po, 2, 0));
        memcpy(pbad, p, sizeof p);
        pbad[1] = tn(mem + 1 * MB, ATTNRT_F16, 4, (int64_t[]){12, 32, 8, 128});
        report("paged-page-size", attnrt_validate(m, "paged_decode", pbad, 5, po, 2, 0));
        memcpy(pbad, p, sizeof p);
        pbad[2] = tn(mem + 3 * MB, ATTNRT_F16, 4, (int64_t[]){5, 64, 8, 128});
        report("paged-cache-pages", attnrt_validate(m, "paged_decode", pbad, 5, po, 2, 0));
        free(mem);
        attnrt_unload(m);
    }
    return 0;
}
