"""The training progress bar (rich): step, reward, solve rate, verifier failures, seconds per step and ETA; and one
line per slow phase before the first step (model load, DeepSpeed set-up, the eval before training), so a user sees it
is working.

When stderr is not a terminal (CI, ``nohup``), a plain line per step is printed instead of a live bar, and a phase is a
line when it starts and one when it ends.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

FAILURES = "reward/verifier_failures/"
"""Metric prefix of the failed verifier calls of a step, per verifier label."""


@contextmanager
def phase(text: str, enabled: bool = True, quiet_below_s: float | None = None) -> Iterator[None]:
    """Say that a slow phase runs: ``text`` when it starts (a spinner with the elapsed time on a terminal), and
    ``text: done in S s`` when it ends. Disabled on ranks other than 0.

    With ``quiet_below_s``, a phase that is usually quick (and may be followed by an input error, which should be the
    first line a user reads) prints only once it has run that long.
    """
    if not enabled:
        yield
        return
    console = Console(stderr=True)
    start = time.perf_counter()
    said = threading.Event()

    def say() -> None:
        said.set()
        print(f"{text} ...", file=sys.stderr, flush=True)

    if console.is_terminal:
        with Progress(SpinnerColumn(), TextColumn(text), TimeElapsedColumn(), console=console, transient=True) as bar:
            bar.add_task(text, total=None)
            yield
        said.set()
    elif quiet_below_s is None:
        say()
        yield
    else:
        timer = threading.Timer(quiet_below_s, say)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
    if said.is_set():
        print(f"{text}: done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)


def failure_warnings(step: int, metrics: dict[str, Any], reasons: dict[str, str | None] | None = None) -> list[str]:
    """A warning per verifier that failed on every sample of the step (its reward carries nothing then), with one of
    its reasons when known."""
    n = metrics.get("reward/samples", 0.0)
    out = []
    for key, value in metrics.items():
        if key.startswith(FAILURES) and n and value >= n:
            label = key[len(FAILURES):]
            why = (reasons or {}).get(label)
            out.append(f"WARNING: verifier {label!r} failed on all {int(n)} samples of step {step}"
                       f"{f' (e.g. {why[:200]})' if why else ''}; the reasons are in samples/step-{step}.jsonl")
    return out


class VerifierFailedError(ValueError):
    """A verifier failed on every sample of ``trainer.max_failed_steps`` steps in a row (one line: the verifier, its
    first failure and what to do)."""


class FailureStreaks:
    """Counts, per verifier label, the steps in a row on which it failed on every sample, with the first failure of
    the streak. The counts come from metrics summed over ranks, so every rank stops at the same step."""

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
        self._streaks: dict[str, tuple[int, str | None, int]] = {}  # label -> (steps, first reason, first step)

    def update(self, step: int, metrics: dict[str, Any], reasons: dict[str, str | None] | None = None) -> None:
        """Record step ``step``'s metrics.

        Raises:
            VerifierFailedError: a verifier failed on every sample of ``max_steps`` steps in a row.
        """
        n = metrics.get("reward/samples", 0.0)
        for key, value in metrics.items():
            if not key.startswith(FAILURES):
                continue
            label = key[len(FAILURES):]
            if not (n and value >= n):
                self._streaks.pop(label, None)
                continue
            count, why, first = self._streaks.get(label, (0, (reasons or {}).get(label), step))
            self._streaks[label] = (count + 1, why, first)
            if count + 1 >= self.max_steps:
                raise VerifierFailedError(
                    f"verifier {label!r} failed on every sample of steps {first}-{step} "
                    f"(trainer.max_failed_steps={self.max_steps}); first failure: "
                    f"{(why or 'see samples/step-' + str(first) + '.jsonl')[:300]}; the run stopped without saving "
                    f"these steps (fix the verifier, then --resume from the last checkpoint)")


class TrainProgress:
    """Context manager; ``update(step, metrics)`` after each step. Disabled on ranks other than 0."""

    def __init__(self, total: int, done: int = 0, enabled: bool = True, token_budget: int | None = None,
                 cpu_budget_s: float | None = None) -> None:
        self.enabled = enabled
        self.total = total
        self.token_budget = token_budget
        self.cpu_budget_s = cpu_budget_s
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
        failed = {k[len(FAILURES):]: v for k, v in metrics.items() if k.startswith(FAILURES) and v}
        if failed:
            n = metrics.get("reward/samples", float("nan"))
            parts.append("failed: " + ",".join(f"{label}={v:.0f}/{n:.0f}" for label, v in failed.items()))
        return " ".join(parts)

    def update(self, step: int, metrics: dict[str, Any], failure_reasons: dict[str, str | None] | None = None) -> None:
        """Advance the bar (or print the step line), then warn about verifiers that failed on every sample."""
        if not self.enabled:
            return
        stats = self.format_stats(metrics)
        if self.token_budget and "rollout/tokens_generated_total" in metrics:
            stats += f" tokens={metrics['rollout/tokens_generated_total']:,.0f}/{self.token_budget:,}"
        if self.cpu_budget_s and "cpu/seconds_total" in metrics:
            stats += f" cpu={metrics['cpu/seconds_total']:,.0f}/{self.cpu_budget_s:,.0f}s"
        self._progress.update(self._task, completed=step, stats=stats)
        if not self.live:
            print(f"step {step}/{self.total} {stats}", file=sys.stderr, flush=True)
        for line in failure_warnings(step, metrics, failure_reasons):
            if self.live:
                self.console.print(line, style="bold yellow", markup=False, highlight=False)
            else:
                print(line, file=sys.stderr, flush=True)
