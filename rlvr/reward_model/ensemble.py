"""Reward-model ensembles: several reward models score the same completions and the scores are combined.

Conservative aggregations against reward over-optimisation (Coste et al. 2023, "Reward Model Ensembles Help Mitigate
Overoptimization", 2310.02743): ``min`` (worst-case optimisation) and ``mean_minus_std`` (uncertainty-weighted, here
with k times the std rather than their variance, so k is in reward units).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from rlvr.reward_model.model import RewardModel

Aggregate = Literal["mean", "min", "mean_minus_std"]


def aggregate_scores(scores: Tensor, how: Aggregate = "mean", k: float = 1.0) -> Tensor:
    """Combine (E, N) scores of E ensemble members into (N,).

    ``mean``: the average; ``min``: the lowest member; ``mean_minus_std``: mean - k * std, with the population std
    (divisor E, so one member gives std 0 and E = 2 gives half the members' gap).

    Raises:
        ValueError: ``scores`` is not 2-D, has no member, or ``how`` is unknown.
    """
    if scores.dim() != 2 or scores.shape[0] == 0:
        raise ValueError(f"scores must be (E members, N samples) with E >= 1, got shape {tuple(scores.shape)}")
    if how == "mean":
        return scores.mean(dim=0)
    if how == "min":
        return scores.min(dim=0).values
    if how == "mean_minus_std":
        return scores.mean(dim=0) - k * scores.std(dim=0, correction=0)
    raise ValueError(f"unknown ensemble aggregate {how!r}; expected 'mean', 'min' or 'mean_minus_std'")


class RewardModelEnsemble:
    """E reward models scoring the same token sequences; :meth:`score` returns the aggregate and each member's score.

    All members must share the tokenizer (the sequences are token ids); a single model is an ensemble of one.
    """

    def __init__(self, members: list[RewardModel], how: Aggregate = "mean", k: float = 1.0) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one reward model")
        aggregate_scores(torch.zeros(len(members), 1), how, k)  # fail on a bad aggregate now, not at the first step
        self.members, self.how, self.k = members, how, k

    @classmethod
    def load(cls, paths: list[str | Path], how: Aggregate = "mean", k: float = 1.0) -> "RewardModelEnsemble":
        return cls([RewardModel.load(p) for p in paths], how, k)

    def score(self, sequences: list[list[int]], pad_id: int, micro_batch_size: int = 16,
              autocast_dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        """(N,) aggregated rewards and (E, N) per-member rewards of token-id sequences."""
        each = torch.stack([m.score(sequences, pad_id, micro_batch_size, autocast_dtype) for m in self.members])
        return aggregate_scores(each, self.how, self.k), each
