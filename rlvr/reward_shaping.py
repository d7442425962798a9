"""Per-token rewards for the PPO path, and a running reward normaliser.

The InstructGPT/Ziegler reward (1909.08593 eq. 2; 2203.02155 sec. 3.5): every response token gets ``-beta * KL_t``
(the per-token KL estimate to the reference policy, :func:`rlvr.kl.kl_per_token`), and the completion's last real
token (its eos when it finished; never a pad) also gets the sequence score (a reward model's, normalised and clipped
by :class:`RunningRewardNormalizer` if wanted). A completion cut at the length limit without eos has
``truncation_penalty`` subtracted from its score (TRL's ``missing_eos_penalty``). Beta is fixed or comes from
:class:`rlvr.kl.AdaptiveKLController`.

Shapes: N sequences, T response tokens.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor

from rlvr.reward_model.model import last_token_index
from rlvr.whitening import masked_moments


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

    def update(self, scores: Tensor, group: dist.ProcessGroup | None = None) -> None:
        """Merge a batch of (N,) scores (this rank's share; all-reduced over ``group`` when distributed)."""
        mean, var, count = masked_moments(scores, torch.ones_like(scores), group)
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
