"""Policy losses: the per-token objectives (each a row of :data:`rlvr.algo.table.POLICY_LOSSES`), and how per-token
losses are reduced to one number.

Shapes: N samples (B prompts x G samples), R rows of a micro-batch of them, T response tokens. A loss takes its tensors
as one :class:`PolicyLossInputs` and its settings as keyword arguments (the row's ``settings``), and returns a
:class:`PolicyLossOutput`. All inputs fp32; masks are 1 on response tokens and 0 on prompt/padding, and nothing masked
ever reaches a mean.

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


ImportanceLevel = Literal["token", "sequence"]


@dataclass
class PolicyLossOutput:
    """Per-token results of a policy loss, all (N, T) fp32, zero where ``mask`` is 0."""

    loss: Tensor
    """Per-token objective to minimise (before aggregation)."""
    ratio: Tensor
    """The importance ratio each token's objective used: pi_theta / pi_old per token, or GSPO's sequence ratio
    (the same value on every token of a sample). Detached."""
    clipped_low: Tensor
    """1.0 where the ratio is below 1 - eps_low with A < 0 (PPO: the clipped branch is active, the gradient is zero;
    CISPO: the weight is truncated, the gradient kept)."""
    clipped_high: Tensor
    """1.0 where the ratio is above 1 + eps_high with A > 0 (PPO: zero gradient; CISPO: truncated weight)."""
    clipped_dual: Tensor
    """1.0 where dual-clip caps a negative-advantage token's loss at ``-A * c`` (zero gradient); 0 without dual-clip."""

    @property
    def clipped(self) -> Tensor:
        """1.0 where any clip (low, high or dual) is active."""
        return torch.clamp(self.clipped_low + self.clipped_high + self.clipped_dual, max=1.0)


@dataclass(frozen=True)
class PolicyLossInputs:
    """What a policy loss reads of R rows (samples of a micro-batch) of T response tokens, all (R, T) fp32 on one
    device.

    Raises:
        ValueError: the four are not 2-D tensors of one shape.
    """

    logprobs: Tensor
    """The current policy's log-probs of the sampled tokens (requires grad)."""
    old_logprobs: Tensor
    """Log-probs under the policy that generated the batch (detached); the current ones, detached, on-policy."""
    advantages: Tensor
    """Per-token advantages."""
    mask: Tensor
    """1 on the tokens in the loss, 0 on padding, tool answers and dropped samples."""

    def __post_init__(self) -> None:
        shapes = [tuple(x.shape) for x in (self.logprobs, self.old_logprobs, self.advantages, self.mask)]
        if len(set(shapes)) != 1 or len(shapes[0]) != 2:
            raise ValueError(f"expected (R, T) tensors of one shape: logprobs {shapes[0]}, old_logprobs {shapes[1]}, "
                             f"advantages {shapes[2]}, mask {shapes[3]}")


def sequence_log_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """GSPO's length-normalised sequence log-ratio, broadcast to tokens with GSPO-token's gradient path
    (Zheng et al. 2507.18071: the sequence ratio s_i and the GSPO-token variant; verl's ``gspo`` policy loss):
    ``log s_i = (1/|y_i|) sum_t (logp_t - logp_old_t)``, returned per token as ``logp_t - sg(logp_t) + sg(log s_i)``,
    whose value is ``log s_i`` on every token and whose gradient flows through each token's own log-prob (with a
    sequence-level advantage this is exactly GSPO's gradient).

    Args:
        logprobs, old_logprobs, mask: (N, T). Returns: (N, T), zero on masked positions.
    """
    mask = mask.float()
    lengths = mask.sum(dim=1).clamp(min=1.0)  # (N,)
    seq = ((logprobs - old_logprobs.detach()) * mask).sum(dim=1) / lengths  # (N,)
    return (logprobs - logprobs.detach() + seq.detach().unsqueeze(1)) * mask


def ppo_clip_loss(
    inputs: PolicyLossInputs,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_ratio_c: float | None = None,
    importance_sampling_level: ImportanceLevel = "token",
) -> PolicyLossOutput:
    """PPO clipped surrogate (Schulman et al. 1707.06347) with separate lower/upper clip ranges.

    ``loss_t = max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high))`` with ``r_t = exp(logp_t - logp_old_t)``.
    ``eps_high > eps_low`` is DAPO's clip-higher (2503.14476 sec. 3.1): low-probability tokens may grow more, which
    delays entropy collapse. With ``clip_ratio_c`` (dual-clip, Ye et al. 1912.09729) the loss of a negative-advantage
    token is also capped at ``-A_t * c`` so a huge ratio cannot blow the update up.

    ``importance_sampling_level="sequence"`` is GSPO (2507.18071): ``r_t`` is replaced by the sample's
    length-normalised ratio ``s_i`` (:func:`sequence_log_ratio`), so a whole sample is clipped or not (the paper's
    clip ranges are ~1e-4, not 0.2).

    Args:
        inputs: the (R, T) log-probs, old log-probs, advantages and mask (:class:`PolicyLossInputs`).
        clip_low, clip_high: eps_low, eps_high. clip_ratio_c: dual-clip bound (> 1) or None.
        importance_sampling_level: ``token`` (PPO/GRPO) or ``sequence`` (GSPO).
    Returns:
        :class:`PolicyLossOutput`.
    Raises:
        ValueError: an unknown ``importance_sampling_level``.
    """
    logprobs, old_logprobs, advantages = inputs.logprobs, inputs.old_logprobs, inputs.advantages
    mask = inputs.mask.float()
    if importance_sampling_level == "token":
        log_ratio = logprobs - old_logprobs.detach()
    elif importance_sampling_level == "sequence":
        log_ratio = sequence_log_ratio(logprobs, old_logprobs, mask)
    else:
        raise ValueError(f"importance_sampling_level must be 'token' or 'sequence', got {importance_sampling_level!r}")
    ratio = torch.exp(log_ratio.clamp(-20.0, 20.0))  # masked positions can hold garbage
    unclipped = -advantages * ratio
    clipped_obj = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped_obj)
    active = clipped_obj > unclipped  # the clipped branch wins: ratio outside the range on the advantage's side
    clipped_low = active & (advantages < 0)
    clipped_high = active & (advantages > 0)
    clipped_dual = torch.zeros_like(active)
    if clip_ratio_c is not None:
        cap = -advantages * clip_ratio_c
        clipped_dual = (advantages < 0) & (cap < loss)
        loss = torch.where(clipped_dual, cap, loss)
    return PolicyLossOutput(loss=loss * mask, ratio=ratio.detach() * mask, clipped_low=clipped_low.float() * mask,
                            clipped_high=clipped_high.float() * mask, clipped_dual=clipped_dual.float() * mask)


def cispo_loss(
    inputs: PolicyLossInputs,
    *,
    clip_low: float = 1.0,
    clip_high: float = 0.28,
) -> PolicyLossOutput:
    """CISPO (MiniMax-M1, 2506.13585): REINFORCE with a clipped, stop-gradient importance weight,
    ``loss_t = -sg(clip(r_t, 1 - eps_low, 1 + eps_high)) * A_t * logp_t``.

    Unlike PPO's clip, no token's gradient is dropped: a token outside the trust region keeps its gradient, with its
    weight truncated. The paper imposes no lower bound (``clip_low = 1``, i.e. the weight is only kept >= 0) and tunes
    ``eps_high``.

    Args:
        inputs: the (R, T) log-probs, old log-probs, advantages and mask (:class:`PolicyLossInputs`).
        clip_low, clip_high: the weight is clipped to ``[1 - clip_low, 1 + clip_high]``.
    Returns:
        :class:`PolicyLossOutput` (``clipped_*`` mark truncated weights, ``clipped_dual`` is 0).
    """
    logprobs, old_logprobs, advantages = inputs.logprobs, inputs.old_logprobs, inputs.advantages
    mask = inputs.mask.float()
    ratio = torch.exp((logprobs - old_logprobs.detach()).clamp(-20.0, 20.0)).detach()
    weight = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = -weight * advantages * logprobs
    clipped_low = (ratio < 1.0 - clip_low) & (advantages < 0)
    clipped_high = (ratio > 1.0 + clip_high) & (advantages > 0)
    return PolicyLossOutput(loss=loss * mask, ratio=ratio * mask, clipped_low=clipped_low.float() * mask,
                            clipped_high=clipped_high.float() * mask, clipped_dual=torch.zeros_like(mask))


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
    - ``seq-mean-token-sum-norm`` (Dr. GRPO): sum over all tokens / (samples x ``max_len``), a constant normaliser, so
      no
      length bias and a scale that does not depend on the batch's lengths.

    Args:
        token_loss: (N, T), zero on masked positions. mask: (N, T).
        mode: one of the four above.
        num_tokens: the mini-batch's response-token count (default: this call's); ``token-mean`` only.
        num_seqs: the mini-batch's count of samples with at least one unmasked token (default: this call's); the
            ``seq-*`` modes. A fully masked sample (truncated under ``mask_truncated``, or dropped) is not a sequence
            of the mean, as in verl's ``agg_loss``: counting it would shrink every other sample's weight.
        max_len: the constant length normaliser (the rollout's max_new_tokens); required for
            ``seq-mean-token-sum-norm``.
    Returns:
        scalar tensor.
    Raises:
        ValueError: unknown mode, or ``max_len`` missing for ``seq-mean-token-sum-norm``.
    """
    mask = mask.float()
    masked = token_loss * mask
    n = float(num_seqs) if num_seqs is not None else float(count_sequences(mask).clamp(min=1.0))
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


def count_sequences(mask: Tensor) -> Tensor:
    """Samples with at least one unmasked token: the ``num_seqs`` of the ``seq-*`` aggregations. mask: (N, T)."""
    return (mask.float().sum(dim=1) > 0).float().sum()
