#!/usr/bin/env python3
"""functional_check.py — attnc.attention (python/attnc/functional.py) on the
GPU, forward and backward, against float64 attention written here from
FlashAttention's definitions of its options.

    python3 bench/functional_check.py --kit KIT --out DIR [--arch sm_80] [--dtype bf16] [--cases decode]

--arch: the target attnc.attention compiles for (default: the device's own,
target_of); sm_70 and sm_80 PTX run on newer GPUs, so one Hopper checks all
three. Each case draws fresh random q, k, v (ragged lengths, Nq != Nk, GQA,
both layouts, head dims 64 and 128; every option, key_mask with a
left-padded sequence and FlexAttention-style score_mod and mask_mod
functions with captured tensors among them) and checks o, lse and dq, dk, dv on the
FlashAttention rule: err <= 2 x (3 x for gradients) the error of the same
attention in the tensors' precision (torch, f32 softmax) + 1e-5. The
caching allocator's free memory is filled with NaN before each call, so an
element the kernels leave unwritten shows. Then: bad arguments are refused
with AttncError naming them, a second call of a block compiles nothing, and
a CUDA graph captured around a call replays to the same numbers.
"""
import itertools
import os
import sys
import time
import zlib

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import gpu_check as gc  # noqa: E402
import attnc  # noqa: E402
from attnc import functional  # noqa: E402


def reference(q, k, v, causal, window, softcap, scale, slopes, key_mask, mods, dtype):
    """o, lse of [B, H, N, D] q and [B, Hkv, N, D] k, v: float64 (dtype) or
    the tensors' precision with an f32 softmax (dtype None), with
    FlashAttention's meanings (bottom-right aligned windows); key_mask [B,
    Nk] or None: keys where it is 0 hidden; mods: (score_mod, mask_mod),
    called as FlexAttention's reference does, on broadcast index tensors."""
    B, H, NQ, D = q.shape
    NK = k.shape[2]
    k = k.repeat_interleave(H // k.shape[1], dim=1)
    v = v.repeat_interleave(H // v.shape[1], dim=1)
    if dtype is None:
        s = (q @ k.transpose(-1, -2)).float()
    else:
        s = q.to(dtype) @ k.to(dtype).transpose(-1, -2)
    s = s * (scale if scale is not None else D ** -0.5)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(NQ, device=q.device).view(NQ, 1)
    j = torch.arange(NK, device=q.device).view(1, NK)
    diag = i + NK - NQ   # the key aligned with query i
    if slopes is not None:
        sl = slopes.view(1, H, 1, 1) if slopes.dim() == 1 else slopes.view(B, H, 1, 1)
        s = s - sl.to(s.dtype) * (diag - j).abs()
    keep = torch.ones(NQ, NK, dtype=torch.bool, device=q.device)
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0
    if left >= 0:
        keep &= j >= diag - left
    if right >= 0:
        keep &= j <= diag + right
    if key_mask is not None:
        keep = keep & (key_mask != 0).view(B, 1, 1, NK)
    bb, hh = (torch.arange(n, device=q.device).view(shape) for n, shape in ((B, (B, 1, 1, 1)), (H, (1, H, 1, 1))))
    ii, jj = i.view(1, 1, NQ, 1), j.view(1, 1, 1, NK)
    if mods[0] is not None:
        s = mods[0](s, bb, hh, ii, jj)
    if mods[1] is not None:
        keep = keep & mods[1](bb, hh, ii, jj)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    o = (p.to(q.dtype) @ v).float() if dtype is None else p @ v.to(dtype)
    dead = torch.isinf(lse) & (lse < 0)
    return o.masked_fill(dead.unsqueeze(-1), 0.0), lse


def poison_free_memory():
    """NaN into the caching allocator's free blocks: outputs allocated next
    start as NaN."""
    free = torch.cuda.mem_get_info()[0]
    n = min(1 << 28, free // 8) // 2
    x = torch.full((n,), float("nan"), device="cuda", dtype=torch.float16)
    del x


CASES = [   # name, B, H, Hkv, NQ, NK, D, Dv, options
    ("plain", 2, 4, 4, 200, 200, 64, 64, {}),
    ("causal cross", 2, 4, 2, 77, 301, 64, 64, {"causal": True}),
    ("causal long q", 1, 4, 1, 300, 129, 128, 128, {"causal": True}),
    ("window", 2, 4, 4, 333, 333, 64, 64, {"window": (48, 16)}),
    ("window left causal", 1, 8, 2, 250, 400, 128, 128, {"window": (100, -1), "causal": True}),
    ("softcap scale", 2, 4, 2, 190, 190, 64, 64, {"softcap": 20.0, "scale": 0.3}),
    ("alibi h causal", 2, 4, 4, 150, 150, 64, 64, {"alibi": "h", "causal": True}),
    ("alibi bh", 2, 4, 2, 90, 170, 128, 128, {"alibi": "bh"}),
    ("dv 64 of d 128", 1, 4, 2, 130, 130, 128, 64, {"causal": True}),
    ("key mask causal", 2, 8, 2, 180, 180, 64, 64, {"key_mask": True, "causal": True}),
    ("key mask window cross", 2, 4, 4, 70, 260, 128, 128, {"key_mask": True, "window": (90, 20)}),
    ("flex bias documents", 2, 4, 2, 200, 200, 64, 64, {"mods": "bias_documents"}),
    ("flex tanh where keep", 2, 4, 4, 150, 230, 128, 128, {"mods": "tanh_where_keep", "causal": True}),
    ("flex clamp per head", 1, 8, 2, 170, 170, 64, 64, {"mods": "clamp_per_head"}),
    # decode: few query rows over many keys, split over the keys where the
    # programs would not fill the GPU (tiling_attention.c's split_count)
    ("decode 32/8", 1, 32, 8, 1, 3001, 128, 128, {"causal": True}),
    ("decode 8/1 q4", 2, 8, 1, 4, 5000, 64, 64, {"causal": True}),
    ("decode 6/2 q16 window", 1, 6, 2, 16, 2500, 128, 128, {"window": (700, 0)}),
    ("decode one key", 3, 8, 2, 1, 1, 64, 64, {}),
    ("decode 16 q16 softcap", 1, 16, 8, 16, 4097, 64, 64, {"softcap": 30.0, "causal": True}),
    ("decode key mask alibi", 2, 8, 8, 3, 2000, 128, 128, {"key_mask": True, "alibi": "bh"}),
    # one query row under GQA: the group's heads packed into the tile's rows
    ("decode packed alibi 16/4", 2, 16, 4, 1, 1500, 64, 64, {"alibi": "h", "causal": True}),
    ("decode packed flex 8/2", 1, 8, 2, 1, 2000, 64, 64, {"mods": "clamp_per_head"}),
    ("decode packed 64/8 window", 3, 64, 8, 1, 777, 128, 128, {"window": (300, 0), "key_mask": True}),
    # a few rows a head packed (G·Nq rows): Q assembled before the key loop
    ("decode packed rows 6/2 q4 d64 window", 3, 6, 2, 4, 2500, 64, 64, {"window": (300, 0)}),
]


def make_mods(kind, B, H, NQ, NK, g):
    """(score_mod, mask_mod) as FlexAttention users write them, with the
    tensors they capture drawn fresh."""
    if kind == "bias_documents":   # a relative bias table and packed documents
        bias = torch.rand(H, NQ, NK, device="cuda", generator=g) - 0.5
        doc = torch.sort(torch.randint(0, 4, (B, max(NQ, NK)), device="cuda", generator=g), dim=1).values
        return (lambda score, b, h, q_idx, kv_idx: score + bias[h, q_idx, kv_idx],
                lambda b, h, q_idx, kv_idx: (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx))
    if kind == "tanh_where_keep":   # softcap by torch.tanh, a -inf where, a bool tensor read as the mask
        keep = torch.rand(B, NK, device="cuda", generator=g) > 0.15
        return (lambda score, b, h, q_idx, kv_idx: torch.where((q_idx + kv_idx) % 7 != 3,
                                                               15.0 * torch.tanh(score / 15.0), -float("inf")),
                lambda b, h, q_idx, kv_idx: keep[b, kv_idx])
    if kind == "clamp_per_head":   # a per-head temperature, clamped, and a banded mask by torch.abs
        temp = torch.rand(H, device="cuda", generator=g) + 0.5
        return (lambda score, b, h, q_idx, kv_idx: (score / temp[h]).clamp(min=-1.5, max=1.5) + torch.minimum(
                    q_idx, kv_idx) * 0.001,
                lambda b, h, q_idx, kv_idx: torch.abs(q_idx - kv_idx) <= 40)
    raise ValueError(kind)


def run_case(rep, name, B, H, HKV, NQ, NK, D, DV, opts, dtype, layout, grad):
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{name} {layout} {grad}".encode()))

    def rnd(*shape):
        return (torch.rand(*shape, device="cuda", generator=g) * 2 - 1).to(dtype)

    shape = (lambda b, h, n, d: (b, n, h, d)) if layout == "bnhd" else (lambda b, h, n, d: (b, h, n, d))
    q, k, v = rnd(*shape(B, H, NQ, D)), rnd(*shape(B, HKV, NK, D)), rnd(*shape(B, HKV, NK, DV))
    slopes = None
    if opts.get("alibi") == "h":
        slopes = torch.tensor([2.0 ** -(h + 1) for h in range(H)], device="cuda")
    elif opts.get("alibi") == "bh":
        slopes = torch.rand(B, H, device="cuda", generator=g) * 0.2
    key_mask = None
    if opts.get("key_mask"):   # the second sequence left-padded, a few holes in the first
        key_mask = torch.rand(B, NK, device="cuda", generator=g) > 0.1
        key_mask[1, :NK // 3] = False
    mods = make_mods(opts["mods"], B, H, NQ, NK, g) if "mods" in opts else (None, None)
    kw = {x: opts[x] for x in ("causal", "window", "softcap", "scale") if x in opts}
    for t in (q, k, v):
        t.requires_grad_(grad)
    poison_free_memory()
    o, lse = attnc.attention(q, k, v, alibi_slopes=slopes, key_mask=key_mask, score_mod=mods[0], mask_mod=mods[1],
                             layout=layout, return_lse=True, **kw)
    do = rnd(*o.shape)
    if grad:
        o.backward(do)
    as_bhnd = (lambda t: t.transpose(1, 2)) if layout == "bnhd" else (lambda t: t)
    ref_args = (opts.get("causal", False), opts.get("window"), opts.get("softcap"), opts.get("scale"), slopes,
                key_mask, mods)
    x64 = [as_bhnd(t.detach()).double().requires_grad_(grad) for t in (q, k, v)]
    xlo = [as_bhnd(t.detach()).clone().requires_grad_(grad) for t in (q, k, v)]
    o64, lse64 = reference(*x64, *ref_args, torch.float64)
    olo, lselo = reference(*xlo, *ref_args, None)
    tag = f"{name} {layout} {'fwd+bwd' if grad else 'fwd'}"
    shp = f"B{B} H{H}/{HKV} {NQ}x{NK} d{D}/{DV}"
    pt = gc.max_err(olo, o64)
    rep.add(f"o {tag}", shp, gc.max_err(as_bhnd(o.detach()), o64), pt, 2 * pt + 1e-5)
    pt = gc.max_err(lselo, lse64)   # max_err: -inf rows must match exactly
    rep.add(f"lse {tag}", shp, gc.max_err(lse, lse64), pt, 2 * pt + 1e-5)
    if not grad:
        return
    d = as_bhnd(do).double()
    (o64 * d).sum().backward()
    (olo.double() * d).sum().backward()
    for nm, x, a, b in zip(("dq", "dk", "dv"), (q, k, v), x64, xlo):
        pt = gc.max_err(b.grad, a.grad)
        rep.add(f"{nm} {tag}", shp, gc.max_err(as_bhnd(x.grad), a.grad), pt, 3 * pt + 1e-5)


PAGED = [   # name, B, H, Hkv, NQ, D, page size, max pages, options (flash_attn_with_kvcache's arguments)
    ("paged 32/8 causal", 4, 32, 8, 1, 128, 64, 20, {"causal": True}),
    ("paged 8/1 q4 window", 3, 8, 1, 4, 64, 16, 40, {"window": (300, 0)}),
    ("paged 6/2 q16 softcap alibi", 3, 6, 2, 16, 128, 256, 5, {"softcap": 30.0, "alibi": "h", "causal": True}),
]


def run_paged(rep, name, B, H, HKV, NQ, D, page, maxp, opts, dtype, layout):
    """attnc.attention over a paged cache (block_table, cache_seqlens)
    against reference() of each batch's own keys (its length's alignment),
    gathered in its table's order; lengths 0, 1 and all keys among them."""
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{name} {layout}".encode()))
    q = torch.randn(B, H, NQ, D, device="cuda", dtype=dtype, generator=g)
    kc, vc, table, lens = gc.paged_inputs(B, HKV, D, page, maxp, g)
    slopes = torch.tensor([2.0 ** -(h + 1) for h in range(H)], device="cuda") if opts.get("alibi") else None
    kw = {x: opts[x] for x in ("causal", "window", "softcap", "scale") if x in opts}
    poison_free_memory()
    with torch.no_grad():
        o, lse = attnc.attention(q.transpose(1, 2) if layout == "bnhd" else q, kc, vc, block_table=table,
                                 cache_seqlens=lens, alibi_slopes=slopes, layout=layout, return_lse=True, **kw)
    if layout == "bnhd":
        o = o.transpose(1, 2)
    shp = f"B{B} H{H}/{HKV} NQ{NQ} d{D} page {page}x{maxp}"
    keys, values = gc.gather_pages(kc, table), gc.gather_pages(vc, table)
    for b in range(B):
        L = int(lens[b])
        if L == 0:   # no key: o = 0, lse = -inf
            ok = bool((o[b] == 0).all()) and bool(torch.isneginf(lse[b]).all())
            rep.expect(f"{name} {layout} empty cache", ok, shp)
            continue
        k, v = keys[b:b + 1, :, :L], values[b:b + 1, :, :L]
        args = (opts.get("causal", False), opts.get("window"), opts.get("softcap"), opts.get("scale"), slopes, None,
                (None, None))
        o64, lse64 = reference(q[b:b + 1], k, v, *args, torch.float64)
        olo, lselo = reference(q[b:b + 1], k, v, *args, None)
        pt = gc.max_err(olo, o64)
        rep.add(f"o {name} {layout} b{b} L{L}", shp, gc.max_err(o[b:b + 1], o64), pt, 2 * pt + 1e-5)
        pt = gc.max_err(lselo, lse64)
        rep.add(f"lse {name} {layout} b{b} L{L}", shp, gc.max_err(lse[b:b + 1], lse64), pt, 2 * pt + 1e-5)


VARLEN = [   # name, query lengths, key lengths (None: the same offsets), H, Hkv, D, options (flash_attn_varlen_func's)
    ("varlen self causal", [300, 0, 1, 129, 1000, 77], None, 8, 2, 128, {"causal": True}),
    ("varlen self d64 window", [513, 64, 3, 0, 250], None, 6, 2, 64, {"window": (100, 0)}),
    ("varlen cross causal", [5, 200, 64, 1], [700, 150, 0, 33], 4, 4, 128, {"causal": True}),
    ("varlen self softcap alibi", [190, 2, 2048, 31], None, 4, 1, 64, {"softcap": 30.0, "alibi": "bh", "causal": True}),
    ("varlen self long", [4096, 1500, 2600], None, 16, 4, 128, {"causal": True}),
]


def run_varlen(rep, name, qlens, klens, H, HKV, D, opts, dtype):
    """attnc.attention over packed sequences (cu_seqlens, one set of offsets
    where klens is None) against reference() of each sequence's rows, the
    options aligned to its own lengths; rows of other sequences poisoned
    with NaN to start, so a store past a sequence shows. Then the gradients
    (the block's backward through autograd) of each sequence's rows of q,
    k and v against float64 autograd of its own attention, under the
    FlashAttention rule."""
    g = torch.Generator(device="cuda").manual_seed(zlib.crc32(name.encode()))
    same = klens is None
    klens = qlens if same else klens
    cu = [torch.tensor([0] + list(itertools.accumulate(x)), device="cuda", dtype=torch.int32) for x in (qlens, klens)]
    TQ, TK = int(cu[0][-1]), int(cu[1][-1])
    q = torch.randn(TQ, H, D, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(TK, HKV, D, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(TK, HKV, D, device="cuda", dtype=dtype, generator=g)
    B = len(qlens)
    slopes = torch.rand(B, H, device="cuda", generator=g) * 0.2 if opts.get("alibi") == "bh" else None
    kw = {x: opts[x] for x in ("causal", "window", "softcap", "scale") if x in opts}
    poison_free_memory()
    with torch.no_grad():
        o, lse = attnc.attention(q, k, v, cu_seqlens_q=cu[0], cu_seqlens_k=cu[0] if same else cu[1],
                                 alibi_slopes=slopes, return_lse=True, **kw)
    shp = f"H{H}/{HKV} d{D} lengths {qlens}" + ("" if same else f" keys {klens}")
    for b in range(B):
        q0, k0, L, M = int(cu[0][b]), int(cu[1][b]), qlens[b], klens[b]
        if L == 0:
            continue
        qb = q[q0:q0 + L].transpose(0, 1).unsqueeze(0)
        kb, vb = (t[k0:k0 + M].transpose(0, 1).unsqueeze(0) for t in (k, v))
        sb = slopes[b:b + 1] if slopes is not None else None
        args = (opts.get("causal", False), opts.get("window"), opts.get("softcap"), opts.get("scale"), sb, None,
                (None, None))
        o64, lse64 = reference(qb, kb, vb, *args, torch.float64)
        olo, lselo = reference(qb, kb, vb, *args, None)
        got_o = o[q0:q0 + L].transpose(0, 1).unsqueeze(0)
        got_l = lse[:, q0:q0 + L].unsqueeze(0)
        pt = gc.max_err(olo, o64)
        rep.add(f"o {name} s{b} {L}x{M}", shp[:28], gc.max_err(got_o, o64), pt, 2 * pt + 1e-5)
        pt = gc.max_err(lselo, lse64)
        rep.add(f"lse {name} s{b} {L}x{M}", shp[:28], gc.max_err(got_l, lse64), pt, 2 * pt + 1e-5)
    rep.expect(f"{name}: every row written", bool(torch.isfinite(o).all()) and not bool(torch.isnan(lse).any()), shp)
    xs = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    og = attnc.attention(*xs, cu_seqlens_q=cu[0], cu_seqlens_k=cu[0] if same else cu[1], alibi_slopes=slopes, **kw)
    do = torch.randn(og.shape, device="cuda", dtype=dtype, generator=g)
    og.backward(do)
    grads = [x.grad for x in xs]
    rep.expect(f"{name}: every gradient row written", all(bool(torch.isfinite(x).all()) for x in grads), shp)
    for b in range(B):
        q0, k0, L, M = int(cu[0][b]), int(cu[1][b]), qlens[b], klens[b]
        if L == 0 or M == 0:
            continue
        args = (opts.get("causal", False), opts.get("window"), opts.get("softcap"), opts.get("scale"),
                slopes[b:b + 1] if slopes is not None else None, None, (None, None))
        rows = [(q, q0, L), (k, k0, M), (v, k0, M)]
        x64 = [t[s:s + n].transpose(0, 1).unsqueeze(0).double().requires_grad_(True) for t, s, n in rows]
        xlo = [t[s:s + n].transpose(0, 1).unsqueeze(0).clone().requires_grad_(True) for t, s, n in rows]
        d = do[q0:q0 + L].transpose(0, 1).unsqueeze(0).double()
        (reference(*x64, *args, torch.float64)[0] * d).sum().backward()
        (reference(*xlo, *args, None)[0].double() * d).sum().backward()
        for nm, got, (t, s, n), a, lo in zip(("dq", "dk", "dv"), grads, rows, x64, xlo):
            pt = gc.max_err(lo.grad, a.grad)
            rep.add(f"{nm} {name} s{b} {L}x{M}", shp[:28], gc.max_err(got[s:s + n].transpose(0, 1).unsqueeze(0), a.grad),
                    pt, 3 * pt + 1e-5)


def refusals(rep, dtype):
    q = torch.randn(1, 4, 64, 64, device="cuda", dtype=dtype)
    k = torch.randn(1, 2, 64, 64, device="cuda", dtype=dtype)

    def expect(what, fn, needle):
        try:
            fn()
        except attnc.AttncError as e:
            rep.expect(f"refused: {what}", needle in str(e), str(e))
            return
        except Exception as e:  # noqa: BLE001 — anything else is the defect being looked for
            rep.expect(f"refused: {what}", False, f"{type(e).__name__}: {e}")
            return
        rep.expect(f"refused: {what}", False, "accepted")

    expect("f32 q", lambda: attnc.attention(q.float(), k, k), "q is torch.float32")
    expect("mixed dtypes", lambda: attnc.attention(q, k.float(), k), "k is torch.float32")
    k3 = torch.randn(1, 3, 64, 64, device="cuda", dtype=dtype)
    expect("3 heads of k", lambda: attnc.attention(q, k3, k3), "multiple")
    expect("cpu v", lambda: attnc.attention(q, k, k.cpu()), "v is on cpu")
    expect("3-d q", lambda: attnc.attention(q[0], k, k), "q must be a 4-dimensional")
    expect("head dims", lambda: attnc.attention(q, k[..., :32], k), "head dim")
    expect("window", lambda: attnc.attention(q, k, k, window=(3,)), "window must be")
    expect("slopes shape", lambda: attnc.attention(q, k, k, alibi_slopes=torch.ones(3, device="cuda")),
           "alibi_slopes must be")
    expect("layout", lambda: attnc.attention(q, k, k, layout="nhd"), "layout must be")
    expect("key mask shape", lambda: attnc.attention(q, k, k, key_mask=torch.ones(1, 63, dtype=torch.bool, device="cuda")),
           "key_mask must be")
    cpu_bias = torch.zeros(4, 64, 64)
    expect("captured tensor on the CPU", lambda: attnc.attention(
        q, k, k, score_mod=lambda s, b, h, i, j: s + cpu_bias[h, i, j]), "is on cpu")
    expect("score_mod and softcap", lambda: attnc.attention(
        q, k, k, softcap=5.0, score_mod=lambda s, b, h, i, j: s * 2), "score_mod cannot be combined")
    expect("untraceable score_mod", lambda: attnc.attention(
        q, k, k, score_mod=lambda s, b, h, i, j: torch.softmax(s, 0)), "torch.softmax")
    expect("float key mask", lambda: attnc.attention(q, k, k, key_mask=torch.ones(1, 64, device="cuda")),
           "key_mask must be")
    kc = torch.randn(4, 64, 2, 64, device="cuda", dtype=dtype)
    table = torch.zeros(1, 2, device="cuda", dtype=torch.int32)
    lens = torch.ones(1, device="cuda", dtype=torch.int32)
    expect("paged: no lengths", lambda: attnc.attention(q, kc, kc, block_table=table), "needs both")
    expect("paged: i64 table", lambda: attnc.attention(q, kc, kc, block_table=table.long(), cache_seqlens=lens),
           "block_table must be a torch.int32")
    expect("paged: lengths of another batch", lambda: attnc.attention(
        q, kc, kc, block_table=table, cache_seqlens=torch.ones(2, device="cuda", dtype=torch.int32)),
        "cache_seqlens must be")
    expect("paged: page size 48", lambda: attnc.attention(q, kc[:, :48], kc[:, :48], block_table=table,
                                                        cache_seqlens=lens), "power of two")
    expect("paged: key_mask", lambda: attnc.attention(q, kc, kc, block_table=table, cache_seqlens=lens,
                                                     key_mask=torch.ones(1, 64, device="cuda", dtype=torch.bool)),
           "key_mask cannot be combined")
    qg = q.detach().clone().requires_grad_(True)
    expect("paged: backward", lambda: attnc.attention(qg, kc, kc, block_table=table, cache_seqlens=lens),
           "no backward")
    qp, kp = torch.randn(70, 4, 64, device="cuda", dtype=dtype), torch.randn(90, 2, 64, device="cuda", dtype=dtype)
    cq = torch.tensor([0, 30, 70], device="cuda", dtype=torch.int32)
    ck = torch.tensor([0, 50, 90], device="cuda", dtype=torch.int32)
    expect("varlen: one offsets", lambda: attnc.attention(qp, kp, kp, cu_seqlens_q=cq), "need both")
    expect("varlen: i64 offsets", lambda: attnc.attention(qp, kp, kp, cu_seqlens_q=cq.long(), cu_seqlens_k=ck),
           "cu_seqlens_q must be a torch.int32")
    expect("varlen: offsets of two sizes", lambda: attnc.attention(qp, kp, kp, cu_seqlens_q=cq, cu_seqlens_k=ck[:2]),
           "both of one size")
    expect("varlen: 4-d q", lambda: attnc.attention(q, kp, kp, cu_seqlens_q=cq, cu_seqlens_k=ck),
           "3-dimensional")
    expect("varlen: key_mask", lambda: attnc.attention(qp, kp, kp, cu_seqlens_q=cq, cu_seqlens_k=ck,
                                                      key_mask=torch.ones(2, 90, device="cuda", dtype=torch.bool)),
           "key_mask cannot be combined")
    expect("varlen: bnhd", lambda: attnc.attention(qp, kp, kp, cu_seqlens_q=cq, cu_seqlens_k=ck, layout="bnhd"),
           "layout does not apply")


def cached_and_graph(rep, dtype):
    q = torch.randn(2, 8, 256, 64, device="cuda", dtype=dtype)
    k = torch.randn(2, 2, 256, 64, device="cuda", dtype=dtype)
    v = torch.randn(2, 2, 256, 64, device="cuda", dtype=dtype)
    attnc.attention(q, k, v, causal=True)
    n = len(functional._modules)
    t = time.perf_counter()
    o1 = attnc.attention(q, k, v, causal=True)
    ms = (time.perf_counter() - t) * 1e3
    rep.expect("second call compiles nothing", len(functional._modules) == n, f"{ms:.2f} ms")
    static_q, static_o = q.clone(), None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        attnc.attention(static_q, k, v, causal=True)   # warm on the capture stream
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            static_o = attnc.attention(static_q, k, v, causal=True)
    except Exception as e:  # noqa: BLE001
        rep.expect("CUDA graph capture", False, f"{type(e).__name__}: {e}")
        return
    q2 = torch.randn_like(q)
    static_q.copy_(q2)
    graph.replay()
    torch.cuda.synchronize()
    want = attnc.attention(q2, k, v, causal=True)
    rep.expect("CUDA graph replay", torch.equal(static_o, want) and not torch.equal(o1, want),
               f"max diff {(static_o.float() - want.float()).abs().max().item():.3g}")


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--arch", default=None, help="target to compile for (default: the device's)")
    ap.add_argument("--dtype", default="f16", choices=("f16", "bf16"))
    ap.add_argument("--cases", default="", help="only the cases whose name holds this text (and no refusals, cache "
                                                 "or graph checks)")
    args = ap.parse_args()
    common.use_kit(args.kit)
    common.use_arch(args.arch)
    arch = functional.target_of(torch.device("cuda"))
    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    gc.DT = dtype
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, f"functional-{arch}-{args.dtype}.log"), "w")
    rep = gc.Report(log)
    for case in [c for c in CASES if args.cases in c[0]]:
        for layout in ("bhnd", "bnhd"):
            for grad in (False, True):
                try:
                    run_case(rep, *case, dtype, layout, grad)
                except Exception as e:  # noqa: BLE001 — report and go on to the next case
                    rep.expect(f"{case[0]} {layout} grad={grad}", False, f"{type(e).__name__}: {e}")
    for case in [c for c in PAGED if args.cases in c[0]]:
        for layout in ("bhnd", "bnhd"):
            try:
                run_paged(rep, *case, dtype, layout)
            except Exception as e:  # noqa: BLE001
                rep.expect(f"{case[0]} {layout}", False, f"{type(e).__name__}: {e}")
    for case in [c for c in VARLEN if args.cases in c[0]]:
        try:
            run_varlen(rep, *case, dtype)
        except Exception as e:  # noqa: BLE001
            rep.expect(f"{case[0]}", False, f"{type(e).__name__}: {e}")
    if not args.cases:
        refusals(rep, dtype)
        cached_and_graph(rep, dtype)
    failed = sum(1 for row in rep.rows if not row[5])
    print(f"functional {arch} {args.dtype}: {len(rep.rows)} checks, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
