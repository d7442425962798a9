"""Grouped-query attention for CPU decoding and CPU training, registered with transformers' ``AttentionInterface``.

Models with fewer KV heads than query heads (GQA: SmolLM2 has 9 query / 3 KV heads) go through transformers'
``sdpa_attention_forward``, which copies the keys and values to every query head (``repeat_kv``) whenever an
attention mask is present, and left padding always makes one. :func:`grouped_query_attention` never makes that copy:

- one query token (decoding): the G = H / H_kv query heads of a KV head are laid out as G query *positions* of that
  head, (R, H_kv, G, d), against the un-repeated cache, through plain SDPA with the padding mask (they are one token,
  so no causal structure among them). Exactly ``repeat_kv`` + SDPA without the copy.
- several query tokens with gradients on CPU in bf16/fp16 (the trainer's forward under autocast, where RoPE's fp32
  cos/sin hand over fp32 queries and keys: cast to the autocast dtype, as SDPA would): the same grouping,
  (R, H_kv, G * Q, d), with attention written out as two batched matmuls and an fp32 softmax, while the scores it
  keeps for the backward stay under :data:`MAX_SCORES_BYTES` a layer (longer sequences: SDPA's flash kernel). torch's
  CPU flash-attention kernel is slower forward + backward at these sizes (``benchmarks/bench_update_ab.py``; numbers
  in ``benchmarks/RESULTS.md``).
  No mask over as many keys as queries (a prefill without padding: transformers' SDPA then means causal) takes the
  same path with the causal mask written out.
- anything else (prefill without gradients, fp32, GPUs, dropout): transformers' SDPA unchanged.

Shapes: R rows, H query heads, H_kv KV heads, G = H / H_kv, Q query tokens, L keys, d head size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

GQA_ATTENTION = "rlvr_gqa"
"""The name :func:`grouped_query_attention` is registered under (a model's ``config._attn_implementation``)."""

MAX_SCORES_BYTES = 128 * 2**20
"""The largest attention-score tensor (one layer, one forward) the CPU training path makes; above it (long sequences)
SDPA's flash kernel runs, which keeps no (Q, L) scores for the backward."""


def scores_bytes(rows: int, heads: int, queries: int, keys: int) -> int:
    """Bytes the CPU training path keeps per layer for the backward: the fp32 scores and the bf16/fp16 probabilities,
    (R, H, Q, L) each (6 bytes an entry)."""
    return 6 * rows * heads * queries * keys


def grouped_query_attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                            attention_mask: Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                            **kwargs) -> tuple[Tensor, None]:
    """Attention of ``query`` over ``key``/``value`` where query head h reads KV head h // G (transformers' order).

    Args:
        query: (R, H, Q, d). key, value: (R, H_kv, L, d). attention_mask: boolean (R, 1, Q, L), True = attend (as
            transformers' ``sdpa_mask`` builds it), or None (causal for Q > 1, as transformers' SDPA reads it).
        scaling: the softmax scale (default d ** -0.5).
    Returns:
        (R, Q, H, d) attention output (the layout of ``sdpa_attention_forward``), and None (no weights).
    """
    r, h, q, d = query.shape
    kv_heads = key.shape[1]
    groups = h // kv_heads
    grads = torch.is_grad_enabled() and query.requires_grad
    # under CPU autocast over fp32 weights, RoPE's fp32 cos/sin make the queries and keys fp32; SDPA (an autocast op)
    # would cast them to the autocast dtype, and so does the path below
    compute_dtype = query.dtype
    if query.device.type == "cpu" and query.dtype == torch.float32 and torch.is_autocast_enabled("cpu"):
        compute_dtype = torch.get_autocast_dtype("cpu")
    # several queries: only bf16/fp16 training on CPU is ours. No mask there means "causal" to transformers' SDPA
    # (is_causal), and fp32 keeps SDPA's exact numerics (fp32 runs, e.g. AVX2 CPUs, compute as before)
    ours = (grads and query.device.type == "cpu" and compute_dtype in (torch.bfloat16, torch.float16)
            and scores_bytes(r, h, q, key.shape[2]) <= MAX_SCORES_BYTES)
    # no mask with as many queries as keys is transformers' "causal" (a prefill without padding): ours too, with the
    # causal mask written out (torch's CPU flash kernel took ~5 ms a layer forward + backward at 2 x 96 tokens)
    causal = attention_mask is None and q == key.shape[2] and getattr(module, "is_causal", True)
    if h == kv_heads or dropout != 0.0 or (q > 1 and not (ours and (attention_mask is not None or causal))):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if q == 1:
        grouped = query.reshape(r, kv_heads, groups, d)  # the G heads of a KV head as G "positions"
        out = F.scaled_dot_product_attention(grouped, key, value, attn_mask=attention_mask, scale=scaling)
        return out.reshape(r, 1, h, d), None  # (R, H_kv, G, d) -> (R, Q=1, H, d)
    scale = scaling if scaling is not None else d ** -0.5
    query, key, value = query.to(compute_dtype), key.to(compute_dtype), value.to(compute_dtype)
    grouped = query.reshape(r, kv_heads, groups * q, d)  # (R, H_kv, G * Q, d): rows g * Q + i
    if attention_mask is None:  # causal, q == L
        attention_mask = torch.ones(q, q, dtype=torch.bool, device=query.device).tril().view(1, 1, q, q)
    if attention_mask.dtype != torch.bool:
        raise ValueError(f"expected a boolean attention mask, got {attention_mask.dtype}")
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * scale  # (R, H_kv, G * Q, L)
    scores = scores.view(r, kv_heads, groups, q, -1)
    # finfo.min, not -inf: a fully masked row (a left-padding query) gets uniform weights instead of NaN
    scores = scores.masked_fill(~attention_mask.unsqueeze(1), torch.finfo(scores.dtype).min)
    scores = scores.view(r, kv_heads, groups * q, -1)
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(probs, value)  # (R, H_kv, G * Q, d)
    return out.view(r, h, q, d).transpose(1, 2), None  # (R, Q, H, d)


AttentionInterface.register(GQA_ATTENTION, grouped_query_attention)
AttentionMaskInterface.register(GQA_ATTENTION, sdpa_mask)


def use_grouped_query_attention(model: torch.nn.Module) -> bool:
    """Switch an HF model that runs transformers' SDPA to :func:`grouped_query_attention` (the same math); returns
    whether it did. Other implementations (eager, flash-attention, a custom one) are left alone."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) not in ("sdpa", GQA_ATTENTION):
        return False
    config._attn_implementation = GQA_ATTENTION
    return True
