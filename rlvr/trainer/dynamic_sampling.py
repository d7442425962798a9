"""Collecting a step's scored rollouts, with DAPO dynamic sampling (2503.14476, section 3.2) when enabled.

Groups whose outcomes are all equal carry no gradient and are dropped, and more prompts are drawn until B groups
remain, or ``max_rounds`` generation rounds are done, or the generated-token budget is spent. When a cap is hit the
step trains on what it has (possibly nothing: the update is then skipped), never aborts, and says so in
``rollout/max_rounds_hit``. Every group generated, kept or not, updates the per-prompt solve-rate table.

Vocabulary: B groups (prompts) of G samples.
"""

from __future__ import annotations

from typing import Callable

import torch

from rlvr.config import DynamicSamplingConfig
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.distributed import all_gather_objects, all_reduce_sum
from rlvr.trainer.groups import solve_counts, zero_variance_groups
from rlvr.trainer.stages import StageTimer


def _filtered(batch: RolloutBatch, ds: DynamicSamplingConfig) -> torch.Tensor:
    """(B, G): what must vary within a group for it to be kept (``filter_on``)."""
    values = batch.solved.float() if ds.filter_on == "solved" else batch.rewards
    return values.view(-1, batch.group_size)


def collect(rollout: Callable[[int], RolloutBatch], verify: Callable[[RolloutBatch], None], want: int,
            ds: DynamicSamplingConfig, observe: Callable[[list[tuple[int, int, int]]], None],
            budget_spent: Callable[[int], bool], timer: StageTimer) -> tuple[RolloutBatch, dict[str, float], int]:
    """Rollout + verify rounds until the step's batch is complete (every rank must call it: counts are reduced).

    Args:
        rollout: draws ``n`` prompts (this rank's share) and samples their groups. verify: scores a batch in place.
        want: B, prompts per step over all ranks. ds: the recipe's dynamic-sampling section.
        observe: takes ``(prompt index, solved, valid samples)`` per group (the curriculum's solve-rate table);
            called with every rank's groups, so every rank keeps the same table.
        budget_spent: whether the run's token budget is spent once ``generated`` more tokens are counted.
        timer: the step's stage timer (``rollout`` and ``reward`` stages).
    Returns:
        this rank's kept batch, the ``rollout/*`` counts of the step, and the tokens generated over all ranks.
    """
    kept: list[RolloutBatch] = []
    have, rounds, zero_var_before, groups_seen, generated = 0, 0, 0, 0, 0
    while True:
        rounds += 1
        with timer("rollout"):
            part = rollout(want - have if ds.enabled else want)
        with timer("reward"):
            verify(part)
        g = part.group_size
        valid = part.valid.view(-1, g)  # (B_part, G)
        zero_var = zero_variance_groups(_filtered(part, ds), valid)  # (B_part,)
        counts_per_group = solve_counts(part.solved.view(-1, g), valid)
        # dropped samples are not evidence about a prompt: the table sees only valid ones
        mine = [(p.index, k, n) for p, (k, n) in zip(part.prompts, counts_per_group, strict=True) if n]
        for groups in all_gather_objects(mine):  # every rank keeps the same solve-rate table
            observe(groups)
        counts = all_reduce_sum(torch.tensor([float(zero_var.sum()), float(len(part.prompts)),
                                              float(sum(len(c.token_ids) for c in part.completions))],
                                             dtype=torch.float64)).tolist()
        zero_var_before += int(counts[0])
        groups_seen += int(counts[1])
        generated += int(counts[2])
        if ds.enabled:
            part = part.select_groups([i for i, z in enumerate(zero_var.tolist()) if not z])
        kept.append(part)
        have += int(all_reduce_sum(torch.tensor([len(part.prompts)]))[0])
        if not ds.enabled or have >= want or rounds >= ds.max_rounds or budget_spent(generated):
            break
    batch = RolloutBatch.concat(kept)
    zero_var_after = 0.0
    if batch.prompts:
        zero_var_after = float(zero_variance_groups(_filtered(batch, ds),
                                                    batch.valid.view(-1, batch.group_size)).sum())
    info = {"rollout/rounds": float(rounds),
            "rollout/groups_generated": float(groups_seen),
            "rollout/groups_kept": float(have),
            "rollout/zero_var_groups_before_filter": zero_var_before / max(groups_seen, 1),
            "rollout/zero_var_groups_after_filter": float(all_reduce_sum(torch.tensor([zero_var_after]))[0])
            / max(have, 1),
            "rollout/batch_filled": have / want,
            "rollout/max_rounds_hit": float(ds.enabled and have < want),
            "rollout/tokens_generated": float(generated)}
    return batch, info, generated
