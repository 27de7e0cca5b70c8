#!/usr/bin/env python3
"""decode_bench.py — attention against a KV cache (few query rows, many
keys): attnc.attention beside cuDNN and FlashAttention-2 through PyTorch's
SDPA, in GB/s of K and V read, and the copy bandwidth of the same run.

    python3 bench/decode_bench.py --kit KIT --out DIR [--arch sm_80] [--quick] [--paged 16,64,256]

Each row is B, NK, Nq, query/kv heads, head dim; q, k, v are f16 [B, H, N,
D], contiguous, not causal (with one query row every key is seen; SDPA's
causal mask aligns the top-left corners, FlashAttention's and attnc's the
bottom-right, so the peers are timed without it). GB/s = the bytes of K and V
(2 · B · Hkv · NK · D · 2) over the median time of a call, each call timed
inside a CUDA graph (triton's do_bench_cudagraph) so that no one's launch
overhead on the host is counted. GQA runs natively everywhere (SDPA's
enable_gqa). attnc's o is compared with the peers' and with itself
replayed from a captured CUDA graph (max |difference|, f32): a row off by
more than 2e-2 is marked, as is one whose call could not be graphed. The
table (markdown) and the rows (JSON) go to DIR; --quick runs the issue's
four rows at 32/8 heads, head dim 128. --paged also times each row's K and
V as a paged cache of each page size (attnc.attention's block_table and
cache_seqlens: a block of pages(table, lens)), its pages in a random
order, against the contiguous call, whose o it must
match within 2e-2 (the same keys; tiles and splits of their own size), or
it is marked.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import attnc  # noqa: E402
from attnc import functional  # noqa: E402

PEERS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash2": SDPBackend.FLASH_ATTENTION}
QUICK = [(1, 131072, 1, 32, 8, 128), (8, 32768, 1, 32, 8, 128), (64, 4096, 1, 32, 8, 128), (16, 8192, 16, 32, 8, 128)]
MAX_KV_BYTES = 8 << 30   # rows whose K and V pass this are left out of the full table


def full_rows(head_dims):
    rows = []
    for D in head_dims:
        for hq, hkv in ((32, 8), (64, 8)):
            for nq in (1, 4, 16):
                for B in (1, 8, 64, 256):
                    for nk in (1024, 4096, 32768, 131072):
                        if 2 * B * hkv * nk * D * 2 <= MAX_KV_BYTES:
                            rows.append((B, nk, nq, hq, hkv, D))
    return rows


def timed(fn):
    """Median ms of fn() replayed in a CUDA graph, and whether it was (a
    call that cannot be captured is timed with events, host overhead and
    all)."""
    from triton.testing import do_bench, do_bench_cudagraph
    fn()
    torch.cuda.synchronize()
    try:
        return do_bench_cudagraph(fn, rep=50, return_mode="median"), True
    except Exception:  # noqa: BLE001
        return do_bench(fn, warmup=25, rep=50, return_mode="median"), False


def graph_diff(fn, eager):
    """Max |difference| between fn()'s output replayed from a captured CUDA
    graph and the eager output: the split's let dims, temporaries and
    launches must replay as they ran."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    return (out.float() - eager.float()).abs().max().nan_to_num(float("inf")).item()


def copy_gbps():
    x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    ms, _ = timed(lambda: y.copy_(x))
    del x, y
    return 2 * (1 << 30) / ms / 1e6   # read + write


def paged_row(row, q, k, v, o, page):
    """The row's K and V as a paged cache (pages in a random order, every
    batch's length NK): GB/s of the same bytes, and the largest difference
    from the contiguous call's o."""
    B, hkv, nk, D = k.shape
    maxp = -(-nk // page)
    P = B * maxp
    table = torch.randperm(P, device="cuda").view(B, maxp).to(torch.int32)
    lens = torch.full((B,), nk, device="cuda", dtype=torch.int32)
    caches = []
    for x in (k, v):
        c = torch.empty(P, page, hkv, D, device="cuda", dtype=x.dtype)
        pad = torch.zeros(B, hkv, maxp * page, D, device="cuda", dtype=x.dtype)
        pad[:, :, :nk] = x
        c[table.long().view(-1)] = pad.view(B, hkv, maxp, page, D).permute(0, 2, 3, 1, 4).reshape(P, page, hkv, D)
        caches.append(c)
        del pad
    call = lambda: attnc.attention(q, caches[0], caches[1], block_table=table, cache_seqlens=lens)  # noqa: E731
    out = call()
    torch.cuda.synchronize()
    diff = (out.float() - o.float()).abs().max().nan_to_num(float("inf")).item()
    ms, _ = timed(call)
    row[f"paged{page}_ms"], row[f"paged{page}"] = ms, row["kv_GB"] / ms * 1e3
    row[f"paged{page}_diff"] = diff
    del caches


def run_row(B, nk, nq, hq, hkv, D, pages=()):
    g = torch.Generator(device="cuda").manual_seed(B * 1000003 + nk * 7 + nq)
    q = torch.randn(B, hq, nq, D, device="cuda", dtype=torch.float16, generator=g)
    k = torch.randn(B, hkv, nk, D, device="cuda", dtype=torch.float16, generator=g)
    v = torch.randn(B, hkv, nk, D, device="cuda", dtype=torch.float16, generator=g)
    gbytes = 2 * B * hkv * nk * D * 2 / 1e9
    row = {"B": B, "NK": nk, "Nq": nq, "H": hq, "Hkv": hkv, "D": D, "kv_GB": gbytes}
    o = attnc.attention(q, k, v)
    ms, row["graphed"] = timed(lambda: attnc.attention(q, k, v))
    row["attnc_ms"], row["attnc"] = ms, gbytes / ms * 1e3
    row["graph_diff"] = graph_diff(lambda: attnc.attention(q, k, v), o)
    for name, be in PEERS.items():
        try:
            with sdpa_kernel([be]):
                ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                ms, _ = timed(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
            row[name + "_ms"], row[name] = ms, gbytes / ms * 1e3
            row[name + "_diff"] = (o.float() - ref.float()).abs().max().item()
        except Exception as e:  # noqa: BLE001 — a backend that refuses the shape is reported, not fatal
            row[name] = None
            row[name + "_error"] = f"{type(e).__name__}: {str(e)[:120]}"
    for page in pages:
        paged_row(row, q, k, v, o, page)
    del q, k, v, o
    torch.cuda.empty_cache()
    return row


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--arch", default=None, help="target to compile for (default: the device's)")
    ap.add_argument("--quick", action="store_true", help="the four rows of the issue's table only")
    ap.add_argument("--head-dims", default="128,64", help="the full table's head dims (default 128,64)")
    ap.add_argument("--rows", default="", help="these rows only: B,NK,Nq,H,Hkv,D;... ")
    ap.add_argument("--paged", default="", help="also each row's K and V as a paged cache of these page sizes "
                                                "(pages(table, lens)), e.g. 16,64,256")
    args = ap.parse_args()
    common.use_kit(args.kit)
    common.use_arch(args.arch)
    arch = functional.target_of(torch.device("cuda"))
    os.makedirs(args.out, exist_ok=True)
    copy = copy_gbps()
    rows = []
    rows_asked = [tuple(int(x) for x in r.split(",")) for r in args.rows.split(";") if r.strip()]
    shapes = rows_asked or (QUICK if args.quick else full_rows([int(d) for d in args.head_dims.split(",")]))
    pages = [int(p) for p in args.paged.split(",") if p.strip()]
    for shape in shapes:
        try:
            rows.append(run_row(*shape, pages=pages))
        except Exception as e:  # noqa: BLE001
            rows.append({"shape": shape, "error": f"{type(e).__name__}: {str(e)[:200]}"})
        print(json.dumps(rows[-1]), flush=True)
    name = f"decode-{arch}{'-quick' if args.quick else '-rows' if rows_asked else ''}"
    json.dump({"device": torch.cuda.get_device_name(), "copy_GBps": copy, "rows": rows},
              open(os.path.join(args.out, name + ".json"), "w"), indent=1)
    paged_cols = "".join(f" paged {p} |" for p in pages)
    lines = [f"# decode, {arch} on {torch.cuda.get_device_name()}: GB/s of K and V read (copy {copy:.0f} GB/s)", "",
             "| B | NK | Nq | heads | D | attnc | cuDNN | FA2 | attnc / best | attnc / copy | max diff |" + paged_cols,
             "|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(pages)]
    if pages:
        lines.insert(1, "\npaged P: GB/s of the same K and V read as a paged cache of P-key pages "
                        "(pages(table, lens), a random block table), and its ratio to the contiguous call's\n")
    paged_ratios = {p: [] for p in pages}
    ratios = []
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['shape']} | error: {r['error']} |")
            continue
        best = max([r[p] for p in PEERS if r.get(p)] or [float("nan")])
        diff = max([r.get(p + "_diff", 0) for p in PEERS] + [r["graph_diff"]])
        ratios.append(r["attnc"] / best)
        fmt = lambda x: f"{x:.0f}" if x else "-"  # noqa: E731
        lines.append(f"| {r['B']} | {r['NK']} | {r['Nq']} | {r['H']}/{r['Hkv']} | {r['D']} | {fmt(r['attnc'])} | "
                     f"{fmt(r.get('cudnn'))} | {fmt(r.get('flash2'))} | {r['attnc'] / best:.2f} | "
                     f"{r['attnc'] / copy:.2f} | {diff:.1e}{' OFF' if diff > 2e-2 else ''}"
                     f"{'' if r['graphed'] else ' (not graphed)'} |" +
                     "".join(f" {r[f'paged{p}']:.0f} ({r[f'paged{p}'] / r['attnc']:.2f})"
                             f"{' OFF' if r[f'paged{p}_diff'] > 2e-2 else ''} |" for p in pages))
        for p in pages:
            paged_ratios[p].append(r[f"paged{p}"] / r["attnc"])
    lines += ["", f"geometric mean attnc / best peer: {common.geomean(ratios):.3f} over {len(ratios)} rows"]
    for p, rs in paged_ratios.items():
        lines.append(f"paged {p} / contiguous: geometric mean {common.geomean(rs):.3f}, lowest {min(rs):.2f}")
    open(os.path.join(args.out, name + ".md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
