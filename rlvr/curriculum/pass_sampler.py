"""The weighted, resumable prompt sampler behind the ``pools`` and ``difficulty`` curricula.

Each draw picks a category (a difficulty pool, a difficulty level, or one category of every eligible prompt) with the
given weights, then the least-drawn prompt of that category, so every category is walked in passes, like epochs: no
prompt repeats within a category before all its prompts have been drawn. Ties are broken by a tie key (the difficulty,
for easy-to-hard passes) and then at random.

Randomness comes from a generator seeded with ``(seed, number of earlier calls)``, so the state is two small things (a
call counter and per-prompt draw counts) and a resumed run draws exactly what a run that never stopped draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Draw:
    """The result of one :meth:`PassSampler.sample` call."""

    indices: list[int]
    """Prompt indices, in draw order."""
    categories: list[int]
    """The category each prompt was drawn from (-1: fallback, every positive-weight category was empty)."""
    fallback: int
    """Draws made from all eligible prompts because every category with weight > 0 was empty."""


class PassSampler:
    """Category-weighted draws; least-drawn prompt first within a category.

    Args:
        num_prompts: training prompts (>= 1).
        seed: base seed (any int).
        tie_key: optional (num_prompts,) key; among the least-drawn prompts of a category the smallest key wins
            (difficulty ascending gives easy-to-hard passes). ``None``: uniform random ties.
    Raises:
        ValueError: ``num_prompts`` < 1 or a ``tie_key`` of the wrong length.
    """

    def __init__(self, num_prompts: int, seed: int, tie_key: np.ndarray | None = None) -> None:
        if num_prompts < 1:
            raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
        if tie_key is not None and len(tie_key) != num_prompts:
            raise ValueError(f"tie_key has {len(tie_key)} entries for {num_prompts} prompts")
        self.num_prompts = num_prompts
        self.seed = seed % 2**63
        self.tie_key = None if tie_key is None else np.asarray(tie_key, dtype=np.float64)
        self.calls = 0
        self.draws = np.zeros(num_prompts, dtype=np.int64)

    def sample(self, k: int, category: np.ndarray, weights: np.ndarray) -> Draw:
        """Draw ``k`` prompts.

        Args:
            k: prompts to draw (>= 0).
            category: (num_prompts,) int; the category of each prompt in ``[0, C)``, or -1 for a prompt that may not
                be drawn now (e.g. outside the current stage's difficulty range).
            weights: (C,) non-negative weights; categories without eligible prompts are skipped and the rest
                renormalised.
        Raises:
            ValueError: shapes that do not match, negative weights, or no eligible prompt at all.
        """
        category = np.asarray(category, dtype=np.int64)
        weights = np.asarray(weights, dtype=np.float64)
        if category.shape != (self.num_prompts,):
            raise ValueError(f"category must have shape ({self.num_prompts},), got {category.shape}")
        if (weights < 0).any() or not np.isfinite(weights).all():
            raise ValueError(f"weights must be finite and >= 0, got {weights.tolist()}")
        if category.max(initial=-1) >= len(weights):
            raise ValueError(f"category {int(category.max())} has no weight ({len(weights)} weights)")
        eligible = np.flatnonzero(category >= 0)
        if k and not len(eligible):
            raise ValueError("no prompt is eligible to be drawn")
        rng = np.random.default_rng([self.seed, self.calls])
        self.calls += 1
        members = [np.flatnonzero(category == c) for c in range(len(weights))]
        avail = np.array([w if len(m) else 0.0 for w, m in zip(weights, members, strict=True)])
        out, cats, fallback = [], [], 0
        for _ in range(k):
            if avail.sum() > 0:
                c = int(rng.choice(len(avail), p=avail / avail.sum()))
                pool = members[c]
            else:
                c, pool = -1, eligible
                fallback += 1
            counts = self.draws[pool]
            cand = pool[counts == counts.min()]
            if self.tie_key is not None:
                keys = self.tie_key[cand]
                cand = cand[keys == keys.min()]
            pick = int(cand[rng.integers(len(cand))])
            self.draws[pick] += 1
            out.append(pick)
            cats.append(c)
        return Draw(indices=out, categories=cats, fallback=fallback)

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "draws": self.draws.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output. Raises ValueError when it was saved for another number of prompts."""
        draws = np.asarray(state["draws"], dtype=np.int64)
        if draws.shape != (self.num_prompts,):
            raise ValueError(f"the checkpoint's sampler state covers {len(draws)} training prompts, this run has "
                             f"{self.num_prompts}: resume with the same data and data.* settings")
        self.calls = int(state["calls"])
        self.draws = draws
