#!/usr/bin/env python3
"""train_llama.py — a transformers Llama's (or Mistral's) prefill and training
step with attnc's attention (attnc.register_transformers(): transformers'
AttentionInterface) against the same model with SDPA, on the GPU.

    python3 bench/train_llama.py --kit KIT --out DIR [--model mistral] [--arch sm_80] [--steps 20]

The model is built from a LlamaConfig (or a MistralConfig, sliding window
1024) with random weights (nothing is downloaded): 8 layers, hidden 2048,
16 query heads and 4 kv heads of head dim 128, MLP 5632, vocabulary 32000,
bf16, causal; batch 2 of 4096 tokens (the 2026-12-03 measurement's shape).
Both runs start from the same weights and the same tokens:

- agreement: one forward and backward each, with SDPA's flash backend (the
  reference; Mistral: its memory-efficient backend, as the window comes as
  a mask) and a second SDPA backend (cuDNN; Mistral: math); the loss and
  every parameter gradient's relative L2 difference from the reference
  are printed; attnc's largest must be within 2x the second backend's +
  1e-3, and its loss likewise (bf16 training: PyTorch's own kernels
  differ that much);
- time: `--steps` prefills (a forward with no gradient) and training steps
  (forward, backward, AdamW step) each, after 3 warm-up ones, the median
  in ms, timed with CUDA events.

attnc's attention takes q [B, 16, N, 128] and k, v [B, 4, N, 128] as the
model makes them — transposed views of [B, N, H, D] projections — with no
copy (libattnrt takes strides, doc/runtime.md), and gives o and the
gradients back in the same layout. Writes MODEL.json.
"""
import json
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import attnc  # noqa: E402

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB = 8, 2048, 16, 4, 128, 5632, 32000
BATCH, SEQ = 2, 4096
WINDOW = 1024   # --model mistral: its sliding window


def build(impl, kind, state=None):
    import transformers
    Config, Model = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                     "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM)}[kind]
    extra = {"sliding_window": WINDOW} if kind == "mistral" else {}
    cfg = Config(hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=LAYERS,
                 num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                 vocab_size=VOCAB, max_position_embeddings=SEQ, attn_implementation=impl, **extra)
    torch.manual_seed(0)
    model = Model(cfg).to(device="cuda", dtype=torch.bfloat16)
    if state is not None:
        model.load_state_dict(state)
    return model


def grads(model, ids):
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.item(), {n: p.grad.float() for n, p in model.named_parameters()}


def median_ms(fn, steps):
    """fn()'s median time in ms over `steps` runs after 3 warm-up ones, timed
    with CUDA events."""
    times = []
    for i in range(steps + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def training_step(model, ids):
    """A function that runs one training step: forward, backward, AdamW step."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def step_ms(model, ids, steps):
    """A training step's median time."""
    return median_ms(training_step(model, ids), steps)


def prefill_ms(model, ids, steps):
    """A forward of the batch with no gradient (a prefill)."""
    with torch.no_grad():
        return median_ms(lambda: model(input_ids=ids), steps)


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--arch", default=None, help="the target attnc.attention compiles for (default: the GPU's)")
    ap.add_argument("--model", default="llama", choices=("llama", "mistral"))
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    common.use_kit(args.kit)
    os.makedirs(args.out, exist_ok=True)
    common.use_arch(args.arch)
    attnc.register_transformers()

    from torch.nn.attention import SDPBackend, sdpa_kernel
    kind = args.model
    sdpa = build("sdpa", kind)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    ref, alt = ((SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION) if kind == "llama" else
                (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH))   # flash takes no mask
    with sdpa_kernel(ref):
        loss_sdpa, g_sdpa = grads(sdpa, ids)
    with sdpa_kernel(alt):   # how far PyTorch's own kernels differ
        loss_alt, g_alt = grads(sdpa, ids)
    state = {k: v.clone() for k, v in sdpa.state_dict().items()}
    ours = build("attnc", kind, state)
    loss_ours, g_ours = grads(ours, ids)

    def largest(g_other):
        rels = {n: ((g_other[n] - g).norm() / g.norm().clamp_min(1e-30)).item() for n, g in g_sdpa.items()}
        n = max(rels, key=rels.get)
        return rels[n], n
    worst, worst_name = largest(g_ours)
    spread, spread_name = largest(g_alt)
    del g_sdpa, g_ours, g_alt
    rn, an = ref.name.lower(), alt.name.lower()
    print(f"loss: attnc {loss_ours:.5f}, SDPA {rn} {loss_sdpa:.5f}, SDPA {an} {loss_alt:.5f}", flush=True)
    print(f"largest relative gradient difference from SDPA {rn}: attnc {worst:.2e} ({worst_name}); "
          f"SDPA {an} {spread:.2e} ({spread_name})", flush=True)

    prefill = {"attnc": prefill_ms(ours, ids, args.steps), "sdpa": prefill_ms(sdpa, ids, args.steps)}
    ms = {"attnc": step_ms(ours, ids, args.steps)}
    del ours
    ms["sdpa"] = step_ms(sdpa, ids, args.steps)
    ok = abs(loss_ours - loss_sdpa) <= 2 * abs(loss_alt - loss_sdpa) + 1e-3 and worst <= 2 * spread + 1e-3
    print(f"prefill (median of {args.steps}): attnc {prefill['attnc']:.1f} ms, SDPA {prefill['sdpa']:.1f} ms "
          f"({prefill['attnc'] / prefill['sdpa']:.3f}x SDPA's time)")
    print(f"training step (median of {args.steps}): attnc {ms['attnc']:.1f} ms, SDPA {ms['sdpa']:.1f} ms "
          f"({ms['attnc'] / ms['sdpa']:.3f}x SDPA's time)")
    print("agreement: " + ("ok" if ok else "FAILED"))
    with open(os.path.join(args.out, f"{kind}.json"), "w") as f:
        json.dump({"loss": {"attnc": loss_ours, f"sdpa_{rn}": loss_sdpa, f"sdpa_{an}": loss_alt},
                   "max_rel_grad_diff": {"attnc": worst, f"sdpa_{an}": spread}, "worst_param": worst_name, "step_ms": ms, "prefill_ms": prefill,
                   "model": kind, "arch": args.arch or "the GPU's",
                   "shape": {"layers": LAYERS, "hidden": HIDDEN, "heads": HEADS, "kv_heads": KV_HEADS,
                             "head_dim": HEAD_DIM, "batch": BATCH, "seq": SEQ,
                             "sliding_window": WINDOW if kind == "mistral" else None}}, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
