"""attnc.attention's blocks, checked without a GPU: for each set of options
the block that attnc.functional.block_source writes runs on attnc's CPU
interpreter (`attnc run --dump`), and its o and lse are compared with
attention computed here in float64 from the same inputs, with
FlashAttention's meaning of each option (bottom-right causal and windows,
softcap on the scaled scores, ALiBi −slope·|i + Nk − Nq − j| after it,
grouped-query heads). FlexAttention-style score_mod and mask_mod functions
are traced into the blocks' hooks (attnc.trace) and checked the same way,
the reference calling each function itself on every score; then
check_options' and the tracer's errors.

    python3 functional.py ATTNC SCRATCH
"""
import ast
import math
import os
import struct
import subprocess
import sys

from attnc import AttncError
from attnc.functional import block_source, check_options
from attnc.trace import trace


# score_mod(score, b, h, q_idx, kv_idx) and mask_mod(b, h, q_idx, kv_idx), as
# FlexAttention users write them, in plain Python arithmetic (the reference
# calls them on numbers; torch's functions are checked on the GPU)
def rel_pos(score, b, h, q_idx, kv_idx):
    return score * 0.5 - abs(q_idx - kv_idx) * 0.125 + (h % 2) * 0.25


def local_blocks(b, h, q_idx, kv_idx):
    return ((q_idx // 4) == (kv_idx // 4)) | ((kv_idx <= q_idx) & (h == 1))


def head_temperature(score, b, h, q_idx, kv_idx):
    return score / (1 + h) + (-1) * (q_idx % 3 - kv_idx // 2) * 0.0625 + (q_idx > kv_idx) * 0.5


def causal_top_left(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def read_npy(path):
    """(shape, flat list of floats) of a little-endian f2/f4 .npy file."""
    with open(path, "rb") as f:
        data = f.read()
    hlen = struct.unpack("<H", data[8:10])[0]
    header = ast.literal_eval(data[10:10 + hlen].decode())
    code = {"<f2": "e", "<f4": "f", "<i4": "i"}[header["descr"]]
    n = math.prod(header["shape"])
    return header["shape"], list(struct.unpack(f"<{n}{code}", data[10 + hlen:10 + hlen + n * struct.calcsize(code)]))


def interpret(attnc, scratch, stem, name, text, dims, seed, tensors):
    """Block `name` of `text` (written to scratch/STEM.attn) run on the
    interpreter at dims {NAME: value} with --seed, its tensors dumped: the
    source's path and {"in.x" / "out.x": flat values} of the names asked."""
    src, dump = os.path.join(scratch, f"{stem}.attn"), os.path.join(scratch, stem)
    os.makedirs(dump, exist_ok=True)
    with open(src, "w") as f:
        f.write(text)
    defines = [x for d, v in dims.items() for x in ("-D", f"{d}={v}")]
    seeded = ["--seed", str(seed)] if seed is not None else []
    subprocess.run([attnc, "run", src, *defines, *seeded, "--dump", dump], check=True, capture_output=True)
    return src, {t: read_npy(os.path.join(dump, f"{name}.{t}.npy"))[1] for t in tensors}


def reference(q, k, v, slopes, keep, B, H, Hk, NQ, NK, D, DV, window, softcap, scale, alibi, score_mod=None,
              mask_mod=None):
    """o [B, H, NQ, DV] and lse [B, H, NQ] in float64 (flat lists); keep
    [B, NK] or None: keys where it is 0 are hidden; score_mod and mask_mod
    called on each score."""
    scale = scale if scale is not None else 1 / math.sqrt(D)
    o, lse = [0.0] * (B * H * NQ * DV), [0.0] * (B * H * NQ)
    for b in range(B):
        for h in range(H):
            kh = h // (H // Hk)
            for i in range(NQ):
                qi = q[((b * H + h) * NQ + i) * D:][:D]
                scores = []
                for j in range(NK):
                    shift = i + NK - NQ
                    if window and ((window[0] >= 0 and j < shift - window[0]) or
                                   (window[1] >= 0 and j > shift + window[1])):
                        continue
                    if keep and keep[b * NK + j] == 0:
                        continue
                    if mask_mod and not mask_mod(b, h, i, j):
                        continue
                    kj = k[((b * Hk + kh) * NK + j) * D:][:D]
                    s = scale * sum(x * y for x, y in zip(qi, kj))
                    if softcap:
                        s = softcap * math.tanh(s / softcap)
                    if alibi:
                        slope = slopes[h] if alibi == "h" else slopes[b * H + h]
                        s -= slope * abs(shift - j)
                    if score_mod:
                        s = score_mod(s, b, h, i, j)
                    scores.append((j, s))
                row = (b * H + h) * NQ + i
                if not scores:
                    lse[row] = -math.inf
                    continue
                m = max(s for _, s in scores)
                total = sum(math.exp(s - m) for _, s in scores)
                lse[row] = m + math.log(total)
                for j, s in scores:
                    p = math.exp(s - m) / total
                    vj = v[((b * Hk + kh) * NK + j) * DV:][:DV]
                    for c in range(DV):
                        o[row * DV + c] += p * vj[c]
    return o, lse


CASES = [
    # H, Hk, D, DV, NQ, NK, options
    (2, 2, 16, 16, 9, 9, {}),
    (4, 2, 16, 32, 7, 13, {"causal": True}),                         # GQA, bottom-right, Dv != D
    (2, 1, 16, 16, 13, 6, {"causal": True}),                         # Nq > Nk: the first rows see nothing
    (2, 2, 32, 32, 11, 11, {"window": (3, 2)}),
    (2, 2, 16, 16, 10, 12, {"causal": True, "window": (4, 7)}),       # causal keeps right at 0
    (2, 2, 16, 16, 8, 8, {"window": (-1, 1)}),
    (2, 2, 16, 16, 9, 9, {"softcap": 2.5, "scale": 0.5}),
    (4, 4, 16, 16, 6, 10, {"alibi": "h", "causal": True}),
    (2, 1, 16, 16, 5, 7, {"alibi": "bh", "softcap": 5.0, "window": (2, -1)}),
    (4, 2, 16, 16, 7, 11, {"key_mask": True, "causal": True}),        # padding keys (keep 0..4: a fifth hidden)
    (2, 2, 16, 16, 6, 9, {"key_mask": True, "alibi": "h"}),
    (2, 2, 16, 16, 9, 9, {"score_mod": rel_pos}),
    (2, 2, 16, 16, 10, 8, {"mask_mod": local_blocks}),
    (4, 2, 16, 16, 7, 7, {"score_mod": head_temperature, "mask_mod": causal_top_left, "window": (3, -1)}),
]


# a paged KV cache (flash_attn_with_kvcache's block_table and cache_seqlens):
# H, Hk, D, page size, NQ, max pages, options
PAGED_CASES = [
    (4, 2, 16, 16, 3, 4, {"causal": True}),
    (2, 1, 32, 32, 1, 3, {}),
    (4, 1, 16, 16, 5, 5, {"window": (6, 0), "softcap": 3.0}),
    (4, 4, 16, 16, 2, 3, {"alibi": "bh", "causal": True}),
]


def paged_case(attnc, scratch, n, H, Hk, D, page, NQ, maxp, opts):
    """A paged block on the interpreter (random block tables of the cache's
    pages, lengths with 0, 1 and all keys among them) against reference()
    of each batch's keys gathered in the table's order."""
    B, pages = 3, 2 * maxp + 1
    alibi = opts.pop("alibi", None)
    window, softcap, scale = check_options(**opts)
    name, text = block_source(H, Hk, D, D, "f16", window, softcap, scale, alibi, page_size=page)
    _, got = interpret(attnc, scratch, f"paged{n}", name, text, {"B": B, "NQ": NQ, "PAGES": pages, "MAX_PAGES": maxp},
                       n + 1, ("in.q", "in.k", "in.v", "in.block_table", "in.cache_seqlens", "out.o", "out.lse") +
                       (("in.slopes",) if alibi else ()))
    slopes = got["in.slopes"] if alibi else None
    lens = [int(x) for x in got["in.cache_seqlens"]]
    err_o = err_l = 0.0
    for b in range(B):
        L = lens[b]
        rows = [int(got["in.block_table"][b * maxp + j // page]) * page + j % page for j in range(L)]
        def kv(x):   # [Hk, L, D] of the cache [pages, page, Hk, D]
            return [x[(r * Hk + h) * D + c] for h in range(Hk) for r in rows for c in range(D)]
        qb = got["in.q"][b * H * NQ * D:(b + 1) * H * NQ * D]
        sb = slopes[b * H:(b + 1) * H] if alibi == "bh" else slopes
        o, lse = reference(qb, kv(got["in.k"]), kv(got["in.v"]), sb, None, 1, H, Hk, NQ, L, D, D, window, softcap,
                           scale, alibi)
        go = got["out.o"][b * H * NQ * D:(b + 1) * H * NQ * D]
        gl = got["out.lse"][b * H * NQ:(b + 1) * H * NQ]
        err_o = max([err_o] + [abs(a - r) / (1e-2 + abs(r)) for a, r in zip(go, o)])
        err_l = max([err_l] + [0.0 if a == r else abs(a - r) for a, r in zip(gl, lse)])
    ok = err_o < 2e-2 and err_l < 1e-3
    print(f"{'ok  ' if ok else 'FAIL'} paged {n} page {page} {opts}{' alibi ' + alibi if alibi else ''}: "
          f"lengths {lens}, o {err_o:.1e}, lse {err_l:.1e}")


# packed sequences (flash_attn_varlen_func's cu_seqlens): H, Hk, D, Dv, one or
# two sets of offsets, total query and key rows, sequences, options
PACKED_CASES = [
    (4, 2, 16, 16, "one", 23, 23, 4, {"causal": True}),
    (2, 1, 16, 32, "two", 15, 26, 3, {"causal": True}),              # Nq != Nk a sequence: bottom-right
    (4, 4, 16, 16, "two", 17, 21, 4, {"window": (3, 0), "softcap": 3.0}),
    (2, 2, 32, 32, "one", 19, 19, 3, {"alibi": "bh"}),
]


def packed_case(attnc, scratch, n, H, Hk, D, DV, sequences, TQ, TK, S, opts):
    """A packed block on the interpreter (random offsets from 0 to all the
    rows, empty sequences among them) against reference() of each
    sequence's rows, aligned to its own lengths."""
    alibi = opts.pop("alibi", None)
    window, softcap, scale = check_options(**opts)
    name, text = block_source(H, Hk, D, DV, "f16", window, softcap, scale, alibi, sequences=sequences)
    cu = ("cu_seqlens", "cu_seqlens") if sequences == "one" else ("cu_seqlens_q", "cu_seqlens_k")
    _, got = interpret(attnc, scratch, f"packed{n}", name, text, {"TQ": TQ, "TK": TK, "S": S, "B": S - 1}, n + 1,
                       ("in.q", "in.k", "in.v", "out.o", "out.lse") + tuple(f"in.{c}" for c in cu) +
                       (("in.slopes",) if alibi else ()))
    slopes = got["in.slopes"] if alibi else None
    cq, ck = ([int(x) for x in got[f"in.{c}"]] for c in cu)
    err_o = err_l = 0.0
    for b in range(S - 1):
        def rows(x, start, n, w, heads):   # [heads, n, w] of the packed [T, heads, w]
            return [x[((start + r) * heads + h) * w + c] for h in range(heads) for r in range(n) for c in range(w)]
        NQ, NK = cq[b + 1] - cq[b], ck[b + 1] - ck[b]
        sb = slopes[b * H:(b + 1) * H] if alibi == "bh" else slopes
        o, lse = reference(rows(got["in.q"], cq[b], NQ, D, H), rows(got["in.k"], ck[b], NK, D, Hk),
                           rows(got["in.v"], ck[b], NK, DV, Hk), sb, None, 1, H, Hk, NQ, NK, D, DV, window, softcap,
                           scale, alibi)
        go = rows(got["out.o"], cq[b], NQ, DV, H)
        gl = [got["out.lse"][h * TQ + cq[b] + i] for h in range(H) for i in range(NQ)]
        err_o = max([err_o] + [abs(a - r) / (1e-2 + abs(r)) for a, r in zip(go, o)])
        err_l = max([err_l] + [0.0 if a == r else abs(a - r) for a, r in zip(gl, lse)])
    ok = err_o < 2e-2 and err_l < 1e-3 and cq[0] == 0 and cq[-1] == TQ
    print(f"{'ok  ' if ok else 'FAIL'} packed {n} {sequences} {opts}{' alibi ' + alibi if alibi else ''}: "
          f"offsets {cq} {ck}, o {err_o:.1e}, lse {err_l:.1e}")


def main():
    attnc, scratch = sys.argv[1], sys.argv[2]
    for n, (H, Hk, D, page, NQ, maxp, opts) in enumerate(PAGED_CASES):
        paged_case(attnc, scratch, n, H, Hk, D, page, NQ, maxp, dict(opts))
    for n, (H, Hk, D, DV, sequences, TQ, TK, S, opts) in enumerate(PACKED_CASES):
        packed_case(attnc, scratch, n, H, Hk, D, DV, sequences, TQ, TK, S, dict(opts))
    B = 2
    for n, (H, Hk, D, DV, NQ, NK, opts) in enumerate(CASES):
        alibi, key_mask = opts.pop("alibi", None), opts.pop("key_mask", False)
        score_mod, mask_mod = opts.pop("score_mod", None), opts.pop("mask_mod", None)
        window, softcap, scale = check_options(**opts)
        score, mask, _ = trace(score_mod, mask_mod)
        name, text = block_source(H, Hk, D, DV, "f16", window, softcap, scale, alibi, key_mask, score, mask)
        src, got = interpret(attnc, scratch, f"case{n}", name, text, {"B": B, "NQ": NQ, "NK": NK}, None,
                             ("in.q", "in.k", "in.v", "out.o", "out.lse") + (("in.slopes",) if alibi else ()) +
                             (("in.keep",) if key_mask else ()))
        slopes = got["in.slopes"] if alibi else None
        keep = got["in.keep"] if key_mask else None
        o, lse = reference(got["in.q"], got["in.k"], got["in.v"], slopes, keep, B, H, Hk, NQ, NK, D, DV, window,
                           softcap, scale, alibi, score_mod, mask_mod)
        err_o = max(abs(a - b) / (1e-2 + abs(b)) for a, b in zip(got["out.o"], o))
        err_l = max(0.0 if a == b else abs(a - b) for a, b in zip(got["out.lse"], lse))
        empty = sum(1 for x in lse if x == -math.inf)
        ok = err_o < 2e-2 and err_l < 1e-3
        hidden = f" keys hidden {keep.count(0)}" if key_mask else ""
        hidden += "".join(f" {f.__name__}" for f in (score_mod, mask_mod) if f)
        print(f"{'ok  ' if ok else 'FAIL'} case {n} {opts}{' alibi ' + alibi if alibi else ''}{hidden}: "
              f"o {err_o:.1e}, lse {err_l:.1e}, rows seeing no key {empty}")
        if score_mod or mask_mod:   # the traced hooks' derived backward, against central differences
            r = subprocess.run([attnc, "run", src, "-backward", "--check", "-D", f"B={B}", "-D", f"NQ={NQ}",
                                "-D", f"NK={NK}"], capture_output=True, text=True)
            fd = [x for x in r.stdout.splitlines() if "central differences" in x]
            print(f"{'ok  ' if r.returncode == 0 and fd else 'FAIL'} case {n} backward: "
                  f"{fd[0].split(':', 1)[0].strip() if fd else r.stdout + r.stderr}")
    for bad in ({"layout": "nhd"}, {"window": (3,)}, {"window": (-2, 0)}, {"window": (1.5, 0)},
                {"softcap": -1.0}, {"scale": float("nan")}, {"softcap": True}):
        try:
            check_options(**bad)
            print(f"accepted {bad}")
        except AttncError as e:
            print(f"refused {bad}: {e}")
    for what, score_mod, mask_mod in (
            ("branch", lambda s, b, h, q, kv: s if q > kv else 0.0, None),
            ("infinity", lambda s, b, h, q, kv: s - float("inf"), None),
            ("mask gives a number", None, lambda b, h, q, kv: q - kv),
            ("score gives a condition", lambda s, b, h, q, kv: q > kv, None),
            ("& of numbers", None, lambda b, h, q, kv: (q - kv) & 1)):
        try:
            trace(score_mod, mask_mod)
            print(f"accepted {what}")
        except AttncError as e:
            print(f"refused {what}: {e}")


if __name__ == "__main__":
    main()
