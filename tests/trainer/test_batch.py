"""RolloutBatch.select_groups / concat: every dataclass field is carried, by group or by sample, and bad input is
refused with the field's name."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from rlvr.data.prompts import Prompt
from rlvr.rollout.base import Completion
from rlvr.tools.environment import EpisodeReward
from rlvr.trainer.batch import RolloutBatch

G = 2


def _batch(b: int = 3, offset: int = 0) -> RolloutBatch:
    """B groups of G samples with every field filled; sample i's values all carry the number offset + i."""
    n = b * G
    ids = [offset + i for i in range(n)]
    column = torch.tensor(ids, dtype=torch.float32)
    return RolloutBatch(
        prompts=[Prompt(index=offset + k, row={}, text=f"p{offset + k}", token_ids=[offset + k]) for k in range(b)],
        completions=[Completion(token_ids=[i], logprobs=[-0.5], finish_reason="stop") for i in ids],
        group_size=G, texts=[f"t{i}" for i in ids], reward_results=[f"r{i}" for i in ids],
        sampled_masks=[[i % 2] for i in ids], trajectories=[[{"turn": i}] for i in ids],
        episode_rewards=[EpisodeReward(reward=float(i)) for i in ids],
        rewards=column.clone(), rm_scores=-column, solved=column > offset + 2, valid=column >= 0,
        input_ids=column.long().unsqueeze(1).repeat(1, 3), attention_mask=torch.ones(n, 3, dtype=torch.long),
        response_mask=column.unsqueeze(1).repeat(1, 2), rollout_logprobs=column.unsqueeze(1).repeat(1, 2),
        old_logprobs=column.unsqueeze(1).repeat(1, 2), ref_logprobs=column.unsqueeze(1).repeat(1, 2),
        advantages=column.unsqueeze(1).repeat(1, 2), values=column.unsqueeze(1).repeat(1, 2),
        returns=column.unsqueeze(1).repeat(1, 2))


def test_select_groups_keeps_every_field_of_the_chosen_groups():
    batch = _batch()
    sub = batch.select_groups([2, 0])  # groups 2 then 0: samples 4, 5, 0, 1
    rows = [4, 5, 0, 1]
    assert [p.index for p in sub.prompts] == [2, 0]
    assert sub.group_size == G
    for f in fields(RolloutBatch):
        value = getattr(sub, f.name)
        assert value is not None, f.name  # nothing filled was dropped
        if f.name in ("prompts", "group_size"):
            continue
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, getattr(batch, f.name)[rows]), f.name
        else:
            assert value == [getattr(batch, f.name)[i] for i in rows], f.name
    assert sub.texts == ["t4", "t5", "t0", "t1"]


def test_select_groups_leaves_unfilled_fields_unfilled_and_refuses_bad_input():
    batch = _batch()
    batch.advantages, batch.reward_results = None, []
    sub = batch.select_groups([1])
    assert sub.advantages is None and sub.reward_results == [] and sub.texts == ["t2", "t3"]
    empty = batch.select_groups([])
    assert empty.prompts == [] and empty.rewards.shape == (0,)
    with pytest.raises(ValueError, match="out of range"):
        batch.select_groups([3])
    batch.texts = ["only one"]
    with pytest.raises(ValueError, match="RolloutBatch.texts has 1 entries, expected 6"):
        batch.select_groups([0])


def test_concat_joins_every_field_in_order():
    a, b = _batch(2, offset=0), _batch(1, offset=10)
    both = RolloutBatch.concat([a, b])
    assert [p.index for p in both.prompts] == [0, 1, 10]
    assert both.texts == ["t0", "t1", "t2", "t3", "t10", "t11"]
    assert both.rewards.tolist() == [0.0, 1.0, 2.0, 3.0, 10.0, 11.0]
    for f in fields(RolloutBatch):
        assert getattr(both, f.name) is not None, f.name
    assert RolloutBatch.concat([a]).rewards.tolist() == a.rewards.tolist()


def test_concat_refuses_mixed_parts():
    a, b = _batch(1), _batch(1)
    b.advantages = None
    with pytest.raises(ValueError, match="field advantages is filled in some parts"):
        RolloutBatch.concat([a, b])
    c = _batch(1)
    c.group_size = 3
    with pytest.raises(ValueError, match="different group sizes"):
        RolloutBatch.concat([a, c])
    with pytest.raises(ValueError, match="at least one"):
        RolloutBatch.concat([])
