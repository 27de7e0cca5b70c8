#!/usr/bin/env python3
"""varlen_bench.py — attention over packed sequences of different lengths
(prefill without padding, flash_attn_varlen_func's layout): attnc.attention
with cu_seqlens beside PyTorch's SDPA on nested jagged tensors (its flash
and cuDNN backends take them, as transformers' packed prefill does), and
beside both run padded to the longest sequence.

    python3 bench/varlen_bench.py --kit KIT --out DIR [--arch sm_80] [--quick]

Each row is a batch of sequence lengths (a seeded draw), heads and head
dim, causal (each sequence's own j <= i) and not; q, k, v are f16 [total,
H, D], one set of offsets (self-attention). TFLOP/s count the useful work
only, Σ 4·L²·H·D over the sequences (halved under the causal mask), over
the median time of a call inside a CUDA graph (triton's
do_bench_cudagraph; a call that cannot be captured is timed with events,
host overhead and all, and marked). attnc's o is compared with the
nested-tensor peers' (max |difference| over every row, f32): a row off by
more than 2e-2 is marked. The table (markdown) and the rows (JSON) go to DIR.
"""
import json
import os
import random
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import attnc  # noqa: E402
from attnc import functional  # noqa: E402
from decode_bench import timed  # noqa: E402

PEERS = {"flash2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def draw(name, n, lo, hi):
    """n lengths uniform in [lo, hi], seeded by the row's name."""
    rng = random.Random(name)
    return [rng.randint(lo, hi) for _ in range(n)]


ROWS = [   # name, lengths, heads, head dim
    ("16 x 256-2048", draw("a", 16, 256, 2048), 16, 128),
    ("64 x 64-512", draw("b", 64, 64, 512), 16, 128),
    ("4 x 2k-8k", draw("c", 4, 2048, 8192), 16, 128),
    ("16 x 256-2048 d64", draw("d", 16, 256, 2048), 32, 64),
    ("128 x 1-300", draw("e", 128, 1, 300), 16, 128),
]
QUICK = ROWS[:2]


def run_row(name, lens, H, D, causal):
    g = torch.Generator(device="cuda").manual_seed(1)
    T = sum(lens)
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], device="cuda", dtype=torch.int32)
    q, k, v = (torch.randn(T, H, D, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    flops = sum(4 * L * L * H * D for L in lens) * (0.5 if causal else 1.0)
    row = {"name": name, "B": len(lens), "T": T, "max": max(lens), "H": H, "D": D, "causal": causal}
    call = lambda: attnc.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=causal)  # noqa: E731
    o = call()
    ms, row["graphed"] = timed(call)
    row["attnc"] = flops / ms / 1e9
    # the peers on nested jagged tensors: [B, j, H, D] viewed [B, H, j, D]
    nt = [torch.nested.nested_tensor_from_jagged(t, offsets=cu.long()).transpose(1, 2) for t in (q, k, v)]
    for peer, backend in PEERS.items():
        try:
            with sdpa_kernel([backend]):
                fn = lambda: F.scaled_dot_product_attention(*nt, is_causal=causal)  # noqa: E731
                out = fn().transpose(1, 2).values()
                row[peer + "_diff"] = (out.float() - o.float()).abs().max().item()
                t, _ = timed(fn)
                row[peer] = flops / t / 1e9
        except Exception as e:  # noqa: BLE001
            row[peer + "_error"] = f"{type(e).__name__}: {str(e)[:120]}"
    # padded to the longest sequence: attnc's and flash's [B, H, Nmax, D]
    # (the padding's work is not counted)
    B, N = len(lens), max(lens)
    qp, kp, vp = (torch.zeros(B, H, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
    for b, L in enumerate(lens):
        for src, dst in ((q, qp), (k, kp), (v, vp)):
            dst[b, :, :L] = src[cu[b]:cu[b] + L].transpose(0, 1)
    ms, _ = timed(lambda: attnc.attention(qp, kp, vp, causal=causal))
    row["attnc_padded"] = flops / ms / 1e9
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        ms, _ = timed(lambda: F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal))
    row["flash2_padded"] = flops / ms / 1e9
    return row


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--arch", default=None, help="target to compile for (default: the device's)")
    ap.add_argument("--quick", action="store_true", help="the first two rows only")
    args = ap.parse_args()
    common.use_kit(args.kit)
    common.use_arch(args.arch)
    arch = functional.target_of(torch.device("cuda"))
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name, lens, H, D in (QUICK if args.quick else ROWS):
        for causal in (False, True):
            try:
                rows.append(run_row(name, lens, H, D, causal))
            except Exception as e:  # noqa: BLE001
                rows.append({"name": name, "causal": causal, "error": f"{type(e).__name__}: {str(e)[:200]}"})
            print(json.dumps(rows[-1]), flush=True)
    tag = f"varlen-{arch}{'-quick' if args.quick else ''}"
    json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, open(os.path.join(args.out, tag + ".json"), "w"),
              indent=1)
    lines = [f"# packed sequences, {arch} on {torch.cuda.get_device_name()}: TFLOP/s of the sequences' own work", "",
             "| lengths | B | total | longest | heads | D | causal | attnc | FA2 (nested) | cuDNN (nested) | "
             "attnc / best | attnc padded | FA2 padded | max diff |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    fmt = lambda x: f"{x:.0f}" if x else "-"  # noqa: E731
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | error: {r['error']} |")
            continue
        best = max([r[p] for p in PEERS if r.get(p)] or [float("nan")])
        diff = max([r.get(p + "_diff", 0) for p in PEERS])
        if best == best:
            ratios.append(r["attnc"] / best)
        lines.append(f"| {r['name']} | {r['B']} | {r['T']} | {r['max']} | {r['H']} | {r['D']} | {r['causal']} | "
                     f"{fmt(r['attnc'])} | {fmt(r.get('flash2'))} | {fmt(r.get('cudnn'))} | {r['attnc'] / best:.2f} | "
                     f"{fmt(r['attnc_padded'])} | {fmt(r['flash2_padded'])} | {diff:.1e}{' OFF' if diff > 2e-2 else ''}"
                     f"{'' if r['graphed'] else ' (not graphed)'} |")
    errors = sorted({r[p + "_error"] for r in rows for p in PEERS if p + "_error" in r})
    lines += ["", f"geometric mean attnc / best peer: {common.geomean(ratios):.3f} over {len(ratios)} rows"]
    lines += [f"peer error: {e}" for e in errors]
    open(os.path.join(args.out, tag + ".md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
