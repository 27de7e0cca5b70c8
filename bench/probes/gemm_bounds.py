"""gemm_bounds.py — what L2's bandwidth allows attnc's sm_80 GEMMs on this GPU.

Builds and runs l2_bandwidth.cu (a measurement probe: cp.async.cg from an
L2-resident buffer into shared memory on every SM), then bounds SwiGLU's
two kernels by it. A block tile of BM rows by n products of BN columns
sharing A copies (BM + n·BN)·BK·2 bytes a K step for 2·BM·n·BN·BK flops;
each block copies its own tiles (sm_80 has no multicast), so no kernel
runs faster than its flops a byte times L2's rate. The register file caps
the tile: 128 × 256 f32 accumulators are half of an SM's registers.

    python3 bench/probes/gemm_bounds.py --out OUT [--tile 128 128]
"""
import argparse
import re

from probe import run_probe


def flops_per_byte(bm, bn, n):
    """Flops a byte copied, for a BM x (n·BN) block tile with A shared (16-bit data)."""
    return bm * n * bn / (bm + n * bn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tile", type=int, nargs=2, default=[128, 128], metavar=("BM", "BN"))
    args = ap.parse_args()
    probe = run_probe("l2_bandwidth", args.out)
    l2 = max(float(x) for x in re.findall(r"l2 best ([0-9.]+)", probe))
    bm, bn = args.tile
    # SwiGLU: the gate/up kernel does 2/3 of the flops (two products sharing
    # A), the down projection 1/3 (one product)
    up = flops_per_byte(bm, bn, 2) * l2   # TFLOP/s, since l2 is in TB/s
    down = flops_per_byte(bm, bn, 1) * l2
    both = 1 / ((2 / 3) / up + (1 / 3) / down)
    print(f"L2 -> shared memory: {l2:.2f} TB/s")
    print(f"bound, gate/up kernel ({bm} x 2·{bn}, {flops_per_byte(bm, bn, 2):.1f} flop/B): {up:.0f} TFLOP/s")
    print(f"bound, down projection ({bm} x {bn}, {flops_per_byte(bm, bn, 1):.1f} flop/B): {down:.0f} TFLOP/s")
    print(f"bound, SwiGLU: {both:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
