#!/usr/bin/env python3
"""transformers_check.py — attnc registered with transformers
(attnc.register_transformers()) in Llama- and Mistral-style models built
from configs (random weights, nothing downloaded), against the same models
with SDPA, on the GPU.

    python3 bench/transformers_check.py --kit KIT --out DIR [--arch sm_80] [--dtype f16]

Each model: 2 layers, hidden 512, 8 query heads and 2 kv heads of head dim
64 (GQA), bf16 by default; Mistral's sliding window 48, so the window cuts
into a 201-token batch. Two batches of 2 × 201 tokens: one with no padding
and one with the second sequence left-padded by 37 tokens
(attention_mask 0 there, labels -100 there and at the first real token,
which the last padding position would predict), as a tokenizer pads for batched
generation. One forward and backward each with attnc, SDPA (the reference)
and eager attention (how far transformers' own implementations differ):
the logits at real tokens, the loss and every parameter gradient, as the
largest relative L2 difference from SDPA; attnc's must be within 2x
eager's + 1e-3. With padding, four decoding steps through the KV cache
(one-token queries against the cache: bottom-right causal, padding keys
hidden) are held to the same rule. Refused: attention dropout in training,
packed sequences (one row whose position_ids restart).
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import attnc  # noqa: E402

N, PAD, WINDOW = 201, 37, 48


def build(kind, impl, dtype, state=None, **extra):
    import transformers
    Config, Model = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                     "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM)}[kind]
    if kind == "mistral":
        extra.setdefault("sliding_window", WINDOW)
    cfg = Config(hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
                 num_key_value_heads=2, head_dim=64, vocab_size=1000, max_position_embeddings=1024,
                 attn_implementation=impl, **extra)
    torch.manual_seed(0)
    model = Model(cfg).to(device="cuda", dtype=dtype)
    if state is not None:
        model.load_state_dict(state)
    return model


def run(model, ids, mask, labels):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    real = mask.bool()
    return out.logits.detach()[real].float(), out.loss.item(), {n: p.grad.float() for n, p in model.named_parameters()}


def decode_logits(model, ids, mask, tok):
    """The logits of feeding tok [B, T] one token at a time after the
    prompt, through the model's KV cache."""
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, use_cache=True)
        cache, logits = out.past_key_values, []
        for t in range(tok.shape[1]):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = model(input_ids=tok[:, t:t + 1], attention_mask=mask, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logits.append(out.logits[:, -1].float())
    return torch.stack(logits)


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def compare(kind, dtype, padded, lines):
    g = torch.Generator(device="cuda").manual_seed(7)
    ids = torch.randint(0, 1000, (2, N), device="cuda", generator=g)
    mask = torch.ones(2, N, dtype=torch.long, device="cuda")
    if padded:
        mask[1, :PAD] = 0
    labels = ids.masked_fill(mask == 0, -100)
    if padded:   # the last padding position predicts the first token: implementations differ there (a query
        labels[1, PAD] = -100   # that sees no key is 0 in attnc and SDPA, the mean of v in eager), so it is left out
    sdpa = build(kind, "sdpa", dtype)
    state = {k: v.clone() for k, v in sdpa.state_dict().items()}
    ref = run(sdpa, ids, mask, labels)
    alt = run(build(kind, "eager", dtype, state), ids, mask, labels)
    ours_model = build(kind, "attnc", dtype, state)
    ours = run(ours_model, ids, mask, labels)
    ok = True
    tag = f"{kind} {'left-padded' if padded else 'no padding'}"
    for what, x, y, z in (("logits", ours[0], alt[0], ref[0]),
                          ("loss", torch.tensor(ours[1]), torch.tensor(alt[1]), torch.tensor(ref[1]))):
        e, s = rel(x, z), rel(y, z)
        good = e <= 2 * s + 1e-3
        ok &= good
        lines.append(f"{'ok  ' if good else 'FAIL'} {tag} {what}: attnc {e:.2e}, eager {s:.2e}")
    worst = max(ours[2], key=lambda n: rel(ours[2][n], ref[2][n]))
    e, s = rel(ours[2][worst], ref[2][worst]), max(rel(alt[2][n], ref[2][n]) for n in ref[2])
    good = e <= 2 * s + 1e-3
    ok &= good
    lines.append(f"{'ok  ' if good else 'FAIL'} {tag} gradients: attnc {e:.2e} ({worst}), eager {s:.2e}")
    if padded:   # decoding with the KV cache: a one-token query against every earlier key
        tok = torch.randint(0, 1000, (2, 4), device="cuda", generator=g)
        x, y, z = (decode_logits(m, ids, mask, tok) for m in (ours_model, build(kind, "eager", dtype, state), sdpa))
        e, s = rel(x, z), rel(y, z)
        good = e <= 2 * s + 1e-3
        ok &= good
        lines.append(f"{'ok  ' if good else 'FAIL'} {tag} 4 decoding steps' logits: attnc {e:.2e}, eager {s:.2e}")
    return ok


def refusals(dtype, lines):
    ids = torch.randint(0, 1000, (1, 64), device="cuda")
    packed = torch.cat([torch.arange(20), torch.arange(44)]).view(1, 64).to("cuda")   # two sequences in one row
    ok = True
    for what, model, kwargs, needle in (
            ("dropout in training", build("llama", "attnc", dtype, attention_dropout=0.1).train(), {}, "dropout"),
            ("packed sequences", build("llama", "attnc", dtype), {"position_ids": packed}, "packed")):
        try:
            model(input_ids=ids, labels=ids, **kwargs)
            lines.append(f"FAIL {what} accepted")
            ok = False
        except attnc.AttncError as e:
            good = needle in str(e)
            ok &= good
            lines.append(f"{'ok  ' if good else 'FAIL'} refused {what}: {e}")
    return ok


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--arch", default=None, help="the target attnc.attention compiles for (default: the GPU's)")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "f16"))
    args = ap.parse_args()
    common.use_kit(args.kit)
    common.use_arch(args.arch)
    attnc.register_transformers()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    lines, ok = [], True
    for kind in ("llama", "mistral"):
        for padded in (False, True):
            try:
                ok &= compare(kind, dtype, padded, lines)
            except Exception as e:  # noqa: BLE001 — report and go on
                lines.append(f"FAIL {kind} padded={padded}: {type(e).__name__}: {e}")
                ok = False
    ok &= refusals(dtype, lines)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"transformers-{args.arch or 'gpu'}-{args.dtype}.log"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"transformers: {len(lines)} checks, {sum(1 for x in lines if x.startswith('FAIL'))} failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
