"""Per-token rewards for the PPO path, and a running reward normaliser.

The InstructGPT/Ziegler reward (1909.08593 eq. 2; 2203.02155 sec. 3.5): every response token gets ``-beta * KL_t``
(the per-token KL estimate to the reference policy, :func:`rlvr.algo.kl.kl_per_token`), and the completion's last real
token (its eos when it finished; never a pad) also gets the sequence score (a reward model's, normalised and clipped
by :class:`RunningRewardNormalizer` if wanted). A completion cut at the length limit without eos has
``truncation_penalty`` subtracted from its score (TRL's ``missing_eos_penalty``). Beta is fixed or comes from
:class:`rlvr.algo.kl.AdaptiveKLController`.

Shapes: N sequences, T response tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

AllReduceSum = Callable[[Tensor], Tensor]
"""Sums a tensor over data-parallel ranks (every rank must call it); the trainer passes
:func:`rlvr.runtime.distributed.all_reduce_sum`."""


def last_token_index(attention_mask: Tensor) -> Tensor:
    """(N,) column of each row's last real token: the last position where ``attention_mask`` is 1.

    Right for left padding, right padding and pad == eos alike, because it never looks at token ids.

    Raises:
        ValueError: ``attention_mask`` is not 2-D, or a row has no real token.
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be (N, L), got shape {tuple(attention_mask.shape)}")
    real = attention_mask.bool()
    if not real.any(dim=1).all():
        bad = (~real.any(dim=1)).nonzero().flatten().tolist()
        raise ValueError(f"rows {bad} of attention_mask have no real token; every sequence needs at least one")
    length = attention_mask.shape[1]
    return (length - 1 - real.flip(dims=[1]).int().argmax(dim=1)).long()


def masked_moments(values: Tensor, mask: Tensor, all_reduce_sum: AllReduceSum | None = None
                   ) -> tuple[float, float, float]:
    """(mean, unbiased variance, count) of ``values`` where ``mask`` is 1, over the global batch.

    With the batch split over ranks, per-rank statistics (TRL's ``masked_whiten`` on each rank's shard) would give every
    rank a different scale; here the sum, sum of squares and count are summed over ranks first, so 2 ranks give exactly
    what 1 rank gives on the whole batch.

    Args:
        values, mask: same shape, any. all_reduce_sum: sums a float64 tensor over ranks; ``None`` = this process's
            batch is the global batch.
    Raises:
        ValueError: shapes differ, or no unmasked value on any rank.
    """
    if values.shape != mask.shape:
        raise ValueError(f"values {tuple(values.shape)} and mask {tuple(mask.shape)} must have the same shape")
    m = mask.double()
    v = values.detach().double() * m
    stats = torch.stack([v.sum(), (v * v).sum(), m.sum()])  # (3,)
    if all_reduce_sum is not None:
        stats = all_reduce_sum(stats)
    total, total_sq, count = (float(x) for x in stats)
    if count == 0:
        raise ValueError("masked_moments: no unmasked value in the batch")
    mean = total / count
    # unbiased (Bessel) variance, as TRL's and OpenRLHF's masked_var; one value has variance 0
    var = max(0.0, (total_sq - count * mean * mean) / (count - 1)) if count > 1 else 0.0
    return mean, var, count


def per_token_rewards(scores: Tensor, response_mask: Tensor, *, kl: Tensor | None = None, beta: float = 0.0,
                      truncated: Tensor | None = None, truncation_penalty: float = 0.0) -> Tensor:
    """(N, T) fp32 rewards: ``-beta * kl`` on response tokens plus the score at each row's last response token.

    Args:
        scores: (N,) sequence scores (e.g. the reward model's). response_mask: (N, T) 1 on response tokens (eos
            included), 0 on padding; the score goes at the last 1 of each row.
        kl: (N, T) per-token KL estimate, or None (no penalty). beta: its coefficient, >= 0.
        truncated: (N,) bool, True for completions that hit the length limit without eos.
        truncation_penalty: subtracted from a truncated completion's score (>= 0).
    Raises:
        ValueError: shapes that do not match, a row without response tokens, beta or penalty < 0.
    """
    if scores.dim() != 1 or response_mask.dim() != 2 or scores.shape[0] != response_mask.shape[0]:
        raise ValueError(f"scores must be (N,) and response_mask (N, T) with the same N, got {tuple(scores.shape)} "
                         f"and {tuple(response_mask.shape)}")
    if beta < 0 or truncation_penalty < 0:
        raise ValueError(f"beta and truncation_penalty must be >= 0, got beta={beta}, penalty={truncation_penalty}")
    m = response_mask.float()
    rewards = torch.zeros_like(m)
    if kl is not None:
        if kl.shape != response_mask.shape:
            raise ValueError(f"kl {tuple(kl.shape)} must match response_mask {tuple(response_mask.shape)}")
        rewards = -beta * kl.detach().float() * m
    score = scores.detach().float().clone()
    if truncated is not None:
        if truncated.shape != scores.shape:
            raise ValueError(f"truncated {tuple(truncated.shape)} must be (N,) like scores")
        score = score - truncation_penalty * truncated.float()
    rows = torch.arange(m.shape[0], device=m.device)
    rewards[rows, last_token_index(response_mask)] += score
    return rewards


class RunningRewardNormalizer:
    """Running mean and variance of sequence scores over all batches so far (and all ranks), for normalising them.

    Batch moments are merged with Chan et al.'s parallel update (the same as merging the samples). :meth:`normalize`
    uses the statistics including the batch it is given, so call :meth:`update` first. ``state_dict`` /
    ``load_state_dict`` carry it through checkpoints (a resumed run then normalises exactly as an unbroken one).

    Args:
        shift_mean: subtract the running mean (else only divide by the std). clip: clamp normalised scores to
            [-clip, clip] (None = no clip). eps: added to the variance.
    """

    def __init__(self, shift_mean: bool = True, clip: float | None = None, eps: float = 1e-8) -> None:
        if clip is not None and not clip > 0:
            raise ValueError(f"clip must be > 0 or None, got {clip}")
        self.shift_mean, self.clip, self.eps = shift_mean, clip, eps
        self.mean, self.var, self.count = 0.0, 1.0, 0.0

    def update(self, scores: Tensor, all_reduce_sum: AllReduceSum | None = None) -> None:
        """Merge a batch of (N,) scores (this rank's share; summed over ranks with ``all_reduce_sum``)."""
        mean, var, count = masked_moments(scores, torch.ones_like(scores), all_reduce_sum)
        batch_m2 = var * (count - 1)  # masked_moments' variance is unbiased
        if self.count == 0:
            total_m2 = batch_m2
        else:
            delta = mean - self.mean
            total_m2 = (self.var * max(self.count - 1, 0.0) + batch_m2
                        + delta * delta * self.count * count / (self.count + count))
            mean = self.mean + delta * count / (self.count + count)
        self.count += count
        self.mean = mean
        self.var = total_m2 / (self.count - 1) if self.count > 1 else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.var + self.eps)

    def normalize(self, scores: Tensor) -> Tensor:
        """``(scores - mean) / std`` (or ``scores / std`` without ``shift_mean``), clipped when ``clip`` is set."""
        out = scores.float() - (self.mean if self.shift_mean else 0.0)
        out = out / self.std
        return out.clamp(-self.clip, self.clip) if self.clip is not None else out

    def state_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.mean, self.var, self.count = float(state["mean"]), float(state["var"]), float(state["count"])
