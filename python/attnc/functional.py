"""functional.py — attnc.attention: attention on PyTorch tensors without a
.attn file, as flash_attn_func and F.scaled_dot_product_attention are called.

    o = attnc.attention(q, k, v, causal=True)                  # [B, H, N, D]
    o = attnc.attention(q, k, v, layout="bnhd", window=(256, 0), softcap=30.0)
    o, lse = attnc.attention(q, k, v, alibi_slopes=slopes, return_lse=True)
    o = attnc.attention(q, k, v, causal=True, key_mask=attention_mask)  # [B, Nk], 0: a padding key
    o = attnc.attention(q, k, v, score_mod=lambda s, b, h, q_idx, kv_idx: s + bias[h, q_idx, kv_idx])

The call writes the attention block its arguments describe (block_source),
compiles it for the GPU the tensors are on (sm_90a on Hopper, sm_80 on
Ampere, Ada and later, sm_70 on Volta) through attnc.compile and its on-disk
cache, keeps the loaded module for the process, and runs it; with autograd
recording and a tensor that requires grad, the block is compiled with its
backward and the call is differentiable in q, k and v (autograd.py).

The options mean what FlashAttention's do (flash_attn_func), so a model
written for it gets the same numbers: the causal mask and windows align the
bottom-right corners when Nq != Nk (query i sees keys up to i + Nk - Nq),
window = (left, right) keeps keys in [i + Nk - Nq - left, i + Nk - Nq +
right] with -1 for no bound, softcap applies c·tanh(s / c) to the scaled
scores, and ALiBi adds −slope·|i + Nk − Nq − j| after it. key_mask [B, Nk]
(bool or integer, as transformers' attention_mask) hides the keys where it
is 0 (padding) from every query; a query that sees no key gets o = 0 and
lse = −inf, as FlashAttention's do. score_mod(score, b, h, q_idx, kv_idx)
and mask_mod(b, h, q_idx, kv_idx) are FlexAttention's: Python functions
traced into the block's hooks (trace.py), the tensors they capture passed
as side inputs; mask_mod combines with the other masks (all must keep a
score), score_mod replaces softcap and ALiBi.

A paged KV cache, as flash_attn_with_kvcache takes it: k and v are the
caches [pages, page_size, Hkv, D] (page_size a power of two from 16 to
256), block_table int32 [B, max_pages] names each sequence's pages in
order and cache_seqlens int32 [B] its length; the options then align to
each sequence's own length (query i of Nq sees keys up to i +
cache_seqlens[b] − Nq). It has no backward, and no key_mask (the lengths
say which keys are there):

    o = attnc.attention(q, k_cache, v_cache, block_table=table, cache_seqlens=lens, causal=True)

Packed sequences of different lengths, as flash_attn_varlen_func takes
them: q [total_q, H, D], k and v [total_k, Hkv, D] hold the batch's
sequences end to end, cu_seqlens_q and cu_seqlens_k int32 [B + 1] their
offsets (sequence b is rows cu_seqlens_q[b] to cu_seqlens_q[b + 1] of q);
o is [total_q, H, Dv] and lse f32 [H, total_q]. The options align to each
sequence's own lengths; passing one tensor as both offsets (self-attention)
makes the causal mask plain j <= i. Differentiable in q, k and v (rows of
no sequence get a gradient of 0). No key_mask (the offsets say which keys
there are) and no max_seqlen: the kernels find each sequence's tiles from
the offsets:

    o = attnc.attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, causal=True)
"""
import math

_LAYOUTS = ("bhnd", "bnhd")
_modules = {}   # (source, arch, backward) -> (module, differentiable function or None)


def _error(msg):
    from . import AttncError
    return AttncError(msg)


def check_options(causal=False, window=None, softcap=None, scale=None, layout="bhnd"):
    """The options as block_source takes them, or AttncError naming the
    one that is wrong: window (left, right) as two ints (-1: no bound),
    None for no window; causal as window (left, 0)."""
    if layout not in _LAYOUTS:
        raise _error(f"layout must be 'bhnd' ([B, H, N, D]) or 'bnhd' ([B, N, H, D]), not {layout!r}")
    if window is not None:
        if (not isinstance(window, (tuple, list)) or len(window) != 2 or
                not all(isinstance(w, int) and not isinstance(w, bool) and w >= -1 for w in window)):
            raise _error(f"window must be (left, right), two ints of -1 (no bound) or more, not {window!r}")
        window = (window[0], 0 if causal else window[1])
    elif causal:
        window = (-1, 0)
    if window == (-1, -1):
        window = None
    for name, x in (("softcap", softcap), ("scale", scale)):
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0):
            raise _error(f"{name} must be a positive number or None, not {x!r}")
    return window, softcap, scale


def block_source(heads, kv_heads, head_dim, v_head_dim, dtype, window=None, softcap=None, scale=None,
                 alibi=None, key_mask=False, score_mod=None, mask_mod=None, captured=(), page_size=None,
                 sequences=None):
    """The attention block (its name, its .attn text) of these head counts,
    head dims, dtype ("f16" or "bf16") and options (check_options's);
    alibi: None, "h" (slopes [H]) or "bh" (slopes [B, H]); key_mask: a side
    input keep: i32 [B, NK] after the slopes, keys where it is 0 hidden;
    score_mod, mask_mod: hook expressions over (s, b, h, i, j) as
    trace.trace gives them, reading the side inputs `captured` ((name, type)
    pairs, after keep). Batch and sequence lengths stay symbolic (B, NQ,
    NK), so one block serves every shape of a model. page_size: k and v are
    a paged cache [PAGES, page_size, Hkv, D] read through the side inputs
    block_table: i32[B, MAX_PAGES] and cache_seqlens: i32[B] (first), whose
    lengths take NK's place in the options' alignment. sequences: "one"
    or "two": q [TQ, H, D], k and v [TK, Hkv, D] packed sequences with
    the offsets cu_seqlens: i32[S] (one, self-attention) or cu_seqlens_q
    and cu_seqlens_k (two) first among the side inputs, each sequence's
    lengths in the alignment; o [TQ, H, Dv], lse [H, TQ]."""
    side, nq = "", "NQ"
    if page_size:
        side = ", block_table: i32[B, MAX_PAGES], cache_seqlens: i32[B]"
    elif sequences:
        cu = ("cu_seqlens", "cu_seqlens") if sequences == "one" else ("cu_seqlens_q", "cu_seqlens_k")
        side = "".join(f", {c}: i32[S]" for c in dict.fromkeys(cu))
    side += {"h": ", slopes: f32[%d]" % heads, "bh": ", slopes: f32[B, %d]" % heads}.get(alibi, "")
    if key_mask:
        side += ", keep: i32[B, NK]"
    side += "".join(f", {name}: {ty}" for name, ty in captured)
    if page_size:
        kv = lambda d: f"[PAGES, {page_size}, {kv_heads}, {d}]"  # noqa: E731
    elif sequences:
        kv = lambda d: f"[TK, {kv_heads}, {d}]"  # noqa: E731
    else:
        kv = lambda d: f"[B, {kv_heads}, NK, {d}]"  # noqa: E731
    nk = "cache_seqlens[b]" if page_size else "NK"
    if sequences:   # each sequence's lengths; one set of offsets: as many keys as queries
        nq, nk = (f"({c}[b + 1] - {c}[b])" for c in cu)
    diag = "i" if sequences == "one" else f"i + {nk} - {nq}"   # the key aligned with query i
    if sequences:
        qo = (f"[TQ, {heads}, {head_dim}]", f"[TQ, {heads}, {v_head_dim}]", f"[{heads}, TQ]")
    else:
        qo = (f"[B, {heads}, NQ, {head_dim}]", f"[B, {heads}, NQ, {v_head_dim}]", f"[B, {heads}, NQ]")
    lines = [f"attention attn(q: {dtype}{qo[0]}, k: {dtype}{kv(head_dim)}, v: {dtype}{kv(v_head_dim)}{side})",
             f"    -> (o: {dtype}{qo[1]}, lse: f32{qo[2]}) {{",
             "  acc f32;"]
    if page_size:
        lines.append("  pages(block_table, cache_seqlens);")
    elif sequences:
        lines.append(f"  sequences({cu[0]}, {cu[1]});")
    if scale is not None:
        lines.append(f"  scale {float(scale)!r};")
    score = "s"
    if softcap is not None:
        c = repr(float(softcap))
        score = f"{c} * tanh(s / {c})"
    if alibi:
        score += " - slopes[%s] * abs(%s - j)" % ("h" if alibi == "h" else "b, h", diag)
    if score_mod is not None:
        score = score_mod
    if score != "s":
        lines.append(f"  score(s, b, h, i, j) = {score};")
    keep = []
    if window is not None:
        left, right = window
        keep = ([f"j >= {diag} - {left}"] if left >= 0 else []) + ([f"j <= {diag} + {right}"] if right >= 0 else [])
    if key_mask:
        keep.append("keep[b, j] != 0")
    if mask_mod is not None:
        keep.append(mask_mod)
    if keep:
        lines.append(f"  mask(b, h, i, j) = {' && '.join(keep)};")
    lines.append("}")
    return "attn", "\n".join(lines) + "\n"


def target_of(device):
    """attnc's target for a CUDA device: sm_90a on compute capability 9.0
    (its wgmma and TMA kernels run there only), sm_80 on 8.x and later (PTX
    the driver compiles for newer GPUs), sm_70 on 7.x."""
    import torch
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) == (9, 0):
        return "sm_90a"
    if major >= 8:
        return "sm_80"
    if major == 7:
        return "sm_70"
    raise _error(f"attnc needs a GPU of compute capability 7.0 or later; {torch.cuda.get_device_name(device)} "
                 f"is {major}.{minor}")


def _check_key_mask(key_mask, q, k):
    """key_mask as the block's keep: i32 [B, Nk] (a small copy), or None."""
    import torch
    if key_mask is None:
        return None
    want = (q.shape[0], k.shape[2])
    if (not isinstance(key_mask, torch.Tensor) or tuple(key_mask.shape) != want or key_mask.device != q.device or
            key_mask.is_floating_point() or key_mask.is_complex()):
        raise _error(f"key_mask must be a bool or integer tensor of shape {want} (batch, keys) on {q.device}, not "
                     f"{getattr(key_mask, 'dtype', type(key_mask).__name__)} "
                     f"{tuple(getattr(key_mask, 'shape', ()))}")
    return (key_mask != 0).to(torch.int32)


def _trace_mods(score_mod, mask_mod, softcap, alibi, q):
    """score_mod's and mask_mod's hook text and their captured tensors,
    converted to what the block declares (f32, i32) and checked to be on
    q's device."""
    import torch
    from .trace import trace
    if score_mod is None and mask_mod is None:
        return None, None, []
    if score_mod is not None and (softcap is not None or alibi is not None):
        raise _error("score_mod cannot be combined with softcap or alibi_slopes; write them in the score_mod")
    for name, fn, n in (("score_mod", score_mod, 5), ("mask_mod", mask_mod, 4)):
        if fn is not None and not callable(fn):
            raise _error(f"{name} must be a function of {n} arguments, not {type(fn).__name__}")
    score, mask, captured = trace(score_mod, mask_mod)
    out = []
    for name, t, ty in captured:
        if t.device != q.device:
            raise _error(f"a tensor of shape {tuple(t.shape)} that score_mod or mask_mod reads is on {t.device}, "
                         f"not {q.device}")
        out.append((name, t.float() if t.is_floating_point() else t.to(torch.int32), ty))
    return score, mask, out


def _check_paged(q, k, v, block_table, cache_seqlens):
    """k and v as a paged cache [pages, page_size, Hkv, D], the table int32
    [B, max_pages] and the lengths int32 [B] on q's device (their values are
    the caller's: attnc's kernels never read outside the cache)."""
    import torch
    if block_table is None or cache_seqlens is None:
        raise _error("a paged KV cache needs both block_table and cache_seqlens")
    if k.shape[:3] != v.shape[:3]:
        raise _error(f"k_cache {tuple(k.shape)} and v_cache {tuple(v.shape)} must agree but in the head dim")
    page = k.shape[1]
    if page < 16 or page > 256 or page & (page - 1):
        raise _error(f"the page size (k_cache's dimension 1) must be a power of two from 16 to 256, not {page}")
    B = q.shape[0]
    for name, t, shape in (("block_table", block_table, f"({B}, max_pages)"), ("cache_seqlens", cache_seqlens, f"({B},)")):
        rank = 2 if name == "block_table" else 1
        if (not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != rank or t.shape[0] != B or
                t.device != q.device):
            raise _error(f"{name} must be a torch.int32 tensor of shape {shape} on {q.device}, not "
                         f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")


def _check_sequences(q, k, v, cu_seqlens_q, cu_seqlens_k, layout):
    """q [total_q, H, D], k and v [total_k, Hkv, D] of one dtype on one
    device, and their offsets int32 [B + 1] of one size there (their values
    are the caller's, as FlashAttention's are): "one" where both offsets
    are one tensor, else "two"."""
    import torch
    if cu_seqlens_q is None or cu_seqlens_k is None:
        raise _error("packed sequences need both cu_seqlens_q and cu_seqlens_k (one tensor for both in "
                     "self-attention)")
    if layout != "bhnd":
        raise _error("packed sequences are [total, heads, head_dim]: layout does not apply to them")
    _check_qkv(q, k, v, 3, "[total, heads, head_dim] with cu_seqlens")
    if k.shape[:2] != v.shape[:2]:
        raise _error(f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree but in the head dim")
    if q.shape[2] != k.shape[2]:
        raise _error(f"q's head dim {q.shape[2]} differs from k's {k.shape[2]}")
    if q.shape[1] % k.shape[1]:
        raise _error(f"q's {q.shape[1]} heads are not a multiple of k's and v's {k.shape[1]} (grouped-query attention)")
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if (not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 1 or t.shape[0] < 2 or
                t.shape[0] != cu_seqlens_q.shape[0] or t.device != q.device):
            raise _error(f"{name} must be a torch.int32 tensor of shape (batch + 1,) on {q.device}, both of one "
                         f"size, not {getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
    return "one" if cu_seqlens_q is cu_seqlens_k else "two"


def _check_qkv(q, k, v, rank, shape):
    """q, k and v tensors of `rank` dimensions (`shape` says how they are
    laid out), all f16 or all bf16, on one CUDA device."""
    import torch
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != rank:
            raise _error(f"{name} must be a {rank}-dimensional tensor {shape}, not "
                         f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        if t.dtype not in (torch.float16, torch.bfloat16) or t.dtype != q.dtype:
            raise _error(f"{name} is {t.dtype}; q, k and v must all be torch.float16 or all torch.bfloat16")
        if not t.is_cuda or t.device != q.device:
            raise _error(f"{name} is on {t.device}; q, k and v must be on one CUDA device")


def _check_tensors(q, k, v, layout, alibi_slopes, paged=False):
    _check_qkv(q, k, v, 4, f"({layout})")
    if not paged and k.shape[:3] != v.shape[:3]:
        raise _error(f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree but in the head dim")
    if not paged and q.shape[0] != k.shape[0]:
        raise _error(f"q has batch {q.shape[0]} and k batch {k.shape[0]}")
    H, Hk = q.shape[1], k.shape[2 if paged else 1]   # (after the bnhd views)
    if q.shape[3] != k.shape[3]:
        raise _error(f"q's head dim {q.shape[3]} differs from k's {k.shape[3]}")
    if H % Hk:
        raise _error(f"q's {H} heads are not a multiple of k's and v's {Hk} (grouped-query attention)")
    return _check_slopes(alibi_slopes, H, q.shape[0], q.device)


def _check_slopes(alibi_slopes, H, B, device):
    """alibi_slopes f32 [H] or [B, H]: "h", "bh", or None without."""
    import torch
    if alibi_slopes is None:
        return None
    if (not isinstance(alibi_slopes, torch.Tensor) or alibi_slopes.dtype != torch.float32 or
            tuple(alibi_slopes.shape) not in ((H,), (B, H)) or alibi_slopes.device != device):
        raise _error(f"alibi_slopes must be a torch.float32 tensor of shape ({H},) or ({B}, {H}) on "
                     f"{device}, not {getattr(alibi_slopes, 'dtype', type(alibi_slopes).__name__)} "
                     f"{tuple(getattr(alibi_slopes, 'shape', ()))}")
    return "h" if alibi_slopes.dim() == 1 else "bh"


def attention(q, k, v, *, causal=False, window=None, softcap=None, scale=None, alibi_slopes=None,
              key_mask=None, score_mod=None, mask_mod=None, block_table=None, cache_seqlens=None,
              cu_seqlens_q=None, cu_seqlens_k=None, layout="bhnd", return_lse=False):
    """Attention of q over k and v: o (and lse, f32 [B, H, Nq], with
    return_lse). layout "bhnd": q [B, H, Nq, D], k and v [B, Hkv, Nk, D] /
    [.., Dv], as F.scaled_dot_product_attention; "bnhd": [B, N, H, D], as
    flash_attn_func, o then [B, Nq, H, Dv]. Strided views are read in
    place. With block_table and cache_seqlens, k and v are a paged cache
    [pages, page_size, Hkv, D] whatever the layout (flash_attn_with_kvcache's).
    With cu_seqlens_q and cu_seqlens_k, q, k and v are packed sequences
    (flash_attn_varlen_func's). See the module's text for the options."""
    window, softcap, scale = check_options(causal, window, softcap, scale, layout)
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        return _attention_packed(q, k, v, window, softcap, scale, alibi_slopes, key_mask, score_mod, mask_mod,
                                 block_table, cu_seqlens_q, cu_seqlens_k, layout, return_lse)
    import torch
    paged = block_table is not None or cache_seqlens is not None
    if layout == "bnhd":
        q = q.transpose(1, 2) if isinstance(q, torch.Tensor) and q.dim() == 4 else q
        if not paged:
            k, v = (t.transpose(1, 2) if isinstance(t, torch.Tensor) and t.dim() == 4 else t for t in (k, v))
    alibi = _check_tensors(q, k, v, layout, alibi_slopes, paged)
    if paged:
        _check_paged(q, k, v, block_table, cache_seqlens)
        if key_mask is not None:
            raise _error("key_mask cannot be combined with a paged KV cache: cache_seqlens says which keys there are")
    keep = _check_key_mask(key_mask, q, k)
    score, mask, captured = _trace_mods(score_mod, mask_mod, softcap, alibi, q)
    dtype = "f16" if q.dtype == torch.float16 else "bf16"
    name, text = block_source(q.shape[1], k.shape[2 if paged else 1], q.shape[3], v.shape[3], dtype, window, softcap,
                              scale, alibi, keep is not None, score, mask, [(n, ty) for n, _, ty in captured],
                              page_size=k.shape[1] if paged else None)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if grad and paged:
        raise _error("a paged KV cache has no backward (decoding reads the cache); call under torch.no_grad()")
    mod, fn = _module(text, name, q.device, grad)
    side = [t for t in (block_table, cache_seqlens, alibi_slopes, keep) if t is not None] + [t for _, t, _ in captured]
    if fn is not None:
        o, lse = fn.op(q, k, v, side)
    else:   # o in q's memory layout, as the differentiable op makes it: bnhd's o is then dense
        o = torch.empty_like(q) if q.shape[3] == v.shape[3] else q.new_empty(q.shape[:3] + v.shape[3:])
        lse = q.new_empty(q.shape[:3], dtype=torch.float32)
        mod.run(name, q, k, v, *side, out=[o, lse])
    if layout == "bnhd":
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


def _module(text, name, device, grad):
    """The block's module (compiled once a process, and through the disk
    cache) and, with grad, its differentiable function."""
    from . import compile_text
    arch = target_of(device)
    entry = _modules.get((text, arch, grad))
    if entry is None:
        mod = compile_text(text, arch=arch, backward=grad)
        entry = _modules[(text, arch, grad)] = (mod, mod.autograd(name) if grad else None)
    return entry


def _attention_packed(q, k, v, window, softcap, scale, alibi_slopes, key_mask, score_mod, mask_mod, block_table,
                      cu_seqlens_q, cu_seqlens_k, layout, return_lse):
    """attention() of packed sequences (flash_attn_varlen_func's q, k, v
    and offsets): o [total_q, H, Dv], lse [H, total_q]."""
    import torch
    if block_table is not None:
        raise _error("a paged KV cache (block_table) cannot be combined with packed sequences (cu_seqlens)")
    if key_mask is not None:
        raise _error("key_mask cannot be combined with packed sequences: cu_seqlens says which keys there are")
    sequences = _check_sequences(q, k, v, cu_seqlens_q, cu_seqlens_k, layout)
    alibi = _check_slopes(alibi_slopes, q.shape[1], cu_seqlens_q.shape[0] - 1, q.device)
    score, mask, captured = _trace_mods(score_mod, mask_mod, softcap, alibi, q)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    dtype = "f16" if q.dtype == torch.float16 else "bf16"
    name, text = block_source(q.shape[1], k.shape[1], q.shape[2], v.shape[2], dtype, window, softcap, scale, alibi,
                              False, score, mask, [(n, ty) for n, _, ty in captured], sequences=sequences)
    mod, fn = _module(text, name, q.device, grad)
    offsets = [cu_seqlens_q] if sequences == "one" else [cu_seqlens_q, cu_seqlens_k]
    side = offsets + [t for t in (alibi_slopes,) if t is not None] + [t for _, t, _ in captured]
    if fn is not None:
        o, lse = fn.op(q, k, v, side)
    else:
        o = torch.empty_like(q) if q.shape[2] == v.shape[2] else q.new_empty(q.shape[:2] + v.shape[2:])
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
        mod.run(name, q, k, v, *side, out=[o, lse])
    return (o, lse) if return_lse else o
