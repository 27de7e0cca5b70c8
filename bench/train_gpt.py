#!/usr/bin/env python3
"""train_gpt.py — a small GPT trained twice, with attnc's attention (forward
and backward compiled by attnc) and with torch SDPA (flash, and cuDNN), from
the same seed.

    python3 bench/train_gpt.py --kit KIT --out DIR [--arch sm_80] [--steps 600]

Model: 4 layers, d_model 256, 4 heads (head dim 64), context 512, vocabulary
64, pre-norm, GELU MLP; fp32 weights, attention in f16 (q, k, v cast to f16,
o cast back). Task (deterministic, needs attention): each sequence is 32
random tokens repeated 16 times, so every token after the first 32 is the
one 32 positions back, found only by attending there; the loss is taken on
every position, so it falls from ln 64 = 4.16 towards (32/512)·ln 64 = 0.26
as the lookup is learned. AdamW, lr 1e-3, batch 16, same data order.

The curves must agree: each run's loss falls below 1.0 and the mean |Δloss|
over the last 50 steps is under 0.05 nats. The step where the lookup is
learned (loss under 1.0) moves with rounding; a third run, SDPA's cuDNN
backend, shows how far it moves between PyTorch's own kernels. Writes
train.json (the curves) and a plot.
"""
import json
import math
import os
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import attnc  # noqa: E402

V, D, H, L, T = 64, 256, 4, 4, 512


class Block(nn.Module):
    def __init__(self, attn_fn):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.attn_fn = attn_fn

    def forward(self, x):
        B = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)
        o = self.attn_fn(q.half().contiguous(), k.half().contiguous(), v.half().contiguous()).float()
        x = x + self.proj(o.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, attn_fn):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block(attn_fn) for _ in range(L))
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


PERIOD = 32


def batch(step, bsz=16):
    g = torch.Generator(device="cuda").manual_seed(1000 + step)
    motif = torch.randint(0, V, (bsz, PERIOD), device="cuda", generator=g)
    seq = motif.repeat(1, T // PERIOD + 1)[:, :T + 1]
    return seq[:, :T], seq[:, 1:T + 1]


def train(attn_fn, steps):
    torch.manual_seed(0)
    model = GPT(attn_fn).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    losses = []
    for step in range(steps):
        x, y = batch(step)
        loss = F.cross_entropy(model(x).view(-1, V), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--arch", default="sm_80")
    ap.add_argument("--steps", type=int, default=600)
    args = ap.parse_args()
    common.use_kit(args.kit)
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "gpt_attn.attn")
    with open(path, "w") as f:
        f.write(f"attention gpt_attn(q: f16[B, {H}, N, {D // H}], k: f16[B, {H}, N, {D // H}], "
                f"v: f16[B, {H}, N, {D // H}]) -> (o: f16[B, {H}, N, {D // H}]) {{\n"
                "  mask(b, h, i, j) = j <= i;\n}\n")
    mod = attnc.compile(path, arch=args.arch, output=path[:-5] + ".ptx", backward=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(backend):
        def attn(q, k, v):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return attn
    runs = {
        "attnc": train(mod.autograd("gpt_attn"), args.steps),
        "sdpa": train(sdpa(SDPBackend.FLASH_ATTENTION), args.steps),
        "sdpa (cuDNN)": train(sdpa(SDPBackend.CUDNN_ATTENTION), args.steps),   # the peers' own spread
    }
    a, s = runs["attnc"], runs["sdpa"]
    cross = {n: next((i for i, x in enumerate(ls) if x < 1.0), None) for n, ls in runs.items()}
    tail = min(50, len(a))
    mean_diff = sum(abs(x - y) for x, y in zip(a[-tail:], s[-tail:])) / tail
    max_diff = max(abs(x - y) for x, y in zip(a, s))
    ok = min(a) < 1.0 and min(s) < 1.0 and mean_diff < 0.05
    summary = (f"train {args.arch}: {args.steps} steps; loss attnc {a[0]:.3f} -> {a[-1]:.4f}, "
               f"sdpa {s[0]:.3f} -> {s[-1]:.4f}; mean |diff| last {tail} steps {mean_diff:.4f}, "
               f"max |diff| {max_diff:.4f}; first step under 1.0: "
               + ", ".join(f"{n} {c}" for n, c in cross.items()) + f": {'ok' if ok else 'FAIL'}")
    print(summary)
    with open(os.path.join(args.out, "train.json"), "w") as f:
        json.dump({"arch": args.arch, "steps": args.steps, "losses": runs, "summary": summary}, f)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, ls in runs.items():
            ax.plot(range(len(ls)), ls, label=name, linewidth=1)
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats)")
        ax.set_title(f"GPT 4×256, period-{PERIOD} copy task: attnc ({args.arch}) vs torch SDPA")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "train.png"), dpi=110)
    except ImportError:
        print("matplotlib missing: no plot")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
