// mma_sync_peak.cu — a measurement probe, not an attnc kernel: the most
// FLOP/s that Ampere's warp-level MMA (mma.sync.m16n8k16, f16 in, f32
// accumulate: what attnc's sm_80 code generator emits) can issue on this GPU,
// with no memory traffic at all. It bounds from above anything sm_80 code
// reaches on a Hopper GPU (whose full rate needs wgmma), e.g. the MLP
// blocks' GEMMs against torch.compile's (cuBLAS, wgmma). Printed beside
// cuBLAS's f16 GEMM rate by bench/probes/mma_ceiling.py.
//
//   nvcc -O3 -arch=sm_90 -o mma_sync_peak mma_sync_peak.cu && ./mma_sync_peak
#include <cstdio>
#include <cuda_runtime.h>

constexpr int kChains = 8;      // independent accumulators a warp: hides the MMA latency
constexpr int kIters = 4096;

__global__ void mma_loop(float *out, int iters) {
    unsigned a[4], b[2];
    for (int i = 0; i < 4; i++) a[i] = 0x3c003c00u ^ (threadIdx.x * 7u + i);   // f16 pairs near 1.0
    for (int i = 0; i < 2; i++) b[i] = 0x3c003c00u ^ (threadIdx.x * 3u + i);
    float c[kChains][4] = {};
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int k = 0; k < kChains; k++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float s = 0;
    for (int k = 0; k < kChains; k++) s += c[k][0] + c[k][1] + c[k][2] + c[k][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;   // keeps the loop alive
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    float best = 0;
    for (int warps = 4; warps <= 16; warps *= 2) {
        int blocks = sms * 4, threads = warps * 32;
        float *out;
        cudaMalloc(&out, sizeof(float) * blocks * threads);
        cudaEvent_t t0, t1;
        cudaEventCreate(&t0);
        cudaEventCreate(&t1);
        mma_loop<<<blocks, threads>>>(out, kIters);   // warm-up
        float ms_best = 1e30f;
        for (int r = 0; r < 10; r++) {
            cudaEventRecord(t0);
            mma_loop<<<blocks, threads>>>(out, kIters);
            cudaEventRecord(t1);
            cudaEventSynchronize(t1);
            float ms;
            cudaEventElapsedTime(&ms, t0, t1);
            if (ms < ms_best) ms_best = ms;
        }
        double flop = 2.0 * 16 * 8 * 16 * kChains * (double)kIters * blocks * warps;
        float tflops = (float)(flop / (ms_best * 1e-3) / 1e12);
        printf("mma.sync.m16n8k16 f16->f32: %d blocks x %d warps: %.1f TFLOP/s\n", blocks, warps, tflops);
        if (tflops > best) best = tflops;
        cudaFree(out);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) { printf("error: %s\n", cudaGetErrorString(e)); return 1; }
    printf("peak %.1f\n", best);
    return 0;
}
