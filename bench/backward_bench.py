#!/usr/bin/env python3
"""backward_bench.py — attnc's attention backward beside torch SDPA's flash
(FlashAttention-2) and cuDNN backward, on the H200, in one process.

    python3 bench/backward_bench.py --kit KIT --out DIR [--arch sm_80 ...] [--quick] [--compare ATTNC ...]
                                    [--schedule S ...] [--head-dims 64 128] [--dtype f16|bf16]

FlashAttention's protocol: batch·seqlen = 16384, heads = 2048 / head dim,
head dims 64 and 128, causal and not, fp16. Backward FLOPs = 2.5 × the
forward's 4·B·H·N²·D (half when causal). Each time is the median of
triton's do_bench: attnc runs NAME.backward (its three kernels, the dQ
accumulator cleared in the stream); the peers run torch.autograd.grad of
the SDPA output (their backward kernels, the preprocess included). Writes
a table of TFLOP/s and ratios to DIR/backward-bench.md. Each --compare
ATTNC adds a column per target (c1, c2, ...) for another attnc binary (say
the commit before; a script that runs one with an environment of its own
does too), measured in the same process; each --schedule S a column per target for
the block compiled with `schedule NAME for ARCH { S }`.
"""
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import attnc  # noqa: E402


def ms(fn):
    return do_bench(fn, warmup=10, rep=50, return_mode="median")


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--arch", action="append")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--compare", action="append", default=[], help="another attnc binary, measured beside this one")
    ap.add_argument("--kv-ratio", type=int, default=1, help="query heads per kv head (GQA; the peers get enable_gqa)")
    ap.add_argument("--schedule", action="append", default=[], help="also time the block with this schedule")
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    args = ap.parse_args()
    archs = args.arch or ["sm_80"]
    kit_attnc = common.use_kit(args.kit)
    compilers = [("", kit_attnc, "")] + [(f" c{i + 1}", os.path.abspath(c), "") for i, c in enumerate(args.compare)]
    for i, c in enumerate(args.compare):
        print(f"c{i + 1}: {c}")
    compilers += [(f" s{i + 1}", kit_attnc, s) for i, s in enumerate(args.schedule)]
    for i, s in enumerate(args.schedule):
        print(f"s{i + 1}: {s}")
    ty = args.dtype
    dt = torch.float16 if ty == "f16" else torch.bfloat16
    variants = [a + c for a in archs for c, _, _ in compilers]
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp()
    Ns = [1024, 4096, 16384] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
    rows = []
    for Dh in args.head_dims:
        H = 2048 // Dh
        HK = H // args.kv_ratio
        for causal in (False, True):
            mods = {}
            for arch in archs:
                for tag, compiler, sched in compilers:
                    name = f"bwd_{Dh}_{int(causal)}"
                    path = os.path.join(tmp, f"{name}_{arch}{tag.strip()}.attn")
                    with open(path, "w") as f:
                        f.write(f"attention {name}(q: {ty}[B, {H}, N, {Dh}], k: {ty}[B, {HK}, N, {Dh}], "
                                f"v: {ty}[B, {HK}, N, {Dh}]) -> (o: {ty}[B, {H}, N, {Dh}], lse: f32[B, {H}, N]) {{\n"
                                + ("  mask(b, h, i, j) = j <= i;\n" if causal else "") + "}\n"
                                + (f"schedule {name} for {arch} {{ {sched} }}\n" if sched else ""))
                    os.environ["ATTNC"] = compiler
                    mods[arch + tag] = (name, attnc.compile(path, arch=arch, output=path[:-5] + ".ptx", backward=True,
                                                                  cache=False))
            for N in Ns:
                B = 16384 // N
                q, do = (torch.randn(B, H, N, Dh, device="cuda", dtype=dt) for _ in range(2))
                k, v = (torch.randn(B, HK, N, Dh, device="cuda", dtype=dt) for _ in range(2))
                flops = 2.5 * 4 * B * H * N * N * Dh * (0.5 if causal else 1)
                row = {"D": Dh, "causal": causal, "N": N}
                for arch, (name, mod) in mods.items():
                    o, lse = mod.run(name, q, k, v)
                    outs = [torch.empty_like(t) for t in (q, k, v)]
                    row[f"attnc {arch}"] = flops / ms(lambda: mod.run(name + ".backward", q, k, v, o, lse, do,
                                                                      out=outs)) / 1e9
                for peer, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    xs = [t.clone().requires_grad_() for t in (q, k, v)]
                    try:
                        with sdpa_kernel(backend):
                            out = F.scaled_dot_product_attention(*xs, is_causal=causal, enable_gqa=HK != H)
                            row[peer] = flops / ms(lambda: torch.autograd.grad(out, xs, do, retain_graph=True)) / 1e9
                    except RuntimeError as e:
                        print(f"{peer} D{Dh} N{N}: {str(e).splitlines()[0]}")
                        row[peer] = float("nan")
                rows.append(row)
                print(row, flush=True)
    archs = variants
    cols = [f"attnc {a}" for a in archs] + ["flash", "cudnn"]
    lines = ["| D | causal | N | " + " | ".join(c + " TFLOP/s" for c in cols) + " | "
             + " | ".join(f"attnc {a} / flash | attnc {a} / cudnn" for a in archs) + " |",
             "|" + "---|" * (3 + len(cols) + 2 * len(archs))]
    for r in rows:
        ratios = []
        for a in archs:
            ratios += [f"{r[f'attnc {a}'] / r['flash']:.2f}", f"{r[f'attnc {a}'] / r['cudnn']:.2f}"]
        lines.append(f"| {r['D']} | {'yes' if r['causal'] else 'no'} | {r['N']} | "
                     + " | ".join(f"{r[c]:.0f}" for c in cols) + " | " + " | ".join(ratios) + " |")
    for a in archs:
        for peer in ("flash", "cudnn"):
            rs = [r[f"attnc {a}"] / r[peer] for r in rows if r[peer] == r[peer]]
            lines.append(f"\ngeomean attnc {a} / {peer}: {common.geomean(rs):.3f}")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "backward-bench.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
