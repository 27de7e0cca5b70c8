#!/usr/bin/env python3
"""gpu_check.py — attnc's kernels for one target on a GPU, against float64 PyTorch.

    python3 bench/gpu_check.py --kit KIT --out DIR [--arch sm_70|sm_80|sm_90a] [--dtype f16|bf16] [--quick]

KIT holds attnc (statically linked), libattnrt.so and attnc-embed. On an
H200 the driver JIT-compiles sm_70 PTX (right for correctness, not for
speed) and runs sm_80 PTX as it is. With --dtype bf16 every tensor is bf16
and the FP16-ACC cases (f16 accumulation needs f16 operands) are left out. For every case the inputs are fresh random numbers, the outputs are
poisoned with NaN before the run, and the error is the max |attnc - float64|.

  FP32-ACC   the FlashAttention rule: err <= 2 * err(torch, same precision) + 1e-5
  FP16-ACC   err <= 2 * err(torch, same precision) + 1e-5 + fp16acc_slack(K)
             (doc/codegen.md: f16 accumulation of K-term dot products)

"torch, same precision" is the same block in eager PyTorch on the f16 inputs
(matmuls in f16 with cuBLAS' f32 accumulation, softmax in f32, P in f16).
Prints one line per case, a table last, and writes the log under DIR.
"""
import itertools
import math
import os
import re
import subprocess
import sys
import time
import zlib

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import attnc  # noqa: E402

U16 = 2.0 ** -11   # unit roundoff of f16
ARCH = "sm_70"       # the target compiled for (--arch)
F16ACC = True        # whether `acc f16` is tested: f16 tensors
DT = torch.float16   # the element type of every tensor (--dtype)
DTN = "f16"          # its name in .attn
REF_ON_CPU = False   # --only sanitize: the references run on the CPU, so that
                     # compute-sanitizer sees attnc's kernels and not cuBLAS's


def fp16acc_slack(k_terms):
    """Error added by accumulating k_terms products in f16 (m8n8k4: 4 per step),
    relative to values of size ~1: sqrt(k/4) roundings of half an ulp each,
    times 4 for the tail (a probabilistic bound, Higham §3.2 / Connolly-Higham)."""
    return 4 * U16 * math.sqrt(max(1, k_terms) / 4)


# ---- .attn sources --------------------------------------------------------------

def attention_src(name, H, HKV, D, acc, mask, score, cross, lse=True):
    nq, nk = ("NQ", "NK") if cross else ("N", "N")
    outs = f"o: {DTN}[B, {H}, {nq}, {D}]" + (f", lse: f32[B, {H}, {nq}]" if lse else "")
    body = f"  acc {acc};\n"
    if score:
        body += f"  score(s, b, h, i, j) = {score};\n"
    if mask:
        body += f"  mask(b, h, i, j) = {mask};\n"
    return (f"attention {name}(q: {DTN}[B, {H}, {nq}, {D}], k: {DTN}[B, {HKV}, {nk}, {D}], "
            f"v: {DTN}[B, {HKV}, {nk}, {D}]) -> ({outs}) {{\n{body}}}\n")


def shrink_consts(text, consts):
    for k, v in consts.items():
        text = re.sub(rf"const {k} = [^;]*;", f"const {k} = {v};", text)
    return text.replace("f16[", DTN + "[")


# ---- references -----------------------------------------------------------------

def attention_ref(q, k, v, scale, mask_fn, score_fn, dtype):
    """Attention in `dtype` (float64: the reference) or the same-precision
    eager form (dtype=None: f16 matmuls, f32 softmax)."""
    B, H, NQ, D = q.shape
    HKV = k.shape[1]
    rep = H // HKV
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    if dtype is None:
        s = (q @ k.transpose(-1, -2)).float()
    else:
        s = q.to(dtype) @ k.to(dtype).transpose(-1, -2)
    s = s * scale
    NK = k.shape[2]
    i = torch.arange(NQ, device=q.device).view(1, 1, NQ, 1)
    j = torch.arange(NK, device=q.device).view(1, 1, 1, NK)
    h = torch.arange(H, device=q.device).view(1, H, 1, 1)
    b = torch.arange(B, device=q.device).view(B, 1, 1, 1)
    if score_fn:
        s = score_fn(s, b, h, i, j)
    if mask_fn:
        s = s.masked_fill(~mask_fn(b, h, i, j), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    if dtype is None:
        o = (p.to(DT) @ v).float()
    else:
        o = p @ v.to(dtype)
    rowdead = torch.isinf(lse) & (lse < 0)
    o = o.masked_fill(rowdead.unsqueeze(-1), 0.0)
    return o.double(), lse.double()


def max_err(x, ref):
    x, ref = x.double(), ref.double()
    both_inf = torch.isinf(ref) & (x == ref)
    d = (x - ref).abs().masked_fill(both_inf, 0.0)
    return float(d.nan_to_num(float("inf")).max()) if d.numel() else 0.0


# ---- the cases ------------------------------------------------------------------

class Report:
    def __init__(self, log):
        self.rows = []
        self.log = log

    def expect(self, name, ok, detail):
        """A check without a number: ok or not, and what was seen."""
        self.rows.append((name, "", 0.0, 0.0, 0.0, ok, detail))
        line = f"{'ok  ' if ok else 'FAIL'} {name:34s} {detail}"
        print(line, flush=True)
        self.log.write(line + "\n")

    def add(self, name, shape, err, ref_err, bound, extra=""):
        ok = err <= bound
        self.rows.append((name, shape, err, ref_err, bound, ok, extra))
        line = (f"{'ok  ' if ok else 'FAIL'} {name:34s} {shape:28s} err {err:.3e}  torch-f16 {ref_err:.3e}  "
                f"bound {bound:.3e} {extra}")
        print(line, flush=True)
        self.log.write(line + "\n")
        return ok


LAYOUTS = ("bhnd", "bnhd", "fused", "padded")


def layout_views(shapes, layout, fill=None, g=None):
    """[B, Hx, N, D] tensors in a layout as models make them: "bhnd"
    contiguous; "bnhd" each made [B, N, Hx, D] and transposed (a
    projection's output viewed per head); "fused" all slices of one
    [B, N, sum Hx, D] buffer (a fused QKV projection; the shapes must share
    B, N and D); "padded" rows of D + 8 of which D are used. Random in
    [-1, 1) (fill None) or filled. Returns the views and the buffers
    behind them (so that what a kernel must not write can be checked)."""
    def make(shape):
        if fill is None:
            return (torch.rand(shape, device="cuda", generator=g) * 2 - 1).to(DT)
        return torch.full(shape, fill, device="cuda", dtype=DT)
    if layout == "bhnd":
        bufs = [make(s) for s in shapes]
        return bufs, bufs
    if layout == "bnhd":
        bufs = [make((B, N, Hx, D)) for B, Hx, N, D in shapes]
        return [b.transpose(1, 2) for b in bufs], bufs
    if layout == "fused":
        B, _, N, D = shapes[0]
        buf = make((B, N, sum(s[1] for s in shapes), D))
        views, at = [], 0
        for _, Hx, _, _ in shapes:
            views.append(buf[:, :, at:at + Hx].transpose(1, 2))
            at += Hx
        return views, [buf]
    assert layout == "padded"
    bufs = [make((B, Hx, N, D + 8)) for B, Hx, N, D in shapes]
    return [b[..., :b.shape[-1] - 8] for b in bufs], bufs


def run_attention(rep, mod, block, name, B, H, HKV, NQ, NK, D, acc, scale, mask_fn, score_fn, cross, extra_inputs=(),
                  lse=True, layout="bhnd"):
    """One case; layout (layout_views) for q, k, v and o, which then run as
    strided views with no copy ("fused" needs NQ = NK)."""
    g = torch.Generator(device="cuda").manual_seed(hash((name, NQ, NK)) & 0xffffffff)
    shapes = [(B, H, NQ, D), (B, HKV, NK, D), (B, HKV, NK, D)]
    (q, k, v), _ = layout_views(shapes, layout, g=g)
    (o,), obufs = layout_views([(B, H, NQ, D)], "bnhd" if layout == "fused" else layout, fill=float("nan"))
    outs = [o]
    if lse:
        outs.append(torch.full((B, H, NQ), float("nan"), device="cuda", dtype=torch.float32))
    mod.run(block, q, k, v, *extra_inputs, out=outs)
    torch.cuda.synchronize()
    if layout == "padded":   # what lies between the rows stays as it was
        pad = obufs[0][..., D:]
        rep.expect(f"{name} {layout}: row padding untouched", bool(pad.isnan().all()),
                   f"{int((~pad.isnan()).sum())} of {pad.numel()} padding elements written")
    if REF_ON_CPU:
        q, k, v, outs = q.cpu(), k.cpu(), v.cpu(), [t.cpu() for t in outs]
        o = outs[0]
    o64, lse64 = attention_ref(q, k, v, scale, mask_fn, score_fn, torch.float64)
    o16, lse16 = attention_ref(q, k, v, scale, mask_fn, score_fn, None)
    ref_err = max_err(o16, o64)
    bound = 2 * ref_err + 1e-5
    if acc == "f16":
        bound += fp16acc_slack(max(NK, D))
    shape = f"B{B} H{H}/{HKV} N{NQ}x{NK} D{D}" + ("" if layout == "bhnd" else f" {layout}")
    ok = rep.add(f"{name} o", shape, max_err(o, o64), ref_err, bound, f"acc {acc}")
    if lse:
        lref = max_err(lse16, lse64)
        lb = 2 * lref + 1e-5 + (fp16acc_slack(max(NK, D)) if acc == "f16" else 0)
        ok &= rep.add(f"{name} lse", shape, max_err(outs[1], lse64), lref, lb, f"acc {acc}")
    return ok


def causal(b, h, i, j):
    return j <= i


def strided_cases(rep, kit, tmp):
    """q, k, v and o as the views models make (layout_views), run with no
    copy: plain and causal GQA, head dims 64 and 128, ragged N."""
    for D in (64, 128):
        for is_causal, H, HKV in ((False, 4, 4), (True, 8, 2)):
            acc = accs()[-1]
            name = f"strided_d{D}{'_causal' if is_causal else ''}"
            mod = compile_src(kit, tmp, name, attention_src(name, H, HKV, D, acc, "j <= i" if is_causal else None,
                                                            None, False))
            for layout in LAYOUTS[1:]:
                for N in (113, 1000):
                    run_attention(rep, mod, name, name, 2, H, HKV, N, N, D, acc, 1 / math.sqrt(D),
                                  causal if is_causal else None, None, False, layout=layout)


def attention_cases(rep, kit, tmp, quick):
    Ns = [1, 17, 113, 128, 1000, 2049] + ([] if quick else [4096])
    for D in (64, 128) + ((256,) if ARCH == "sm_90a" else ()):   # head dim 256: sm_90a's 128 x 64 tiles
        for acc in accs():
            for is_causal in (False, True):
                name = f"mha_d{D}_{acc}{'_causal' if is_causal else ''}"
                src = attention_src(name, 4, 4, D, acc, "j <= i" if is_causal else None, None, False)
                mod = compile_src(kit, tmp, name, src)
                for N in Ns:
                    run_attention(rep, mod, name, name, 2, 4, 4, N, N, D, acc, 1 / math.sqrt(D),
                                  causal if is_causal else None, None, False)
    # other tilings and stage counts (schedule), which change warps per block,
    # row blocks per warp and the prefetch ring
    scheds = ("tile(16, 16)", "tile(32, 64)", "tile(128, 64)", "tile(64, 32)", "tile(64, 64); stages(1)",
              "tile(64, 64); stages(3)")
    if ARCH == "sm_90a":   # a warpgroup per 64 rows: smaller row tiles are refused, said at compile time
        scheds = ("tile(64, 64)", "tile(128, 64)", "tile(64, 128)", "tile(192, 64)", "tile(128, 128); stages(1)",
                  "tile(128, 128); stages(3)", "persistent(1)", "persistent(0)", "pingpong(1)", "overlap(0)", "producer(0)",
                  "producer(1)")
        src = attention_src("sched_small", 2, 2, 64, "f32", "j <= i", None, False) + \
            f"schedule sched_small for {ARCH} {{ tile(16, 16); }}\n"
        try:
            compile_src(kit, tmp, "sched_small", src)
            rep.expect("tile(16, 16) refused on sm_90a", False, "compiled")
        except attnc.AttncError as e:
            rep.expect("tile(16, 16) refused on sm_90a", "multiple of 64" in str(e), str(e)[:110])
    for sched in scheds:
        tag = re.sub(r"[^0-9]+", "_", sched).strip("_")
        for acc in accs():
            name = f"sched_{tag}_{acc}"
            src = attention_src(name, 2, 2, 64, acc, "j <= i", None, False) + f"schedule {name} for {ARCH} {{ {sched}; }}\n"
            mod = compile_src(kit, tmp, name, src)
            for N in (17, 300):
                run_attention(rep, mod, name, name, 2, 2, 2, N, N, 64, acc, 1 / 8, causal, None, False)
    if ARCH == "sm_90a":
        # persistent blocks over more tiles than a section of tile_order
        # (256), the last section short (B·H = 80 heads, 8 row tiles each);
        # and 64-row tiles, two blocks an SM (nv.blocks_per_sm), over as many
        for D, sched, tag in ((64, "persistent(1)", ""), (128, "persistent(1)", ""), (64, "tile(64, 64)", "_t64")):
            name = f"persistent_d{D}{tag}"
            src = attention_src(name, 20, 20, D, "f32", "j <= i", None, False) + \
                f"schedule {name} for {ARCH} {{ {sched}; }}\n"
            mod = compile_src(kit, tmp, name, src)
            run_attention(rep, mod, name, name, 4, 20, 20, 1000, 1000, D, "f32", 1 / math.sqrt(D), causal, None, False)
    # GQA, causal, both accumulators
    for acc in accs():
        name = f"gqa_d128_{acc}_causal"
        mod = compile_src(kit, tmp, name, attention_src(name, 8, 2, 128, acc, "j <= i", None, False))
        for N in Ns:
            run_attention(rep, mod, name, name, 2, 8, 2, N, N, 128, acc, 1 / math.sqrt(128), causal, None, False)
    # GQA with symbolic head counts: the kernel maps heads from the dims it is
    # passed, and the runtime checks H % HKV == 0 (from the manifest)
    name = "gqa_symbolic"
    src = ("attention gqa_symbolic(q: f16[B, H, N, 64], k: f16[B, HKV, N, 64], v: f16[B, HKV, N, 64])\n"
           "    -> (o: f16[B, H, N, 64], lse: f32[B, H, N]) { mask(b, h, i, j) = j <= i; }\n").replace("f16[", DTN + "[")
    mod = compile_src(kit, tmp, name, src)
    for H, HKV, N in ((8, 2, 113), (6, 3, 1000), (4, 4, 17)):
        run_attention(rep, mod, name, f"{name} H{H}/{HKV}", 2, H, HKV, N, N, 64, "f32", 1 / 8, causal, None, False)
    x = torch.zeros(1, 8, 5, 64, device="cuda", dtype=DT)
    y = torch.zeros(1, 3, 5, 64, device="cuda", dtype=DT)
    try:
        mod.run(name, x, y, y)
        rep.expect("gqa_symbolic H8/3 refused", False, "no error raised")
    except attnc.AttncError as e:
        rep.expect("gqa_symbolic H8/3 refused", "not a multiple of kv heads" in str(e), str(e)[:110])
    # cross-attention, NQ != NK, causal (top-left aligned, as the DSL reads) and not
    for is_causal in (False, True):
        name = f"cross_d64{'_causal' if is_causal else ''}"
        mod = compile_src(kit, tmp, name, attention_src(name, 4, 4, 64, "f32", "j <= i" if is_causal else None,
                                                       None, True))
        for NQ, NK in ((17, 1000), (1000, 113), (2049, 128), (1, 4096)):
            run_attention(rep, mod, name, name, 2, 4, 4, NQ, NK, 64, "f32", 1 / 8, causal if is_causal else None,
                          None, True)
    # softcap + ALiBi with a slopes tensor (examples/softcap_alibi.attn: FP16-ACC, causal)
    H = 4
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)], device="cuda")
    def score(s, b, h, i, j):
        return 30 * torch.tanh(s / 30) + slopes.to(s.dtype)[h] * (j - i)
    if F16ACC:
        mod = compile_file(kit, tmp, os.path.join(ROOT, "examples", "softcap_alibi.attn"))
        for N in Ns:
            run_attention(rep, mod, "softcap_alibi", "softcap_alibi", 2, H, H, N, N, 128, "f16", 1 / math.sqrt(128),
                          causal, score, False, extra_inputs=(slopes,), lse=False)
    else:   # the example with FP32-ACC, in bf16
        src = open(os.path.join(ROOT, "examples", "softcap_alibi.attn")).read().replace("acc f16", "acc f32")
        mod = compile_src(kit, tmp, "softcap_alibi_f32", shrink_consts(src, {}))
        for N in Ns:
            run_attention(rep, mod, "softcap_alibi", "softcap_alibi (acc f32)", 2, H, H, N, N, 128, "f32",
                          1 / math.sqrt(128), causal, score, False, extra_inputs=(slopes,), lse=False)
    # cross_attention.attn: keys past each batch's encoder length are hidden
    # (a length of 0 hides every key: o = 0, lse = -inf)
    mod = compile_example(kit, tmp, "cross_attention")
    for NQ, NK in ((17, 1000), (1000, 113), (1, 2049)):
        enc_len = torch.tensor([NK // 3, 0, NK], device="cuda", dtype=torch.int32)
        run_attention(rep, mod, "cross_attention", "example cross_attention", 3, 8, 8, NQ, NK, 64, "f32", 1 / 8,
                      lambda b, h, i, j: j < enc_len.long()[b], None, True, extra_inputs=(enc_len,))
    # document_mask.attn: packed documents (ids from a tensor), causal, plus a bias
    mod = compile_example(kit, tmp, "document_mask")
    for N in (17, 113, 1000):
        g = torch.Generator(device="cuda").manual_seed(N)
        doc = torch.sort(torch.randint(0, 4, (2, N), device="cuda", generator=g, dtype=torch.int32), dim=1)[0]
        bias = (torch.rand(3, N, N, device="cuda", generator=g) * 2 - 1).to(DT)
        run_attention(rep, mod, "document_mask", "example document_mask", 2, 3, 3, N, N, 64, "f32", 1 / 8,
                      lambda b, h, i, j: (doc.long()[b.view(-1)].view(-1, 1, N, 1) ==
                                          doc.long()[b.view(-1)].view(-1, 1, 1, N)) & (j <= i),
                      lambda s, b, h, i, j: s + bias.to(s.dtype)[h.view(-1)].unsqueeze(0),
                      False, extra_inputs=(doc, bias), lse=False)
    # sliding_window.attn with the window shrunk to 100 keys, so it binds
    src = shrink_consts(open(os.path.join(ROOT, "examples", "sliding_window.attn")).read(), {"WINDOW": 100})
    mod = compile_src(kit, tmp, "sliding_window_100", src)
    for N in (17, 113, 1000, 2049):
        run_attention(rep, mod, "sliding_window", "example sliding_window (W=100)", 1, 32, 8, N, N, 128, "f32",
                      128 ** -0.5, lambda b, h, i, j: (j <= i) & (i - j < 100), None, False, lse=False)
    # every attention example as written, at one ragged size
    for ex, H, HKV, D, lse_out in (("mha", 16, 16, 64, False), ("gqa_causal", 32, 8, 128, True)):
        mod = compile_example(kit, tmp, ex)
        run_attention(rep, mod, ex, "example " + ex, 1, H, HKV, 1000, 1000, D, "f32", 1 / math.sqrt(D),
                      causal if ex == "gqa_causal" else None, None, False, lse=lse_out)


def paged_src(name, H, HKV, D, page, mask):
    """A decode block over a paged KV cache (pages(table, lens), doc/dsl.md)."""
    body = "  pages(table, lens);\n" + (f"  mask(b, h, i, j) = {mask};\n" if mask else "")
    return (f"attention {name}(q: {DTN}[B, {H}, NQ, {D}], k: {DTN}[P, {page}, {HKV}, {D}], "
            f"v: {DTN}[P, {page}, {HKV}, {D}], table: i32[B, MAXP], lens: i32[B])\n"
            f"    -> (o: {DTN}[B, {H}, NQ, {D}], lse: f32[B, {H}, NQ]) {{\n{body}}}\n")


# the masks of paged_cases: none (the lengths only), causal aligned to each
# batch's length, and a 300-key window ending there
PAGED_MASKS = {
    "all": (None, lambda b, h, i, j, L, NQ: j >= 0),
    "causal": ("j <= i + lens[b] - NQ", lambda b, h, i, j, L, NQ: j <= i + L - NQ),
    "window": ("j <= i + lens[b] - NQ && j > i + lens[b] - NQ - 300",
               lambda b, h, i, j, L, NQ: (j <= i + L - NQ) & (j > i + L - NQ - 300)),
}


def paged_inputs(B, HKV, D, page, maxp, g):
    """A paged cache of more pages than the batch uses (k and v [P, page,
    HKV, D], random in [-1, 1)), each batch's table a random choice of
    distinct pages, and random lengths with 0, 1 and all max_pages · page
    keys among them: kc, vc, table, lens."""
    P = B * maxp + 3
    kc, vc = ((torch.rand(P, page, HKV, D, device="cuda", generator=g) * 2 - 1).to(DT) for _ in range(2))
    table = torch.randperm(P, device="cuda", generator=g)[:B * maxp].view(B, maxp).to(torch.int32).contiguous()
    most = maxp * page
    lens = torch.randint(0, most + 1, (B,), device="cuda", generator=g, dtype=torch.int32)
    lens[: min(B, 3)] = torch.tensor([0, 1, most], device="cuda", dtype=torch.int32)[: min(B, 3)]
    return kc, vc, table, lens


def gather_pages(cache, table):
    """The keys of each batch's pages, in its table's order: [B, HKV, max_pages · page, D]."""
    P, page, HKV, D = cache.shape
    rows = (table.long().unsqueeze(-1) * page + torch.arange(page, device=cache.device)).view(table.shape[0], -1)
    return cache.reshape(P * page, HKV, D)[rows].permute(0, 2, 1, 3)


def run_paged(rep, mod, name, B, H, HKV, NQ, D, page, maxp, mask, seed):
    """One paged case (paged_inputs); the reference reads the same keys
    gathered contiguous."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = (torch.rand(B, H, NQ, D, device="cuda", generator=g) * 2 - 1).to(DT)
    kc, vc, table, lens = paged_inputs(B, HKV, D, page, maxp, g)
    o = torch.full((B, H, NQ, D), float("nan"), device="cuda", dtype=DT)
    lse = torch.full((B, H, NQ), float("nan"), device="cuda", dtype=torch.float32)
    mod.run(name, q, kc, vc, table, lens, out=[o, lse])
    torch.cuda.synchronize()
    k, v = gather_pages(kc, table), gather_pages(vc, table)
    L = lens.long().view(B, 1, 1, 1)
    user = PAGED_MASKS[mask][1]
    mask_fn = lambda b, h, i, j: user(b, h, i, j, L, NQ) & (j < L)   # noqa: E731
    o64, lse64 = attention_ref(q, k, v, D ** -0.5, mask_fn, None, torch.float64)
    o16, lse16 = attention_ref(q, k, v, D ** -0.5, mask_fn, None, None)
    shape = f"B{B} H{H}/{HKV} NQ{NQ} page {page}x{maxp} D{D}"
    ref_err = max_err(o16, o64)
    rep.add(f"{name} o", shape, max_err(o, o64), ref_err, 2 * ref_err + 1e-5, mask)
    lref = max_err(lse16, lse64)
    rep.add(f"{name} lse", shape, max_err(lse, lse64), lref, 2 * lref + 1e-5, mask)


def paged_cases(rep, kit, tmp, quick):
    """A paged KV cache (pages(table, lens)): page sizes 16, 64 and 256,
    GQA 32/8, 8/1 and 6/2, Nq 1, 4 and 16, the masks of PAGED_MASKS; then
    the runtime's refusals of a bad table or lengths."""
    configs = [(32, 8, 128, page, mask) for page in (16, 64, 256) for mask in PAGED_MASKS]
    configs += [(8, 1, 128, 64, "causal"), (6, 2, 64, 16, "causal"), (6, 2, 64, 256, "window"), (8, 1, 64, 32, "all")]
    for H, HKV, D, page, mask in configs[: 4 if quick else None]:
        name = f"paged_{H}_{HKV}_d{D}_p{page}_{mask}"
        mod = compile_src(kit, tmp, name, paged_src(name, H, HKV, D, page, PAGED_MASKS[mask][0]))
        maxp = max(2, 2048 // page)
        for NQ in (1, 4, 16):
            run_paged(rep, mod, name, 5, H, HKV, NQ, D, page, maxp, mask, seed=zlib.crc32(f"{name}{NQ}".encode()))
    name = "paged_refusals"
    mod = compile_src(kit, tmp, name, paged_src(name, 8, 2, 64, 64, None))
    q = torch.zeros(2, 8, 1, 64, device="cuda", dtype=DT)
    kc = torch.zeros(5, 64, 2, 64, device="cuda", dtype=DT)
    table = torch.zeros(2, 3, device="cuda", dtype=torch.int32)
    lens = torch.zeros(2, device="cuda", dtype=torch.int32)

    def expect(what, fn, *needles):
        try:
            fn()
            rep.expect(f"paged: {what}", False, "no error raised")
        except attnc.AttncError as e:
            rep.expect(f"paged: {what}", all(n in str(e) for n in needles), str(e).splitlines()[0][:110])
    expect("table dtype", lambda: mod.run(name, q, kc, kc, table.long(), lens), "input 'table'", "dtype")
    expect("table batch", lambda: mod.run(name, q, kc, kc, table[:1], lens), "input 'table'", "B")
    expect("lengths size", lambda: mod.run(name, q, kc, kc, table, lens[:1]), "input 'lens'", "B")
    expect("lengths dtype", lambda: mod.run(name, q, kc, kc, table, lens.float()), "input 'lens'", "dtype")
    expect("page size", lambda: mod.run(name, q, kc[:, :32], kc[:, :32], table, lens), "input 'k'", "64")
    expect("cache pages", lambda: mod.run(name, q, kc, kc[:4], table, lens), "input 'v'", "P")


def varlen_src(name, H, HKV, D, schedule):
    """Packed sequences' cross attention (sequences(cu_q, cu_k), doc/dsl.md),
    causal aligned to each sequence's last key, with a schedule line for
    the target ("": the default kernel)."""
    sched = f"\nschedule {name} for {ARCH} {{ {schedule} }}\n" if schedule else ""
    return (f"attention {name}(q: {DTN}[TQ, {H}, {D}], k: {DTN}[TK, {HKV}, {D}], v: {DTN}[TK, {HKV}, {D}], "
            f"cu_q: i32[S], cu_k: i32[S])\n    -> (o: {DTN}[TQ, {H}, {D}], lse: f32[{H}, TQ]) {{\n"
            f"  sequences(cu_q, cu_k);\n"
            f"  mask(b, h, i, j) = j <= i + (cu_k[b + 1] - cu_k[b]) - (cu_q[b + 1] - cu_q[b]);\n}}\n{sched}")


def varlen_cases(rep, kit, tmp, quick):
    """Packed sequences: each sequence's o and lse against float64 attention
    of its own rows (bottom-right causal), sequences of several tiles, one
    row and none (o = 0, lse = -inf where no key), outputs poisoned with
    NaN so a row written twice wrong or not at all shows; on sm_90a each
    kernel: the default, the plain TMA one (producer(0)) and the
    warp-specialised persistent one (producer(1))."""
    schedules = ["", "producer(0);", "producer(1);"] if ARCH == "sm_90a" else [""]
    lengths = [([300, 0, 1, 129, 1000, 77], None), ([5, 200, 64, 1], [700, 150, 0, 33]),
               ([4096, 1500, 2600, 3], None)]
    for H, HKV, D in ((8, 2, 128), (6, 2, 64)):
        for si, schedule in enumerate(schedules):
            name = f"varlen_{H}_{HKV}_d{D}_s{si}"
            mod = compile_src(kit, tmp, name, varlen_src(name, H, HKV, D, schedule))
            for qlens, klens in lengths[: 2 if quick else None]:
                klens = klens or qlens
                g = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{name}{qlens}".encode()))
                cu = [torch.tensor([0] + list(itertools.accumulate(x)), device="cuda", dtype=torch.int32)
                      for x in (qlens, klens)]
                TQ, TK = int(cu[0][-1]), int(cu[1][-1])
                q = (torch.rand(TQ, H, D, device="cuda", generator=g) * 2 - 1).to(DT)
                k, v = ((torch.rand(TK, HKV, D, device="cuda", generator=g) * 2 - 1).to(DT) for _ in range(2))
                o = torch.full((TQ, H, D), float("nan"), device="cuda", dtype=DT)
                lse = torch.full((H, TQ), float("nan"), device="cuda", dtype=torch.float32)
                mod.run(name, q, k, v, cu[0], cu[1], out=[o, lse])
                torch.cuda.synchronize()
                shape = f"H{H}/{HKV} D{D} {schedule or 'default'}"
                worst, worst_ref, worst_l, worst_lref = 0.0, 0.0, 0.0, 0.0
                for b, (L, M) in enumerate(zip(qlens, klens)):
                    if L == 0:
                        continue
                    q0, k0 = int(cu[0][b]), int(cu[1][b])
                    qb = q[q0:q0 + L].transpose(0, 1).unsqueeze(0)
                    kb, vb = (t[k0:k0 + M].transpose(0, 1).unsqueeze(0) for t in (k, v))
                    mask_fn = lambda bb, h, i, j: j <= i + (M - L)   # noqa: E731
                    o64, lse64 = attention_ref(qb, kb, vb, D ** -0.5, mask_fn, None, torch.float64)
                    olo, lselo = attention_ref(qb, kb, vb, D ** -0.5, mask_fn, None, None)
                    worst = max(worst, max_err(o[q0:q0 + L].transpose(0, 1).unsqueeze(0), o64))
                    worst_ref = max(worst_ref, max_err(olo, o64))
                    worst_l = max(worst_l, max_err(lse[:, q0:q0 + L].unsqueeze(0), lse64))
                    worst_lref = max(worst_lref, max_err(lselo, lse64))
                rep.add(f"{name} o {len(qlens)} seqs", shape, worst, worst_ref, 2 * worst_ref + 1e-5, str(qlens)[:40])
                rep.add(f"{name} lse {len(qlens)} seqs", shape, worst_l, worst_lref, 2 * worst_lref + 1e-5,
                        str(klens)[:40])


def binding_errors(rep, tmp):
    """The Python binding refuses bad arguments with AttncError naming them."""
    name = "bind_check"
    mod = compile_src(None, tmp, name, attention_src(name, 4, 4, 64, "f32", None, None, False, lse=False))
    q = torch.zeros(1, 4, 17, 64, device="cuda", dtype=DT)

    def expect(what, fn, *needles):
        try:
            fn()
            rep.expect(f"binding: {what}", False, "no error raised")
        except attnc.AttncError as e:
            ok = all(n in str(e) for n in needles)
            rep.expect(f"binding: {what}", ok, str(e).splitlines()[0][:110])
    expect("dtype", lambda: mod.run(name, q.float(), q, q), "input 'q'", "dtype")
    other = torch.bfloat16 if DT == torch.float16 else torch.float16
    expect("16-bit dtype", lambda: mod.run(name, q.to(other), q, q), "input 'q'", "dtype")
    expect("device", lambda: mod.run(name, q, q.cpu(), q), "input 'k'", "cpu")
    expect("count", lambda: mod.run(name, q, q), "takes 3 inputs")
    expect("innermost stride", lambda: mod.run(name, q, q, q.transpose(2, 3).contiguous().transpose(2, 3)),
           "input 'v'", "(the innermost) is 17; expected 1")
    expect("row alignment", lambda: mod.run(name, q, q, torch.zeros(1, 4, 17, 65, device="cuda", dtype=DT)[..., 1:]),
           "input 'v'", "stride 2 is 65; expected a multiple of 8")
    expect("out= overlapping itself", lambda: mod.run(name, q, q, q, out=torch.zeros(1, 1, 17, 64, device="cuda",
                                                                                         dtype=DT).expand(1, 4, 17, 64)),
           "output 'o'", "two elements at one address")
    expect("shape", lambda: mod.run(name, q, q[:, :, :5], q), "input 'k'", "N")
    expect("block", lambda: mod.run("nope", q, q, q), "no block 'nope'")
    bad = os.path.join(tmp, "bad.attn")
    with open(bad, "w") as f:
        f.write("mlp m(x: f16[T]) -> (y: f16[T]) { y = x +; }\n")
    expect("compile error", lambda: attnc.compile(bad, output=os.path.join(tmp, "bad.ptx")), "error:")
    # on a side stream: the input is written on that stream behind a long
    # chain of matmuls; a kernel launched on any other stream would read the
    # zeros that were there before
    side = torch.cuda.Stream()
    x = (torch.rand(1, 4, 300, 64, device="cuda") * 2 - 1).to(DT)
    xs = torch.zeros_like(x)
    big = torch.rand(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        for _ in range(30):
            big = big @ big / 4096
        xs.copy_(x)
        o_side = mod.run(name, xs, xs, xs)
    side.synchronize()
    torch.cuda.synchronize()
    o_ref, _ = attention_ref(x, x, x, 1 / 8, None, None, torch.float64)
    e = max_err(o_side, o_ref)
    rep.expect("binding: current torch stream", e < 1e-3, f"input written on a side stream, kernel run there: err {e:.2e}")
    # out= aliasing an input is refused (PyTorch's rule), and empty inputs
    # give empty outputs with no launch
    expect("out= is an input", lambda: mod.run(name, q, q.clone(), q.clone(), out=q), "output 'o'", "overlaps input 'q'")
    e = torch.empty(0, 4, 17, 64, device="cuda", dtype=DT)
    oe = mod.run(name, e, e, e)
    rep.expect("binding: B = 0 gives an empty output", tuple(oe.shape) == (0, 4, 17, 64), f"{tuple(oe.shape)}")
    e = torch.empty(1, 4, 0, 64, device="cuda", dtype=DT)
    oe = mod.run(name, e, e, e)
    rep.expect("binding: N = 0 gives an empty output", tuple(oe.shape) == (1, 4, 0, 64), f"{tuple(oe.shape)}")
    o = mod.run(name, q, q, q)
    rep.expect("binding: outputs allocated", o.shape == q.shape and o.dtype == DT and bool(
        torch.isfinite(o).all()), f"{tuple(o.shape)} {o.dtype}")
    # B·H over grid.y's 65,535 (a decode batch: B = 8192, H = 16, B·H =
    # 131,072): the runtime splits y over z, the kernel folds it back;
    # every program's output is checked (poisoned first)
    name = "grid_y"
    acc = accs()[-1]
    mod = compile_src(None, tmp, name, attention_src(name, 16, 16, 64, acc, "j <= i", None, False))
    run_attention(rep, mod, name, "grid.y split B*H=131072", 8192, 16, 16, 17, 17, 64, acc, 1 / 8, causal, None,
                  False)


def fp16acc_emulation_cases(rep, kit, tmp):
    """FP16-ACC against the CPU interpreter's emulation of it: the interpreter
    runs the same block after the sm_70 pipeline (its f16 accumulation
    emulated exactly) on its own N(0, 1) inputs and dumps them, the GPU runs
    the kernel on those inputs; both are held to the FP16-ACC bound, and the
    GPU to no worse than twice the emulation (+ 1e-4)."""
    import numpy as np
    cases = (("emu_d64_f16", 4, 4, 64, None, 257), ("emu_d128_f16_causal", 4, 4, 128, "j <= i", 300),
             ("emu_gqa_d128_f16", 8, 2, 128, "j <= i", 200))
    for name, H, HKV, D, mask, N in cases:
        path = os.path.join(tmp, name + ".attn")
        with open(path, "w") as f:
            f.write(attention_src(name, H, HKV, D, "f16", mask, None, False))
        dump = os.path.join(tmp, name + ".dump")
        os.makedirs(dump, exist_ok=True)
        r = subprocess.run([os.environ["ATTNC"], "run", path, "-arch", ARCH, "-D", f"N={N}", "-D", "B=1",
                            "--seed", "3", "--check", "--dump", dump], capture_output=True, text=True)
        print(r.stdout.strip(), flush=True)
        ld = lambda kind, n: torch.from_numpy(np.load(os.path.join(dump, f"{name}.{kind}.{n}.npy"))).cuda()
        q, k, v = ld("in", "q"), ld("in", "k"), ld("in", "v")
        mod = attnc.compile(path, arch=ARCH, output=os.path.join(tmp, name + ".ptx"))
        o = torch.full(q.shape, float("nan"), device="cuda", dtype=torch.half)
        lse = torch.full(q.shape[:3], float("nan"), device="cuda", dtype=torch.float32)
        mod.run(name, q, k, v, out=[o, lse])
        torch.cuda.synchronize()
        mask_fn = causal if mask else None
        o16, _ = attention_ref(q, k, v, D ** -0.5, mask_fn, None, None)
        ref = ld("ref", "o")
        ref_err = max_err(o16, ref)
        bound = 2 * ref_err + 1e-5 + fp16acc_slack(max(N, D))
        emu_err = max_err(ld("out", "o"), ref)
        shape = f"B1 H{H}/{HKV} N{N}x{N} D{D}"
        rep.add(f"{name} interpreter (emulated)", shape, emu_err, ref_err, bound, "acc f16")
        rep.add(f"{name} GPU, same inputs", shape, max_err(o, ref), ref_err, min(bound, 2 * emu_err + 1e-4),
                "acc f16")


def mlp_cases(rep, kit, tmp, quick):
    Ts = [1, 17, 113, 128, 1000] + ([] if quick else [2049])
    g = torch.Generator(device="cuda").manual_seed(7)

    def rnd(*shape, scale=1.0):
        return ((torch.rand(*shape, device="cuda", generator=g) * 2 - 1) * scale).to(DT)

    def check(name, mod, block, inputs, outs, ref_fn, acc, kterms):
        o = [torch.full(s, float("nan"), device="cuda", dtype=DT) for s in outs]
        mod.run(block, *inputs, out=o)
        torch.cuda.synchronize()
        r64 = ref_fn([x.double() for x in inputs])
        r16 = ref_fn(list(inputs))
        for i, (got, a, b) in enumerate(zip(o, r64, r16)):
            ref_err = max_err(b, a)
            bound = 2 * ref_err + 1e-5 + (fp16acc_slack(kterms) * float(a.abs().max()) if acc == "f16" else 0)
            rep.add(f"{name} out{i}", f"{tuple(got.shape)}", max_err(got, a), ref_err, bound, f"acc {acc}")

    silu = torch.nn.functional.silu
    gelu = torch.nn.functional.gelu
    DIM, FF = 256, 512
    src = shrink_consts(open(os.path.join(ROOT, "examples", "swiglu_mlp.attn")).read(), {"DIM": DIM, "FF": FF})
    mod = compile_src(kit, tmp, "swiglu_small", src)
    for T in Ts:
        x, wg, wu, wd = rnd(T, DIM), rnd(DIM, FF, scale=DIM ** -0.5), rnd(DIM, FF, scale=DIM ** -0.5), \
            rnd(FF, DIM, scale=FF ** -0.5)
        check("swiglu_mlp", mod, "swiglu", [x, wg, wu, wd], [(T, DIM)],
              lambda a: [a[0] + (silu(a[0] @ a[1]) * (a[0] @ a[2])) @ a[3]], "f32", DIM)
    if ARCH == "sm_80":
        # a grid of 2 x 4 warps whose share of the 192 columns (48) does not
        # start a 64-column panel: fragment addresses made whole through the
        # swizzle (sm80.c frag_addr), not the lane's XOR a constant
        DIM, FF = 256, 384
        src = shrink_consts(open(os.path.join(ROOT, "examples", "swiglu_mlp.attn")).read(), {"DIM": DIM, "FF": FF})
        src += f"schedule swiglu for {ARCH} {{ tile(128, 192, 64); warps(8); }}\n"
        mod = compile_src(kit, tmp, "swiglu_share48", src)
        for T in (17, 300):
            x, wg, wu, wd = rnd(T, DIM), rnd(DIM, FF, scale=DIM ** -0.5), rnd(DIM, FF, scale=DIM ** -0.5), \
                rnd(FF, DIM, scale=FF ** -0.5)
            check("swiglu_mlp tile(128, 192, 64) warps(8)", mod, "swiglu", [x, wg, wu, wd], [(T, DIM)],
                  lambda a: [a[0] + (silu(a[0] @ a[1]) * (a[0] @ a[2])) @ a[3]], "f32", DIM)
    # odd widths: output pairs (columns 2t, 2t + 1) that start at an odd
    # element or end past the row, so the 16-bit stores' run-time fallback
    # (lower.c store_pair) writes them, not the 32-bit store
    DIM, FF = 131, 77
    src = shrink_consts(open(os.path.join(ROOT, "examples", "swiglu_mlp.attn")).read(), {"DIM": DIM, "FF": FF})
    mod = compile_src(kit, tmp, "swiglu_odd", src)
    for T in (1, 17, 130):
        x, wg, wu, wd = rnd(T, DIM), rnd(DIM, FF, scale=DIM ** -0.5), rnd(DIM, FF, scale=DIM ** -0.5), \
            rnd(FF, DIM, scale=FF ** -0.5)
        check("swiglu_mlp odd widths", mod, "swiglu", [x, wg, wu, wd], [(T, DIM)],
              lambda a: [a[0] + (silu(a[0] @ a[1]) * (a[0] @ a[2])) @ a[3]], "f32", DIM)
    # nn.Linear's [out, in] weights read in place (x @ transpose(w)): the
    # weights' tiles transposed as they load; odd widths too
    for DIM, FF in ((256, 512), (131, 77)):
        src = shrink_consts(open(os.path.join(ROOT, "examples", "swiglu_linear.attn")).read(), {"DIM": DIM, "FF": FF})
        mod = compile_src(kit, tmp, f"swiglu_linear_{DIM}", src)
        for T in (Ts if DIM == 256 else (1, 17, 130)):
            x, wg, wu, wd = rnd(T, DIM), rnd(FF, DIM, scale=DIM ** -0.5), rnd(FF, DIM, scale=DIM ** -0.5), \
                rnd(DIM, FF, scale=FF ** -0.5)
            check(f"swiglu_linear {DIM}x{FF}", mod, "swiglu_linear", [x, wg, wu, wd], [(T, DIM)],
                  lambda a: [a[0] + (silu(a[0] @ a[1].T) * (a[0] @ a[2].T)) @ a[3].T], "f32", DIM)
    HID, FF = 256, 384
    src = shrink_consts(open(os.path.join(ROOT, "examples", "geglu_bias_mlp.attn")).read(), {"HIDDEN": HID, "FF": FF})
    geglu_acc = "f16" if F16ACC else "f32"   # the example is FP16-ACC; bf16 accumulates in f32
    mod = compile_src(kit, tmp, "geglu_small", src.replace("acc f16", "acc " + geglu_acc))
    for T in Ts:
        x, wg, bg, wu, wd, bd = rnd(T, HID), rnd(HID, FF, scale=HID ** -0.5), rnd(FF), rnd(HID, FF, scale=HID ** -0.5), \
            rnd(FF, HID, scale=FF ** -0.5), rnd(HID)

        def ref(a):
            act = gelu(a[0] @ a[1] + a[2]) * (a[0] @ a[3])
            return [act @ a[4] + a[5], act]
        check("geglu_bias_mlp", mod, "geglu", [x, wg, bg, wu, wd, bd], [(T, HID), (T, FF)], ref, geglu_acc,
              max(HID, FF))
    DIM, FF = 256, 512
    src = shrink_consts(open(os.path.join(ROOT, "examples", "decoder_layer.attn")).read(),
                        {"DIM": DIM, "FF": FF, "HEADS": 4, "KV_HEADS": 2})
    mod = compile_src(kit, tmp, "decoder_small", src)
    for T in Ts[:4]:
        x, at, wo, nw = rnd(T, DIM), rnd(T, DIM), rnd(DIM, DIM, scale=DIM ** -0.5), rnd(DIM)
        wg, wu, wd = rnd(DIM, FF, scale=DIM ** -0.5), rnd(DIM, FF, scale=DIM ** -0.5), rnd(FF, DIM, scale=FF ** -0.5)

        def ref(a):
            h = a[0] + a[1] @ a[2]
            hn = h * torch.rsqrt((h.float() * h.float()).mean(-1, keepdim=True) + 1e-5).to(h.dtype) * a[3]
            return [h + (silu(hn @ a[4]) * (hn @ a[5])) @ a[6]]
        check("decoder_layer post_attn", mod, "post_attn", [x, at, wo, nw, wg, wu, wd], [(T, DIM)], ref, "f32", FF)
    for N in ([17, 1000] if quick else [17, 1000, 2049]):
        run_attention(rep, mod, "self_attn", "decoder_layer self_attn", 2, 4, 2, N, N, DIM // 4, "f32",
                      1 / math.sqrt(DIM // 4), causal, None, False)
    # rows narrower than a block's 128 threads (RMSNorm over 96): the last
    # column slot runs past the row
    DIM, FF = 96, 160
    consts = {"DIM": DIM, "FF": FF, "HEADS": 2, "KV_HEADS": 1}
    if ARCH == "sm_90a":   # the attention block's head dim a multiple of 64 (wgmma's swizzled panels)
        consts["HEAD_DIM"] = 64
    src = shrink_consts(open(os.path.join(ROOT, "examples", "decoder_layer.attn")).read(), consts)
    mod = compile_src(kit, tmp, "decoder_narrow", src)
    for T in (17, 113):
        x, at, wo, nw = rnd(T, DIM), rnd(T, DIM), rnd(DIM, DIM, scale=DIM ** -0.5), rnd(DIM)
        wg, wu, wd = rnd(DIM, FF, scale=DIM ** -0.5), rnd(DIM, FF, scale=DIM ** -0.5), rnd(FF, DIM, scale=FF ** -0.5)
        check("decoder_layer post_attn DIM=96", mod, "post_attn", [x, at, wo, nw, wg, wu, wd], [(T, DIM)], ref, "f32",
              FF)


# ---- compiling ------------------------------------------------------------------

def compile_src(kit, tmp, name, src):
    path = os.path.join(tmp, name + ".attn")
    with open(path, "w") as f:
        f.write(src)
    return compile_file(kit, tmp, path)


def compile_file(kit, tmp, path):
    out = os.path.join(tmp, os.path.basename(path).replace(".attn", ".ptx"))
    return attnc.compile(path, arch=ARCH, output=out)


def compile_example(kit, tmp, name):
    """An example as written (in bf16 runs: with its f16 tensors made bf16)."""
    path = os.path.join(ROOT, "examples", name + ".attn")
    if DT == torch.float16:
        return compile_file(kit, tmp, path)
    return compile_src(kit, tmp, name + "_bf16", shrink_consts(open(path).read(), {}))


def accs():
    """The accumulators to test: f16 needs f16 operands."""
    return ("f32", "f16") if F16ACC else ("f32",)


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--arch", default="sm_70", choices=["sm_70", "sm_80", "sm_90a"])
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--only", choices=["attention", "strided", "paged", "varlen", "mlp", "emulation", "sanitize"],
                    default=None)
    args = ap.parse_args()
    global ARCH, DT, DTN, F16ACC, REF_ON_CPU
    ARCH, DTN = args.arch, args.dtype
    DT = torch.float16 if DTN == "f16" else torch.bfloat16
    F16ACC = DT == torch.float16
    common.use_kit(args.kit)
    os.makedirs(args.out, exist_ok=True)
    tmp = f"/tmp/attnc-check-{ARCH}-{DTN}"
    os.makedirs(tmp, exist_ok=True)
    log = open(os.path.join(args.out, f"check-{ARCH}-{DTN}.log"), "w")
    rep = Report(log)
    t0 = time.time()
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, {ARCH} {DTN}", flush=True)
    if args.only in (None, "attention"):
        attention_cases(rep, args.kit, tmp, args.quick)
    if args.only in (None, "attention", "strided"):
        strided_cases(rep, args.kit, tmp)
    if args.only in (None, "paged"):
        paged_cases(rep, args.kit, tmp, args.quick)
    if args.only in (None, "varlen"):
        varlen_cases(rep, args.kit, tmp, args.quick)
    if args.only in (None, "mlp"):
        mlp_cases(rep, args.kit, tmp, args.quick)
    if args.only in (None, "emulation") and F16ACC:
        fp16acc_emulation_cases(rep, args.kit, tmp)
    if args.only in (None, "strided"):
        binding_errors(rep, tmp)
    if args.only == "sanitize":   # small cases for compute-sanitizer
        REF_ON_CPU = True
        name = "san_causal"
        acc = accs()[-1]
        mod = compile_src(args.kit, tmp, name, attention_src(name, 2, 1, 64, acc, "j <= i", None, False))
        run_attention(rep, mod, name, name, 1, 2, 1, 17, 17, 64, acc, 1 / 8, causal, None, False)
        for layout in ("bnhd", "padded"):   # strided views: every address a kernel forms from the strides
            run_attention(rep, mod, name, name, 1, 2, 1, 70, 70, 64, acc, 1 / 8, causal, None, False, layout=layout)
        mod = compile_src(args.kit, tmp, "san_cross", attention_src("san_cross", 2, 2, 128, "f32", None, None, True))
        run_attention(rep, mod, "san_cross", "san_cross", 1, 2, 2, 5, 70, 128, "f32", 128 ** -0.5, None, None, True)
        name = "san_paged"   # a paged cache: every address a kernel forms from the block table
        mod = compile_src(args.kit, tmp, name, paged_src(name, 8, 2, 64, 16, PAGED_MASKS["causal"][0]))
        for NQ in (1, 4, 40):
            run_paged(rep, mod, name, 3, 8, 2, NQ, 64, 16, 9, "causal", seed=NQ)
        if ARCH == "sm_90a":   # persistent blocks, more tiles (320) than blocks: the tile scheduler's ring turns
            name = "san_persistent"
            src = attention_src(name, 16, 16, 64, "f32", "j <= i", None, False) + \
                f"schedule {name} for {ARCH} {{ persistent(1); }}\n"
            mod = compile_src(args.kit, tmp, name, src)
            run_attention(rep, mod, name, name, 4, 16, 16, 600, 600, 64, "f32", 1 / 8, causal, None, False)
    bad = [r for r in rep.rows if not r[5]]
    summary = (f"\n{len(rep.rows)} checks, {len(bad)} failed, {time.time() - t0:.0f} s\n" +
               "\n".join(f"FAIL {r[0]} {r[1]}: err {r[2]:.3e} > bound {r[4]:.3e} {r[6]}" for r in bad))
    print(summary)
    log.write(summary + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
