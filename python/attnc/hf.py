"""hf.py — attnc as an attention backend of Hugging Face transformers.

    import attnc
    attnc.register_transformers()        # once: the name "attnc"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="attnc")

register() adds attnc to transformers' AttentionInterface (the attention
function every modern model calls) and AttentionMaskInterface (the mask the
model builds once a forward for it). Each attention call goes to
attnc.attention with what the model passes: q [B, H, N, D] and k, v [B,
Hkv, N, D] as the model made them (transposed views of its projections,
read in place), grouped-query heads as they are (no repeat_kv), the
module's causality, its scaling, sliding_window (a key j is seen from query
i when i − W < j <= i, transformers' meaning, so the window is (W − 1, 0)),
softcap, and the padding mask. As for FlashAttention in transformers, the
mask function gives None when no key is padding and else the 2-D [B, Nk]
mask (1: a real token), which attnc applies to the keys of every query;
queries at padding positions get o = 0.

Refused with AttncError, never computed otherwise: dropout during training,
a 4-D mask (a model that builds its own), and packed sequences
(cu_seq_lens in the call, or a batch of one row whose position_ids
restart, as transformers' DataCollatorWithFlattening makes it).
"""


def padding_mask(attention_mask=None, kv_length=None, **kwargs):
    """transformers' mask for attnc: None without padding, else the 2-D
    padding mask cut to the last kv_length keys (a sliding-window layer's
    cache keeps only those), as transformers' flash_attention_mask."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2:
        return attention_mask   # a model's own 4-D mask: attention_forward refuses it by name
    if kv_length is not None:
        attention_mask = attention_mask[:, -kv_length:]
    return None if bool(attention_mask.all()) else attention_mask


def _packed(module, query, attention_mask, kwargs):
    """Whether the batch is sequences packed into one row, as transformers
    finds them (DataCollatorWithFlattening: batch 1, no mask, position_ids
    that restart): looked at in the first layer only (one read of the
    device a forward, and none at batch sizes above 1 or in decoding)."""
    pos = kwargs.get("position_ids")
    if (pos is None or attention_mask is not None or query.shape[0] != 1 or query.shape[2] < 2 or
            getattr(module, "layer_idx", 0) != 0 or pos.shape[-1] != query.shape[2]):
        return False
    return bool((pos.reshape(-1).diff() != 1).any())


def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                      softcap=None, is_causal=None, **kwargs):
    """transformers' attention function signature: (o [B, N, H, Dv], None)."""
    from . import AttncError
    from .functional import attention
    if dropout:
        raise AttncError(f"attnc has no attention dropout; the model asks for {dropout} "
                         "(set the config's attention_dropout to 0.0)")
    if "cu_seq_lens_q" in kwargs or "cu_seq_lens_k" in kwargs or _packed(module, query, attention_mask, kwargs):
        raise AttncError("attnc does not take packed sequences (cu_seq_lens, or position_ids that restart "
                         "within a row); pad the batch instead")
    if attention_mask is not None and attention_mask.dim() != 2:
        raise AttncError(f"attnc takes the [batch, keys] padding mask its mask function gives, not a "
                         f"{attention_mask.dim()}-D mask {tuple(attention_mask.shape)}")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    window = None
    if sliding_window:
        window = (sliding_window - 1, 0 if causal else sliding_window - 1)
    o = attention(query, key, value, causal=causal, window=window, softcap=softcap, scale=scaling,
                  key_mask=attention_mask)
    return o.transpose(1, 2), None


def register(name="attnc"):
    """Registers attnc with transformers under `name` (attn_implementation=name);
    returns the name."""
    from transformers import AttentionInterface, AttentionMaskInterface
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, padding_mask)
    return name
