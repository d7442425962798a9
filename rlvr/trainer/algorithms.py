"""The advantage stage: how a scored batch becomes per-token advantages, for the recipe's row of the algorithm table
(:data:`rlvr.algo.table.ALGORITHMS`), which also says what a step needs (:func:`rlvr.algo.table.needs`).

The two baselines a row can have share one interface, :class:`Algorithm`: ``advantages(batch) -> Advantages`` with
per-token advantages (N, T) and, for a critic, per-token returns (N, T). A per-sample ``(B, G)`` signature cannot
express GAE, whose advantage differs from token to token.

- :class:`GroupRelative` (``baseline: group``: ``grpo``, ``rloo``, ``reinforce_pp``): an outcome reward per sample, a
  baseline from the other samples of its group (the row's estimator), broadcast over the response tokens; no critic,
  no returns.
- :class:`GAE` (``baseline: critic``: ``ppo``): per-token rewards and values in, ``Advantages(advantages, returns)``
  out.

The pure tensor math lives in :mod:`rlvr.algo`; this module only wires a recipe's row to it.
Vocabulary: B prompts, G samples per prompt, N = B x G samples, T response tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from rlvr.algo.advantages import broadcast_to_tokens, subtract_kl_from_returns, whiten
from rlvr.algo.kl import kl_per_token
from rlvr.algo.reward_shaping import RunningRewardNormalizer
from rlvr.algo.table import ALGORITHMS, Needs, needs
from rlvr.config import AlgorithmConfig
from rlvr.trainer.batch import RolloutBatch

AllReduceSum = Callable[[Tensor], Tensor]


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
    normalizer: RunningRewardNormalizer | None
    """Running statistics of the sequence scores that the algorithm keeps across steps (checkpointed), or None."""

    def advantages(self, batch: RolloutBatch, kl_beta: float, all_reduce_sum: AllReduceSum) -> Advantages: ...


class GroupRelative:
    """Group-relative outcome advantages (a row with ``baseline: group``: ``grpo``, ``rloo``, ``reinforce_pp``).

    The row's estimator runs per group over valid samples and is broadcast to tokens; with KL in the reward,
    ``-beta * KL_t`` (the recipe's estimator, on the pre-update log-probs) is summed into each token's return;
    batch-normalised estimators (``normalisation: batch``, ``reinforce_pp``) are then whitened over all ranks'
    tokens.

    Args:
        config: the recipe's ``algorithm`` section.
        reference: whether a reference model is loaded; ``None`` = the recipe's need (``kl.beta > 0``).
    """

    def __init__(self, config: AlgorithmConfig, reference: bool | None = None) -> None:
        self.normalizer = None
        self.config = config
        self.needs = needs(config, reference)
        row = ALGORITHMS[config.name]
        self.estimator = row.advantage_function()
        self.batch_norm = row.normalisation == "batch"

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


class GAE:
    """PPO's advantages from a critic (InstructGPT 2203.02155 / Ziegler 1909.08593): per-token rewards
    ``-beta * KL_t`` at every response token plus the sequence score (the reward source's total, minus
    ``critic.truncation_penalty`` for a completion cut without eos) at its last real token
    (:func:`rlvr.algo.reward_shaping.per_token_rewards`), then GAE with ``gamma``/``lam``
    (:func:`rlvr.algo.gae.gae_advantages`)
    against the rollout-time values, and the advantages whitened over all ranks' tokens.

    With tools, ``response_mask`` is 0 on tool answers: they get no KL reward, and GAE carries the next sampled
    token's value and advantage across them (:func:`rlvr.algo.gae.gae_advantages`).

    Needs the critic, the policy's old log-probs (the KL estimate is on the pre-update policy) and, always, the
    reference: the initial policy, for the KL penalty and the ``train/sqrt_kl_from_init`` metric even at beta 0
    (the row's ``always_reference``).

    Args:
        config: the recipe's ``algorithm`` section. reference: whether a reference model is loaded (``None``: yes).

    With ``critic.reward_normalize``, a :class:`rlvr.algo.reward_shaping.RunningRewardNormalizer` (``normalizer``) is
    updated with each batch's valid scores (all ranks) and applied to them before the KL penalty.
    """

    def __init__(self, config: AlgorithmConfig, reference: bool | None = None) -> None:
        self.config = config
        c = config.critic
        self.normalizer = RunningRewardNormalizer(clip=c.reward_clip) if c.reward_normalize else None
        self.needs = needs(config, reference)
        self.estimator = ALGORITHMS[config.name].advantage_function()

    def advantages(self, batch: RolloutBatch, kl_beta: float, all_reduce_sum: AllReduceSum) -> Advantages:
        """Advantages and returns (N, T) of a prepared batch with ``values`` (N, T) from the critic."""
        from rlvr.algo.reward_shaping import per_token_rewards

        a = self.config
        if not batch.prompts:
            if self.normalizer is not None:
                self.normalizer.update(torch.zeros(0), all_reduce_sum)  # join the collective
            whiten(torch.zeros(0, 1), torch.zeros(0, 1), all_reduce_sum=all_reduce_sum)  # join the collective
            return Advantages(advantages=torch.zeros(0, 1), returns=torch.zeros(0, 1))
        scores = batch.rewards
        if self.normalizer is not None:
            self.normalizer.update(scores[batch.valid] if batch.valid is not None else scores, all_reduce_sum)
            scores = self.normalizer.normalize(scores)
        mask = batch.response_mask
        # the score sits at each completion's last token (even where the mask drops the sample: it is then masked)
        lengths = torch.tensor([max(len(c.token_ids), 1) for c in batch.completions])
        token_mask = (torch.arange(mask.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)).float()  # (N, T)
        if batch.sampled_masks:  # tools: the score sits at the last token the policy sampled, not at a tool answer
            sampled = torch.zeros_like(token_mask)
            for i, m in enumerate(batch.sampled_masks):
                sampled[i, :len(m)] = torch.tensor(m, dtype=sampled.dtype)
            token_mask = torch.where(sampled.sum(1, keepdim=True) > 0, token_mask * sampled, token_mask)
        kl = kl_per_token(batch.old_logprobs, batch.ref_logprobs, a.kl.estimator) \
            if self.needs.reference and batch.ref_logprobs is not None else None
        truncated = torch.tensor([c.finish_reason == "length" for c in batch.completions])
        rewards = per_token_rewards(scores, token_mask, kl=kl, beta=kl_beta if kl is not None else 0.0,
                                    truncated=truncated, truncation_penalty=a.critic.truncation_penalty) * mask
        adv, returns = self.estimator(rewards, batch.values, mask, gamma=a.advantage.gamma, lam=a.advantage.lam)
        adv = whiten(adv, mask, std_normalize=a.advantage.std_normalize, eps=a.advantage.eps,
                     all_reduce_sum=all_reduce_sum)
        return Advantages(advantages=adv, returns=returns)


def build_algorithm(config: AlgorithmConfig, reference: bool | None = None) -> Algorithm:
    """The advantage stage of the recipe's algorithm (its row's ``baseline``: :class:`GAE` for ``critic``, else
    :class:`GroupRelative`); ``reference``: whether a reference model is loaded (``None``: the recipe's need)."""
    if ALGORITHMS[config.name].baseline == "critic":
        return GAE(config, reference)
    return GroupRelative(config, reference)
