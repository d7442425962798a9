"""Reward sources: what turns a batch of completions into per-sample scores and per-verifier logs.

One interface (:class:`RewardSource`) for every way a step is rewarded, so the trainer does not care which it has:
rule-based verifiers (:class:`VerifierRewards`, the recipe's ``verifiers:`` run by
:class:`verifiers.reward.RewardFunction` in its worker pool); a learned reward model, or both with weights, plug in
behind the same ``score``.

Vocabulary: N completions of a rollout batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor


@dataclass
class RewardScores:
    """The scores of N completions.

    Attributes:
        rewards: (N,) fp32 total reward (what the advantage estimator optimises).
        solved: (N,) bool, the solved-verifier scored 1 (solve rate, curriculum, dynamic sampling).
        valid: (N,) bool, False for a sample to drop (a verifier failed and ``reward.failure_score`` is null).
        results: N per-sample logs (:class:`verifiers.reward.RewardResult`: per-verifier ``scores``, ``extras``,
            ``failures``), for metrics and sample dumps.
    """

    rewards: Tensor
    solved: Tensor
    valid: Tensor
    results: list[Any]


class RewardSource(Protocol):
    """Scores completions: ``texts[i]`` is the decoded completion of ``samples[i]`` (the dataset row, prompt and
    completion facts, :func:`rlvr.verifier_inputs.sample_dict`)."""

    labels: list[str]

    def score(self, texts: list[str], samples: list[dict[str, Any]]) -> RewardScores: ...

    def close(self) -> None: ...


class VerifierRewards:
    """The recipe's verifiers as a reward source.

    Args:
        reward_fn: the verifier pool (:class:`verifiers.reward.RewardFunction`); closed by :meth:`close`.
        labels: verifier labels in recipe order (``name``, ``name#2`` for repeats).
        solved_label: the label whose score 1 counts as solved (``solved_verifier``).
        drop_failed: ``reward.failure_score`` is null: a sample with a failed verifier is not valid.
    Raises:
        ValueError: ``solved_label`` not among ``labels``.
    """

    def __init__(self, reward_fn: Any, labels: list[str], solved_label: str, drop_failed: bool) -> None:
        if solved_label not in labels:
            raise ValueError(f"solved verifier {solved_label!r} is not one of the verifiers {labels}")
        self.reward_fn = reward_fn
        self.labels = list(labels)
        self.solved_label = solved_label
        self.drop_failed = drop_failed

    def score(self, texts: list[str], samples: list[dict[str, Any]]) -> RewardScores:
        """Run every verifier on every completion (failures cost one sample, never the run)."""
        results = self.reward_fn.score(texts, samples)
        return RewardScores(
            rewards=torch.tensor([r.total for r in results], dtype=torch.float32),
            solved=torch.tensor([(r.scores.get(self.solved_label) or 0.0) >= 1.0 - 1e-9 for r in results]),
            valid=torch.tensor([not (self.drop_failed and r.failures) for r in results]),
            results=results)

    def close(self) -> None:
        self.reward_fn.close()
