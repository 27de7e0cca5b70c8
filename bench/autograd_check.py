#!/usr/bin/env python3
"""autograd_check.py — attnc's attention as a PyTorch op: autograd, the
custom op's registration (torch.library.opcheck) and torch.compile.

    python3 bench/autograd_check.py --kit KIT --out DIR [--arch sm_80]

1. Gradients through mod.autograd(block) (q, k, v f16, a side input for
   ALiBi) against float64 torch.autograd of the same attention, on the
   FlashAttention rule (err <= 3 x torch same-precision + 1e-5).
2. torch.library.opcheck on the forward and backward custom ops (schema,
   fake implementation, autograd registration, AOT dispatch).
3. torch.compile(fullgraph=True) of a function holding the op: the same
   forward and gradients as eager, bit for bit (the same kernels run).
"""
import math
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import gpu_check as gc  # noqa: E402
import attnc  # noqa: E402

SRC = """attention alibi_causal(q: f16[B, 4, N, 64], k: f16[B, 2, N, 64], v: f16[B, 2, N, 64], slopes: f32[4])
    -> (o: f16[B, 4, N, 64]) {
  score(s, b, h, i, j) = s + slopes[h] * (j - i);
  mask(b, h, i, j) = j <= i;
}
"""


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--arch", default="sm_80")
    args = ap.parse_args()
    common.use_kit(args.kit)
    gc.ARCH = args.arch
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, f"autograd-{args.arch}.log"), "w")
    rep = gc.Report(log)
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "alibi_causal.attn")
    with open(path, "w") as f:
        f.write(SRC)
    mod = attnc.compile(path, arch=args.arch, output=path[:-5] + ".ptx", backward=True)
    attn = mod.autograd("alibi_causal")
    slopes = torch.tensor([2.0 ** -(i + 1) for i in range(4)], device="cuda")

    def score(s, b, h, i, j):
        return s + slopes.to(s.dtype)[h.view(-1)].view(1, -1, 1, 1) * (j - i)

    # 1. gradients through the op
    for N in (113, 1000):
        g = torch.Generator(device="cuda").manual_seed(N)
        q = (torch.rand(2, 4, N, 64, device="cuda", generator=g) * 2 - 1).half().requires_grad_()
        k = (torch.rand(2, 2, N, 64, device="cuda", generator=g) * 2 - 1).half().requires_grad_()
        v = (torch.rand(2, 2, N, 64, device="cuda", generator=g) * 2 - 1).half().requires_grad_()
        do = (torch.rand(2, 4, N, 64, device="cuda", generator=g) * 2 - 1).half()
        o = attn(q, k, v, slopes)
        o.backward(do)
        xs = [t.detach().double().requires_grad_() for t in (q, k, v)]
        o64, _ = gc.attention_ref(*xs, 1 / 8, gc.causal, score, torch.float64)
        (o64 * do.double()).sum().backward()
        ys = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        o16, _ = gc.attention_ref(*ys, 1 / 8, gc.causal, score, None)
        (o16 * do.double()).sum().backward()
        rep.add("autograd o", f"N{N}", gc.max_err(o.detach(), o64), gc.max_err(o16, o64), 2 * gc.max_err(o16, o64) + 1e-5)
        for nm, x, x64, x16 in zip(("dq", "dk", "dv"), (q, k, v), xs, ys):
            pt = gc.max_err(x16.grad, x64.grad)
            rep.add(f"autograd {nm}", f"N{N}", gc.max_err(x.grad, x64.grad), pt, 3 * pt + 1e-5)
    # 2. the custom ops' registration
    q = torch.randn(1, 4, 70, 64, device="cuda").half()
    k = torch.randn(1, 2, 70, 64, device="cuda").half()
    v = torch.randn(1, 2, 70, 64, device="cuda").half()
    for what, op, opargs in (
            ("forward", attn.op, (q.clone().requires_grad_(), k.clone().requires_grad_(),
                                  v.clone().requires_grad_(), [slopes])),
            ("backward", attn.backward_op, (q, k, v, [slopes], *attn.op(q, k, v, [slopes]), torch.randn_like(q)))):
        try:
            res = torch.library.opcheck(op, opargs)
            bad = {t: r for t, r in res.items() if r != "SUCCESS"}
            rep.expect(f"opcheck {what}", not bad, str(res) if bad else ", ".join(res))
        except Exception as e:   # noqa: BLE001 - reported as a failed check
            rep.expect(f"opcheck {what}", False, f"{type(e).__name__}: {str(e).splitlines()[0][:150]}")
    # 3. torch.compile holds the op: the same output and gradients as eager,
    # bit for bit (attnc's kernels run on the same inputs either way). The
    # loss around it is a sum whose order Inductor picks (its fused
    # reduction against eager's), so it agrees to rounding only.
    def loss_fn(q, k, v):
        o = attn(q, k, v, slopes)
        return o, (o.float() ** 2).sum()
    compiled = torch.compile(loss_fn, fullgraph=True)
    for fn_name, fn in (("eager", loss_fn), ("compiled", compiled)):
        xs = [t.clone().requires_grad_() for t in (q, k, v)]
        o, loss = fn(*xs)
        loss.backward()
        if fn_name == "eager":
            ref = (o.detach(), loss.detach(), [x.grad for x in xs])
        else:
            same = torch.equal(o.detach(), ref[0]) and all(torch.equal(a.grad, b) for a, b in zip(xs, ref[2]))
            close = abs(loss.item() - ref[1].item()) <= 1e-6 * abs(ref[1].item())
            rep.expect("torch.compile(fullgraph=True)", same and close,
                       f"o and grads {'equal' if same else 'DIFFER'}; loss {loss.item():.6f} vs eager {ref[1].item():.6f}")
    failed = [r for r in rep.rows if not r[5]]
    line = f"autograd {args.arch}: {len(rep.rows)} checks, {len(failed)} failed"
    print(line)
    log.write(line + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
