#!/usr/bin/env python3
"""llama_profile.py — where a transformers Llama's training step spends its
GPU time with attnc's attention and with SDPA (train_llama.py's model and
batch): torch.profiler over a few steps after warm-up, the kernels' CUDA
time summed by name, the top ones printed for each.

    python3 bench/probes/llama_profile.py --kit KIT --out DIR [--steps 3] [--top 15]
"""
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import common  # noqa: E402
import attnc  # noqa: E402
import train_llama as tl  # noqa: E402


def kernel_times(model, ids, steps):
    step = tl.training_step(model, ids)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    totals = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            us = getattr(e, "device_time", None)
            us = e.cuda_time if us is None else us
            totals[e.name] = totals.get(e.name, 0.0) + us / 1000 / steps
    return totals


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    common.use_kit(args.kit)
    os.makedirs(args.out, exist_ok=True)
    attnc.register_transformers()
    ids = torch.randint(0, tl.VOCAB, (tl.BATCH, tl.SEQ), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    lines = []
    for impl in ("attnc", "sdpa"):
        model = tl.build(impl, "llama")
        t = kernel_times(model, ids, args.steps)
        del model
        torch.cuda.empty_cache()
        lines.append(f"{impl}: GPU kernel time a step {sum(t.values()):.2f} ms")
        for name, ms in sorted(t.items(), key=lambda x: -x[1])[:args.top]:
            lines.append(f"  {ms:8.3f} ms  {name[:110]}")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "llama-profile.txt"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
