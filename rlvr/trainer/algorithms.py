"""Algorithms: what a training step needs (reference, critic, old log-probs) and how a scored batch becomes per-token
advantages.

Two kinds share one interface, :class:`Algorithm`: ``advantages(batch) -> Advantages`` with per-token advantages
(N, T) and, for a critic, per-token returns (N, T). A per-sample ``(B, G)`` signature cannot express GAE, whose
advantage differs from token to token.

- :class:`GroupRelative` (``grpo``, ``rloo``, ``reinforce_pp``): an outcome reward per sample, a baseline from the
  other samples of its group (:mod:`rlvr.advantages`), broadcast over the response tokens; no critic, no returns.
- GAE with a critic (the PPO path) is the second kind: per-token rewards and values in, ``Advantages(advantages,
  returns)`` out.

The pure tensor math lives in :mod:`rlvr.advantages`; this module only wires a recipe's choice to it.
Vocabulary: B prompts, G samples per prompt, N = B x G samples, T response tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch
from torch import Tensor

from rlvr.advantages import NORMALISATION, broadcast_to_tokens, get_estimator, subtract_kl_from_returns, whiten
from rlvr.config import AlgorithmConfig
from rlvr.kl import kl_per_token
from rlvr.trainer.batch import RolloutBatch

AllReduceSum = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Needs:
    """The models and forwards an algorithm needs before its update.

    Attributes:
        reference: a frozen reference policy (KL to it, in the loss or in the reward).
        critic: a value model (GAE).
        old_logprobs: the policy's own pre-update log-probs (several optimizer steps per batch, truncated importance
            sampling, KL in the reward), one extra forward pass per step.
    """

    reference: bool
    critic: bool
    old_logprobs: bool


@dataclass
class Advantages:
    """Per-token training signal of a batch: ``advantages`` (N, T) fp32, zero on padding; ``returns`` (N, T), the
    critic's regression targets (``None`` without a critic)."""

    advantages: Tensor
    returns: Tensor | None = None


class Algorithm(Protocol):
    """Turns a scored, tensorized batch into advantages. ``advantages`` must be called on every rank, with or without
    samples (normalisation over the global batch is a collective)."""

    needs: Needs

    def advantages(self, batch: RolloutBatch, kl_beta: float, all_reduce_sum: AllReduceSum) -> Advantages: ...


class GroupRelative:
    """Group-relative outcome advantages (:mod:`rlvr.advantages`: ``grpo``, ``rloo``, ``reinforce_pp``).

    The estimator runs per group over valid samples and is broadcast to tokens; with KL in the reward,
    ``-beta * KL_t`` (the recipe's estimator, on the pre-update log-probs) is summed into each token's return;
    batch-normalised estimators (``reinforce_pp``) are then whitened over all ranks' tokens.

    Args:
        config: the recipe's ``algorithm`` section.
        reference: whether a reference model is loaded; ``None`` = the recipe's need (``kl.beta > 0``).
    """

    def __init__(self, config: AlgorithmConfig, reference: bool | None = None) -> None:
        self.config = config
        a = config
        reference = a.kl.beta > 0 if reference is None else reference
        self.needs = Needs(reference=reference, critic=False, old_logprobs=(
            a.ppo_epochs > 1 or a.mini_batches > 1 or a.tis_cap is not None
            or (reference and a.kl.placement == "reward")))
        self.estimator = get_estimator(a.advantage.type)
        self.batch_norm = NORMALISATION[a.advantage.type] == "batch"

    def advantages(self, batch: RolloutBatch, kl_beta: float, all_reduce_sum: AllReduceSum) -> Advantages:
        """Advantages (N, T) of a prepared batch (``rewards``, ``valid``, ``response_mask``; with KL in the reward
        also ``old_logprobs`` and ``ref_logprobs``). A rank without samples gets an empty (0, 1) tensor, after joining
        the whitening collective."""
        a = self.config
        if not batch.prompts:
            if self.batch_norm:
                whiten(torch.zeros(0, 1), torch.zeros(0, 1), all_reduce_sum=all_reduce_sum)  # join the collective
            return Advantages(advantages=torch.zeros(0, 1))
        g = batch.group_size
        rewards = batch.rewards.view(-1, g)  # (B, G)
        valid = batch.valid.view(-1, g) if batch.valid is not None else None
        adv = self.estimator(rewards, valid=valid, std_normalize=a.advantage.std_normalize,
                             eps=a.advantage.eps).reshape(-1)  # (N,)
        token_adv = broadcast_to_tokens(adv, batch.response_mask)  # (N, T)
        if self.needs.reference and a.kl.placement == "reward":
            kl = kl_per_token(batch.old_logprobs, batch.ref_logprobs, a.kl.estimator)
            token_adv = subtract_kl_from_returns(token_adv, kl, batch.response_mask, kl_beta)
        if self.batch_norm:
            token_adv = whiten(token_adv, batch.response_mask, std_normalize=a.advantage.std_normalize,
                               eps=a.advantage.eps, all_reduce_sum=all_reduce_sum)
        return Advantages(advantages=token_adv)


def build_algorithm(config: AlgorithmConfig, reference: bool | None = None) -> Algorithm:
    """The algorithm a recipe's ``algorithm`` section describes (today: the group-relative kind); ``reference``:
    whether a reference model is loaded (``None``: the recipe's need)."""
    return GroupRelative(config, reference)
