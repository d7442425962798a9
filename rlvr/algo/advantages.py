"""Advantage estimators for outcome rewards: pure tensor functions, each named by a row of the algorithm table
(:data:`rlvr.algo.table.ALGORITHMS`).

Vocabulary used in every docstring: B prompts, G samples per prompt (a *group*), N = B*G samples, T response tokens.
Each estimator maps rewards ``(B, G)`` (fp32) to per-sample advantages ``(B, G)``; :func:`broadcast_to_tokens`
spreads them over the response tokens, and :func:`subtract_kl_from_returns` applies a KL-in-reward penalty.

Where each estimator normalises, and so where a KL-in-reward penalty enters (the row's ``normalisation``):

- ``grpo``, ``rloo``: within the group. A KL penalty is added to the group advantage afterwards (in units of
  normalised advantage; neither paper defines KL in the reward, GRPO puts it in the loss).
- ``reinforce_pp``: the estimator only subtracts the group mean; the token returns, KL penalty included, are then
  whitened over the *global* batch's response tokens (:func:`whiten`), as REINFORCE++ (2501.03262, sec. 3) does.

``valid`` (B, G) bool marks samples that count (False: a verifier failed with ``reward.failure_score: null``): a
dropped sample is left out of its group's mean and std and gets advantage 0; a group with fewer than 2 valid samples
gets advantage 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor


class AdvantageFn(Protocol):
    """What a group estimator is: ``(rewards (B, G), *, valid (B, G) bool | None, std_normalize, eps) -> (B, G)``."""

    def __call__(self, rewards: Tensor, *, valid: Tensor | None = None, std_normalize: bool,
                 eps: float) -> Tensor: ...


def _check(rewards: Tensor, valid: Tensor | None) -> bool:
    """Validate shapes; True when some sample is not valid (the masked formulas are needed)."""
    if rewards.ndim != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be (B, G) with G >= 2 samples per group, got shape {tuple(rewards.shape)}")
    if valid is None:
        return False
    if valid.shape != rewards.shape:
        raise ValueError(f"valid must have the rewards' shape {tuple(rewards.shape)}, got {tuple(valid.shape)}")
    return not bool(valid.all())


def _masked_group_stats(rewards: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(B, G) rewards and validity -> weights v (B, G), valid count n, mean and unbiased std (B, 1), over valid
    samples only."""
    v = valid.float()
    n = v.sum(dim=1, keepdim=True)
    mean = (rewards * v).sum(dim=1, keepdim=True) / n.clamp(min=1.0)
    var = (((rewards - mean) * v) ** 2).sum(dim=1, keepdim=True) / (n - 1.0).clamp(min=1.0)
    return v, n, mean, var.sqrt()


def grpo_advantages(rewards: Tensor, *, valid: Tensor | None = None, std_normalize: bool = True,
                    eps: float = 1e-6) -> Tensor:
    """GRPO group baseline (Shao et al. 2402.03300, eq. 3): ``A_i = (r_i - mean(r)) / (std(r) + eps)``.

    Args:
        rewards: (B, G) outcome rewards. valid: (B, G) bool or None (all valid); see the module docstring.
        std_normalize: divide by the group's std (unbiased, as in the paper). Dr. GRPO (2503.20783) turns this off:
            it up-weights groups that are nearly all solved or all failed.
        eps: added to the std so a zero-variance group gives advantage 0, not NaN.
    Returns:
        (B, G) advantages; exactly 0 for groups whose rewards are all equal, and for dropped samples.
    Raises:
        ValueError: rewards not (B, G) with G >= 2, or ``valid`` of another shape.
    """
    if not _check(rewards, valid):
        centered = rewards - rewards.mean(dim=1, keepdim=True)
        if std_normalize:
            centered = centered / (rewards.std(dim=1, keepdim=True) + eps)
        return centered
    v, n, mean, std = _masked_group_stats(rewards, valid)
    centered = (rewards - mean) * v
    if std_normalize:
        centered = centered / (std + eps)
    return torch.where(n >= 2, centered, 0.0)  # where, not *: 0/0 of a one-sample group with eps 0 is NaN


def rloo_advantages(rewards: Tensor, *, valid: Tensor | None = None, std_normalize: bool = False,
                    eps: float = 1e-6) -> Tensor:
    """REINFORCE leave-one-out (Ahmadian et al. 2402.14740): ``A_i = r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean r)``.

    Args:
        rewards: (B, G). valid: (B, G) bool or None (all valid): the mean runs over the other *valid* samples.
        std_normalize: also divide by the group's (unbiased) reward std + ``eps``, as TRL's RLOO
            ``normalize_advantages`` does; off in the paper.
    Returns:
        (B, G) advantages; 0 for dropped samples and groups with fewer than 2 valid samples.
    Raises:
        ValueError: rewards not (B, G) with G >= 2, or ``valid`` of another shape.
    """
    masked = _check(rewards, valid)
    v = valid.float() if masked else torch.ones_like(rewards)
    n = v.sum(dim=1, keepdim=True)  # (B, 1)
    baseline = ((rewards * v).sum(dim=1, keepdim=True) - rewards) / (n - 1.0).clamp(min=1.0)
    adv = (rewards - baseline) * v
    if std_normalize:
        std = rewards.std(dim=1, keepdim=True) if not masked else _masked_group_stats(rewards, valid)[3]
        adv = adv / (std + eps)
    return torch.where(n >= 2, adv, 0.0)


def reinforce_pp_advantages(rewards: Tensor, *, valid: Tensor | None = None, std_normalize: bool = True,
                            eps: float = 1e-6) -> Tensor:
    """REINFORCE++-baseline (Hu et al. 2501.03262), first half: the reward minus its group mean (over valid samples).

    The second half, normalisation by the *global batch's* mean/std (not the group's: it keeps the scale stable
    across prompts of different difficulty, and does not depend on how the batch is split over ranks), runs over
    tokens after any KL-in-reward penalty: :func:`whiten`. ``std_normalize``/``eps`` are applied there.

    Args:
        rewards: (B, G). valid: (B, G) bool or None (all valid).
    Returns:
        (B, G) group-centred rewards; 0 for dropped samples and groups with fewer than 2 valid samples.
    Raises:
        ValueError: rewards not (B, G) with G >= 2, or ``valid`` of another shape.
    """
    if not _check(rewards, valid):
        return rewards - rewards.mean(dim=1, keepdim=True)
    v, n, mean, _ = _masked_group_stats(rewards, valid)
    return torch.where(n >= 2, (rewards - mean) * v, 0.0)


def whiten(values: Tensor, mask: Tensor, *, std_normalize: bool = True, eps: float = 1e-6,
           all_reduce_sum: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """Normalise ``values`` by the mean and std of its unmasked entries over the global batch:
    ``(x - mean) / (std + eps)`` (population std), the batch normalisation of REINFORCE++ (2501.03262 sec. 3,
    OpenRLHF's token-level whitening).

    Args:
        values: (N, T) token advantages/returns. mask: (N, T) response mask (entries at 0 are left out and returned
            as 0).
        std_normalize: divide by the std (else only subtract the mean).
        all_reduce_sum: sums a float64 tensor over ranks (every rank must call this, even with N = 0); ``None`` =
            this process's batch is the global batch.
    Returns:
        (N, T) fp32, zero on masked entries.
    """
    mask = mask.float()
    v = values.double() * mask
    stats = torch.stack([v.sum(), (v * v).sum(), mask.double().sum()])  # (3,)
    if all_reduce_sum is not None:
        stats = all_reduce_sum(stats)
    total, squares, count = (float(x) for x in stats.tolist())
    count = max(count, 1.0)
    mean = total / count
    out = values.double() - mean
    if std_normalize:
        out = out / (max(squares / count - mean * mean, 0.0) ** 0.5 + eps)
    return out.float() * mask


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
