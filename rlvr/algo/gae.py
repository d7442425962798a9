"""Generalised advantage estimation for the PPO path (Schulman et al. 1506.02438, eq. 11-16).

Shapes: N sequences, T response tokens. ``rewards``, ``values`` and ``mask`` are (N, T); the mask is 1 on the tokens
the policy produced (they get an advantage) and 0 on padding and on tokens it did not produce (a tool's or user's
observation tokens in a multi-turn rollout). Masked tokens are skipped as if absent: the recursion carries the next
real token's value and running advantage across them unchanged (verl's multi-turn GAE; OpenRLHF's version does not skip
them), and they get advantage and return 0.
"""

from __future__ import annotations

import torch
from torch import Tensor


def gae_advantages(rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0, lam: float = 0.95
                   ) -> tuple[Tensor, Tensor]:
    """Per-token GAE advantages and returns (value targets).

    With t' the next unmasked token after t (none past the last: V = 0, the episode ends there):
    ``delta_t = r_t + gamma V(t') - V(t)``, ``A_t = delta_t + gamma lambda A_{t'}``, ``R_t = A_t + V(t)``.

    Args:
        rewards: (N, T) per-token rewards (see :func:`rlvr.algo.reward_shaping.per_token_rewards`).
        values: (N, T) critic values V(s_t) from the rollout (detached).
        mask: (N, T) 1 where the token is the policy's, 0 elsewhere.
        gamma: discount in [0, 1] (1.0 for language-model RL). lam: GAE lambda in [0, 1] (0.95 usual).
    Returns:
        advantages (N, T) and returns (N, T), fp32, 0 where ``mask`` is 0. Not whitened (see
        :func:`rlvr.algo.advantages.whiten`).
    Raises:
        ValueError: shapes differ or are not 2-D; gamma or lam outside [0, 1].
    """
    if not (rewards.shape == values.shape == mask.shape) or rewards.dim() != 2:
        raise ValueError(f"rewards {tuple(rewards.shape)}, values {tuple(values.shape)} and mask "
                         f"{tuple(mask.shape)} must be the same (N, T) shape")
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must lie in [0, 1], got gamma={gamma}, lam={lam}")
    rewards, values, m = rewards.float(), values.detach().float(), mask.float()
    n, t_len = rewards.shape
    next_value = torch.zeros(n, dtype=torch.float32, device=rewards.device)
    next_adv = torch.zeros(n, dtype=torch.float32, device=rewards.device)
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(t_len)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * next_adv
        # a masked token leaves the carried value and advantage as they were
        next_value = torch.where(m[:, t] > 0, values[:, t], next_value)
        next_adv = torch.where(m[:, t] > 0, adv, next_adv)
        advantages[:, t] = adv
    advantages = advantages * m
    returns = (advantages + values) * m
    return advantages, returns
