"""Per-prompt solve-rate statistics, updated from every rollout group and saved in checkpoints.

With binary rewards, a prompt the policy always (or never) solves gives its whole group one reward: zero advantage,
no gradient. Knowing each prompt's solve rate lets the sampler (:mod:`rlvr.curriculum.pass_sampler`) feed prompts of the
right difficulty and lets the metrics show how much of a step's compute could carry gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class SolveRateTracker:
    """Counts and an exponential moving estimate of the solve rate of each training prompt.

    A "solved" sample is one the recipe's solved verifier scored 1 (``reward.solved_verifier``). Prompts are keyed by
    their index in the training split (:attr:`rlvr.data.prompts.Prompt.index`).

    Args:
        num_prompts: training prompts (>= 1).
        ema: weight of the newest group in the estimate, in (0, 1]; 1 keeps only the newest group's rate.
        prior: optional starting estimate per prompt (``None`` entries: no prior), e.g. ``rlvr filter``'s
            ``solve_rate`` column. A prior counts as trusted by the pools (see :meth:`known`).
    Raises:
        ValueError: ``num_prompts`` < 1, ``ema`` outside (0, 1], a prior of the wrong length or outside [0, 1].
    """

    def __init__(self, num_prompts: int, ema: float = 0.5, prior: Sequence[float | None] | None = None) -> None:
        if num_prompts < 1:
            raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
        if not 0.0 < ema <= 1.0:
            raise ValueError(f"ema must be in (0, 1], got {ema}")
        self.num_prompts = num_prompts
        self.ema = ema
        self.samples = np.zeros(num_prompts, dtype=np.int64)    # samples generated for each prompt
        self.solved = np.zeros(num_prompts, dtype=np.int64)     # of which solved
        self.groups = np.zeros(num_prompts, dtype=np.int64)     # groups (rollouts of G samples)
        self.estimate = np.full(num_prompts, np.nan)            # EMA solve rate; NaN = no statistics yet
        self.has_prior = np.zeros(num_prompts, dtype=bool)
        if prior is not None:
            if len(prior) != num_prompts:
                raise ValueError(f"prior has {len(prior)} entries for {num_prompts} prompts")
            for i, p in enumerate(prior):
                if p is None:
                    continue
                if not 0.0 <= float(p) <= 1.0:
                    raise ValueError(f"prior solve rate of prompt {i} is {p}, outside [0, 1]")
                self.estimate[i] = float(p)
                self.has_prior[i] = True

    def observe(self, index: int, solved: int, samples: int) -> float:
        """Record one group of ``samples`` completions of prompt ``index``, ``solved`` of them solved.

        Returns:
            the group's solve rate ``solved / samples``.
        Raises:
            IndexError: ``index`` outside the training split. ValueError: ``samples`` < 1 or ``solved`` outside
            [0, samples].
        """
        if not 0 <= index < self.num_prompts:
            raise IndexError(f"prompt index {index} outside the {self.num_prompts} training prompts")
        if samples < 1 or not 0 <= solved <= samples:
            raise ValueError(f"need 0 <= solved <= samples and samples >= 1, got solved={solved}, samples={samples}")
        rate = solved / samples
        self.samples[index] += samples
        self.solved[index] += solved
        self.groups[index] += 1
        old = self.estimate[index]
        self.estimate[index] = rate if np.isnan(old) else self.ema * rate + (1.0 - self.ema) * old
        return rate

    def known(self, min_samples: int = 1) -> np.ndarray:
        """(num_prompts,) bool: prompts with an estimate from a prior or from at least ``min_samples`` samples."""
        return ~np.isnan(self.estimate) & ((self.samples >= min_samples) | self.has_prior)

    def rate(self, index: int) -> float | None:
        """The current estimate of prompt ``index``, or None without statistics."""
        value = self.estimate[index]
        return None if np.isnan(value) else float(value)

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state holding only prompts with statistics (floats round-trip exactly through JSON)."""
        rows = np.flatnonzero((self.groups > 0) | self.has_prior)
        return {"num_prompts": self.num_prompts, "ema": self.ema, "index": rows.tolist(),
                "samples": self.samples[rows].tolist(), "solved": self.solved[rows].tolist(),
                "groups": self.groups[rows].tolist(), "estimate": [float(x) for x in self.estimate[rows]],
                "prior": self.has_prior[rows].tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output. Raises ValueError when it was saved for another number of prompts."""
        if int(state["num_prompts"]) != self.num_prompts:
            raise ValueError(f"the checkpoint's solve-rate table covers {state['num_prompts']} training prompts, this "
                             f"run has {self.num_prompts}: resume with the same data and data.* settings")
        rows = np.asarray(state["index"], dtype=np.int64)
        self.samples[:] = 0
        self.solved[:] = 0
        self.groups[:] = 0
        self.estimate[:] = np.nan
        self.has_prior[:] = False
        self.samples[rows] = state["samples"]
        self.solved[rows] = state["solved"]
        self.groups[rows] = state["groups"]
        self.estimate[rows] = np.asarray(state["estimate"], dtype=np.float64)
        self.has_prior[rows] = state["prior"]
