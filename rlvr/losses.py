"""Policy losses: the per-token clipped objective, and how per-token losses are reduced to one number.

Shapes: N samples (B prompts x G samples, or a micro-batch of them), T response tokens. All inputs fp32; masks are
1 on response tokens and 0 on prompt/padding, and nothing masked ever reaches a mean.

Aggregation is kept apart from the per-token objective (as in verl's ``agg_loss``) because it decides which biases a run
has. Every mode takes *global* denominators so that micro-batches summed by gradient accumulation give exactly the
mini-batch loss: pass ``num_tokens`` / ``num_seqs`` of the whole mini-batch (on all ranks, times world size where
DeepSpeed averages gradients across ranks) when calling it on a micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


@dataclass
class PolicyLossOutput:
    """Per-token results of :func:`ppo_clip_loss`, all (N, T) fp32, zero where ``mask`` is 0."""

    loss: Tensor
    """Per-token objective to minimise (before aggregation)."""
    ratio: Tensor
    """pi_theta / pi_old per token."""
    clipped: Tensor
    """1.0 where the clipped branch is active (the gradient is zero there)."""


def ppo_clip_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float | None = None,
) -> PolicyLossOutput:
    """PPO clipped surrogate (Schulman et al. 1707.06347) with separate lower/upper clip ranges.

    ``loss_t = max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high))`` with ``r_t = exp(logp_t - logp_old_t)``.
    ``eps_high > eps_low`` is DAPO's clip-higher (2503.14476 sec. 3.1): low-probability tokens may grow more, which
    delays entropy collapse. With ``clip_ratio_c`` (dual-clip, Ye et al. 1912.09729) the loss of a negative-advantage
    token is also capped at ``-A_t * c`` so a huge ratio cannot blow the update up.

    Args:
        logprobs: (N, T) current policy log-probs of the sampled tokens (requires grad).
        old_logprobs: (N, T) log-probs under the policy that generated the batch (detached).
        advantages: (N, T). mask: (N, T) response mask.
        clip_low, clip_high: eps_low, eps_high. clip_ratio_c: dual-clip bound (> 1) or None.
    Returns:
        :class:`PolicyLossOutput`.
    """
    if not (logprobs.shape == old_logprobs.shape == advantages.shape == mask.shape):
        raise ValueError(f"shape mismatch: logprobs {tuple(logprobs.shape)}, old_logprobs "
                         f"{tuple(old_logprobs.shape)}, advantages {tuple(advantages.shape)}, mask {tuple(mask.shape)}")
    mask = mask.float()
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-20.0, 20.0)  # masked positions can hold garbage
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped_obj = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped_obj)
    clipped = (clipped_obj > unclipped).float()
    if clip_ratio_c is not None:
        capped = torch.minimum(loss, -advantages * clip_ratio_c)
        loss = torch.where(advantages < 0, capped, loss)
    return PolicyLossOutput(loss=loss * mask, ratio=ratio.detach() * mask, clipped=clipped * mask)


def aggregate_loss(
    token_loss: Tensor,
    mask: Tensor,
    mode: LossAgg,
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Reduce a (N, T) per-token loss to a scalar.

    - ``token-mean`` (DAPO 2503.14476 sec. 3.3): sum over all tokens / number of tokens. Every token weighs the same, so
      long responses are not under-weighted; the default.
    - ``seq-mean-token-mean`` (original GRPO): mean over tokens within each sample, then over samples. A token of a long
      response weighs less: long wrong answers are punished less (length bias, Dr. GRPO 2503.20783 sec. 3.1).
    - ``seq-mean-token-sum``: sum over tokens per sample, mean over samples; the gradient scale grows with length.
    - ``seq-mean-token-sum-norm`` (Dr. GRPO): sum over all tokens / (samples x ``max_len``), a constant normaliser, so no
      length bias and a scale that does not depend on the batch's lengths.

    Args:
        token_loss: (N, T), zero on masked positions. mask: (N, T).
        mode: one of the four above.
        num_tokens: the mini-batch's response-token count (default: this call's); ``token-mean`` only.
        num_seqs: the mini-batch's sample count (default: N); the ``seq-*`` modes.
        max_len: the constant length normaliser (the rollout's max_new_tokens); required for
            ``seq-mean-token-sum-norm``.
    Returns:
        scalar tensor.
    Raises:
        ValueError: unknown mode, or ``max_len`` missing for ``seq-mean-token-sum-norm``.
    """
    mask = mask.float()
    masked = token_loss * mask
    n = float(num_seqs) if num_seqs is not None else float(token_loss.shape[0])
    if mode == "token-mean":
        denom = float(num_tokens) if num_tokens is not None else mask.sum().clamp(min=1.0)
        return masked.sum() / denom
    if mode == "seq-mean-token-mean":
        per_seq = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return per_seq.sum() / n
    if mode == "seq-mean-token-sum":
        return masked.sum() / n
    if mode == "seq-mean-token-sum-norm":
        if max_len is None:
            raise ValueError("loss_agg 'seq-mean-token-sum-norm' needs max_len (the rollout's max_new_tokens)")
        return masked.sum() / (n * max_len)
    raise ValueError(f"unknown loss aggregation {mode!r}; expected token-mean, seq-mean-token-mean, "
                     "seq-mean-token-sum or seq-mean-token-sum-norm")


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over positions where ``mask`` is 1 (0 when the mask is empty); any shape."""
    mask = mask.float()
    return (values * mask).sum() / mask.sum().clamp(min=1.0)
