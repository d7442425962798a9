"""Reward sources: what turns a batch of completions into per-sample scores and per-verifier logs.

One interface (:class:`RewardSource`) for every way a step is rewarded, so the trainer does not care which it has
(``reward.source`` in the recipe):

- ``verifiers``: :class:`VerifierRewards`, the recipe's ``verifiers:`` run by
  :class:`rlvr.verifiers.reward.RewardFunction`
  in its worker pool; a verifier with ``optimise: false`` is scored and logged as gold but weighs 0 in the total.
  A ``rollout.environment``'s episode rewards join them as the label ``env``
  (:mod:`rlvr.rollout.environment_rewards`).
- ``reward_model`` / ``both``: :class:`RewardModelRewards`, a learned reward model (or ensemble, ``reward_model:``)
  scores the exact sampled token ids; the verifiers still run and are logged (as gold scores where they are not
  optimised), and ``both`` adds their total to ``rm_weight`` times the model's score.

Vocabulary: N completions of a rollout batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from rlvr.rollout.environment_rewards import add_episode_rewards
from rlvr.trainer.batch import RolloutBatch


@dataclass
class RewardScores:
    """The scores of N completions.

    Attributes:
        rewards: (N,) fp32 total reward (what the advantage estimator optimises).
        solved: (N,) bool, the solved-verifier scored 1 (solve rate, curriculum, dynamic sampling).
        valid: (N,) bool, False for a sample to leave out: an optimised verifier failed for the machinery (raised,
            timed out, its sandbox broke) and ``reward.failure_score`` is null (the default).
        results: N per-sample logs (:class:`rlvr.verifiers.reward.RewardResult`: per-verifier ``scores``, ``extras``,
            ``failures``), for metrics and sample dumps.
    """

    rewards: Tensor
    solved: Tensor
    valid: Tensor
    results: list[Any]
    rm_scores: Tensor | None = None
    """(N,) fp32 the reward model's (aggregated) score, before ``rm_weight``; None without a reward model."""


class RewardSource(Protocol):
    """Scores the completions of a rollout batch: ``batch.texts[i]`` is the decoded completion ``i`` (token ids in
    ``batch.completions[i]``, prompt ids in ``batch.prompt_of(i)``), ``samples[i]`` what a verifier sees of it (the
    dataset row, prompt and completion facts, :func:`rlvr.runs.verifier_inputs.sample_dict`)."""

    labels: list[str]
    gold_labels: list[str]

    def score(self, batch: RolloutBatch, samples: list[dict[str, Any]]) -> RewardScores: ...

    def close(self) -> None: ...


class VerifierRewards:
    """The recipe's verifiers as a reward source.

    Args:
        reward_fn: the verifier pool (:class:`rlvr.verifiers.reward.RewardFunction`); closed by :meth:`close`.
        labels: verifier labels in recipe order (``name``, ``name#2`` for repeats).
        solved_label: the label whose score 1 counts as solved (``solved_verifier``); ``None`` when the recipe has no
            verifier (nothing is ever solved; the trainer then logs no solve rate).
        drop_failed: ``reward.failure_score`` is null: a sample on which a verifier that is not gold failed is not
            valid (a gold verifier's failure costs its log only).
        gold_labels: labels logged as gold (``reward/gold_<label>``): verifiers that are not optimised.
        environment_weight: the weight of the environment's episode rewards (``batch.episode_rewards``), added under
            the label ``env``, which ``labels`` then holds; None: no environment.
        failure_score: what an environment's failure adds to the total (``reward.failure_score``).
    Raises:
        ValueError: ``solved_label`` or a gold label not among ``labels``.
    """

    def __init__(self, reward_fn: Any, labels: list[str], solved_label: str | None, drop_failed: bool,
                 gold_labels: list[str] | None = None, environment_weight: float | None = None,
                 failure_score: float | None = None) -> None:
        named = ([solved_label] if solved_label is not None else []) + list(gold_labels or [])
        unknown = [lbl for lbl in named if lbl not in labels]
        if unknown:
            raise ValueError(f"verifier label(s) {unknown} are not among the verifiers {labels}")
        self.reward_fn = reward_fn
        self.labels = list(labels)
        self.solved_label = solved_label
        self.drop_failed = drop_failed
        self.gold_labels = list(gold_labels or [])
        self.environment_weight, self.failure_score = environment_weight, failure_score

    def score(self, batch: RolloutBatch, samples: list[dict[str, Any]]) -> RewardScores:
        """Run every verifier on every completion, and add the environment's episode rewards (failures cost one
        sample, never the run)."""
        results = self.reward_fn.score(batch.texts, samples)
        if self.environment_weight is not None:
            add_episode_rewards(results, batch.episode_rewards, self.environment_weight, self.failure_score)
        return RewardScores(
            rewards=torch.tensor([r.total for r in results], dtype=torch.float32),
            # dtype spelled out: a rank without prompts has empty lists, and torch.tensor([]) is float
            solved=torch.tensor([self.solved_label is not None
                                 and (r.scores.get(self.solved_label) or 0.0) >= 1.0 - 1e-9 for r in results],
                                dtype=torch.bool),
            valid=torch.tensor([not (self.drop_failed and any(lbl not in self.gold_labels for lbl in r.failures))
                                for r in results], dtype=torch.bool),
            results=results)

    def close(self) -> None:
        self.reward_fn.close()


class RewardModelRewards:
    """A learned reward model (or ensemble) as the reward source, with the verifiers run beside it.

    Each completion is scored on its exact token ids, prompt + completion (eos included; the reward model reads the
    last real token, :func:`rlvr.reward_model.model.last_token_index`), so the reward model must share the policy's
    tokenizer. Validity and the solved flag come from the verifiers.

    Args:
        model: :class:`rlvr.reward_model.ensemble.RewardModelEnsemble` (one model is an ensemble of one).
        verifiers: the verifier source (its ``gold_labels`` are logged as gold).
        pad_id: the tokenizer's pad id. micro_batch_size: sequences per reward-model forward.
        autocast_dtype: autocast dtype of its forwards (None = fp32).
        add_verifiers: ``reward.source: both``: the optimised reward is the verifiers' total plus ``rm_weight`` x the
            model's score; else (``reward_model``) ``rm_weight`` x the model's score alone.
        rm_weight: see ``add_verifiers``.
        collective: the members are ZeRO-3 sharded (:mod:`rlvr.trainer.sharded_inference`), so every forward is a
            collective: ranks score in the same number of micro-batches, a rank with fewer (or no) completions scoring
            one-token sequences to make up the count.
    """

    def __init__(self, model: Any, verifiers: VerifierRewards, *, pad_id: int, micro_batch_size: int,
                 autocast_dtype: torch.dtype | None, add_verifiers: bool, rm_weight: float,
                 collective: bool = False) -> None:
        self.collective = collective
        self.model = model
        self.verifiers = verifiers
        self.labels = verifiers.labels
        self.gold_labels = verifiers.gold_labels
        self.pad_id = pad_id
        self.micro_batch_size = micro_batch_size
        self.autocast_dtype = autocast_dtype
        self.add_verifiers = add_verifiers
        self.rm_weight = rm_weight

    def score(self, batch: RolloutBatch, samples: list[dict[str, Any]]) -> RewardScores:
        """Verifiers on every completion, then the reward model on every (prompt + completion) token sequence."""
        scores = self.verifiers.score(batch, samples)
        sequences = [list(batch.prompt_of(i).token_ids) + list(c.token_ids) for i, c in enumerate(batch.completions)]
        rm = self._score(sequences).float()
        scores.rewards = (scores.rewards if self.add_verifiers else torch.zeros_like(rm)) + self.rm_weight * rm
        scores.rm_scores = rm
        return scores

    def _score(self, sequences: list[list[int]]) -> Tensor:
        """(N,) aggregated scores; with ``collective``, padded with idle forwards to the largest micro-batch count over
        ranks."""
        mbs = self.micro_batch_size
        if not self.collective:
            return self.model.score(sequences, self.pad_id, mbs, self.autocast_dtype)[0] if sequences \
                else torch.zeros(0)
        from rlvr.runtime.distributed import all_reduce_max

        chunks = [sequences[s:s + mbs] for s in range(0, len(sequences), mbs)]
        passes = all_reduce_max(len(chunks))  # before any forward: each forward is itself a collective
        scores = [self.model.score(chunk, self.pad_id, mbs, self.autocast_dtype)[0] for chunk in chunks]
        for _ in range(passes - len(chunks)):  # join the other ranks' parameter gathers
            self.model.score([[self.pad_id]], self.pad_id, mbs, self.autocast_dtype)
        return torch.cat(scores) if scores else torch.zeros(0)

    def close(self) -> None:
        self.verifiers.close()
