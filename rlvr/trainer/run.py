"""The run around the steps: evaluation before the first step and after the last, the step loop with its step line,
periodic checkpoints and evaluations, the token and CPU-time budgets, the failure streak, plots and ``summary.json``.

:class:`TrainingRun` owns that loop and the state of the run (:class:`RunState`: the CPU seconds, the evaluation
before training and the latest one), which checkpoints carry beside the trainer's own. It asks the trainer
(:class:`rlvr.trainer.trainer.RLTrainer`) for one step at a time (``step()``, which returns a :class:`StepResult`), a
checkpoint (``save()``) and a held-out evaluation (``evaluate()``); ``RLTrainer.train()`` runs one. The stages trained
on fixed data (:class:`rlvr.trainer.stage_trainer.StageTrainer`: SFT, DPO) run in the same loop: their recipes have
no rollouts, rewards or curriculum, so the keys of those (a token budget, the failure streak) keep their defaults.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.curriculum.plot import plot_curriculum
from rlvr.runs.checkpoint import latest_checkpoint
from rlvr.runs.metrics import read_metrics
from rlvr.runs.plots import plot_curves, plot_tools
from rlvr.runtime.atomic import atomic_write_text
from rlvr.runtime.cpu_time import process_tree_cpu_seconds
from rlvr.runtime.distributed import all_reduce_max
from rlvr.runtime.interrupts import raise_if_interrupted
from rlvr.trainer.progress import CollapseWatch, FailureStreaks, TrainProgress, VerifierFailedError, phase

if TYPE_CHECKING:
    from rlvr.trainer.trainer import RLTrainer


@dataclass
class StepResult:
    """What one training step returns.

    Attributes:
        metrics: the step's metrics line (``reward/*``, ``rollout/*``, ``train/*``, ``time/*``, ...).
        failure_reasons: per verifier label, the first machinery failure seen on this rank's samples (None where it
            never failed): the step line's warning and the failure streak's message.
    """

    metrics: dict[str, float]
    failure_reasons: dict[str, str | None] = field(default_factory=dict)


@dataclass
class RunState:
    """What a run carries from step to step and through its checkpoints, beside the trainer's own state.

    Attributes:
        cpu_seconds: CPU seconds of the process tree spent by the steps so far (``trainer.max_cpu_seconds``).
        eval_before: the held-out evaluation before the first step (``EvalResult.as_dict()``), or None.
        step_eval: the latest held-out evaluation and its ``step``: saved in that step's checkpoint, where it keeps the
            best checkpoint by eval beside the newest ``trainer.keep_checkpoints``.
    """

    cpu_seconds: float = 0.0
    eval_before: dict[str, Any] | None = None
    step_eval: dict[str, Any] | None = None

    def checkpoint_fields(self, step: int) -> dict[str, Any]:
        """The fields a checkpoint of ``step`` saves (``eval`` only when the latest evaluation is of that step)."""
        return {"cpu_seconds": self.cpu_seconds, "eval_before": self.eval_before,
                "eval": self.step_eval if self.step_eval and self.step_eval.get("step") == step else None}

    @classmethod
    def from_checkpoint(cls, state: dict[str, Any] | None) -> RunState:
        """The run's state as a resumed checkpoint saved it (a fresh one without a checkpoint)."""
        state = state or {}
        return cls(cpu_seconds=float(state.get("cpu_seconds", 0.0)), eval_before=state.get("eval_before"))


def write_plots(run_dir: Path, title: str, curriculum: bool,
                panels: list[tuple[str, str, list[str]]] | None = None) -> None:
    """``plots/curves.png`` (``panels``: its panels, default an RL run's) and ``plots/tools.png`` from the run's
    ``metrics.jsonl``, and ``plots/curriculum.png`` where ``curriculum`` (a run with a curriculum or dynamic sampling:
    for plain epochs it would be a flat line)."""
    records = read_metrics(run_dir)
    plot_curves(records, run_dir / "plots" / "curves.png", title=title, panels=panels)
    if curriculum:
        plot_curriculum(records, run_dir / "plots" / "curriculum.png", title=title)
    plot_tools(records, run_dir / "plots" / "tools.png", title=title)


class TrainingRun:
    """Evaluations, the step loop, the budgets, the failure streak, plots and the summary of one trainer's run.

    Args:
        trainer: a built trainer (resumed or fresh); the run's state starts from its resumed checkpoint, if any.
    """

    def __init__(self, trainer: RLTrainer) -> None:
        self.trainer = trainer
        self.recipe = trainer.recipe
        self.run_dir = trainer.run_dir
        self.is_main = trainer.dist.is_main
        self.logger = trainer.logger
        self.state = RunState.from_checkpoint(trainer.resumed_state)
        # RL runs only: an SFT or preference step has no groups, and its entropy falls by design
        steps = getattr(self.recipe.trainer, "collapse_steps", None)
        self.collapse = None if steps is None else CollapseWatch(steps, self.recipe.trainer.collapse_entropy)
        self.collapsed_at: int | None = None
        """The step at which ``trainer.stop_on_collapse`` ended the run, or None."""

    # ------------------------------------------------------------------------------------------------ budgets
    def _token_budget_spent(self) -> bool:
        budget = getattr(self.recipe.trainer, "max_tokens_generated", None)
        return budget is not None and self.trainer.tokens_generated >= budget

    def _cpu_budget_spent(self) -> bool:
        budget = self.recipe.trainer.max_cpu_seconds
        return budget is not None and self.state.cpu_seconds >= budget

    def _finished(self) -> bool:
        """``trainer.steps`` done, or the generated-token or CPU-time budget spent (same on every rank: both counts
        are reduced)."""
        return (self.trainer.step_done >= self.recipe.trainer.steps or self._token_budget_spent()
                or self._cpu_budget_spent() or self.collapsed_at is not None)

    def _count_cpu_seconds(self, loop_start_cpu_s: float, spent_before_s: float) -> None:
        """Update ``cpu_seconds`` after a step; reduced over ranks (a collective) only when a CPU budget is set."""
        spent = spent_before_s + process_tree_cpu_seconds() - loop_start_cpu_s
        self.state.cpu_seconds = all_reduce_max(spent) if self.recipe.trainer.max_cpu_seconds is not None else spent

    def _resume_hint(self) -> str:
        """How to go on after a stop: ``--resume`` where a finished checkpoint exists, else a fresh start."""
        last = latest_checkpoint(self.run_dir)
        if last is None:
            return "then start again with --overwrite: no checkpoint was written yet"
        return f"then --resume from {last.name}"

    # ------------------------------------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """Run the remaining steps with an eval before the first and after the last; returns the summary."""
        t, r = self.trainer, self.recipe
        start_time = time.perf_counter()
        evals = r.eval.enabled and t.can_evaluate
        if r.eval.enabled and not evals and self.is_main:
            print("eval skipped: pass@k needs a verifier to say what is solved, and the recipe lists none (add one "
                  "with optimise: false to log it as gold and evaluate with it)", file=sys.stderr, flush=True)
        if evals and self.state.eval_before is None:
            with phase(f"eval before training: {self._eval_what()}", self.is_main):
                result = t.evaluate()
            self.state.eval_before = result.as_dict() if result else None
            if self.state.eval_before:
                self.logger.log(0, {f"eval/{k}": v for k, v in self.state.eval_before.items()})
        progress = TrainProgress(total=r.trainer.steps, done=t.step_done, enabled=self.is_main,
                                 token_budget=getattr(r.trainer, "max_tokens_generated", None),
                                 cpu_budget_s=r.trainer.max_cpu_seconds)
        if self.is_main and not self._finished():
            if hasattr(t, "describe_step"):
                print(f"training: {t.describe_step()}; the first step line comes after step {t.step_done + 1}",
                      file=sys.stderr, flush=True)
            else:
                print(f"training: {r.trainer.steps - t.step_done} step(s) of {r.rollout.prompts_per_step} prompts x "
                      f"{r.rollout.group_size} samples; the first step line comes after step {t.step_done + 1}'s "
                      f"rollout, verify and update", file=sys.stderr, flush=True)
        loop_start_cpu_s, spent_before_s = process_tree_cpu_seconds(), self.state.cpu_seconds
        reward = getattr(r, "reward", None)
        streaks = FailureStreaks(getattr(r.trainer, "max_failed_steps", 3),
                                 reward.max_failure_rate if reward is not None else 0.5, self._resume_hint)
        try:
            with progress:
                self._loop(progress, streaks, evals, loop_start_cpu_s, spent_before_s)
        except VerifierFailedError:
            t.close()
            raise
        if t.step_done < r.trainer.steps and self.is_main:
            if self.collapsed_at is not None:
                print(f"the run stopped learning (trainer.stop_on_collapse): stopping after step {t.step_done}")
            elif self._token_budget_spent():
                print(f"token budget spent ({t.tokens_generated:,} of trainer.max_tokens_generated="
                      f"{r.trainer.max_tokens_generated:,} tokens generated): stopping after step {t.step_done}")
            else:
                print(f"CPU budget spent ({self.state.cpu_seconds:,.0f} of trainer.max_cpu_seconds="
                      f"{r.trainer.max_cpu_seconds:,.0f} CPU s): stopping after step {t.step_done}")
        eval_after = None
        if evals:
            with phase(f"eval after training: {self._eval_what()}", self.is_main):
                res = t.evaluate()
            eval_after = res.as_dict() if res else None
            if eval_after:
                self.state.step_eval = {"step": t.step_done, **eval_after}
                self.logger.log(t.step_done, {f"eval/{k}": v for k, v in eval_after.items()})
        final = self._save(final=True)
        summary = self._summary(eval_after, time.perf_counter() - start_time, final)
        t.close()
        return summary

    def _loop(self, progress: TrainProgress, streaks: FailureStreaks, evals: bool, loop_start_cpu_s: float,
              spent_before_s: float) -> None:
        """The steps, each with its metrics line, periodic eval and checkpoint; raises VerifierFailedError (before
        that step's checkpoint) when a verifier has failed on every sample for ``trainer.max_failed_steps`` steps."""
        t, r = self.trainer, self.recipe
        while not self._finished():
            raise_if_interrupted()
            result = t.step()
            metrics = result.metrics
            self._count_cpu_seconds(loop_start_cpu_s, spent_before_s)
            metrics["cpu/seconds_total"] = self.state.cpu_seconds
            step, last = t.step_done, self._finished()
            if evals and r.eval.every and step % r.eval.every == 0 and not last:
                res = t.evaluate()
                if res:
                    metrics.update({f"eval/{k}": v for k, v in res.as_dict().items()})
                    self.state.step_eval = {"step": step, **res.as_dict()}
            self.logger.log(step, metrics)
            progress.update(step, metrics, result.failure_reasons)
            streaks.update(step, metrics, result.failure_reasons)
            collapsed = None if self.collapse is None else self.collapse.update(step, metrics)
            if collapsed is not None:
                if self.is_main:
                    print(collapsed, file=sys.stderr, flush=True)
                if r.trainer.stop_on_collapse:
                    self.collapsed_at = step
                    last = True
            if r.trainer.save_every and step % r.trainer.save_every == 0 and not last:
                self._save()

    def _eval_k(self) -> int:
        return 1 if self.recipe.eval.temperature == 0 else self.recipe.eval.k

    def _eval_what(self) -> str:
        """What an evaluation covers, for its progress line."""
        describe = getattr(self.trainer, "eval_description", None)
        return describe() if describe is not None else f"{self.trainer.eval_size} prompts x {self._eval_k()}"

    def _save(self, final: bool = False) -> Path:
        """A checkpoint of the current step with the run's state in it, then the plots refreshed."""
        path = self.trainer.save(self.state.checkpoint_fields(self.trainer.step_done), final=final)
        self._plot()
        return path

    def _plot(self) -> None:
        if self.is_main:
            c = getattr(self.recipe, "curriculum", None)
            ds = getattr(self.recipe.algorithm, "dynamic_sampling", None)
            curriculum = c is not None and (c.sampler != "epoch" or bool(c.stages) or ds.enabled)
            write_plots(self.run_dir, f"{self.recipe.model.name} | {self.run_dir.name}", curriculum=curriculum,
                        panels=getattr(self.trainer, "plot_panels", None))

    def _summary(self, eval_after: dict | None, seconds: float, final: Path) -> dict[str, Any]:
        t, s = self.trainer, self.state
        summary: dict[str, Any] = {"steps": t.step_done, "stopped_learning_at": self.collapsed_at,
                                   "wall_time_s": round(seconds, 1),
                                   "tokens_generated": t.tokens_generated, "cpu_seconds": round(s.cpu_seconds, 1),
                                   "final_checkpoint": str(final),
                                   "model": str(final / "model"), "eval_before": s.eval_before,
                                   "eval_after": eval_after}
        b, a = s.eval_before, eval_after
        if b and a and "pass_at_1" in a and "pass_at_1" in b:
            diff = a["pass_at_1"] - b["pass_at_1"]
            se = math.sqrt(a["pass_at_1_se"] ** 2 + b["pass_at_1_se"] ** 2)
            summary.update(pass_at_1_change=diff, pass_at_1_change_se=se,
                           pass_at_1_change_z=diff / se if se > 0 else float("nan"))
        if self.is_main:
            atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2, default=str))
            self._plot()
        return summary
