"""The stages of one training step, in order, and their wall-clock timer (``time/<stage>_s`` metrics).

The names are shared by the trainer's ``step()``, the timers, the metric prefixes and the README's table.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

STAGES = ("rollout", "reward", "old_logprobs", "ref_logprobs", "values", "advantages", "update", "sync", "checkpoint")


class StageTimer:
    """Wall-clock seconds per stage of one step (``time/<stage>_s`` metrics); a stage entered twice (dynamic
    sampling's rounds) adds up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start
