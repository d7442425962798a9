"""Collecting a step's scored rollouts, with DAPO dynamic sampling (2503.14476, section 3.2) when enabled.

Groups whose outcomes are all equal carry no gradient and are dropped, and more prompts are drawn until B groups
remain, or ``max_rounds`` generation rounds are done, or the generated-token budget is spent. When a cap is hit the
step trains on what it has (possibly nothing: the update is then skipped), never aborts, and says so in
``rollout/max_rounds_hit``. Every group generated, kept or not, updates the per-prompt solve-rate table.

Vocabulary: B groups (prompts) of G samples.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.config import DynamicSamplingConfig, RolloutConfig
from rlvr.curriculum import Curriculum
from rlvr.data.prompts import Prompt
from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.rollout.tool_sampler import ToolSampler
from rlvr.runs.verifier_inputs import sample_dict
from rlvr.runtime.distributed import DistInfo, all_gather_objects, all_reduce_sum
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.groups import solve_counts, zero_variance_groups
from rlvr.trainer.reward_sources import RewardSource
from rlvr.trainer.stages import StageTimer


def rollout(engine: RolloutEngine, curriculum: Curriculum, train_prompts: list[Prompt], tokenizer: Any,
            num_prompts: int, step: int, config: RolloutConfig, dist: DistInfo, tools: ToolSampler | None = None,
            timer: StageTimer | None = None) -> RolloutBatch:
    """Draw ``num_prompts`` training prompts from the curriculum (this rank's share of them) and sample G completions
    for each with ``engine``, at the curriculum's length limit for ``step``; with ``tools``, multi-turn samples
    (their sampled-token masks and trajectories in the batch, on ``timer`` as ``tools`` the seconds the rollout
    waited for the tool calls and the environment with nothing decoding)."""
    g = config.group_size
    indices = curriculum.sample(num_prompts, step)[dist.rank::dist.world_size]
    prompts = [train_prompts[i] for i in indices]
    sampling = SamplingParams(temperature=config.temperature, top_p=config.top_p, top_k=config.top_k,
                              max_new_tokens=curriculum.max_new_tokens(step))
    if tools is not None:
        if not prompts:
            return RolloutBatch(prompts=[], completions=[], group_size=g, texts=[])
        out = tools.generate(prompts, g, sampling)
        if timer is not None:
            timer.add("tools", out.rollout.tool_wait_seconds)
        return RolloutBatch(prompts=out.prompts, completions=out.completions, group_size=g, texts=out.texts,
                            sampled_masks=out.masks, trajectories=out.trajectories,
                            episode_rewards=out.episode_rewards)
    # a dynamic-sampling refill smaller than the number of ranks leaves some ranks without prompts
    groups = engine.generate([p.token_ids for p in prompts], g, sampling) if prompts else []
    completions = [c for group in groups for c in group]
    # batch_decode([]) returns [''] (one empty text), not []
    texts = tokenizer.batch_decode([c.token_ids for c in completions], skip_special_tokens=True) \
        if completions else []
    return RolloutBatch(prompts=prompts, completions=completions, group_size=g, texts=texts)


def score(rewards: RewardSource, batch: RolloutBatch, max_new_tokens: int) -> None:
    """Score every completion of ``batch`` in place with the reward source (verifiers run in their worker pool; a
    failure costs one sample). ``max_new_tokens``: the step's length limit, which overlong shaping reads."""
    samples = [sample_dict(batch.prompt_of(i), c, max_new_tokens) for i, c in enumerate(batch.completions)]
    if batch.trajectories:  # tools: the sampled tokens count, and a verifier may read the turns and calls
        for i, sample in enumerate(samples):
            sample["completion_tokens"] = batch.sampled_length(i)
            sample["trajectory"] = batch.trajectories[i]
    scores = rewards.score(batch, samples)
    batch.reward_results, batch.rewards, batch.solved, batch.valid = (scores.results, scores.rewards,
                                                                     scores.solved, scores.valid)
    batch.rm_scores = scores.rm_scores


def _filtered(batch: RolloutBatch, ds: DynamicSamplingConfig) -> torch.Tensor:
    """(B, G): what must vary within a group for it to be kept (``filter_on``)."""
    values = batch.solved.float() if ds.filter_on == "solved" else batch.rewards
    return values.view(-1, batch.group_size)


def collect(engine: RolloutEngine, rewards: RewardSource, curriculum: Curriculum, train_prompts: list[Prompt],
            tokenizer: Any, *, step: int, config: RolloutConfig, ds: DynamicSamplingConfig, dist: DistInfo,
            tokens_left: float, timer: StageTimer, tools: ToolSampler | None = None
            ) -> tuple[RolloutBatch, dict[str, float], int]:
    """Rollout + verify rounds until the step's batch is complete (every rank must call it: counts are reduced).

    Args:
        engine: the rollout engine. rewards: the reward source. curriculum: draws the prompts, gives the step's
            length limit, and takes ``(prompt index, solved, valid samples)`` of every group (its solve-rate table),
            from every rank's groups, so every rank keeps the same table.
        train_prompts: the training prompts the curriculum's indices point into. tokenizer: decodes completions.
        step: steps done so far. config: the recipe's ``rollout`` section (B = ``prompts_per_step`` over all ranks).
        ds: the recipe's dynamic-sampling section. dist: this rank and the number of ranks.
        tokens_left: generated tokens left in the run's budget (``inf``: no budget).
        timer: the step's stage timer (``rollout``, ``tools`` and ``reward`` stages).
        tools: the recipe's tool sampler (``rollout.tools``), or None for single-turn generation.
    Returns:
        this rank's kept batch, the ``rollout/*`` counts of the step, and the tokens generated over all ranks.
    """
    want = config.prompts_per_step
    kept: list[RolloutBatch] = []
    have, rounds, zero_var_before, groups_seen, generated = 0, 0, 0, 0, 0
    while True:
        rounds += 1
        with timer("rollout"):
            part = rollout(engine, curriculum, train_prompts, tokenizer, want - have if ds.enabled else want, step,
                           config, dist, tools, timer)
        with timer("reward"):
            score(rewards, part, curriculum.max_new_tokens(step))
        g = part.group_size
        valid = part.valid.view(-1, g)  # (B_part, G)
        zero_var = zero_variance_groups(_filtered(part, ds), valid)  # (B_part,)
        counts_per_group = solve_counts(part.solved.view(-1, g), valid)
        # dropped samples are not evidence about a prompt: the table sees only valid ones
        mine = [(p.index, k, n) for p, (k, n) in zip(part.prompts, counts_per_group, strict=True) if n]
        for groups in all_gather_objects(mine):  # every rank keeps the same solve-rate table
            curriculum.observe(groups)
        counts = all_reduce_sum(torch.tensor([float(zero_var.sum()), float(len(part.prompts)),
                                              float(sum(part.sampled_length(i) for i in range(part.num_samples)))],
                                             dtype=torch.float64)).tolist()
        zero_var_before += int(counts[0])
        groups_seen += int(counts[1])
        generated += int(counts[2])
        if ds.enabled:
            part = part.select_groups([i for i, z in enumerate(zero_var.tolist()) if not z])
        kept.append(part)
        have += int(all_reduce_sum(torch.tensor([len(part.prompts)]))[0])
        if not ds.enabled or have >= want or rounds >= ds.max_rounds or generated >= tokens_left:
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
