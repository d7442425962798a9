"""Corrections for stale and mismatched tokens: per-token weights that multiply the policy-gradient loss when the
tokens were sampled by another policy than the one the loss is anchored at (each a row of
:data:`rlvr.algo.table.CORRECTIONS`, chosen by ``algorithm.correction.type``).

Three policies meet in a step (Hilton et al. 2110.00641, "Batch size-invariance for policy optimization"):

- pi_behav, the *behaviour* policy that sampled the tokens: the rollout engine's log-probs (``rollout_logprobs``), at
  the weights of its last sync (k optimizer steps behind under asynchrony) and with the engine's own numerics (another
  kernel, another precision: never bitwise the trainer's);
- pi_old, the *proximal* policy: the trainer's own log-probs before the update (``old_logprobs``), the anchor of the
  PPO ratio and of its clip;
- pi_theta, the policy being trained.

The PPO ratio pi_theta / pi_old (in :mod:`rlvr.algo.losses`) covers the step from pi_old to pi_theta; a correction
covers the step from pi_behav to pi_old with the behaviour ratio ``r_t = pi_old(y_t) / pi_behav(y_t)``, a constant of
the update (both log-probs are known before it: no gradient flows through a correction's weight).

Every function here takes ``old_logprobs``, ``rollout_logprobs`` and ``mask``, all (R, T) fp32 (R rows, T response
tokens; ``mask`` 1 on the tokens in the loss), plus its row's settings as keyword arguments, and returns a
:class:`Correction`. The log-ratio is bounded to [-20, 20] before ``exp`` (:func:`behaviour_log_ratio`), so no weight
is inf or nan however far the two log-probs are apart (a log-prob of -inf, a padding position that holds garbage).
When pi_old = pi_behav every ratio is 1 and every correction's weight is 1 on every token: the loss is the uncorrected
one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

LOG_RATIO_BOUND = 20.0
"""|log r_t| is clamped to this before ``exp``: ratios stay in [2e-9, 5e8] (verl's rollout correction uses the same
bound)."""


@dataclass(frozen=True)
class Correction:
    """A correction's result on R rows of T response tokens, all (R, T) fp32, detached, zero where ``mask`` is 0."""

    weight: Tensor
    """Multiplies each token's policy-gradient loss (0 on a masked token)."""
    kept: Tensor
    """1 on the tokens of the loss that the correction keeps, 0 on the ones it masks (and on padding)."""
    ratio: Tensor
    """The token's behaviour ratio r_t = pi_old / pi_behav (of the bounded log-ratio)."""


def behaviour_log_ratio(old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor) -> Tensor:
    """``log r_t = log pi_old(y_t) - log pi_behav(y_t)``, clamped to +-:data:`LOG_RATIO_BOUND`, detached, 0 where
    ``mask`` is 0. All (R, T).

    Raises:
        ValueError: the three are not 2-D tensors of one shape.
    """
    shapes = [tuple(x.shape) for x in (old_logprobs, rollout_logprobs, mask)]
    if len(set(shapes)) != 1 or len(shapes[0]) != 2:
        raise ValueError(f"expected (R, T) tensors of one shape: old_logprobs {shapes[0]}, rollout_logprobs "
                         f"{shapes[1]}, mask {shapes[2]}")
    log_ratio = (old_logprobs.detach() - rollout_logprobs.detach()).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return log_ratio * mask.float()


def truncated_is(old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, *, cap: float) -> Correction:
    """Truncated importance sampling (TIS; Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy
    RL training"; Espeholt et al. 1802.01561 for the truncation): ``w_t = min(r_t, cap)``.

    Every token keeps its gradient; a token the behaviour policy over-sampled (r_t < 1) weighs less, an under-sampled
    one more, at most ``cap``. Biased where the cap bites, with variance bounded by it. The rows ``tis`` and
    ``decoupled`` both use it: times PPO's clip against pi_old it is the decoupled objective of Hilton et al.
    (2110.00641), verl's "decoupled token IS".

    Args:
        old_logprobs, rollout_logprobs, mask: (R, T). cap: the largest weight (> 0).
    Returns:
        :class:`Correction` (``kept`` is the mask: truncation masks nothing).
    """
    mask = mask.float()
    ratio = torch.exp(behaviour_log_ratio(old_logprobs, rollout_logprobs, mask))
    return Correction(weight=ratio.clamp(max=cap) * mask, kept=mask, ratio=ratio * mask)


def icepop(old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, *, low: float, high: float) -> Correction:
    """IcePop (Ring-1T, 2510.18855): ``w_t = r_t`` where ``low <= r_t <= high``, else 0 (the paper's
    ``M(k) = k`` on [alpha, beta], 0 outside; its alpha = 0.5, beta = 5).

    A token whose two probabilities disagree by more than the band is masked out of the policy-gradient term (no
    gradient at all, rather than a truncated one); a token inside it is importance-weighted by its ratio.

    Args:
        old_logprobs, rollout_logprobs, mask: (R, T). low, high: the band (``low <= 1 <= high``).
    Returns:
        :class:`Correction`.
    """
    mask = mask.float()
    ratio = torch.exp(behaviour_log_ratio(old_logprobs, rollout_logprobs, mask))
    kept = ((ratio >= low) & (ratio <= high)).float() * mask
    return Correction(weight=ratio * kept, kept=kept, ratio=ratio * mask)


def sequence_mask(old_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, *, low: float,
                  high: float) -> Correction:
    """Sequence masking by the geometric mean of the token ratios (verl's geometric rejection sampling, prime-rl's
    ``geo_mask``): ``g_i = exp(mean_t log r_t)`` over sample i's tokens in the loss; every token of a sample with
    ``g_i`` outside [low, high] gets weight 0, every token of the others weight 1 (rejection only, no reweighting).

    The geometric mean does not grow with length as the product of the ratios does, so one band fits short and long
    samples; a whole sample is dropped rather than the few tokens where the policies disagree, which keeps the
    surviving samples' tokens on-policy in context.

    Args:
        old_logprobs, rollout_logprobs, mask: (R, T). low, high: the band (``low <= 1 <= high``).
    Returns:
        :class:`Correction` (a row without tokens in the loss has g = 1 and is kept, with nothing to keep).
    """
    mask = mask.float()
    log_ratio = behaviour_log_ratio(old_logprobs, rollout_logprobs, mask)
    geometric = torch.exp(log_ratio.sum(dim=1) / mask.sum(dim=1).clamp(min=1.0))  # (R,)
    kept = ((geometric >= low) & (geometric <= high)).float().unsqueeze(1) * mask
    return Correction(weight=kept, kept=kept, ratio=torch.exp(log_ratio) * mask)
