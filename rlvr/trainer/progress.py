"""The training progress bar (rich): step, reward, solve rate, seconds per step and ETA.

When stdout is not a terminal (CI, ``nohup``), a plain line per step is printed instead of a live bar.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class TrainProgress:
    """Context manager; ``update(step, metrics)`` after each step. Disabled on ranks other than 0."""

    def __init__(self, total: int, done: int = 0, enabled: bool = True, token_budget: int | None = None) -> None:
        self.enabled = enabled
        self.total = total
        self.token_budget = token_budget
        self.console = Console(stderr=True)
        self.live = enabled and self.console.is_terminal
        self._progress = Progress(
            TextColumn("[bold]step"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=self.console,
            disable=not self.live)
        self._task = self._progress.add_task("train", total=total, completed=done, stats="")

    def __enter__(self) -> "TrainProgress":
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(*exc)

    @staticmethod
    def format_stats(metrics: dict[str, Any]) -> str:
        secs = sum(v for k, v in metrics.items() if k.startswith("time/"))
        parts = [f"reward={metrics.get('reward/mean', float('nan')):.3f}",
                 f"solve={metrics.get('reward/solve_rate', float('nan')):.3f}",
                 f"len={metrics.get('rollout/response_length', float('nan')):.1f}",
                 f"{secs:.1f}s/step"]
        if "train/kl" in metrics:
            parts.insert(2, f"kl={metrics['train/kl']:.4f}")
        if "eval/pass_at_1" in metrics:
            parts.append(f"eval_pass@1={metrics['eval/pass_at_1']:.3f}")
        return " ".join(parts)

    def update(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        stats = self.format_stats(metrics)
        if self.token_budget and "rollout/tokens_generated_total" in metrics:
            stats += f" tokens={metrics['rollout/tokens_generated_total']:,.0f}/{self.token_budget:,}"
        self._progress.update(self._task, completed=step, stats=stats)
        if not self.live:
            print(f"step {step}/{self.total} {stats}", file=sys.stderr, flush=True)
