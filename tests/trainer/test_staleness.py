"""Staleness of an asynchronous step's samples: versions stamped where the engine left none, whole groups dropped when a
sample is staler than K, and the metrics, on hand-made batches."""

from __future__ import annotations

import pytest
import torch

from rlvr.data.prompts import Prompt
from rlvr.rollout.base import Completion
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.staleness import drop_stale_groups, stamp_versions


def _batch(versions: list[int | None], group_size: int = 2) -> RolloutBatch:
    """Groups of ``group_size`` one-token samples with the given ``policy_version`` each, rewards 0, 1, 2, ..."""
    b = len(versions) // group_size
    return RolloutBatch(prompts=[Prompt(index=k, row={}, text=f"p{k}", token_ids=[k]) for k in range(b)],
                        completions=[Completion([i], [-1.0], "stop", policy_version=v) for i, v in enumerate(versions)],
                        group_size=group_size, texts=[str(i) for i in range(len(versions))],
                        rewards=torch.arange(float(len(versions))))


def test_stamping_fills_only_the_versions_the_engine_left_out():
    batch = _batch([None, 3, None, None])
    stamp_versions(batch, 2)
    assert [c.policy_version for c in batch.completions] == [2, 3, 2, 2]


def test_a_group_with_one_sample_staler_than_k_is_dropped_whole():
    """Trainer version 5, K = 1: staleness (0, 1 | 2, 0 | 1, 1): the middle group goes, with its fresh sample too, so
    the kept groups' baselines are over whole groups."""
    batch = _batch([5, 4, 3, 5, 4, 4])
    out = drop_stale_groups(batch, version=5, max_off_policy_steps=1)
    assert out.staleness == [0, 1, 2, 0, 1, 1]
    assert (out.dropped_groups, out.dropped_samples) == (1, 2)
    assert [p.index for p in out.batch.prompts] == [0, 2]
    assert out.batch.texts == ["0", "1", "4", "5"]
    assert out.batch.rewards.tolist() == [0.0, 1.0, 4.0, 5.0]
    assert out.metrics() == {"rollout/staleness_mean": pytest.approx(5 / 6), "rollout/staleness_max": 2.0,
                             "rollout/stale_samples_dropped": 2.0}


def test_nothing_is_dropped_within_the_bound_and_the_batch_is_the_same_object():
    batch = _batch([3, 3, 1, 2])
    out = drop_stale_groups(batch, version=3, max_off_policy_steps=2)
    assert out.batch is batch and out.dropped_samples == 0
    assert out.metrics()["rollout/staleness_max"] == 2.0


def test_an_empty_batch_has_zero_staleness():
    out = drop_stale_groups(_batch([]), version=7, max_off_policy_steps=1)
    assert out.metrics() == {"rollout/staleness_mean": 0.0, "rollout/staleness_max": 0.0,
                             "rollout/stale_samples_dropped": 0.0}


def test_a_version_from_the_future_or_none_is_an_error():
    with pytest.raises(ValueError, match="policy_version 6, newer than the trainer's 5"):
        drop_stale_groups(_batch([5, 6]), version=5, max_off_policy_steps=1)
    with pytest.raises(ValueError, match="sample 1 has no policy_version"):
        drop_stale_groups(_batch([5, None]), version=5, max_off_policy_steps=1)
