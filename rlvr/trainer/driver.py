"""The run around the steps: eval before the first step and after the last, the step loop with its step line,
periodic checkpoints and evals, the token and CPU-time budgets, plots and ``summary.json``.

:class:`RunDriver` drives an :class:`rlvr.trainer.trainer.RLTrainer`, which does one step (``step()``), saves a
checkpoint (``save()``) and evaluates (``evaluate()``); ``RLTrainer.train()`` runs it.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.runs.atomic import atomic_write_text
from rlvr.runs.cpu_time import process_tree_cpu_seconds
from rlvr.trainer.distributed import all_reduce_max
from rlvr.trainer.progress import FailureStreaks, TrainProgress, VerifierFailedError, phase

if TYPE_CHECKING:
    from rlvr.trainer.trainer import RLTrainer


class RunDriver:
    """Evals, the step loop, the budgets and the summary of one trainer's run."""

    def __init__(self, trainer: RLTrainer) -> None:
        self.trainer = trainer

    def _budget_spent(self, tokens: int) -> bool:
        t = self.trainer
        budget = t.recipe.trainer.max_tokens_generated
        return budget is not None and tokens >= budget

    def _cpu_budget_spent(self) -> bool:
        t = self.trainer
        budget = t.recipe.trainer.max_cpu_seconds
        return budget is not None and t.cpu_seconds >= budget

    def _finished(self) -> bool:
        """``trainer.steps`` done, or the generated-token or CPU-time budget spent (same on every rank: both counts
        are reduced)."""
        t = self.trainer
        return (t.step_done >= t.recipe.trainer.steps or self._budget_spent(t.tokens_generated)
                or self._cpu_budget_spent())

    def _count_cpu_seconds(self, loop_start_cpu_s: float, spent_before_s: float) -> None:
        """Update ``cpu_seconds`` after a step; reduced over ranks (a collective) only when a CPU budget is set."""
        t = self.trainer
        spent = spent_before_s + process_tree_cpu_seconds() - loop_start_cpu_s
        t.cpu_seconds = all_reduce_max(spent) if t.recipe.trainer.max_cpu_seconds is not None else spent

    # ------------------------------------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """Run the remaining steps with an eval before the first and after the last; returns the summary."""
        t = self.trainer
        r = t.recipe
        start_time = time.perf_counter()
        evals = r.eval.enabled and t.solved_label is not None
        if r.eval.enabled and not evals and t.dist.is_main:
            print("eval skipped: pass@k needs a verifier to say what is solved, and the recipe lists none (add one "
                  "with optimise: false to log it as gold and evaluate with it)", file=sys.stderr, flush=True)
        if evals and t.eval_before is None:
            k = 1 if r.eval.temperature == 0 else r.eval.k
            with phase(f"eval before training: {len(t.prompt_set.eval)} prompts x {k}", t.dist.is_main):
                result = t.evaluate()
            t.eval_before = result.as_dict() if result else None
            if t.eval_before:
                t.logger.log(0, {f"eval/{k}": v for k, v in t.eval_before.items()})
        progress = TrainProgress(total=r.trainer.steps, done=t.step_done, enabled=t.dist.is_main,
                                 token_budget=r.trainer.max_tokens_generated, cpu_budget_s=r.trainer.max_cpu_seconds)
        if t.dist.is_main and not self._finished():
            print(f"training: {r.trainer.steps - t.step_done} step(s) of {r.rollout.prompts_per_step} prompts x "
                  f"{r.rollout.group_size} samples; the first step line comes after step {t.step_done + 1}'s "
                  f"rollout, verify and update", file=sys.stderr, flush=True)
        loop_start_cpu_s, spent_before_s = process_tree_cpu_seconds(), t.cpu_seconds
        streaks = FailureStreaks(r.trainer.max_failed_steps)
        try:
            with progress:
                self._loop(progress, streaks, evals, loop_start_cpu_s, spent_before_s)
        except VerifierFailedError:
            t.logger.close()
            t.rewards.close()
            t._release()
            raise
        if t.step_done < r.trainer.steps and t.dist.is_main:
            if self._budget_spent(t.tokens_generated):
                print(f"token budget spent ({t.tokens_generated:,} of trainer.max_tokens_generated="
                      f"{r.trainer.max_tokens_generated:,} tokens generated): stopping after step {t.step_done}")
            else:
                print(f"CPU budget spent ({t.cpu_seconds:,.0f} of trainer.max_cpu_seconds="
                      f"{r.trainer.max_cpu_seconds:,.0f} CPU s): stopping after step {t.step_done}")
        eval_after = None
        if evals:
            with phase(f"eval after training: {len(t.prompt_set.eval)} prompts x "
                       f"{1 if r.eval.temperature == 0 else r.eval.k}", t.dist.is_main):
                res = t.evaluate()
            eval_after = res.as_dict() if res else None
            if eval_after:
                t.step_eval = {"step": t.step_done, **eval_after}
                t.logger.log(t.step_done, {f"eval/{k}": v for k, v in eval_after.items()})
        final = t.save(final=True)
        summary = self._summary(eval_after, time.perf_counter() - start_time, final)
        t.logger.close()
        t.rewards.close()
        t._release()
        return summary

    def _loop(self, progress: TrainProgress, streaks: FailureStreaks, evals: bool, loop_start_cpu_s: float,
              spent_before_s: float) -> None:
        """The steps, each with its metrics line, periodic eval and checkpoint; raises VerifierFailedError (before
        that step's checkpoint) when a verifier has failed on every sample for ``trainer.max_failed_steps`` steps."""
        t = self.trainer
        r = t.recipe
        while not self._finished():
            metrics = t.step()
            self._count_cpu_seconds(loop_start_cpu_s, spent_before_s)
            metrics["cpu/seconds_total"] = t.cpu_seconds
            step, last = t.step_done, self._finished()
            if evals and r.eval.every and step % r.eval.every == 0 and not last:
                res = t.evaluate()
                if res:
                    metrics.update({f"eval/{k}": v for k, v in res.as_dict().items()})
                    t.step_eval = {"step": step, **res.as_dict()}
            t.logger.log(step, metrics)
            progress.update(step, metrics, t.failure_reasons)
            streaks.update(step, metrics, t.failure_reasons)
            if r.trainer.save_every and step % r.trainer.save_every == 0 and not last:
                t.save()

    def _summary(self, eval_after: dict | None, seconds: float, final: Path) -> dict[str, Any]:
        t = self.trainer
        summary: dict[str, Any] = {"steps": t.step_done, "wall_time_s": round(seconds, 1),
                                   "tokens_generated": t.tokens_generated, "cpu_seconds": round(t.cpu_seconds, 1),
                                   "final_checkpoint": str(final),
                                   "model": str(final / "model"), "eval_before": t.eval_before,
                                   "eval_after": eval_after}
        b, a = t.eval_before, eval_after
        if b and a:
            diff = a["pass_at_1"] - b["pass_at_1"]
            se = math.sqrt(a["pass_at_1_se"] ** 2 + b["pass_at_1_se"] ** 2)
            summary.update(pass_at_1_change=diff, pass_at_1_change_se=se,
                           pass_at_1_change_z=diff / se if se > 0 else float("nan"))
        if t.dist.is_main:
            atomic_write_text(t.run_dir / "summary.json", json.dumps(summary, indent=2, default=str))
            t._plot()
        return summary
