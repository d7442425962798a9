"""Difficulty curricula and solve-rate statistics: which training prompts a run draws, and when.

- :mod:`rlvr.curriculum.curriculum`: :class:`Curriculum`, what the trainer calls (sample, observe, staged limits).
- :mod:`rlvr.curriculum.solve_rates`: per-prompt solve-rate counts and estimates (saved in checkpoints).
- :mod:`rlvr.curriculum.pass_sampler`: the weighted, resumable sampler behind the ``pools`` and ``difficulty``
  curricula.
- :mod:`rlvr.curriculum.difficulty`: reading a dataset's difficulty field.
- :mod:`rlvr.curriculum.histogram`: solve-rate bins shared by metrics and ``rlvr filter``.
- :mod:`rlvr.curriculum.offline`: ``rlvr filter``, prompts filtered by a measured solve rate before training.
- :mod:`rlvr.curriculum.plot`: the solve-rate plot of a run.

See ``docs/curriculum.md`` for the recipe keys and measurements.
"""

from rlvr.curriculum.curriculum import POOLS, Curriculum, StepReport
from rlvr.curriculum.difficulty import CurriculumError
from rlvr.curriculum.solve_rates import SolveRateTracker

__all__ = ["POOLS", "Curriculum", "CurriculumError", "SolveRateTracker", "StepReport"]
