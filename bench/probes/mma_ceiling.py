"""mma_ceiling.py — the ceiling of sm_80 code on this GPU, beside cuBLAS.

Builds and runs mma_sync_peak.cu (a measurement probe: mma.sync.m16n8k16
with no memory traffic, the instruction attnc's sm_80 generator emits) and,
in the same process, times torch's f16 GEMM at 8192³ (cuBLAS; wgmma on a
Hopper GPU). Their ratio bounds what any sm_80 kernel can reach against a
cuBLAS-based peer, such as the MLP blocks against torch.compile
(bench/results/).

    python3 bench/probes/mma_ceiling.py --out OUT
"""
import argparse
import re

import torch
import triton.testing
from probe import run_probe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    probe = run_probe("mma_sync_peak", args.out)
    peak = float(re.search(r"peak ([0-9.]+)", probe).group(1))
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    ms = triton.testing.do_bench(lambda: a @ b, warmup=100, rep=500)
    cublas = 2 * n ** 3 / ms / 1e9
    print(f"cuBLAS f16 GEMM {n}^3: {cublas:.1f} TFLOP/s")
    print(f"mma.sync peak / cuBLAS: {peak / cublas:.3f}")


if __name__ == "__main__":
    main()
