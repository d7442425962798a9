"""How the trainer wires the RL math (issue 11): dropped samples, the dynamic-sampling filter, the metrics and timers of
one step, and eval sampling. Each test scripts the completions with :class:`ScriptedEngine`, so the expected numbers
are known by hand."""

from __future__ import annotations

import math

import pytest
import torch

from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset


class ScriptedEngine:
    """Group k of every ``generate`` call gets the texts ``script[k % len(script)]`` (one per sample, characters of
    the tiny tokenizer), each ending with eos; records the sampling parameters of every call."""

    def __init__(self, tokenizer, script: list[list[str]]) -> None:
        self.tok = tokenizer
        self.script = script
        self.sampling: list = []

    def generate(self, prompt_token_ids, n, sampling):
        from rlvr.rollout.base import Completion

        self.sampling.append(sampling)
        groups = []
        for k in range(len(prompt_token_ids)):
            texts = self.script[k % len(self.script)]
            assert len(texts) == n
            groups.append([Completion([self.tok.convert_tokens_to_ids(c) for c in text] + [self.tok.eos_token_id],
                                      [-1.0] * (len(text) + 1), "stop") for text in texts])
        return groups

    def sync_weights(self, model) -> None:
        pass


def fails_on_b(completion: str, sample: dict) -> float:
    """Raises on completions containing ``b``: with ``reward.failure_score: null`` such a sample is dropped."""
    if "b" in completion:
        raise ValueError("cannot score a 'b'")
    return 0.0


pytestmark = pytest.mark.usefixtures("no_plots")  # PNG plots are not what these tests check


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def _trainer(tiny, tmp_path, script, **sections):
    from rlvr.config import resolve
    from rlvr.models.loading import load_tokenizer
    from rlvr.trainer.trainer import RLTrainer

    raw = tiny_recipe(*tiny, **sections)
    recipe = resolve(raw)
    engine = ScriptedEngine(load_tokenizer(recipe.model.name, recipe.model), script)
    trainer = RLTrainer(recipe, tmp_path / "run", rollout_engine=engine)
    return trainer, engine


DROP_VERIFIERS = [{"name": "tests.tiny:digit_fraction"}, {"name": "tests.tiny:starts_with_digit", "weight": 0.0},
                  {"name": "tests.trainer.test_trainer_wiring:fails_on_b", "weight": 0.0}]


def test_a_failed_verifier_leaves_the_sample_out_of_every_statistic_by_default(tiny, tmp_path):
    """A verifier that raises is a failure of the machinery, not a 0 (``reward.failure_score`` defaults to null).
    Group 0 keeps one valid sample (no baseline: zero advantage, a zero-variance group); group 1 keeps
    three, whose mean and std alone make the advantages; the solve-rate table counts valid samples only."""
    script = [["1", "b", "b", "b"], ["1", "a", "b1", "22"]]
    trainer, _ = _trainer(tiny, tmp_path, script, verifiers=DROP_VERIFIERS,
                          reward={"num_workers": 1, "solved_verifier": "tests.tiny:starts_with_digit"},
                          rollout={"prompts_per_step": 2, "group_size": 4},
                          algorithm={"loss_agg": "token-mean",
                                     "dynamic_sampling": {"enabled": True, "max_rounds": 1}})
    try:
        batch, info, timer = trainer.collect()
        # group 0 has a single valid sample: zero variance, dropped by the filter
        assert info["rollout/zero_var_groups_before_filter"] == 0.5 and info["rollout/groups_kept"] == 1
        assert batch.valid.tolist() == [True, True, False, True]
        trainer.prepare(batch, timer)
        trainer.compute_advantages(batch)
        # valid rewards (digit fraction) 1, 0, 1: mean 2/3, unbiased std sqrt(1/3)
        std = math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 2)
        expected = [(1 / 3) / std, -(2 / 3) / std, 0.0, (1 / 3) / std]
        assert batch.advantages[:, 0].tolist() == pytest.approx(expected, abs=1e-5)
        assert batch.response_mask[2].sum() == 0  # the dropped sample is out of the loss
        # solve-rate table: group 0 saw 1 valid sample (solved), group 1 saw 3 (2 solved)
        tracker = trainer.curriculum.tracker
        seen = sorted((int(tracker.samples[i]), int(tracker.solved[i])) for i in range(tracker.num_prompts)
                      if tracker.samples[i])
        assert seen == [(1, 1), (3, 2)]
        metrics = trainer._rollout_metrics(batch, timer)
        assert metrics["reward/solve_rate"] == pytest.approx(2 / 3) and metrics["reward/mean"] == pytest.approx(2 / 3)
        assert metrics["reward/infra_failures/tests.trainer.test_trainer_wiring:fails_on_b"] == 1.0
        assert (metrics["reward/infra_failure_rate"], metrics["reward/left_out"]) == (0.25, 1.0)
    finally:
        trainer.reward_fn.close()
        trainer.engine.destroy()


@pytest.mark.parametrize("filter_on, kept", [("solved", 1), ("reward", 2)])
def test_dynamic_sampling_filters_on_accuracy_by_default(tiny, tmp_path, filter_on, kept):
    """Fix 5. Group 0 is all solved (starts with a digit) with different total rewards (digit fractions 1, 1, 0.5,
    2/3): DAPO's accuracy filter drops it, the total-reward filter keeps it."""
    script = [["1", "12", "1a", "1a2"], ["1", "a", "a1", "2"]]
    trainer, _ = _trainer(tiny, tmp_path, script, rollout={"prompts_per_step": 2, "group_size": 4},
                          algorithm={"loss_agg": "token-mean",
                                     "dynamic_sampling": {"enabled": True, "max_rounds": 1, "filter_on": filter_on}})
    try:
        batch, info, _ = trainer.collect()
        assert info["rollout/groups_kept"] == kept
        assert len(batch.prompts) == kept
    finally:
        trainer.reward_fn.close()
        trainer.engine.destroy()


def test_step_metrics_split_the_loss_terms_clip_regions_and_forward_timers(tiny, tmp_path):
    """Fix 7: the loss's policy-gradient, KL and entropy terms add up to train/loss; the clip regions add up to
    train/clip_fraction; the old and reference log-prob forwards have their own timers, out of ``advantages``."""
    script = [["1", "a2", "ab", "123"], ["9", "x", "1b", "zz"]]
    trainer, _ = _trainer(tiny, tmp_path, script, rollout={"prompts_per_step": 2, "group_size": 4},
                          optim={"lr": 3e-2, "micro_batch_size": 8},
                          algorithm={"loss_agg": "token-mean", "ppo_epochs": 2, "clip_ratio_c": 1.5,
                                     "kl": {"beta": 0.1, "estimator": "k3"}, "entropy_coef": 0.01})
    try:
        m = trainer.step().metrics
    finally:
        trainer.reward_fn.close()
        trainer.engine.destroy()
    assert m["train/pg_loss"] + m["train/kl_loss"] + m["train/entropy_loss"] == pytest.approx(m["train/loss"],
                                                                                              rel=1e-5)
    assert m["train/entropy_loss"] < 0 and m["train/kl_loss"] >= 0
    assert m["train/clip_fraction_low"] + m["train/clip_fraction_high"] + m["train/clip_fraction_dual"] == \
        pytest.approx(m["train/clip_fraction"])
    assert m["train/clip_fraction"] > 0  # lr 3e-2: the second epoch's ratios leave the clip range
    for stage in ("old_logprobs", "ref_logprobs", "advantages", "update"):
        assert m[f"time/{stage}_s"] > 0, stage


def test_eval_samples_with_the_rollouts_top_k(tiny, tmp_path):
    """Fix 11: the eval dropped ``rollout.top_k`` (it sampled the full distribution the policy was not trained on)."""
    script = [["1", "2"]]
    trainer, engine = _trainer(tiny, tmp_path, script, rollout={"prompts_per_step": 2, "group_size": 2, "top_k": 5},
                               eval={"enabled": True, "k": 2})
    try:
        trainer.evaluate()
    finally:
        trainer.reward_fn.close()
        trainer.engine.destroy()
    assert engine.sampling and all(s.top_k == 5 for s in engine.sampling)


def test_group_statistics_of_a_rank_without_prompts():
    """A rank that drew no prompts (a small dynamic-sampling refill) has empty per-sample lists; ``torch.tensor([])``
    is float, which once crashed the filter (found by tests/curriculum/test_curriculum_multirank.py)."""
    from rlvr.trainer.groups import solve_counts, zero_variance_groups

    empty = torch.tensor([]).view(0, 4)
    assert zero_variance_groups(empty, empty).tolist() == []
    assert solve_counts(empty, empty) == []
    rewards = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.5, 0.0]])
    valid = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])  # float 0/1 works like bool
    assert zero_variance_groups(rewards, valid).tolist() == [True, True]
    assert zero_variance_groups(rewards).tolist() == [False, False]
    assert solve_counts(rewards >= 1.0, valid.bool()) == [(3, 3), (2, 2)]


@pytest.mark.parametrize(("world_size", "zero_stage", "engine", "packed"), [
    (1, 3, object(), True),   # one rank: no collective to match
    (2, 2, object(), True),   # ZeRO-2 gathers nothing in the forward
    (2, 3, object(), False),  # ZeRO-3 over ranks: packed rows may fall back to two forwards on one rank only
    (2, 3, None, True),       # a frozen unsharded module: its forwards are local
])
def test_packed_rows_only_where_forwards_are_not_collectives(world_size, zero_stage, engine, packed):
    from rlvr.runtime.distributed import DistInfo
    from rlvr.trainer.workers import MicroBatchPlan, ModelWorker

    worker = ModelWorker(torch.nn.Linear(1, 1), engine, dist=DistInfo(0, world_size, 0, torch.device("cpu")),
                         plan=MicroBatchPlan(8, None, zero_stage), pad_id=0, temperature=1.0, autocast_dtype=None,
                         gradient_checkpointing=False)
    assert worker.packed_rows is packed


def test_a_random_control_run_optimises_the_coin_and_logs_the_real_verifiers_as_gold(tiny, tmp_path):
    from rlvr.verifiers.controls import random_reward

    script = [["1", "a", "12", "b2"], ["2", "a1", "22", "x"]]
    trainer, _ = _trainer(tiny, tmp_path, script, rollout={"prompts_per_step": 2, "group_size": 4},
                          reward={"num_workers": 1, "solved_verifier": "tests.tiny:starts_with_digit",
                                  "control": "random"})
    try:
        batch, info, timer = trainer.collect()
        coins = [random_reward(text, {"prompt": batch.prompt_of(i).text}, seed=0) for i, text in enumerate(batch.texts)]
        assert batch.rewards.tolist() == coins and 0.0 < sum(coins) < len(coins)
        metrics = trainer._rollout_metrics(batch, timer)
        # the real verifiers are gold: logged, out of the optimised reward; the solve rate is still theirs
        assert "reward/gold_tests.tiny:digit_fraction" in metrics and "reward/random_reward" in metrics
        starts = [float(t[:1].isdigit()) for t in batch.texts]
        assert metrics["reward/solve_rate"] == pytest.approx(sum(starts) / len(starts))
    finally:
        trainer.reward_fn.close()
        trainer.engine.destroy()
