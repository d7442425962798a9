"""The curriculum a training run follows: which prompts to draw next, the response-length limit of each step, and the
per-prompt solve-rate statistics both rest on.

What the trainer does each step::

    indices = curriculum.sample(num_prompts, step)          # training-split indices
    ... rollout with curriculum.max_new_tokens(step), verify ...
    curriculum.observe([(prompt_index, solved, group_size), ...])   # every group generated, kept or not
    report = curriculum.end_step(step)                       # metrics and histograms of the step

Samplers (``curriculum.sampler``):

- ``epoch``: seeded permutations (:class:`rlvr.curriculum.epoch_sampler.EpochSampler`), the default.
- ``pools``: prompts bucketed easy / normal / hard by their solve-rate estimate and drawn with ``pools.weights``;
  prompts without statistics count as normal.
- ``difficulty``: by the dataset's difficulty field: ``order`` walks each pass easiest first, ``weight`` draws
  difficulty values with the (staged) weights.

Stages (``curriculum.stages``) set, from a step on, the response-length limit and the difficulty range drawn from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlvr.config import CurriculumConfig, StageConfig
from rlvr.curriculum.difficulty import CurriculumError, difficulties
from rlvr.curriculum.epoch_sampler import EpochSampler
from rlvr.curriculum.histogram import BIN_LABELS, histogram
from rlvr.curriculum.pass_sampler import PassSampler
from rlvr.curriculum.solve_rates import SolveRateTracker

POOLS: tuple[str, ...] = ("easy", "normal", "hard")


@dataclass
class StepReport:
    """What :meth:`Curriculum.end_step` hands the trainer's logger."""

    metrics: dict[str, float]
    histograms: dict[str, list[float]] = field(default_factory=dict)


class Curriculum:
    """Prompt order, staged limits and solve-rate statistics of one run (identical on every rank).

    Args:
        cfg: the recipe's ``curriculum`` section.
        rows: the training split's dataset rows, in prompt-index order.
        seed: the run's seed.
        max_new_tokens: ``rollout.max_new_tokens``, the limit outside any stage.
    Raises:
        CurriculumError: a missing or unreadable difficulty or prior field, a stage whose difficulty range holds no
            prompt, or a difficulty weight that no prompt can use.
    """

    def __init__(self, cfg: CurriculumConfig, rows: Sequence[dict[str, Any]], seed: int, max_new_tokens: int) -> None:
        self.cfg = cfg
        self.num_prompts = len(rows)
        self.default_max_new_tokens = max_new_tokens
        self.tracker = SolveRateTracker(self.num_prompts, cfg.solve_rate.ema, self._priors(rows))
        self.difficulty = difficulties(rows, cfg.difficulty.field) if cfg.difficulty is not None else None
        self._levels = np.unique(self.difficulty) if self.difficulty is not None else np.zeros(0)
        restricts = any(s.min_difficulty is not None or s.max_difficulty is not None for s in cfg.stages)
        self.sampler: EpochSampler | PassSampler
        if cfg.sampler == "epoch" and not restricts:
            self.sampler = EpochSampler(self.num_prompts, seed=seed)
        else:
            ordered = cfg.sampler == "difficulty" and cfg.difficulty is not None and cfg.difficulty.mode == "order"
            self.sampler = PassSampler(self.num_prompts, seed=seed, tie_key=self.difficulty if ordered else None)
        self._check_stages()
        self._reset_step()

    # ------------------------------------------------------------------------------------------------ set-up
    def _priors(self, rows: Sequence[dict[str, Any]]) -> list[float] | None:
        name = self.cfg.solve_rate.prior_field
        if name is None:
            return None
        out = []
        for i, row in enumerate(rows):
            value = row.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise CurriculumError(f"curriculum.solve_rate.prior_field={name!r}: training row {i} holds {value!r}, "
                                      f"not a solve rate in [0, 1] (rlvr filter writes one per row)")
            out.append(float(value))
        return out

    def _check_stages(self) -> None:
        """Every stage must leave prompts to draw, and every difficulty weight must name a difficulty that exists."""
        d = self.cfg.difficulty
        weighted = self.cfg.sampler == "difficulty" and d is not None and d.mode == "weight"
        shown = ", ".join(f"{v:g}" for v in self._levels[:20])
        for where, weights in [("curriculum.difficulty.weights", d.weights if d else None)] + [
                (f"curriculum.stages (step {s.step}).difficulty_weights", s.difficulty_weights)
                for s in self.cfg.stages]:
            for value in weights or {}:
                if value not in self._levels:
                    raise CurriculumError(f"{where} has a weight for difficulty {value:g}, which no training prompt "
                                          f"has (difficulties: {shown})")
        for step in [0] + [s.step for s in self.cfg.stages]:
            stage = self.stage_at(step)
            eligible = self._eligible(stage)
            where = f"curriculum.stages (step {stage.step})" if stage else "before the first curriculum stage"
            if not eligible.any():
                raise CurriculumError(f"{where}: no training prompt has a difficulty in [{stage.min_difficulty}, "
                                      f"{stage.max_difficulty}] (difficulties: {shown})")
            if weighted:
                w = self._level_weights(stage)[np.searchsorted(self._levels, self.difficulty)]
                if not (w[eligible] > 0).any():
                    raise CurriculumError(f"{where}: every prompt it may draw has difficulty weight 0")

    # ------------------------------------------------------------------------------------------------ stages
    def stage_at(self, step: int) -> StageConfig | None:
        """The stage in force for the step that starts after ``step`` steps are done (None before the first)."""
        current = None
        for stage in self.cfg.stages:
            if stage.step <= step:
                current = stage
        return current

    def max_new_tokens(self, step: int) -> int:
        """Response-length limit (tokens) of step ``step`` (0-based)."""
        stage = self.stage_at(step)
        if stage is not None and stage.max_new_tokens is not None:
            return stage.max_new_tokens
        return self.default_max_new_tokens

    def _eligible(self, stage: StageConfig | None) -> np.ndarray:
        mask = np.ones(self.num_prompts, dtype=bool)
        if stage is not None and self.difficulty is not None:
            if stage.min_difficulty is not None:
                mask &= self.difficulty >= stage.min_difficulty
            if stage.max_difficulty is not None:
                mask &= self.difficulty <= stage.max_difficulty
        return mask

    def _level_weights(self, stage: StageConfig | None) -> np.ndarray:
        """(L,) weight of each distinct difficulty value (values not listed get 0)."""
        weights = (stage.difficulty_weights if stage is not None and stage.difficulty_weights is not None
                   else self.cfg.difficulty.weights) or {}
        return np.array([float(weights.get(float(v), 0.0)) for v in self._levels])

    # ------------------------------------------------------------------------------------------------ pools
    def pools(self) -> np.ndarray:
        """(num_prompts,) pool index into :data:`POOLS` from the current solve-rate estimates."""
        p = self.cfg.pools
        known = self.tracker.known(p.min_samples)
        est = self.tracker.estimate
        out = np.ones(self.num_prompts, dtype=np.int64)  # normal, including prompts without statistics
        out[known & (est >= p.easy_min)] = 0
        out[known & (est <= p.hard_max)] = 2
        return out

    # ------------------------------------------------------------------------------------------------ sampling
    def sample(self, k: int, step: int) -> list[int]:
        """The next ``k`` training-prompt indices for step ``step`` (0-based); the same on every rank."""
        pools = self.pools()
        if isinstance(self.sampler, EpochSampler):
            indices = self.sampler.sample(k)
        else:
            stage = self.stage_at(step)
            if self.cfg.sampler == "pools":
                category, weights = pools.copy(), np.array([getattr(self.cfg.pools.weights, n) for n in POOLS])
            elif self.cfg.sampler == "difficulty" and self.cfg.difficulty.mode == "weight":
                category, weights = np.searchsorted(self._levels, self.difficulty), self._level_weights(stage)
            else:
                category, weights = np.zeros(self.num_prompts, dtype=np.int64), np.ones(1)
            category[~self._eligible(stage)] = -1
            draw = self.sampler.sample(k, category, weights)
            indices = draw.indices
            self._fallback += draw.fallback
        for i in indices:
            self._drawn[int(pools[i])] += 1
        return indices

    def observe(self, groups: Sequence[tuple[int, int, int]]) -> None:
        """Record rollout groups ``(prompt index, solved samples, samples)``: every group generated, including the
        ones dynamic sampling drops (those are what mark a prompt easy or hard)."""
        for index, solved, samples in groups:
            self._group_rates.append(self.tracker.observe(int(index), int(solved), int(samples)))

    def _reset_step(self) -> None:
        self._group_rates: list[float] = []
        self._drawn = [0] * len(POOLS)
        self._fallback = 0

    def end_step(self, step: int) -> StepReport:
        """Metrics of step ``step`` (0-based) and the histograms to log; resets the step's counters.

        Metrics (``curriculum/`` prefix): ``group_solve_rate/<bin>`` share of the step's groups per solve-rate bin
        (:data:`rlvr.curriculum.histogram.BIN_LABELS`), ``pool_<easy|normal|hard>`` prompts per pool (eligible in the
        stage), ``drawn_<pool>`` share of the step's draws from each pool, ``fallback_draws``, ``prompts_with_stats``,
        ``eligible_prompts``, ``max_new_tokens``, ``stage`` (index into ``curriculum.stages``, -1 before the first).
        """
        stage = self.stage_at(step)
        eligible = self._eligible(stage)
        pools = self.pools()
        counts = histogram(self._group_rates)
        ngroups = max(len(self._group_rates), 1)
        ndrawn = max(sum(self._drawn), 1)
        metrics: dict[str, float] = {
            f"curriculum/group_solve_rate/{label}": c / ngroups for label, c in zip(BIN_LABELS, counts, strict=True)}
        for i, name in enumerate(POOLS):
            metrics[f"curriculum/pool_{name}"] = float(((pools == i) & eligible).sum())
            metrics[f"curriculum/drawn_{name}"] = self._drawn[i] / ndrawn
        known = self.tracker.known(1)
        metrics.update({
            "curriculum/fallback_draws": float(self._fallback),
            "curriculum/prompts_with_stats": float(known.sum()),
            "curriculum/eligible_prompts": float(eligible.sum()),
            "curriculum/max_new_tokens": float(self.max_new_tokens(step)),
            "curriculum/stage": float(self.cfg.stages.index(stage)) if stage is not None else -1.0,
        })
        histograms = {"curriculum/group_solve_rate": list(self._group_rates),
                      "curriculum/prompt_solve_rate": self.tracker.estimate[known].tolist()}
        self._reset_step()
        return StepReport(metrics=metrics, histograms=histograms)

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The sampler's position and the solve-rate table (JSON-safe)."""
        return {"sampler": self.sampler.state_dict(), "solve_rates": self.tracker.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output. Raises ValueError when it was saved for other data."""
        self.sampler.load_state_dict(state["sampler"])
        self.tracker.load_state_dict(state["solve_rates"])
