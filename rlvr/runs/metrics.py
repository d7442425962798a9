"""Per-step metrics: one JSON line per step in ``metrics.jsonl`` and the same scalars in TensorBoard.

Metric names are grouped by stage prefix (``rollout/``, ``reward/``, ``train/``, ``time/``, ``eval/``), the stage names
of the training step, so one grep finds a stage's code, timer and curves.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class MetricsLogger:
    """Writes metrics of rank 0 (other ranks pass ``enabled=False`` and write nothing).

    On resume, :meth:`truncate_after` drops lines of steps after the checkpoint, so the file holds each step once, and
    restarts TensorBoard with ``purge_step``: TensorBoard then discards the old events of those steps.
    """

    def __init__(self, run_dir: Path, enabled: bool = True) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.enabled = enabled
        self._tb = None
        if enabled:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def truncate_after(self, step: int) -> None:
        """Keep only lines (and TensorBoard events) with ``step <= step``: steps lost in a crash, or after an older
        checkpoint resumed with ``--resume-from``, are redone by the resumed run."""
        if not self.enabled:
            return
        from torch.utils.tensorboard import SummaryWriter

        log_dir = self._tb.log_dir
        self._tb.close()
        # a SessionLog.START at step+1: TensorBoard drops every earlier-written event of steps >= step + 1
        self._tb = SummaryWriter(log_dir=log_dir, purge_step=step + 1)
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= step]
        self.path.write_text("".join(line + "\n" for line in kept))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": step, **metrics}
        with self.path.open("a") as fh:
            fh.write(json.dumps(record, default=float) + "\n")
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self._tb.add_scalar(key, value, step)
        self._tb.flush()

    def histogram(self, tag: str, values: list[float], step: int) -> None:
        if self.enabled and values:
            import numpy as np

            self._tb.add_histogram(tag, np.asarray(values, dtype=np.float32), step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All records of ``run_dir/metrics.jsonl`` (empty when the file is missing)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
