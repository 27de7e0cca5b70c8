#!/usr/bin/env python3
"""train_llama.py — a transformers Llama's training step with attnc's
attention (registered through transformers' AttentionInterface) against
the same model with SDPA, on the GPU.

    python3 bench/train_llama.py --kit KIT --out DIR [--arch sm_90a] [--steps 20]

The model is built from a LlamaConfig with random weights (nothing is
downloaded): 8 layers, hidden 2048, 16 query heads and 4 kv heads of head
dim 128, MLP 5632, vocabulary 32000, bf16, causal; batch 2 of 4096 tokens
(the 2026-12-03 measurement's shape). Both runs start from the same
weights and the same tokens:

- agreement: one forward and backward each, with SDPA's flash backend
  (the reference), SDPA's cuDNN backend and attnc; the loss and every
  parameter gradient's relative L2 difference from the reference are
  printed; attnc's largest must be within 2x cuDNN's + 1e-3, and its
  loss likewise (bf16 training: PyTorch's own kernels differ that much);
- time: `--steps` training steps each (forward, backward, AdamW step),
  after 3 warm-up steps, the median step in ms, timed with CUDA events.

attnc's attention takes q [B, 16, N, 128] and k, v [B, 4, N, 128] as the
model makes them — transposed views of [B, N, H, D] projections — with no
copy (libattnrt takes strides, doc/runtime.md), and gives o and the
gradients back in the same layout. Writes llama.json.
"""
import json
import os
import statistics
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (python/ on the path)
import attnc  # noqa: E402

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB = 8, 2048, 16, 4, 128, 5632, 32000
BATCH, SEQ = 2, 4096


def attnc_attention_fn(arch):
    """transformers' attention function signature, backed by an attnc block
    (causal GQA) compiled with its backward."""
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "llama_attn.attn")
    with open(path, "w") as f:
        f.write(f"attention llama_attn(q: bf16[B, {HEADS}, N, {HEAD_DIM}], k: bf16[B, {KV_HEADS}, N, {HEAD_DIM}], "
                f"v: bf16[B, {KV_HEADS}, N, {HEAD_DIM}]) -> (o: bf16[B, {HEADS}, N, {HEAD_DIM}]) {{\n"
                f"  mask(b, h, i, j) = j <= i;\n}}\n")
    attn = attnc.compile(path, arch=arch, backward=True).autograd("llama_attn")

    def forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        if scaling is not None and abs(scaling - HEAD_DIM ** -0.5) > 1e-6:
            raise ValueError(f"this block scales by 1/sqrt({HEAD_DIM}), not {scaling}")
        o = attn(query, key, value)   # strided views as the model made them: no copies
        return o.transpose(1, 2), None   # [B, N, H, D] (contiguous: o has query's layout), as sdpa returns

    return forward


def build(impl, state=None):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                      vocab_size=VOCAB, max_position_embeddings=SEQ, attn_implementation=impl)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
    if state is not None:
        model.load_state_dict(state)
    return model


def grads(model, ids):
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.item(), {n: p.grad.float() for n, p in model.named_parameters()}


def step_ms(model, ids, steps):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    times = []
    for i in range(steps + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    ap = common.kit_parser(__doc__)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    common.use_kit(args.kit)
    os.makedirs(args.out, exist_ok=True)
    from transformers import AttentionInterface
    AttentionInterface.register("attnc", attnc_attention_fn(args.arch))
    try:   # the block is causal itself and the batch has no padding: no mask to build (as for flash_attention_2)
        from transformers import AttentionMaskInterface
        AttentionMaskInterface.register("attnc", lambda *a, **k: None)
    except ImportError:
        pass

    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = build("sdpa")
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        loss_sdpa, g_sdpa = grads(sdpa, ids)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):   # how far PyTorch's own kernels differ
        loss_alt, g_alt = grads(sdpa, ids)
    state = {k: v.clone() for k, v in sdpa.state_dict().items()}
    ours = build("attnc", state)
    loss_ours, g_ours = grads(ours, ids)

    def largest(g_other):
        rels = {n: ((g_other[n] - g).norm() / g.norm().clamp_min(1e-30)).item() for n, g in g_sdpa.items()}
        n = max(rels, key=rels.get)
        return rels[n], n
    worst, worst_name = largest(g_ours)
    ref, ref_name = largest(g_alt)
    del g_sdpa, g_ours, g_alt
    print(f"loss: attnc {loss_ours:.5f}, SDPA flash {loss_sdpa:.5f}, SDPA cuDNN {loss_alt:.5f}", flush=True)
    print(f"largest relative gradient difference from SDPA flash: attnc {worst:.2e} ({worst_name}); "
          f"SDPA cuDNN {ref:.2e} ({ref_name})", flush=True)

    ms = {"attnc": step_ms(ours, ids, args.steps)}
    del ours
    ms["sdpa"] = step_ms(sdpa, ids, args.steps)
    ok = abs(loss_ours - loss_sdpa) <= 2 * abs(loss_alt - loss_sdpa) + 1e-3 and worst <= 2 * ref + 1e-3
    print(f"training step (median of {args.steps}): attnc {ms['attnc']:.1f} ms, SDPA {ms['sdpa']:.1f} ms "
          f"({ms['attnc'] / ms['sdpa']:.3f}x SDPA's time)")
    print("agreement: " + ("ok" if ok else "FAILED"))
    with open(os.path.join(args.out, "llama.json"), "w") as f:
        json.dump({"loss": {"attnc": loss_ours, "sdpa_flash": loss_sdpa, "sdpa_cudnn": loss_alt},
                   "max_rel_grad_diff": {"attnc": worst, "sdpa_cudnn": ref}, "worst_param": worst_name, "step_ms": ms, "arch": args.arch,
                   "shape": {"layers": LAYERS, "hidden": HIDDEN, "heads": HEADS, "kv_heads": KV_HEADS,
                             "head_dim": HEAD_DIM, "batch": BATCH, "seq": SEQ}}, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
