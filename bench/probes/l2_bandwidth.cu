// l2_bandwidth.cu — a measurement probe, not an attnc kernel: how many bytes
// a second every SM together can pull from L2 (and from DRAM) into shared
// memory with cp.async.cg, 16 bytes a thread at a time, in flight several
// stages deep — the path attnc's sm_80 GEMMs feed their MMAs by. A GEMM
// kernel whose block tile does F flops per byte it copies cannot run faster
// than F × this rate (bench/probes/gemm_bounds.py prints the bound beside
// the MLP's kernels).
//
//   nvcc -O3 -arch=sm_90 -o l2_bandwidth l2_bandwidth.cu && ./l2_bandwidth
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kPerThread = 4;                                  // 16-byte copies a thread a stage
constexpr int kStageBytes = kThreads * kPerThread * 16;        // 16 KiB: one contiguous chunk
constexpr int kStages = 4;

__global__ void pull(const char *src, size_t chunks, int iters, int *sink) {
    extern __shared__ __align__(128) char ring[];
    uint32_t base = (uint32_t)__cvta_generic_to_shared(ring);
    for (int it = 0; it < iters; it++) {
        size_t chunk = ((size_t)blockIdx.x + (size_t)it * gridDim.x) % chunks;
        const char *from = src + chunk * kStageBytes;
        uint32_t to = base + (it % kStages) * kStageBytes;
#pragma unroll
        for (int i = 0; i < kPerThread; i++) {
            int off = (i * kThreads + threadIdx.x) * 16;   // a warp's 32 copies: 512 contiguous bytes
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to + off), "l"(from + off));
        }
        asm volatile("cp.async.commit_group;");
        asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2));
    }
    asm volatile("cp.async.wait_group 0;");
    __syncthreads();
    if (threadIdx.x == 0 && ring[blockIdx.x % kStageBytes] == 123)   // keeps the copies alive
        atomicAdd(sink, 1);
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    int l2 = 0;
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    int smem = kStages * kStageBytes;
    cudaFuncSetAttribute(pull, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    const size_t sizes[] = {(size_t)l2 / 4, (size_t)l2 / 2, (size_t)4 << 30};
    const char *names[] = {"L2 (a quarter of it)", "L2 (half of it)", "DRAM (4 GiB)"};
    char *src;
    if (cudaMalloc(&src, sizes[2]) != cudaSuccess) { printf("error: cudaMalloc\n"); return 1; }
    cudaMemset(src, 1, sizes[2]);
    int *sink;
    cudaMalloc(&sink, sizeof(int));
    printf("%d SMs, L2 %d MiB, %d-byte stages, %d stages a block\n", sms, l2 >> 20, kStageBytes, kStages);
    for (int s = 0; s < 3; s++) {
        size_t chunks = sizes[s] / kStageBytes;
        float best = 0;
        for (int per_sm = 1; per_sm <= 3; per_sm++) {
            int blocks = sms * per_sm, iters = 2048 / per_sm;
            cudaEvent_t t0, t1;
            cudaEventCreate(&t0);
            cudaEventCreate(&t1);
            pull<<<blocks, kThreads, smem>>>(src, chunks, iters, sink);   // warm-up (and fills L2)
            float ms_best = 1e30f;
            for (int r = 0; r < 10; r++) {
                cudaEventRecord(t0);
                pull<<<blocks, kThreads, smem>>>(src, chunks, iters, sink);
                cudaEventRecord(t1);
                cudaEventSynchronize(t1);
                float ms;
                cudaEventElapsedTime(&ms, t0, t1);
                if (ms < ms_best) ms_best = ms;
            }
            double bytes = (double)kStageBytes * iters * blocks;
            float tbs = (float)(bytes / (ms_best * 1e-3) / 1e12);
            printf("%s: %d blocks an SM: %.2f TB/s\n", names[s], per_sm, tbs);
            if (tbs > best) best = tbs;
        }
        printf("%s best %.2f\n", s < 2 ? "l2" : "dram", best);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) { printf("error: %s\n", cudaGetErrorString(e)); return 1; }
    return 0;
}
