#!/usr/bin/env python3
"""bench.py — attnc side by side with its peers, in one process, on one GPU.

    python3 bench/bench.py --kit KIT --out DIR [--arch sm_80] [--quick]
                           [--schedule "warps(8)" ...] [--compare OTHER_ATTNC] [--only attention|mlp] [--dtype f16|bf16]
                           [--ns 512 1024 ...] [--head-dims 64 128 ...]   (a subset of the rows)
                           [--rounds 3]

The FlashAttention papers' protocol: batch·seqlen = 16384, heads =
2048 / head_dim, head dim 64 and 128 (and 256 for sm_90a), N in {512 ...
16384}, causal and not,
fp16 and bf16; FLOPs = 4·B·H·N²·D (half when causal). Each row times
attnc and its peers in --rounds interleaved rounds (3; the order rotates
each round, and is reversed every other round), each round the median of triton.testing.do_bench over
100 / rounds ms after its warm-up, and reports the median of the rounds:
clock drift within a row then falls on every contender alike. Peers: torch SDPA's flash
(FlashAttention-2) and cuDNN backends and torch.compile(flex_attention)
(fp16). Every attnc output is also compared with the flash backend's on the
same inputs (max |diff|, which must stay under 2e-2 for inputs of N(0, 1)).
Also the SwiGLU MLP block at Llama-3-8B shapes (T = 4096, 8192) against torch
eager and torch.compile (and, for sm_80, against Triton's matmul compiled
for sm_80, the like-for-like peer: bench/probes/triton_sm80_gemm.py, timed
after the rounds), attnc's compile time per block, and the same run's
cuBLAS fp16 GEMM rate at 8192³ (the ceiling), timed at the start of the
run and again right after each head dim 128 row at N >= 8k: those rows are
reported as a fraction of both (under sustained load the GPU holds a lower
clock than at the start, for cuBLAS as for attnc). Each
--schedule S adds a column "attnc S": the same blocks compiled with
`schedule NAME for ARCH { S }`, timed in the same run, to measure a
schedule choice against the default. --compare ATTNC adds a column
"attnc compare": the same blocks compiled by another attnc binary (say the
last commit's), timed row by row beside this one in the same process, the
A/B of a compiler change with the least drift between A and B.

Writes DIR/bench.json, DIR/bench.md (the tables for bench/results/) and
DIR/bench.png (TFLOP/s vs N, a line per implementation, a panel per head dim
× causal, fp16).
"""
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import attnc  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
rows = []


def log(**kw):
    rows.append(kw)
    print(json.dumps(kw), flush=True)


def bench_ms(fn, rep=100):
    return do_bench(fn, warmup=25, rep=rep, return_mode="median")


def time_rounds(contenders, rounds, row):
    """contenders: [(column, fn, context)]; each runs once first (a failure
    goes into row as COLUMN_error and leaves it out), then every round times
    each of them for 100 / rounds ms, in an order that rotates from round to
    round and is reversed every other round. A column's time is the median of its rounds: when the clock
    drifts within a row (it does, by a few per cent, under sustained load)
    every contender sees the drift alike, not whichever ran last. Returns
    {column: ms}."""
    ok = []
    for col, fn, ctx in contenders:
        try:
            with ctx():
                fn()
            ok.append((col, fn, ctx))
        except Exception as e:   # reported, not hidden
            row[col + "_error"] = str(e)[:120]
    times = {col: [] for col, _, _ in ok}
    for r in range(rounds):
        k = r % len(ok) if ok else 0
        order = ok[k:] + ok[:k]
        if r % 2:   # (reversed too: each runs after a different one each round)
            order.reverse()
        for col, fn, ctx in order:
            with ctx():
                times[col].append(bench_ms(fn, rep=100 / rounds))
    return {col: statistics.median(t) for col, t in times.items()}


def attention_block(name, D, causal, dt, heads="H"):
    """The protocol's block; `heads` a number where the kernel should be
    specialised on it (the backward's kernels are made per head count)."""
    mask = "  mask(b, h, i, j) = j <= i;\n" if causal else ""
    H = heads
    return (f"attention {name}(q: {dt}[B, {H}, N, {D}], k: {dt}[B, {H}, N, {D}], v: {dt}[B, {H}, N, {D}])\n"
            f"    -> (o: {dt}[B, {H}, N, {D}], lse: f32[B, {H}, N]) {{\n  acc f32;\n{mask}}}\n")


def compile_block(tmp, arch, name, text, backward=False):
    path = os.path.join(tmp, name + ".attn")
    with open(path, "w") as f:
        f.write(text)
    out = os.path.join(tmp, name + ".ptx")
    t0 = time.time()
    mod = attnc.compile(path, arch=arch, output=out, backward=backward, cache=False)   # timed: never from the cache
    return mod, time.time() - t0


COMPARE = "compare"   # the column of the --compare attnc's kernels


def columns(args):
    """The extra columns: one per --schedule, then --compare's."""
    return args.schedule + ([COMPARE] if args.compare else [])


def column_name(col):
    return "the --compare attnc" if col == COMPARE else f"schedule `{col}`"


def compile_variants(args, tmp, kind, name, src):
    """The block `name` of src once more under each --schedule, renamed
    NAME_sI, and with the --compare attnc (column "compare"), renamed
    NAME_cmp: [(column, module, block name)]; one that does not compile
    (too much shared memory) is reported and left out."""
    variants = []
    for i, sched in enumerate(columns(args)):
        other = sched == COMPARE
        vname = f"{name}_cmp" if other else f"{name}_s{i}"
        vsrc = src.replace(f"{kind} {name}(", f"{kind} {vname}(")
        if not other:
            vsrc += f"schedule {vname} for {args.arch} {{ {sched} }}\n"
        own = os.environ["ATTNC"]
        try:
            if other:   # (attnc.compile runs $ATTNC)
                os.environ["ATTNC"] = args.compare
            variants.append((sched, compile_block(tmp, args.arch, vname, vsrc)[0], vname))
        except attnc.AttncError as e:
            log(what="compile", block=vname, schedule=sched, error=str(e).splitlines()[0][:200])
        finally:
            os.environ["ATTNC"] = own
    return variants


def attention(args, tmp):
    flex = None
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        # one compiled kernel per shape: without room for all of them dynamo
        # falls back to the unfused (slow) path and flex would be misreported
        torch._dynamo.config.cache_size_limit = 1024
        torch._dynamo.config.accumulated_cache_size_limit = 4096
        flex = torch.compile(flex_attention, dynamic=False)
    except Exception as e:  # reported, not hidden
        log(what="flex", error=str(e)[:200])
    Ns = [512, 1024, 2048, 4096, 8192, 16384]
    if args.quick:
        Ns = [1024, 8192]
    if args.ns:
        Ns = args.ns
    for dtn, dt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        if args.dtype and dtn != args.dtype:
            continue
        for D in (64, 128) + ((256,) if args.arch == "sm_90a" else ()):
            if args.head_dims and D not in args.head_dims:
                continue
            for causal in (False, True):
                name = f"bench_{dtn}_d{D}{'_causal' if causal else ''}"
                src = attention_block(name, D, causal, dtn)
                mod, ct = compile_block(tmp, args.arch, name, src)
                log(what="compile", block=name, arch=args.arch, seconds=ct)
                variants = compile_variants(args, tmp, "attention", name, src)
                for N in Ns:
                    B, H = 16384 // N, 2048 // D
                    fl = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
                    q = torch.randn(B, H, N, D, device="cuda", dtype=dt)
                    k, v = torch.randn_like(q), torch.randn_like(q)
                    o = torch.empty_like(q)
                    lse = torch.empty(B, H, N, device="cuda", dtype=torch.float32)
                    row = dict(what="attention", arch=args.arch, dtype=dtn, D=D, N=N, B=B, H=H, causal=causal)
                    none = contextlib.nullcontext
                    contenders = [("attnc", lambda: mod.run(name, q, k, v, out=[o, lse]), none)]
                    for sched, vmod, vname in variants:
                        contenders.append((f"attnc {sched}", lambda vmod=vmod, vname=vname: vmod.run(
                            vname, q, k, v, out=[o, lse]), none))
                    sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    for be, sb in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        contenders.append((be, sdpa, lambda sb=sb: sdpa_kernel([sb])))
                    if flex is not None and dt == torch.float16:
                        try:
                            bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, N, N) if causal else None
                            contenders.append(("flex", lambda bm=bm: flex(q, k, v, block_mask=bm), none))
                        except Exception as e:
                            row["flex_error"] = str(e)[:120]
                    for col, ms in time_rounds(contenders, args.rounds, row).items():
                        row[col] = fl / ms / 1e9
                    if D == 128 and N >= CEILING_N:
                        # the ceiling again right after the rows it is compared
                        # with: the GPU holds a lower clock under sustained load
                        # than at the start of the run (cuBLAS read 764 and 686
                        # TFLOP/s at the start of two calls, bench/results/).
                        # Not in the rounds: the GEMM draws the most power and
                        # held the clock down for whichever ran next
                        # (2026-12-03: attnc after it in two rounds of
                        # three, 586 against 611 without)
                        row["cublas_adjacent"] = cublas_rate()
                    if "flash" in row:
                        mod.run(name, q, k, v, out=[o, lse])
                        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                            row["maxdiff_vs_flash"] = float((o.float() - sdpa().float()).abs().max())
                    for peer in ("flash", "cudnn", "flex"):
                        if peer in row:
                            row[f"vs_{peer}"] = row["attnc"] / row[peer]
                            for sched in columns(args):   # (a variant that did not compile has no column)
                                if f"attnc {sched}" in row:
                                    row[f"vs_{peer} {sched}"] = row[f"attnc {sched}"] / row[peer]
                    log(**row)
                    del q, k, v, o, lse


# (BM, BN, BK, stages, warps): the three best of the probe's ten on the H200
TRITON_SM80_CONFIGS = [(256, 128, 64, 3, 8), (128, 256, 64, 3, 8), (128, 128, 32, 4, 4)]


def mlp(args, tmp):
    src = open(os.path.join(ROOT, "examples", "swiglu_mlp.attn")).read()
    mod, ct = compile_block(tmp, args.arch, "swiglu_mlp", src)
    log(what="compile", block="swiglu", arch=args.arch, seconds=ct)
    variants = compile_variants(args, tmp, "mlp", "swiglu", src)
    DIM, FF = 4096, 14336

    def eager(x, wg, wu, wd):
        return x + (F.silu(x @ wg) * (x @ wu)) @ wd
    compiled = torch.compile(eager)
    triton80 = None
    if args.arch == "sm_80":
        # sm_80's like-for-like peer: Triton's matmul compiled for sm_80
        # (bench/probes/triton_sm80_gemm.py), its best three configurations
        # on SwiGLU's shapes (2026-12-03); torch.compile's GEMMs are wgmma
        try:
            sys.path.insert(0, os.path.join(HERE, "probes"))
            import triton_sm80_gemm
            triton80 = (triton_sm80_gemm, triton_sm80_gemm.load_kernels(80, TRITON_SM80_CONFIGS))
        except Exception as e:   # reported, not hidden
            log(what="triton_sm80", error=str(e)[:200])
    for T in (4096, 8192):
        g = torch.Generator(device="cuda").manual_seed(T)
        x = torch.randn(T, DIM, device="cuda", generator=g).half()
        wg = (torch.randn(DIM, FF, device="cuda", generator=g) * DIM ** -0.5).half()
        wu = (torch.randn(DIM, FF, device="cuda", generator=g) * DIM ** -0.5).half()
        wd = (torch.randn(FF, DIM, device="cuda", generator=g) * FF ** -0.5).half()
        y = torch.empty_like(x)
        fl = 2 * T * DIM * FF * 3
        row = dict(what="mlp", arch=args.arch, block="swiglu", T=T, DIM=DIM, FF=FF)
        none = contextlib.nullcontext
        contenders = [("attnc", lambda: mod.run("swiglu", x, wg, wu, wd, out=[y]), none)]
        for sched, vmod, vname in variants:
            contenders.append((f"attnc {sched}", lambda vmod=vmod, vname=vname: vmod.run(
                vname, x, wg, wu, wd, out=[y]), none))
        contenders += [("eager", lambda: eager(x, wg, wu, wd), none), ("compile", lambda: compiled(x, wg, wu, wd), none)]
        for col, ms in time_rounds(contenders, args.rounds, row).items():
            row[col] = fl / ms / 1e9
        mod.run("swiglu", x, wg, wu, wd, out=[y])
        ref = eager(x, wg, wu, wd)
        row["maxdiff_vs_eager"] = float((y.float() - ref.float()).abs().max())
        row["vs_eager"] = row["attnc"] / row["eager"]
        row["vs_compile"] = row["attnc"] / row["compile"]
        if triton80:
            try:
                row["triton_sm80"] = triton80[0].swiglu_rate(triton80[1], T, DIM, FF)
                row["vs_triton_sm80"] = row["attnc"] / row["triton_sm80"]
            except Exception as e:
                row["triton_sm80_error"] = str(e)[:200]
        log(**row)


CEILING_N = 8192


def cublas_rate():
    """cuBLAS's fp16 GEMM rate at 8192³ (torch.matmul), TFLOP/s: the tensor
    cores' practical ceiling, which attention is measured against."""
    a, b = (torch.randn(CEILING_N, CEILING_N, device="cuda", dtype=torch.float16) for _ in range(2))
    return 2 * CEILING_N ** 3 / bench_ms(lambda: a @ b) / 1e9


def ceiling():
    """The ceiling at the start of the run (the GPU still cool)."""
    log(what="cublas", n=CEILING_N, tflops=cublas_rate())


def report(args):
    att = [r for r in rows if r["what"] == "attention"]
    lines = [f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, attnc -arch {args.arch}; TFLOP/s",
             "", "| dtype | D | N | causal | attnc | flash | cudnn | flex | vs flash | vs cudnn | max diff vs flash |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda r, k: f"{r[k]:.0f}" if k in r else "–"
    g = lambda r, k: f"{r[k]:.2f}" if k in r else "–"
    for r in att:
        lines.append(f"| {r['dtype']} | {r['D']} | {r['N']} | {r['causal']} | {f(r, 'attnc')} | {f(r, 'flash')} | "
                     f"{f(r, 'cudnn')} | {f(r, 'flex')} | {g(r, 'vs_flash')} | {g(r, 'vs_cudnn')} | "
                     f"{r.get('maxdiff_vs_flash', float('nan')):.1e} |")
    for sched in columns(args) if att else []:
        lines.append(f"\nwith {column_name(sched)}: attnc TFLOP/s per row: " +
                     ", ".join(f(r, f"attnc {sched}") for r in att))
    for peer in ("flash", "cudnn"):
        for suffix in [""] + [f" {s}" for s in columns(args)]:
            v = [r[f"vs_{peer}{suffix}"] for r in att if f"vs_{peer}{suffix}" in r]
            if v:
                gm = math.exp(sum(math.log(x) for x in v) / len(v))
                lines.append(f"\nattnc{suffix} / {peer}: geometric mean {gm:.3f}, min {min(v):.3f}, "
                             f"max {max(v):.3f} over {len(v)} rows")
    v = [r["attnc"] / r[f"attnc {COMPARE}"] for r in att if f"attnc {COMPARE}" in r]
    if v:
        gm = math.exp(sum(math.log(x) for x in v) / len(v))
        lines.append(f"\nattnc / attnc {COMPARE} ({args.compare}), row by row: geometric mean {gm:.3f}, "
                     f"min {min(v):.3f}, max {max(v):.3f}; faster in {sum(x > 1 for x in v)} of {len(v)} rows")
    cb = [r for r in rows if r["what"] == "cublas"]
    if cb:
        top = cb[0]["tflops"]
        lines.append(f"\ncuBLAS fp16 GEMM {cb[0]['n']}³ (the ceiling) at the start of the run: {top:.0f} TFLOP/s")
        for dt in ("f16", "bf16"):
            big = [r for r in att if r["D"] == 128 and r["N"] >= 8192 and r["dtype"] == dt]
            if big:
                v = [r["attnc"] / top for r in big]
                lines.append(f"\nattnc {dt} head dim 128, N >= 8k: {min(v):.3f} … {max(v):.3f} of cuBLAS at the start")
                adj = [r for r in big if "cublas_adjacent" in r]
                if adj:
                    w = [r["attnc"] / r["cublas_adjacent"] for r in adj]
                    c = [r["cublas_adjacent"] for r in adj]
                    lines.append(f"attnc {dt} head dim 128, N >= 8k: {min(w):.3f} … {max(w):.3f} of cuBLAS measured "
                                 f"right after each row ({min(c):.0f} … {max(c):.0f} TFLOP/s)")
    m = [r for r in rows if r["what"] == "mlp"]
    if m:
        lines += ["", "| MLP | T | attnc | torch eager | torch.compile | vs eager | vs compile | max diff |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in m:
            lines.append(f"| {r['block']} | {r['T']} | {r['attnc']:.0f} | {r['eager']:.0f} | {r['compile']:.0f} | "
                         f"{r['vs_eager']:.2f} | {r['vs_compile']:.2f} | {r['maxdiff_vs_eager']:.1e} |")
        t80 = [r for r in m if "triton_sm80" in r]
        if t80:
            lines.append("\nTriton's matmul compiled for sm_80 (mma.sync; SwiGLU's three GEMMs, each shape at its "
                         "best configuration, elementwise ops not counted), TFLOP/s per row: " +
                         ", ".join(f"T {r['T']} {r['triton_sm80']:.0f} (attnc / it {r['vs_triton_sm80']:.2f})"
                                   for r in t80))
        for r in m:
            if "triton_sm80_error" in r:
                lines.append(f"\nTriton sm_80 at T {r['T']}: {r['triton_sm80_error']}")
        for sched in columns(args):
            lines.append(f"\nMLP with {column_name(sched)}: attnc TFLOP/s per row: " +
                         ", ".join(f"{r[f'attnc {sched}']:.0f}" for r in m if f"attnc {sched}" in r))
    c = [r for r in rows if r["what"] == "compile"]
    if c:
        lines.append("\ncompile time per block (attnc, PTX): " +
                     ", ".join(f"{r['block']} {r['seconds']:.2f} s" if "seconds" in r else
                               f"{r['block']} failed ({r.get('error', '?')})" for r in c))
    text = "\n".join(lines) + "\n"
    open(os.path.join(args.out, "bench.md"), "w").write(text)
    print(text)
    try:
        from plot import draw   # bench/plot.py, beside this script
        draw([att], os.path.join(args.out, "bench.png"), f"attention forward on {torch.cuda.get_device_name()}")
    except Exception as e:
        print("no plot:", e)


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--arch", default="sm_80")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dtype", choices=["f16", "bf16"], default=None, help="attention in this dtype only")
    ap.add_argument("--schedule", action="append", default=[],
                    help="also time the attention blocks under this schedule (e.g. 'warps(8);')")
    ap.add_argument("--compare", metavar="ATTNC",
                    help="also time the blocks compiled by this other attnc binary (an A/B of two compilers, "
                         "row by row in one process; column 'compare')")
    ap.add_argument("--only", choices=("attention", "mlp"))
    ap.add_argument("--ns", type=int, nargs="+", help="attention at these sequence lengths only")
    ap.add_argument("--head-dims", type=int, nargs="+", help="attention at these head dims only")
    ap.add_argument("--rounds", type=int, default=3,
                    help="time each row's contenders in this many interleaved rounds (the median of them)")
    args = ap.parse_args()
    if args.compare:
        args.compare = os.path.abspath(args.compare)
    common.use_kit(args.kit)
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="attnc-bench-")
    ceiling()
    if args.only != "mlp":
        attention(args, tmp)
    if args.only != "attention":
        mlp(args, tmp)
    json.dump(rows, open(os.path.join(args.out, "bench.json"), "w"), indent=1)
    report(args)


if __name__ == "__main__":
    main()
