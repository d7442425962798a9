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
from collections.abc import Callable, Iterator
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

FAILURES = "reward/infra_failures/"
"""Metric prefix of a step's failures of the machinery (a verifier raised or timed out, a sandbox broke), per verifier
label."""
FAILURE_RATE = "reward/infra_failure_rate"
"""Metric: the fraction of a step's samples with a failure of the machinery."""


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
    """More than ``reward.max_failure_rate`` of the samples failed for the machinery on ``trainer.max_failed_steps``
    steps in a row (one line: the failing verifiers, the first failure and what to do)."""


class FailureStreaks:
    """Counts the steps in a row on which more than ``max_rate`` of the samples failed for the machinery, with the
    verifiers that failed and the first failure of the streak. The counts come from metrics summed over ranks, so every
    rank stops at the same step.

    Args:
        max_steps: failed steps in a row that stop the run (``trainer.max_failed_steps``, >= 1).
        max_rate: the failure fraction above which a step is failed (``reward.max_failure_rate``, in [0, 1]).
        resume_hint: called when the run stops: what the message says about continuing (``--resume`` only where a
            checkpoint exists).
    """

    def __init__(self, max_steps: int, max_rate: float = 0.5,
                 resume_hint: Callable[[], str] = lambda: "then --resume from the last checkpoint") -> None:
        self.max_steps = max_steps
        self.max_rate = max_rate
        self.resume_hint = resume_hint
        self._count = 0
        self._first: tuple[int, str | None] = (0, None)  # first step of the streak, its first reason
        self._labels: dict[str, None] = {}  # failing verifiers of the streak, in order of appearance

    def update(self, step: int, metrics: dict[str, Any], reasons: dict[str, str | None] | None = None) -> None:
        """Record step ``step``'s metrics.

        Raises:
            VerifierFailedError: more than ``max_rate`` of the samples failed on ``max_steps`` steps in a row.
        """
        rate = metrics.get(FAILURE_RATE, 0.0)
        if not metrics.get("reward/samples") or not rate > self.max_rate:
            self._count, self._labels = 0, {}
            return
        failing = [key[len(FAILURES):] for key, value in metrics.items() if key.startswith(FAILURES) and value]
        if self._count == 0:
            self._first = (step, next((reasons[lbl] for lbl in failing if (reasons or {}).get(lbl)), None))
        self._count += 1
        self._labels.update(dict.fromkeys(failing))
        if self._count >= self.max_steps:
            first, why = self._first
            steps = f"step {step}" if first == step else f"steps {first}-{step}"
            names = ", ".join(repr(lbl) for lbl in self._labels) or "a verifier"
            raise VerifierFailedError(
                f"{names} failed for the machinery on more than {self.max_rate:.0%} of the samples of {steps} "
                f"({rate:.0%} on step {step}; reward.max_failure_rate={self.max_rate:g}, "
                f"trainer.max_failed_steps={self.max_steps}); first failure: "
                f"{(why or 'see samples/step-' + str(first) + '.jsonl')[:300]}; the run stopped without saving "
                f"these steps (fix the verifier or its sandbox, {self.resume_hint()})")


class CollapseWatch:
    """Notices a run that has stopped learning: ``steps`` steps in a row on which every group's rewards were equal
    (``reward/zero_var_groups``, before dynamic sampling's filter where it runs, is 1: the group-relative advantage is
    0 everywhere) or the policy's mean entropy was under ``entropy_floor`` (it samples one answer). The counts come from
    metrics summed over ranks, so every rank sees the same.

    Args:
        steps: steps in a row (``trainer.collapse_steps``). entropy_floor: nats (``trainer.collapse_entropy``).
    """

    def __init__(self, steps: int, entropy_floor: float) -> None:
        self.steps, self.entropy_floor = steps, entropy_floor
        self._flat = self._low = 0
        self.warned = False

    def update(self, step: int, metrics: dict[str, Any]) -> str | None:
        """Record step ``step``; returns the one-line warning the first time the run is seen collapsed, else None."""
        zero_var = metrics.get("rollout/zero_var_groups_before_filter", metrics.get("reward/zero_var_groups"))
        entropy = metrics.get("train/entropy")
        self._flat = self._flat + 1 if zero_var is not None and zero_var >= 1.0 - 1e-9 else 0
        self._low = self._low + 1 if entropy is not None and entropy < self.entropy_floor else 0
        if self.warned or max(self._flat, self._low) < self.steps:
            return None
        self.warned = True
        if self._flat >= self.steps:
            solve = metrics.get("reward/solve_rate")
            which = ("every sample solves its prompt" if solve is not None and solve >= 1.0 - 1e-9 else
                     "no sample solves its prompt" if solve is not None and solve <= 1e-9 else
                     "each group is all solved or all failed")
            what = (f"every group's rewards have been equal for {self._flat} steps ({which}): the group-relative "
                    f"advantage is 0 and the updates carry nothing")
        else:
            what = (f"the policy's entropy has been under {self.entropy_floor:g} nats a token for {self._low} steps "
                    f"(it samples one answer)")
        # dynamic sampling first: on the CPU demo's collapsing seed it learned where a KL penalty did not
        # (benchmarks/results/demo_seeds.md)
        return (f"WARNING: the run has stopped learning at step {step}: {what}; try dynamic sampling "
                f"(algorithm.dynamic_sampling.enabled: true, which trains on groups whose rewards differ), a larger "
                f"rollout.group_size or temperature, prompts nearer a 50% solve rate, a lower optim.lr, or a KL or "
                f"entropy term (algorithm.kl.beta, algorithm.entropy_coef) (trainer.stop_on_collapse ends a run "
                f"here)")


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
        if "reward/mean" not in metrics and "train/loss" in metrics:  # a stage on fixed data (SFT, DPO)
            parts = [f"loss={metrics['train/loss']:.4f}"]
            for key, name in (("train/accuracy", "acc"), ("train/margin", "margin"), ("eval/loss", "eval_loss"),
                              ("eval/accuracy", "eval_acc"), ("eval/pass_at_1", "eval_pass@1")):
                if key in metrics:
                    parts.append(f"{name}={metrics[key]:.3f}")
            return " ".join(parts + [f"{secs:.1f}s/step"])
        if metrics.get("train/skipped_empty_batch"):  # its reward and length are of no sample: not 0
            groups = metrics.get("rollout/groups_generated", 0.0)
            return (f"no group kept: dynamic sampling filtered out all {groups:.0f} groups sampled (each all right "
                    f"or all wrong); update skipped {secs:.1f}s/step")
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
