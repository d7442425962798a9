"""The run around the steps: eval before the first step and after the last, the step loop with its step line,
periodic checkpoints and evals, the token and CPU-time budgets, plots and ``summary.json``.

:class:`RunLoop` is the outer half of :class:`rlvr.trainer.trainer.RLTrainer` (which supplies ``step()``, ``save()``
and the state it reads: recipe, run_dir, dist, logger, rollout engine, prompt split, reward function).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from rlvr.runs.cpu_time import process_tree_cpu_seconds
from rlvr.curriculum.plot import plot_curriculum
from rlvr.runs.evaluation import EvalResult, run_eval
from rlvr.runs.metrics import read_metrics
from rlvr.runs.plots import plot_curves
from rlvr.trainer.distributed import all_reduce_max
from rlvr.trainer.progress import TrainProgress, phase


class RunLoop:
    """Evals, the step loop and the summary; mixed into the trainer."""

    recipe: Any
    run_dir: Path
    dist: Any
    logger: Any
    step_done: int
    tokens_generated: int
    cpu_seconds: float
    """CPU seconds (user + system, process tree) spent in the step loop so far, resumed runs included; the largest
    over ranks while ``trainer.max_cpu_seconds`` is set."""
    eval_before: dict[str, Any] | None
    solved_label: str | None
    failure_reasons: dict[str, str | None]

    def step(self) -> dict[str, float]:
        raise NotImplementedError

    def save(self) -> Path:
        raise NotImplementedError

    def _plot(self) -> None:
        if self.dist.is_main:
            records = read_metrics(self.run_dir)
            plot_curves(records, self.run_dir / "plots" / "curves.png",
                        title=f"{self.recipe.model.name} | {self.run_dir.name}")
            plot_curriculum(records, self.run_dir / "plots" / "curriculum.png",
                            title=f"{self.recipe.model.name} | {self.run_dir.name}")

    def _report_rollout_logprob_check(self, train_metrics: dict[str, float]) -> None:
        """First step: say how far the rollout engine's log-probs are from the trainer's on the same tokens (before
        any update, so only numerics differ). fp32 engines agree to ~1e-6; bf16 ones to ~1e-2 on average. A mean
        above 0.1 nats points at a bug (weights not loaded, another temperature, a different tokenizer or chat
        template); it is printed, the metrics ``train/rollout_logprob_diff_mean/max`` carry the same numbers."""
        mean = train_metrics.get("train/rollout_logprob_diff_mean")
        if mean is None or not self.dist.is_main:
            return
        peak = train_metrics.get("train/rollout_logprob_diff_max", float("nan"))
        verdict = "ok" if mean <= 0.1 else "WARNING: larger than numerics explain; check the engine's weights/sampling"
        print(f"rollout log-prob check ({self.recipe.rollout.engine} vs trainer, step 1): mean |diff| {mean:.2e}, "
              f"max {peak:.2e} nats/token: {verdict}")

    # ------------------------------------------------------------------------------------------------ eval
    def evaluate(self, k: int | None = None) -> EvalResult | None:
        """Held-out pass@1 (with standard error), pass@k, maj@k and length on the eval split; None when it is empty.

        Sampling uses its own seeded RNG stream (the training RNG is saved and restored), so an eval never changes the
        training run's numbers.
        """
        ev = self.recipe.eval
        if not self.prompt_set.eval or self.solved_label is None:  # pass@k needs a verifier to say "solved"
            return None
        with torch.no_grad():
            return run_eval(self.rollout_engine, self.tokenizer, self.prompt_set.eval, self.reward_fn,
                            self.solved_label, k=k or ev.k, temperature=ev.temperature,
                            max_new_tokens=ev.max_new_tokens or self.recipe.rollout.max_new_tokens,
                            top_p=self.recipe.rollout.top_p, top_k=self.recipe.rollout.top_k, seed=ev.seed,
                            rank=self.dist.rank, world_size=self.dist.world_size)

    def _budget_spent(self, tokens: int) -> bool:
        budget = self.recipe.trainer.max_tokens_generated
        return budget is not None and tokens >= budget

    def _cpu_budget_spent(self) -> bool:
        budget = self.recipe.trainer.max_cpu_seconds
        return budget is not None and self.cpu_seconds >= budget

    def _finished(self) -> bool:
        """``trainer.steps`` done, or the generated-token or CPU-time budget spent (same on every rank: both counts
        are reduced)."""
        return (self.step_done >= self.recipe.trainer.steps or self._budget_spent(self.tokens_generated)
                or self._cpu_budget_spent())

    def _count_cpu_seconds(self, loop_start_cpu_s: float, spent_before_s: float) -> None:
        """Update ``cpu_seconds`` after a step; reduced over ranks (a collective) only when a CPU budget is set."""
        spent = spent_before_s + process_tree_cpu_seconds() - loop_start_cpu_s
        self.cpu_seconds = all_reduce_max(spent) if self.recipe.trainer.max_cpu_seconds is not None else spent

    # ------------------------------------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """Run the remaining steps with an eval before the first and after the last; returns the summary."""
        r = self.recipe
        start_time = time.perf_counter()
        evals = r.eval.enabled and self.solved_label is not None
        if r.eval.enabled and not evals and self.dist.is_main:
            print("eval skipped: pass@k needs a verifier to say what is solved, and the recipe lists none (add one "
                  "with optimise: false to log it as gold and evaluate with it)", file=sys.stderr, flush=True)
        if evals and self.eval_before is None:
            k = 1 if r.eval.temperature == 0 else r.eval.k
            with phase(f"eval before training: {len(self.prompt_set.eval)} prompts x {k}", self.dist.is_main):
                result = self.evaluate()
            self.eval_before = result.as_dict() if result else None
            if self.eval_before:
                self.logger.log(0, {f"eval/{k}": v for k, v in self.eval_before.items()})
        progress = TrainProgress(total=r.trainer.steps, done=self.step_done, enabled=self.dist.is_main,
                                 token_budget=r.trainer.max_tokens_generated, cpu_budget_s=r.trainer.max_cpu_seconds)
        if self.dist.is_main and not self._finished():
            print(f"training: {r.trainer.steps - self.step_done} step(s) of {r.rollout.prompts_per_step} prompts x "
                  f"{r.rollout.group_size} samples; the first step line comes after step {self.step_done + 1}'s "
                  f"rollout, verify and update", file=sys.stderr, flush=True)
        loop_start_cpu_s, spent_before_s = process_tree_cpu_seconds(), self.cpu_seconds
        with progress:
            while not self._finished():
                metrics = self.step()
                self._count_cpu_seconds(loop_start_cpu_s, spent_before_s)
                metrics["cpu/seconds_total"] = self.cpu_seconds
                step, last = self.step_done, self._finished()
                if evals and r.eval.every and step % r.eval.every == 0 and not last:
                    res = self.evaluate()
                    if res:
                        metrics.update({f"eval/{k}": v for k, v in res.as_dict().items()})
                self.logger.log(step, metrics)
                progress.update(step, metrics, self.failure_reasons)
                if r.trainer.save_every and step % r.trainer.save_every == 0 and not last:
                    self.save()
        if self.step_done < r.trainer.steps and self.dist.is_main:
            if self._budget_spent(self.tokens_generated):
                print(f"token budget spent ({self.tokens_generated:,} of trainer.max_tokens_generated="
                      f"{r.trainer.max_tokens_generated:,} tokens generated): stopping after step {self.step_done}")
            else:
                print(f"CPU budget spent ({self.cpu_seconds:,.0f} of trainer.max_cpu_seconds="
                      f"{r.trainer.max_cpu_seconds:,.0f} CPU s): stopping after step {self.step_done}")
        eval_after = None
        if evals:
            with phase(f"eval after training: {len(self.prompt_set.eval)} prompts x "
                       f"{1 if r.eval.temperature == 0 else r.eval.k}", self.dist.is_main):
                res = self.evaluate()
            eval_after = res.as_dict() if res else None
            if eval_after:
                self.logger.log(self.step_done, {f"eval/{k}": v for k, v in eval_after.items()})
        final = self.save()
        summary = self._summary(eval_after, time.perf_counter() - start_time, final)
        self.logger.close()
        self.rewards.close()
        self._release()
        return summary

    def _release(self) -> None:
        """Free what the trainer holds besides the policy engine (the caller destroys that one)."""

    def _summary(self, eval_after: dict | None, seconds: float, final: Path) -> dict[str, Any]:
        summary: dict[str, Any] = {"steps": self.step_done, "wall_time_s": round(seconds, 1),
                                   "tokens_generated": self.tokens_generated, "cpu_seconds": round(self.cpu_seconds, 1),
                                   "final_checkpoint": str(final),
                                   "model": str(final / "model"), "eval_before": self.eval_before,
                                   "eval_after": eval_after}
        b, a = self.eval_before, eval_after
        if b and a:
            diff = a["pass_at_1"] - b["pass_at_1"]
            se = math.sqrt(a["pass_at_1_se"] ** 2 + b["pass_at_1_se"] ** 2)
            summary.update(pass_at_1_change=diff, pass_at_1_change_se=se,
                           pass_at_1_change_z=diff / se if se > 0 else float("nan"))
        if self.dist.is_main:
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
            self._plot()
        return summary
