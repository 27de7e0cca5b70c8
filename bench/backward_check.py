#!/usr/bin/env python3
"""backward_check.py — attnc's attention backward kernels on a GPU, against
float64 PyTorch autograd.

    python3 bench/backward_check.py --kit KIT --out DIR [--arch sm_70|sm_80|sm_90a] [--dtype f16|bf16] [--quick]
        [--schedule "backward_tile(64, 128);" --head-dims 128]

--schedule adds its directives to the schedule of every block the script
writes for the target (the examples, written with their own schedules, are
then left out); --head-dims keeps the cases of those head dims.

For each case: q, k, v (and side inputs) fresh random numbers; attnc's
forward gives o and lse; do is random; NAME.backward (attnc -backward) gives
dq, dk, dv into outputs poisoned with NaN. The reference is torch.autograd
of the same attention in float64; "torch, same precision" is the eager form
on the 16-bit inputs (bench/gpu_check.py's attention_ref), differentiated
by autograd. FlashAttention's rule for gradients:

  FP32-ACC   err <= 3 * err(torch, same precision) + 1e-5
  FP16-ACC   the same + fp16acc_slack(K) (bench/gpu_check.py)

Prints one line per gradient, a summary last, and writes the log under DIR.
"""
import math
import os
import sys
import tempfile
import zlib

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import gpu_check as gc  # noqa: E402
import attnc  # noqa: E402  (gpu_check put python/ on the path)


SCHEDULE = ""          # --schedule: directives added to every block written here
HEAD_DIMS = (64, 128)  # --head-dims


def write_block(tmp, name, src, directives=""):
    """The block's source in tmp/NAME.attn, with its schedule for the target
    (these directives and --schedule's); returns the path."""
    sched = (directives + " " + SCHEDULE).strip()
    if sched:
        src += f"schedule {name} for {gc.ARCH} {{ {sched} }}\n"
    path = os.path.join(tmp, name + ".attn")
    with open(path, "w") as f:
        f.write(src)
    return path


def grads(q, k, v, do, scale, mask_fn, score_fn, dtype):
    """dq, dk, dv of sum(o * do) by autograd: dtype float64 (the reference)
    or None (the same-precision eager form on the 16-bit inputs)."""
    xs = [t.detach().clone().to(dtype if dtype else t.dtype).requires_grad_() for t in (q, k, v)]
    o, _ = gc.attention_ref(*xs, scale, mask_fn, score_fn, dtype)
    (o * do.double()).sum().backward()
    return [x.grad for x in xs]


def run_case(rep, mod, name, label, B, H, HKV, NQ, NK, D, acc, scale, mask_fn, score_fn, extra=(), layout="bhnd"):
    """One case; with a layout (gc.layout_views) q, k, v, do and dq, dk, dv
    are strided views ("fused": q, k, v from one buffer, NQ = NK; dq, dk,
    dv then [B, N, H, D] transposed: outputs interleaved in one buffer are
    refused, doc/runtime.md)."""
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(repr((label, NQ, NK, D)).encode()))
    shapes = [(B, H, NQ, D), (B, HKV, NK, D), (B, HKV, NK, D)]
    (q, k, v), _ = gc.layout_views(shapes, layout, g=g)
    (do,), _ = gc.layout_views(shapes[:1], "bnhd" if layout == "fused" else layout, g=g)
    o, lse = mod.run(name, q, k, v, *extra)
    outs, obufs = gc.layout_views(shapes, "bnhd" if layout == "fused" else layout, fill=float("nan"))
    mod.run(name + ".backward", q, k, v, *extra, o, lse, do, out=outs)
    torch.cuda.synchronize()
    if layout == "padded":   # what lies between the rows stays as it was
        pad = torch.cat([b[..., D:].flatten() for b in obufs])
        rep.expect(f"{label} {layout}: row padding untouched", bool(pad.isnan().all()),
                   f"{int((~pad.isnan()).sum())} of {pad.numel()} padding elements written")
    ref = grads(q, k, v, do, scale, mask_fn, score_fn, torch.float64)
    same = grads(q, k, v, do, scale, mask_fn, score_fn, None)
    shape = f"B{B} H{H}/{HKV} N{NQ}x{NK} D{D}" + ("" if layout == "bhnd" else f" {layout}")
    ok = True
    for gname, got, want, base in zip(("dq", "dk", "dv"), outs, ref, same):
        pt = gc.max_err(base, want)
        bound = 3 * pt + 1e-5 + (gc.fp16acc_slack(max(NQ, NK, D)) if acc == "f16" else 0)
        ok &= rep.add(f"{label} {gname}", shape, gc.max_err(got, want), pt, bound, f"acc {acc}")
    return ok


def cases(rep, tmp, quick, small=False):
    if small:   # under compute-sanitizer: one small causal GQA case per head dim (d64: deterministic)
        for D in HEAD_DIMS:
            name = f"bwd_small_d{D}"
            path = write_block(tmp, name, gc.attention_src(name, 4, 2, D, "f32", "j <= i", None, True),
                               "deterministic;" if D == 64 else "")
            mod = attnc.compile(path, arch=gc.ARCH, output=path[:-5] + ".ptx", backward=True)
            run_case(rep, mod, name, f"small d{D}", 1, 4, 2, 70, 93, D, "f32", D ** -0.5, gc.causal, None)
        return
    pairs = [(113, 203), (128, 217), (108, 256), (256, 512), (512, 256), (1, 1), (239, 1), (1023, 1024)]
    if quick:
        pairs = pairs[:4] + [(1023, 1024)]
    for D in HEAD_DIMS:
        for acc in gc.accs():
            for causal in (False, True):
                for H, HKV in ((4, 4), (8, 2)):
                    name = f"bwd_d{D}_{acc}_{'c' if causal else 'n'}_{H}_{HKV}"
                    src = gc.attention_src(name, H, HKV, D, acc, "j <= i" if causal else None, None, True)
                    path = write_block(tmp, name, src)
                    mod = attnc.compile(path, arch=gc.ARCH, output=path[:-5] + ".ptx", backward=True)
                    for NQ, NK in pairs:
                        run_case(rep, mod, name, f"d{D} {acc} {'causal' if causal else 'full'} gqa{H}/{HKV}",
                                 1 if NQ * NK > 100000 else 2, H, HKV, NQ, NK, D, acc, D ** -0.5,
                                 gc.causal if causal else None, None)
    # strided q, k, v, do and dq, dk, dv (the views models pass), no copies
    for D in HEAD_DIMS:
        name = f"bwd_strided_d{D}"
        path = write_block(tmp, name, gc.attention_src(name, 8, 2, D, "f32", "j <= i", None, True))
        mod = attnc.compile(path, arch=gc.ARCH, output=path[:-5] + ".ptx", backward=True)
        for layout in gc.LAYOUTS[1:]:
            for N in (113, 1000):
                run_case(rep, mod, name, f"strided d{D} causal gqa8/2", 2, 8, 2, N, N, D, "f32", D ** -0.5,
                         gc.causal, None, layout=layout)
    # deterministic: dq without atomics, the same bits on every run
    for D in HEAD_DIMS:
        name = f"bwd_det_d{D}"
        path = write_block(tmp, name, gc.attention_src(name, 8, 2, D, "f32", "j <= i", None, True), "deterministic;")
        mod = attnc.compile(path, arch=gc.ARCH, output=path[:-5] + ".ptx", backward=True)
        for NQ, NK in ((113, 203), (1023, 1024)):
            run_case(rep, mod, name, f"deterministic d{D} causal gqa8/2", 2, 8, 2, NQ, NK, D, "f32", D ** -0.5,
                     gc.causal, None)
            g = torch.Generator(device="cuda").manual_seed(7)
            q = (torch.rand(2, 8, NQ, D, device="cuda", generator=g) * 2 - 1).to(gc.DT)
            k, v = ((torch.rand(2, 2, NK, D, device="cuda", generator=g) * 2 - 1).to(gc.DT) for _ in range(2))
            do = torch.rand_like(q)
            o, lse = mod.run(name, q, k, v)
            runs = [mod.run(name + ".backward", q, k, v, o, lse, do) for _ in range(5)]
            same = all(torch.equal(a, b) for r in runs[1:] for a, b in zip(r, runs[0]))
            rep.expect(f"deterministic d{D} {NQ}x{NK}: 5 runs bit-identical", same, "dq, dk, dv")
    # softcap (Gemma's tanh cap), causal: the hook's derivative
    if 128 not in HEAD_DIMS:
        return
    name = "bwd_softcap"
    path = write_block(tmp, name, gc.attention_src(name, 4, 4, 128, "f32", "j <= i", "30 * tanh(s / 30)", True))
    mod = attnc.compile(path, arch=gc.ARCH, output=path[:-5] + ".ptx", backward=True)
    for NQ, NK in ((113, 203), (1023, 1024)):
        run_case(rep, mod, name, "softcap 30 causal", 2, 4, 4, NQ, NK, 128, "f32", 128 ** -0.5, gc.causal,
                 lambda s, b, h, i, j: 30 * torch.tanh(s / 30))


def example_cases(rep, tmp):
    """Every attention example as written (its f16 made bf16 in bf16 runs),
    at one ragged size, with its own masks, hooks and side inputs."""
    def compile_example(name, consts=None):
        path = os.path.join(gc.ROOT, "examples", name + ".attn")
        if consts or gc.DT != torch.float16:
            src = gc.shrink_consts(open(path).read(), consts or {})
            if gc.DT != torch.float16:
                src = src.replace("acc f16;", "acc f32;")   # f16 accumulation needs f16 operands
            path = os.path.join(tmp, name + "_ex.attn")
            with open(path, "w") as f:
                f.write(src)
        return attnc.compile(path, arch=gc.ARCH, output=os.path.join(tmp, name + "_ex.ptx"), backward=True)

    causal = gc.causal
    run_case(rep, compile_example("mha"), "mha", "example mha", 1, 16, 16, 1000, 1000, 64, "f32", 1 / 8, None, None)
    run_case(rep, compile_example("gqa_causal"), "gqa_causal", "example gqa_causal", 1, 32, 8, 777, 777, 128, "f32",
             128 ** -0.5, causal, None)
    run_case(rep, compile_example("sliding_window", {"WINDOW": 100}), "sliding_window", "example sliding_window W100",
             1, 32, 8, 1000, 1000, 128, "f32", 128 ** -0.5, lambda b, h, i, j: (j <= i) & (i - j < 100), None)
    slopes = torch.tensor([2.0 ** -(i + 1) for i in range(4)], device="cuda")
    acc = "f16" if gc.DT == torch.float16 else "f32"
    run_case(rep, compile_example("softcap_alibi"), "softcap_alibi", f"example softcap_alibi (acc {acc})", 2, 4, 4,
             500, 500, 128, acc, 128 ** -0.5, causal,
             lambda s, b, h, i, j: 30 * torch.tanh(s / 30) + slopes.to(s.dtype)[h.view(-1)].view(1, -1, 1, 1) * (j - i),
             extra=(slopes,))
    # keys past each batch's encoder length hidden; a length of 0 hides every
    # key, so that batch's rows get zero gradients, never NaN
    for NQ, NK in ((17, 1000), (1000, 113)):
        enc_len = torch.tensor([NK // 3, 0, NK], device="cuda", dtype=torch.int32)
        run_case(rep, compile_example("cross_attention"), "cross_attention", "example cross_attention", 3, 8, 8, NQ, NK,
                 64, "f32", 1 / 8, lambda b, h, i, j: j < enc_len.long()[b], None, extra=(enc_len,))
    N = 500
    g = torch.Generator(device="cuda").manual_seed(N)
    doc = torch.sort(torch.randint(0, 4, (2, N), device="cuda", generator=g, dtype=torch.int32), dim=1)[0]
    bias = (torch.rand(3, N, N, device="cuda", generator=g) * 2 - 1).to(gc.DT)
    run_case(rep, compile_example("document_mask"), "document_mask", "example document_mask", 2, 3, 3, N, N, 64, "f32",
             1 / 8, lambda b, h, i, j: (doc.long()[b.view(-1)].view(-1, 1, N, 1) ==
                                        doc.long()[b.view(-1)].view(-1, 1, 1, N)) & (j <= i),
             lambda s, b, h, i, j: s + bias.to(s.dtype)[h.view(-1)].unsqueeze(0), extra=(doc, bias))


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--arch", default="sm_80", choices=["sm_70", "sm_80", "sm_90a"])
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--small", action="store_true", help="two small cases (for compute-sanitizer)")
    ap.add_argument("--schedule", default="", help="directives added to every block's schedule for the target")
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    args = ap.parse_args()
    global SCHEDULE, HEAD_DIMS
    SCHEDULE, HEAD_DIMS = args.schedule, tuple(args.head_dims)
    common.use_kit(args.kit)
    gc.ARCH = args.arch
    gc.DT = torch.float16 if args.dtype == "f16" else torch.bfloat16
    gc.DTN = args.dtype
    gc.F16ACC = args.dtype == "f16"
    os.makedirs(args.out, exist_ok=True)
    tag = ("-small" if args.small else "") + ("-schedule" if SCHEDULE else "")
    with open(os.path.join(args.out, f"backward-{args.arch}-{args.dtype}{tag}.log"), "w") as log, \
            tempfile.TemporaryDirectory() as tmp:
        rep = gc.Report(log)
        cases(rep, tmp, args.quick, args.small)
        if not args.small and not SCHEDULE:
            example_cases(rep, tmp)
        failed = [r for r in rep.rows if not r[5]]
        line = f"backward {args.arch} {args.dtype}: {len(rep.rows)} checks, {len(failed)} failed"
        print(line)
        log.write(line + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
