"""The stages of one training step, in order, and their wall-clock timer (``time/<stage>_s`` metrics).

The names are shared by the trainer's ``step()``, the timers and the metric prefixes.
``update`` is the policy's update; ``update_critic`` (PPO only) the critic's, timed inside it and not counted in it;
``tools`` (``rollout.tools`` or ``rollout.environment`` only) the time the rollout waited for the tool calls and the
environment to answer, inside ``rollout`` and not counted in it (under ``rollout.turn_scheduling: continuous`` only
the waits with nothing decoding: the environment answers while the engine decodes).
With ``rollout.max_off_policy_steps`` >= 1, ``rollout``, ``tools`` and ``reward`` run in the collector's thread while
the trainer works (metrics ``rollout/collector_<stage>_s``), and the step has ``rollout_wait`` instead: the seconds the
trainer waited for its batch.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

STAGES = ("rollout_wait", "rollout", "tools", "reward", "old_logprobs", "ref_logprobs", "values", "advantages",
          "update", "update_critic", "sync", "checkpoint")


class StageTimer:
    """Wall-clock seconds per stage of one step (``time/<stage>_s`` metrics); a stage entered twice (dynamic
    sampling's rounds) adds up. A stage entered inside another is counted only as itself: the enclosing stage's
    seconds exclude it, so the stages of a step add up to the step's time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._nested: list[float] = []  # per open stage: seconds spent in stages nested inside it

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        self._nested.append(0.0)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            inner = self._nested.pop()
            self.seconds[stage] = self.seconds.get(stage, 0.0) + elapsed - inner
            if self._nested:
                self._nested[-1] += elapsed

    def add(self, stage: str, seconds: float) -> None:
        """Count ``seconds`` spent inside the open stage as ``stage`` (measured by the caller, e.g. the tool calls
        of a rollout): the open stage's seconds exclude them."""
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        if self._nested:
            self._nested[-1] += seconds
