"""Advantage estimators for outcome rewards: pure tensor functions, looked up by name.

Vocabulary used in every docstring: B prompts, G samples per prompt (a *group*), N = B*G samples, T response tokens.
Each estimator maps rewards ``(B, G)`` (fp32) to per-sample advantages ``(B, G)``; :func:`broadcast_to_tokens`
spreads them over the response tokens, and :func:`subtract_kl_from_returns` applies a KL-in-reward penalty.
"""

from __future__ import annotations

import difflib
from typing import Callable, Protocol

import torch
from torch import Tensor


class AdvantageFn(Protocol):
    def __call__(self, rewards: Tensor, *, std_normalize: bool, eps: float) -> Tensor: ...


ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {}


def register(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    def wrap(fn: AdvantageFn) -> AdvantageFn:
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn
    return wrap


def get_estimator(name: str) -> AdvantageFn:
    """The estimator registered as ``name``. Raises KeyError naming the valid ones."""
    if name not in ADVANTAGE_ESTIMATORS:
        close = difflib.get_close_matches(name, list(ADVANTAGE_ESTIMATORS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise KeyError(f"unknown advantage estimator {name!r}{hint}; valid: {sorted(ADVANTAGE_ESTIMATORS)}")
    return ADVANTAGE_ESTIMATORS[name]


def _check(rewards: Tensor) -> None:
    if rewards.ndim != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be (B, G) with G >= 2 samples per group, got shape {tuple(rewards.shape)}")


@register("grpo")
def grpo_advantages(rewards: Tensor, *, std_normalize: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO group baseline (Shao et al. 2402.03300, eq. 3): ``A_i = (r_i - mean(r)) / (std(r) + eps)``.

    Args:
        rewards: (B, G) outcome rewards.
        std_normalize: divide by the group's std (unbiased, as in the paper). Dr. GRPO (2503.20783) turns this off:
            it up-weights groups that are nearly all solved or all failed.
        eps: added to the std so a zero-variance group gives advantage 0, not NaN.
    Returns:
        (B, G) advantages; exactly 0 for groups whose rewards are all equal.
    """
    _check(rewards)
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    if std_normalize:
        centered = centered / (rewards.std(dim=1, keepdim=True) + eps)
    return centered


@register("rloo")
def rloo_advantages(rewards: Tensor, *, std_normalize: bool = False, eps: float = 1e-6) -> Tensor:
    """REINFORCE leave-one-out (Ahmadian et al. 2402.14740): ``A_i = r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean r)``.

    Args:
        rewards: (B, G). std_normalize/eps: unused (kept for a common signature).
    Returns:
        (B, G) advantages.
    """
    _check(rewards)
    g = rewards.shape[1]
    baseline = (rewards.sum(dim=1, keepdim=True) - rewards) / (g - 1)
    return rewards - baseline


@register("reinforce_pp")
def reinforce_pp_advantages(rewards: Tensor, *, std_normalize: bool = True, eps: float = 1e-6) -> Tensor:
    """REINFORCE++-baseline (Hu et al. 2501.03262): subtract the group mean, then normalise by the *batch* mean/std.

    Batch (not group) normalisation keeps the scale stable across prompts of different difficulty.

    Args:
        rewards: (B, G). std_normalize: divide by the batch std of the centred rewards.
    Returns:
        (B, G) advantages.
    """
    _check(rewards)
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    centered = centered - centered.mean()
    if std_normalize:
        centered = centered / (centered.std() + eps)
    return centered


def broadcast_to_tokens(advantages: Tensor, response_mask: Tensor) -> Tensor:
    """Spread per-sample advantages over response tokens.

    Args:
        advantages: (N,) per sample. response_mask: (N, T) 1 for response tokens, 0 for padding.
    Returns:
        (N, T) fp32, zero on padding.
    """
    return advantages.float().unsqueeze(1) * response_mask.float()


def subtract_kl_from_returns(token_advantages: Tensor, kl: Tensor, response_mask: Tensor, beta: float) -> Tensor:
    """KL-in-reward (InstructGPT 2203.02155 / REINFORCE++): each token's reward is ``-beta * kl_t``, so with gamma = 1
    the return from token t onward carries ``-beta * sum_{s >= t} kl_s`` on top of the outcome advantage.

    Args:
        token_advantages: (N, T). kl: (N, T) per-token KL estimate (nats), detached. response_mask: (N, T).
        beta: KL coefficient.
    Returns:
        (N, T) advantages, zero on padding.
    """
    kl = (kl * response_mask).detach()
    future_kl = kl.flip(1).cumsum(1).flip(1)  # (N, T): sum over s >= t
    return (token_advantages - beta * future_kl) * response_mask
