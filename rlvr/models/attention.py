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

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

SEGMENTS_KWARG = "rlvr_segments"
"""The forward keyword that carries :class:`PackedSegments` through an HF model down to its attention calls."""


@dataclass
class PackedSegments:
    """How a packed row of N tokens (no padding) splits into attention segments, for :func:`segment_attention`.

    ``spans``: ``(start, length, prefix_start, prefix_length)`` per segment, in order, covering positions 0..N-1
    exactly once: a segment's queries attend causally to themselves after the ``prefix_length`` keys at
    ``prefix_start`` (a group's prompt, shared by its responses; 0 for a prompt's own segment). ``layers_seen``
    counts the attention calls that read them (the caller checks every layer did).
    """

    spans: list[tuple[int, int, int, int]]
    layers_seen: int = 0
    _masks: dict[tuple[int, int, str], Tensor] = field(default_factory=dict, repr=False)

    def causal_mask(self, length: int, prefix_length: int, device: torch.device) -> Tensor:
        """(length, prefix_length + length) boolean, True = attend: every prefix key, then causal over the segment.
        Built once per shape and kept for the forward's other layers."""
        key = (length, prefix_length, str(device))
        if key not in self._masks:
            self._masks[key] = torch.ones(length, prefix_length + length, dtype=torch.bool,
                                          device=device).tril(prefix_length)
        return self._masks[key]

    def scores_bytes(self, heads: int) -> int:
        """Bytes :func:`segment_attention` keeps per layer for the backward: every segment's fp32 scores and bf16
        probabilities over its prefix and itself."""
        return sum(scores_bytes(1, heads, length, prefix + length) for _, length, _, prefix in self.spans)


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
    segments = kwargs.get(SEGMENTS_KWARG)
    if segments is not None:
        return segment_attention(query, key, value, segments, scaling), None
    r, h, q, d = query.shape
    kv_heads = key.shape[1]
    groups = h // kv_heads
    grads = torch.is_grad_enabled() and query.requires_grad
    compute_dtype = _compute_dtype(query)
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
    out = _grouped_softmax_attention(grouped, key, value, attention_mask.unsqueeze(1), groups, scale)
    return out.view(r, h, q, d).transpose(1, 2), None  # (R, Q, H, d)


def _compute_dtype(query: Tensor) -> torch.dtype:
    """The dtype attention computes in: under CPU autocast over fp32 weights, RoPE's fp32 cos/sin make the queries and
    keys fp32, and SDPA (an autocast op) would cast them to the autocast dtype; so do rlvr's paths."""
    if query.device.type == "cpu" and query.dtype == torch.float32 and torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu")
    return query.dtype


def _grouped_softmax_attention(grouped: Tensor, key: Tensor, value: Tensor, mask: Tensor, groups: int,
                               scale: float) -> Tensor:
    """Two batched matmuls and an fp32 softmax over grouped queries.

    Args:
        grouped: (..., H_kv, G * Q, d), the G query heads of a KV head stacked. key, value: (..., H_kv, L, d).
        mask: boolean, broadcastable to (..., H_kv, G, Q, L), True = attend.
    Returns:
        (..., H_kv, G * Q, d) in ``value``'s dtype.
    """
    *lead, kv_heads, rows, _ = grouped.shape
    keys = key.shape[-2]
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * scale  # (..., H_kv, G * Q, L)
    # finfo.min, not -inf: a fully masked row (a left-padding query) gets uniform weights instead of NaN
    scores = scores.view(*lead, kv_heads, groups, rows // groups, keys)
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores.view(*lead, kv_heads, rows, keys), dim=-1).to(value.dtype)
    return torch.matmul(probs, value)


def segment_attention(query: Tensor, key: Tensor, value: Tensor, segments: PackedSegments,
                      scaling: float | None = None) -> Tensor:
    """Attention within the segments of one packed row (:class:`PackedSegments`): each segment's queries over its
    prefix's keys and its own, causally; query head h reads KV head h // G. Under CPU autocast, fp32 queries/keys
    (RoPE's fp32 cos/sin) are cast to the autocast dtype, as SDPA would; scores and softmax in fp32.

    Args:
        query: (1, H, N, d). key, value: (1, H_kv, N, d). scaling: the softmax scale (default d ** -0.5).
    Returns:
        (1, N, H, d), the layout of transformers' attention functions.
    Raises:
        ValueError: a batch of more than one row, or spans that do not cover the N positions in order.
    """
    rows, h, n, d = query.shape
    if rows != 1:
        raise ValueError(f"packed segments need one row, got {rows}")
    lengths = [span[1] for span in segments.spans]
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    if sum(lengths) != n or [span[0] for span in segments.spans] != starts:
        raise ValueError(f"segments (start, length) {[span[:2] for span in segments.spans]} do not cover the {n} "
                         "positions in order")
    segments.layers_seen += 1
    kv_heads = key.shape[1]
    groups = h // kv_heads
    dtype = _compute_dtype(query)
    q, k, v = query[0].to(dtype), key[0].to(dtype), value[0].to(dtype)  # (H, N, d), (H_kv, N, d)
    # split, not sliced: the backward then writes each segment's gradient once into one concatenation, where every
    # slice's backward would zero and add a whole (H, N, d) gradient (~0.15 s an update at 2 x 8 x 128 tokens)
    q_parts, k_parts, v_parts = q.split(lengths, dim=1), k.split(lengths, dim=1), v.split(lengths, dim=1)
    segment_at = {(span[0], span[1]): i for i, span in enumerate(segments.spans)}
    scale = scaling if scaling is not None else d ** -0.5
    outs = []
    for i, (_, length, prefix_start, prefix_length) in enumerate(segments.spans):
        qs = q_parts[i].reshape(kv_heads, groups * length, d)  # the G heads of a KV head stacked, as above
        ks, vs = k_parts[i], v_parts[i]
        if prefix_length:
            j = segment_at.get((prefix_start, prefix_length))  # a group's prompt: a segment of its own
            prefix = slice(prefix_start, prefix_start + prefix_length)
            prefix_k, prefix_v = (k_parts[j], v_parts[j]) if j is not None else (k[:, prefix], v[:, prefix])
            ks, vs = torch.cat([prefix_k, ks], dim=1), torch.cat([prefix_v, vs], dim=1)
        causal = segments.causal_mask(length, prefix_length, q.device)
        outs.append(_grouped_softmax_attention(qs, ks, vs, causal, groups, scale).view(h, length, d))
    return torch.cat(outs, dim=1).transpose(0, 1).unsqueeze(0)  # (1, N, H, d)


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
