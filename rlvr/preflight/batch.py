"""Batch arithmetic of a step: how the rollout batch splits over ranks, mini-batches and micro-batches, and how many
tokens a step generates at the length cap."""

from __future__ import annotations

from rlvr.config import Recipe
from rlvr.preflight.memory import tokens_per_step
from rlvr.preflight.report import Report


def check_batch(report: Report, recipe: Recipe, ranks: int) -> None:
    """Add the step's numbers (``info``), what cannot run (``error``: prompts per step not divisible by the ranks, as
    each rank rolls out whole groups) and what runs unevenly (``warn``: a rank's samples not divisible by the
    mini-batches, so the last mini-batch is smaller and weighs as much in its optimizer step)."""
    ro, a, o = recipe.rollout, recipe.algorithm, recipe.optim
    b, g = ro.prompts_per_step, ro.group_size
    n = b * g
    if b % ranks:
        report.add("error", "batch", f"rollout.prompts_per_step={b} is not divisible by {ranks} ranks: each rank rolls "
                                     f"out whole groups; use a multiple of {ranks}")
        return
    per_rank = n // ranks
    if per_rank % a.mini_batches:
        report.add("warn", "batch", f"a rank's {per_rank} samples do not split into algorithm.mini_batches="
                                    f"{a.mini_batches} equal mini-batches: the last one is smaller; make "
                                    f"prompts_per_step x group_size / ranks a multiple of it")
    mini = -(-per_rank // a.mini_batches)
    micro = -(-mini // o.micro_batch_size)
    budget = f", at most {o.micro_batch_tokens:,} padded tokens each" if o.micro_batch_tokens else ""
    ds = a.dynamic_sampling
    rounds = f" (up to {ds.max_rounds} rounds with dynamic sampling)" if ds.enabled else ""
    report.add("info", "batch",
               f"global batch {b} prompts x {g} samples = {n} samples over {ranks} rank(s): {b // ranks} prompts, "
               f"{per_rank} samples per rank\n"
               f"{a.mini_batches} mini-batch(es) x {a.ppo_epochs} epoch(s) = {a.mini_batches * a.ppo_epochs} optimizer "
               f"step(s) per training step; {mini} samples per rank per mini-batch in >= {micro} micro-batch(es) of "
               f"<= {o.micro_batch_size} rows{budget}\n"
               f"tokens one step generates at the cap: {n} x {ro.max_new_tokens} = {tokens_per_step(recipe):,}{rounds}")
