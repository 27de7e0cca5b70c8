#!/usr/bin/env python3
"""profile_row.py — one row of bench.py's protocol, attnc and its peers run
a few times each, for a profiler to look at (Nsight Compute):

    ncu --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        python3 bench/profile_row.py --kit KIT --arch sm_90a --D 64 --N 512 --causal [--schedule S]

Each implementation runs `--reps` times after one warm-up call; the
kernels' names tell them apart (attnc's are the block's name + _k0).
With --backward it is the backward that runs: attnc's NAME.backward
(kernels NAME_backward_k0 ...) and the peers' torch.autograd.grad.
"""
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import common  # noqa: E402


def main():
    ap = common.kit_parser(__doc__, out=False)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--N", type=int, default=512)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    ap.add_argument("--schedule", action="append", default=[], help="also run the block with this schedule")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--no-time", action="store_true", help="run each once + reps, untimed (under a profiler)")
    ap.add_argument("--backward", action="store_true", help="run the backward instead of the forward")
    args = ap.parse_args()
    common.use_kit(args.kit)
    dt = torch.float16 if args.dtype == "f16" else torch.bfloat16
    B, H = 16384 // args.N, 2048 // args.D
    q = torch.randn(B, H, args.N, args.D, device="cuda", dtype=dt)
    k, v = torch.randn_like(q), torch.randn_like(q)
    o, do = torch.empty_like(q), torch.randn_like(q)
    lse = torch.empty(B, H, args.N, device="cuda", dtype=torch.float32)
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for i, sched in enumerate([None] + args.schedule):
            name = f"row{i}"
            src = bench.attention_block(name, args.D, args.causal, args.dtype, heads=H if args.backward else "H")
            if sched:
                src += f"schedule {name} for {args.arch} {{ {sched} }}\n"
            mod, _ = bench.compile_block(tmp, args.arch, name, src, backward=args.backward)
            if args.backward:
                mod.run(name, q, k, v, out=[o, lse])
                grads = [torch.empty_like(t) for t in (q, k, v)]
                runs.append((sched or "default", lambda mod=mod, name=name, grads=grads:
                             mod.run(name + ".backward", q, k, v, o, lse, do, out=grads)))
            else:
                runs.append((sched or "default", lambda mod=mod, name=name: mod.run(name, q, k, v, out=[o, lse])))
        for be, sb in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            if args.backward:
                xs = [t.clone().requires_grad_() for t in (q, k, v)]
                with sdpa_kernel([sb]):
                    out = F.scaled_dot_product_attention(*xs, is_causal=args.causal)

                def peer(xs=xs, out=out):
                    torch.autograd.grad(out, xs, do, retain_graph=True)
            else:
                def peer(sb=sb):
                    with sdpa_kernel([sb]):
                        F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
            runs.append((be, peer))
        for what, fn in runs:
            fn()
            torch.cuda.synchronize()
            for _ in range(args.reps):
                fn()
            torch.cuda.synchronize()
            if args.no_time:
                continue
            ms = bench.bench_ms(fn)
            fl = 4 * B * H * args.N * args.N * args.D * (0.5 if args.causal else 1.0) * (2.5 if args.backward else 1.0)
            print(f"{what}: {ms * 1e3:.1f} us, {fl / ms / 1e9:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
