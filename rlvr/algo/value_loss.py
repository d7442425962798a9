"""The critic's loss and metrics for the PPO path: clipped value loss and explained variance.

Shapes: N sequences, T response tokens; every tensor (N, T) fp32 with a response mask (1 on the policy's tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class ValueLossOutput:
    """Per-token results of :func:`clipped_value_loss`, (N, T), zero where the mask is 0."""

    loss: Tensor
    """Per-token loss before aggregation (reduce with :func:`rlvr.algo.losses.aggregate_loss`, e.g. ``token-mean``)."""
    clipped: Tensor
    """1.0 where the clipped branch is the larger one (its gradient is 0 there): ``critic/value_clip_fraction``."""


def clipped_value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor,
                       value_clip: float | None = 0.2) -> ValueLossOutput:
    """PPO's clipped value loss (Schulman et al. 1707.06347 as in OpenAI baselines ppo2; Ziegler 1909.08593):

    ``V_clip = V_old + clip(V - V_old, -c, c)``, ``loss_t = 0.5 max((V - R)^2, (V_clip - R)^2)``; with
    ``value_clip=None`` it is ``0.5 (V - R)^2``.

    Args:
        values: (N, T) current critic values (require grad). old_values: (N, T) values at rollout time.
        returns: (N, T) targets (GAE returns). mask: (N, T). value_clip: c > 0 in the critic's units, or None.
    Raises:
        ValueError: shapes differ, or ``value_clip <= 0``.
    """
    if not (values.shape == old_values.shape == returns.shape == mask.shape):
        raise ValueError(f"shape mismatch: values {tuple(values.shape)}, old_values {tuple(old_values.shape)}, "
                         f"returns {tuple(returns.shape)}, mask {tuple(mask.shape)}")
    if value_clip is not None and not value_clip > 0:
        raise ValueError(f"value_clip must be > 0 or None, got {value_clip}")
    m = mask.float()
    returns, old_values = returns.detach().float(), old_values.detach().float()
    unclipped = (values.float() - returns).square()
    if value_clip is None:
        return ValueLossOutput(loss=0.5 * unclipped * m, clipped=torch.zeros_like(m))
    v_clipped = old_values + (values.float() - old_values).clamp(-value_clip, value_clip)
    clipped_sq = (v_clipped - returns).square()
    loss = 0.5 * torch.maximum(unclipped, clipped_sq)
    return ValueLossOutput(loss=loss * m, clipped=(clipped_sq > unclipped).float() * m)


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """``1 - Var[R - V] / Var[R]`` over masked tokens (``critic/explained_variance``): 1 = the critic predicts the
    returns, 0 = no better than their mean, < 0 = worse. NaN when the returns are constant or fewer than 2 tokens."""
    m = mask.bool()
    r, v = returns.detach().double()[m], values.detach().double()[m]
    if r.numel() < 2:
        return float("nan")
    var_r = r.var()
    if var_r == 0:
        return float("nan")
    return float(1.0 - (r - v).var() / var_r)
