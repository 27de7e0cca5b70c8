"""triton_sm80_gemm.py — what another compiler's sm_80 GEMMs reach on this GPU.

#8 compares attnc's sm_80 MLP kernels with torch.compile, whose GEMMs are
cuBLAS's Hopper kernels (wgmma). The like-for-like peer of sm_80 code is
sm_80 code: this probe compiles Triton's matmul (the tutorial's kernel:
GROUP_M order, f32 accumulation, f16 out) for sm_80 — PTX with
mma.sync.m16n8k16, ldmatrix and cp.async, as attnc's sm_80 generator emits —
and loads that PTX through the CUDA driver, which JIT-compiles it for the
GPU here, as it does attnc's. Each of Triton's usual Ampere configurations
is timed on SwiGLU's GEMMs (x @ wg and h @ wd, T 4096 and 8192); beside
them, in the same process: Triton's own Hopper kernels for the same
GEMMs (sm_90, wgmma) and cuBLAS (torch.matmul).

    python3 bench/probes/triton_sm80_gemm.py --out OUT

Prints a table and writes OUT/triton-sm80-gemm.json. A probe, not a peer
of the benchmark: bench/results/ says what its numbers mean for #8's bar.
"""
import argparse
import ctypes
import json
import os

import torch
import triton
import triton.language as tl
import triton.testing
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def matmul(a, b, c, M, N, K, stride_am, stride_bk, stride_cm,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    first_m = pid // per_group * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    pm = first_m + (pid % per_group) % group_m
    pn = (pid % per_group) // group_m
    rm = (pm * BM + tl.arange(0, BM)) % M
    rn = (pn * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    ap = a + rm[:, None] * stride_am + rk[None, :]
    bp = b + rk[:, None] * stride_bk + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        x = tl.load(ap, mask=rk[None, :] < K - k * BK, other=0.0)
        y = tl.load(bp, mask=rk[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(x, y, acc)
        ap += BK
        bp += BK * stride_bk
    cm = pm * BM + tl.arange(0, BM)
    cn = pn * BN + tl.arange(0, BN)
    tl.store(c + cm[:, None] * stride_cm + cn[None, :], acc.to(tl.float16),
             mask=(cm[:, None] < M) & (cn[None, :] < N))


# Triton's matmul tutorial's configurations for f16 (BM, BN, BK, stages, warps)
CONFIGS = [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 256, 32, 4, 8), (256, 128, 32, 4, 8),
           (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 128, 64, 3, 4), (128, 64, 32, 4, 4),
           (64, 128, 32, 4, 4), (128, 128, 64, 4, 8)]


def compile_ptx(cfg, arch):
    bm, bn, bk, stages, warps = cfg
    sig = {n: "*fp16" for n in ("a", "b", "c")}
    sig.update({n: "i32" for n in ("M", "N", "K", "stride_am", "stride_bk", "stride_cm")})
    sig.update({n: "constexpr" for n in ("BM", "BN", "BK", "GROUP_M")})
    # every pointer and size a multiple of 16, as the benchmark's are (the
    # vectorised loads that become cp.async need it)
    src = ASTSource(fn=matmul, signature=sig, constexprs={"BM": bm, "BN": bn, "BK": bk, "GROUP_M": 8},
                    attrs={(i,): [["tt.divisibility", 16]] for i in range(9)})
    k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps, "num_stages": stages})
    assert getattr(k.metadata, "global_scratch_size", 0) == 0, "kernel wants global scratch"
    return k.asm["ptx"], k.metadata.name, k.metadata.shared, warps


class DriverKernel:
    """PTX loaded with cuModuleLoadData (the driver JIT-compiles it) and
    launched with cuLaunchKernel on torch's current stream."""
    cuda = None

    def __init__(self, ptx, name, shared, warps):
        if DriverKernel.cuda is None:
            DriverKernel.cuda = ctypes.CDLL("libcuda.so.1")
        cu = DriverKernel.cuda
        torch.empty(1, device="cuda")   # the runtime makes the primary context current here
        self.mod, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(cu.cuModuleLoadData(ctypes.byref(self.mod), ctypes.c_char_p(ptx.encode() + b"\0")), "load")
        self.check(cu.cuModuleGetFunction(ctypes.byref(self.fn), self.mod, name.encode()), "function")
        # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self.check(cu.cuFuncSetAttribute(self.fn, 8, ctypes.c_int(shared)), "shared memory")
        self.shared, self.threads = shared, 32 * warps

    @staticmethod
    def check(err, what):
        if err:
            raise RuntimeError(f"CUDA driver error {err} ({what})")

    def launch(self, grid, args):
        vals = [a if isinstance(a, ctypes.c_void_p) else ctypes.c_int32(a) for a in args]
        vals += [ctypes.c_void_p(0), ctypes.c_void_p(0)]   # Triton's global and profile scratch: none
        params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(DriverKernel.cuda.cuLaunchKernel(self.fn, grid, 1, 1, self.threads, 1, 1, self.shared, stream,
                                                    params, None), "launch")


def gemm_runner(kern, cfg, a, b, c):
    M, K = a.shape
    N = b.shape[1]
    grid = triton.cdiv(M, cfg[0]) * triton.cdiv(N, cfg[1])
    args = [ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()), ctypes.c_void_p(c.data_ptr()),
            M, N, K, a.stride(0), b.stride(0), c.stride(0)]
    return lambda: kern.launch(grid, args)


def load_kernels(arch, configs):
    """{config: DriverKernel} of Triton's matmul for sm_ARCH; a
    configuration that does not compile or load is reported and left out."""
    kernels = {}
    for cfg in configs:
        try:
            kernels[cfg] = DriverKernel(*compile_ptx(cfg, arch))
        except Exception as e:   # (too much shared memory for one configuration: reported)
            print(f"sm_{arch} {cfg}: {str(e)[:120]}")
    return kernels


def best_rate(kernels, M, K, N):
    """Each kernel on a random f16 [M, K] @ [K, N], checked against torch,
    then timed: ({config: TFLOP/s}, the best config); a wrong result raises."""
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16) * K ** -0.5
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    ref = a @ b
    rates = {}
    for cfg, kern in kernels.items():
        run = gemm_runner(kern, cfg, a, b, c)
        c.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        err = float((c.float() - ref.float()).abs().max())
        if not err < 0.05:
            raise RuntimeError(f"Triton {cfg} [{M}, {K}] @ [{K}, {N}]: max |diff| {err} against torch")
        rates[cfg] = 2 * M * N * K / triton.testing.do_bench(run, warmup=25, rep=100) / 1e9
    if not rates:
        raise RuntimeError("no Triton kernel loaded")
    return rates, max(rates, key=rates.get)


def swiglu_rate(kernels, T, DIM, FF):
    """SwiGLU's three GEMMs (x @ wg and x @ wu, [T, DIM] @ [DIM, FF]; h @ wd,
    [T, FF] @ [FF, DIM]), each shape with its best kernel: TFLOP/s over
    their FLOPs (the elementwise ops, which attnc fuses, not counted)."""
    up, up_best = best_rate(kernels, T, DIM, FF)
    down, down_best = best_rate(kernels, T, FF, DIM)
    fl = 2 * T * DIM * FF   # (each of the three)
    return 3 * fl / (2 * fl / up[up_best] + fl / down[down_best])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    DIM, FF = 4096, 14336
    rows = []
    kernels = {arch: load_kernels(arch, CONFIGS) for arch in (80, 90)}
    for T in (4096, 8192):
        for what, M, K, N in (("x @ wg", T, DIM, FF), ("h @ wd", T, FF, DIM)):
            a = torch.randn(M, K, device="cuda", dtype=torch.float16)
            b = torch.randn(K, N, device="cuda", dtype=torch.float16)
            fl = 2 * M * N * K
            row = dict(T=T, gemm=what, M=M, N=N, K=K,
                       cublas=fl / triton.testing.do_bench(lambda: a @ b, warmup=25, rep=100) / 1e9)
            del a, b
            for arch in (80, 90):
                rates, best = best_rate(kernels[arch], M, K, N)
                row.update({f"sm_{arch} {cfg}": r for cfg, r in rates.items()})
                row[f"triton_sm{arch}_best"], row[f"triton_sm{arch}_best_config"] = rates[best], best
            rows.append(row)
            print(f"T {T} {what}: cuBLAS {row['cublas']:.0f}, Triton sm_80 best {row['triton_sm80_best']:.0f} "
                  f"{row['triton_sm80_best_config']}, Triton sm_90 best {row['triton_sm90_best']:.0f} "
                  f"{row['triton_sm90_best_config']} TFLOP/s", flush=True)
    # SwiGLU's three GEMMs (gate and up are the same shape) at each one's best
    print("\n| T | SwiGLU GEMMs, TFLOP/s | cuBLAS | Triton sm_80 (mma.sync) | Triton sm_90 (wgmma) | sm_80 / cuBLAS |")
    print("|---|---|---|---|---|---|")
    for T in (4096, 8192):
        g, d = [r for r in rows if r["T"] == T]
        fl_g, fl_d = 2 * g["M"] * g["N"] * g["K"], 2 * d["M"] * d["N"] * d["K"]
        rate = {k: (2 * fl_g + fl_d) / (2 * fl_g / g[k] + fl_d / d[k])
                for k in ("cublas", "triton_sm80_best", "triton_sm90_best")}
        print(f"| {T} | x@wg, x@wu, h@wd | {rate['cublas']:.0f} | {rate['triton_sm80_best']:.0f} | "
              f"{rate['triton_sm90_best']:.0f} | {rate['triton_sm80_best'] / rate['cublas']:.3f} |")
    with open(os.path.join(args.out, "triton-sm80-gemm.json"), "w") as f:
        json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
