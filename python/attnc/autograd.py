"""autograd.py — an attention block as a differentiable PyTorch op.

    mod = attnc.compile("mha.attn", backward=True)    # attnc -backward
    attn = mod.autograd("mha")                         # q, k, v (and side inputs) -> o
    o = attn(q, k, v)
    o.float().sum().backward()                         # runs mha.backward

Each block becomes two torch.library custom ops, `attnc::NAME_N` (the
forward: o and lse) and `attnc::NAME_N_backward` (dq, dk, dv), each with a
fake (meta) implementation that gives the output shapes, so torch.compile
graphs can hold them; the forward is registered with autograd: it saves q,
k, v, the side inputs, o and lse, and its backward runs the compiled
backward block on the current stream. The side inputs (ALiBi slopes, a
document's ids) get no gradient; lse is not differentiable. q, k, v and the
incoming gradient may be strided views (doc/runtime.md's rules), read with
no copy; o and dq, dk, dv take the memory layout of q, k and v where those
are dense (torch.empty_like), so that a model that made q as [B, N, H, D]
and transposed it gets o and dq back in that layout, ready to reshape.
A block of packed sequences (sequences(cu_q, cu_k): q [Tq, H, D], lse
[H, Tq]) takes its offsets as side inputs; the rows of q, k and v in no
sequence (past the last offset) get a gradient of 0.
"""
import itertools

_count = itertools.count()


def make_function(module, block):
    import torch

    blocks = module.blocks
    if block not in blocks:
        raise ValueError(f"no block '{block}' in {module.path}")
    if block + ".backward" not in blocks:
        raise ValueError(f"block '{block}' has no backward in {module.path}: compile it with backward=True "
                         "(attnc -backward)")
    ins, outs = module.signature(block)
    if len(outs) != 2 or len(ins) < 3:
        raise ValueError(f"block '{block}' is not an attention block with o and lse")
    name = f"{block}_{next(_count)}"
    packed = len(outs[1][2]) == 2   # packed sequences: lse [H, Tq]

    def outputs_like(q, v):
        """o in q's memory layout (empty_like keeps a dense view's strides:
        q made [B, N, H, D] and transposed gives o the same, whose transpose
        back is contiguous), and lse."""
        o = torch.empty_like(q) if q.shape[-1] == v.shape[-1] else q.new_empty(q.shape[:-1] + v.shape[-1:])
        lse_shape = (q.shape[1], q.shape[0]) if packed else q.shape[:-1]
        return o, q.new_empty(lse_shape, dtype=torch.float32)

    def gradients_like(q, k, v):
        """dq, dk, dv, each in its input's layout (as outputs_like); of
        packed sequences zero to start: the block leaves rows of no
        sequence unwritten."""
        make = torch.zeros_like if packed else torch.empty_like
        return [make(t) for t in (q, k, v)]

    @torch.library.custom_op(f"attnc::{name}", mutates_args=())
    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                side: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        o, lse = outputs_like(q, v)
        module.run(block, q, k, v, *side, out=[o, lse])
        return o, lse

    @forward.register_fake
    def _(q, k, v, side):
        return outputs_like(q, v)

    @torch.library.custom_op(f"attnc::{name}_backward", mutates_args=())
    def backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, side: list[torch.Tensor],
                    o: torch.Tensor, lse: torch.Tensor,
                    do: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        grads = gradients_like(q, k, v)
        module.run(block + ".backward", q, k, v, *side, o, lse, do, out=grads)
        return tuple(grads)

    @backward_op.register_fake
    def _(q, k, v, side, o, lse, do):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup_context(ctx, inputs, output):
        q, k, v, side = inputs
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse, *side)
        ctx.mark_non_differentiable(lse)

    def backward(ctx, do, dlse):
        q, k, v, o, lse, *side = ctx.saved_tensors
        dq, dk, dv = backward_op(q, k, v, list(side), o, lse, do.to(o.dtype))
        return dq, dk, dv, [None] * len(side)

    forward.register_autograd(backward, setup_context=setup_context)

    def attention(q, k, v, *side):
        """o of the block (differentiable in q, k and v)."""
        return forward(q, k, v, list(side))[0]

    attention.op = forward
    attention.backward_op = backward_op
    return attention
