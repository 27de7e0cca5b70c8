"""barrier_probe.py — the sm_90a backward of one causal GQA 8/2 block at head
dim 64 (test/backward/Inputs/gqa-d64-causal.attn renamed g), as several
compilers made it, in layouts bhnd and bnhd ([B, N, H, D] transposed) at
B 1 to 8 and N 500 to 1024, three runs each: the largest error of dq, dk,
dv against float32 autograd, and where values are not finite (b, h, key
tiles, rows within a tile, columns). bench/results/2026-12-07-h100-barriers/.

    attnc BLOCK.attn -backward -arch sm_90a -o gpu-kit/g_VARIANT.ptx   # per variant
    python3 bench/probes/barrier_probe.py VARIANT,VARIANT,...          # OUT set, kit in gpu-kit/
    python3 bench/probes/barrier_probe.py one VARIANT LAYOUT B N       # one run (for compute-sanitizer)
"""
import os
import sys

import torch

sys.path.insert(0, "bench")
import common
import gpu_check as gc

common.use_kit("gpu-kit")
import attnc  # noqa: E402 (after the kit's runtime is named)

gc.DT = torch.float16
OUT = os.environ.get("OUT", "/tmp")
log = open(os.path.join(OUT, "probe.log"), "w")


def say(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    log.write(s + "\n")
    log.flush()


def ref(q, k, v, do):
    """dq, dk, dv in float32 by autograd (SDPA, causal, kv heads repeated)."""
    H, HKV = q.shape[1], k.shape[1]
    xs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    kk = xs[1].repeat_interleave(H // HKV, 1); vv = xs[2].repeat_interleave(H // HKV, 1)
    o = torch.nn.functional.scaled_dot_product_attention(xs[0], kk, vv, is_causal=True)
    (o * do.float()).sum().backward()
    return [x.grad for x in xs]


summary = []
variants = sys.argv[1].split(",")
for var in variants:
    mod = attnc.load(f"gpu-kit/g_{var}.ptx")
    for layout in ("bhnd", "bnhd"):
        for B, N in ((1, 1000), (2, 1000), (4, 1000), (2, 1024), (2, 960), (2, 1023), (2, 500), (8, 1000)):
            g = torch.Generator(device="cuda").manual_seed(B * 10000 + N)
            shapes = [(B, 8, N, 64), (B, 2, N, 64), (B, 2, N, 64)]
            (q, k, v), _ = gc.layout_views(shapes, layout, g=g)
            (do,), _ = gc.layout_views(shapes[:1], layout, g=g)
            o, lse = mod.run("g", q, k, v)
            want = ref(q, k, v, do)
            bad_runs = 0
            for rep in range(3):
                outs, _ = gc.layout_views(shapes, layout, fill=float("nan"))
                mod.run("g.backward", q, k, v, o, lse, do, out=outs)
                torch.cuda.synchronize()
                errs = []
                for gname, got, w in zip(("dq", "dk", "dv"), outs, want):
                    bad = ~torch.isfinite(got)
                    err = (got.float() - w).abs().max().item() if not bad.any() else float("inf")
                    errs.append(f"{gname} {err:.2e}")
                    if bad.any() and rep == 0:
                        idx = bad.nonzero()
                        rows = idx[:, 2]
                        say(f"    {var} {layout} B{B} N{N} {gname}: {int(bad.sum())} bad; b {sorted(set(idx[:,0].tolist()))} h {sorted(set(idx[:,1].tolist()))}"
                            f" tiles {sorted(set((rows // 64).tolist()))} rows%64 {sorted(set((rows % 64).tolist()))[:20]} cols {sorted(set(idx[:,3].tolist()))[:20]}")
                        vals = got[bad][:8].tolist()
                        say(f"      values {vals}")
                    elif rep == 0 and err > 0.05:
                        d = (got.float() - w).abs()
                        idx = (d > 0.05).nonzero()
                        rows = idx[:, 2]
                        say(f"    {var} {layout} B{B} N{N} {gname}: {len(idx)} wrong; tiles {sorted(set((rows // 64).tolist()))} rows%64 {sorted(set((rows % 64).tolist()))[:20]}")
                bad_runs += any("inf" in e or float(e.split()[1]) > 0.05 for e in errs)
                if rep == 0:
                    first = ", ".join(errs)
            line = f"{var:6s} {layout} B{B} N{N}: {first}; bad in {bad_runs}/3 runs"
            say(line); summary.append(line)
say("==== summary"); [say(l) for l in summary]
