"""Reward sources: verifiers, a reward model, or both (``reward.source``), and gold verifiers (``optimise: false``)."""

from __future__ import annotations

import pytest
import torch

from rlvr.config import RecipeError, resolve
from rlvr.data.prompts import Prompt
from rlvr.rollout.base import Completion
from rlvr.runs.metrics import read_metrics
from rlvr.runs.verifier_inputs import verifier_specs
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.reward_sources import RewardModelRewards, VerifierRewards
from rlvr.verifiers.reward import RewardResult
from tests.tiny import build_tiny_model, build_tokenizer, tiny_recipe, write_addition_dataset


class FakeVerifierPool:
    """Stands in for RewardFunction: the total is 1 for completions starting with a digit."""

    def score(self, texts, samples):
        return [RewardResult(total=float(t[:1].isdigit()), scores={"v": float(t[:1].isdigit())}, extras={},
                             failures={}) for t in texts]

    def close(self):
        pass


class FakeRewardModel:
    """Scores a token sequence by its length: (N,) aggregate and (1, N) members, like RewardModelEnsemble.score."""

    def __init__(self):
        self.calls = []

    def score(self, sequences, pad_id, micro_batch_size=16, autocast_dtype=None):
        self.calls.append(sequences)
        s = torch.tensor([float(len(x)) for x in sequences])
        return s, s.unsqueeze(0)


def _batch() -> RolloutBatch:
    prompts = [Prompt(index=0, row={}, text="p", token_ids=[7, 8])]
    comps = [Completion(token_ids=[1], logprobs=[0.0], finish_reason="stop"),
             Completion(token_ids=[1, 2, 3], logprobs=[0.0] * 3, finish_reason="stop")]
    return RolloutBatch(prompts=prompts, completions=comps, group_size=2, texts=["5", "x"])


@pytest.mark.parametrize("add_verifiers, expected", [(False, [1.5, 2.5]), (True, [2.5, 2.5])])
def test_reward_model_source_scores_the_exact_ids_and_weights(add_verifiers, expected):
    verifiers = VerifierRewards(FakeVerifierPool(), ["v"], "v", drop_failed=False, gold_labels=["v"])
    rm = FakeRewardModel()
    source = RewardModelRewards(rm, verifiers, pad_id=0, micro_batch_size=4, autocast_dtype=None,
                                add_verifiers=add_verifiers, rm_weight=0.5)
    scores = source.score(_batch(), [{}, {}])
    assert rm.calls == [[[7, 8, 1], [7, 8, 1, 2, 3]]]  # prompt + completion ids, never re-tokenised
    assert scores.rm_scores.tolist() == [3.0, 5.0]
    assert scores.rewards.tolist() == expected  # 0.5 * rm (+ the verifier total 1, 0 with both)
    assert scores.solved.tolist() == [True, False] and scores.valid.tolist() == [True, True]
    assert source.gold_labels == ["v"]


def test_verifier_source_refuses_unknown_labels():
    with pytest.raises(ValueError, match=r"\['w'\] are not among the verifiers \['v'\]"):
        VerifierRewards(FakeVerifierPool(), ["v"], "v", drop_failed=False, gold_labels=["w"])


def test_recipe_reward_source_keys(tmp_path):
    base = tiny_recipe(tmp_path / "m", tmp_path / "d.jsonl")
    with pytest.raises(RecipeError, match="reward.source='reward_model' needs a reward_model: section"):
        resolve({**base, "reward": {"source": "reward_model"}})
    gold_only = {**base, "verifiers": [{"name": "tests.tiny:digit_fraction", "optimise": False}]}
    with pytest.raises(RecipeError, match="every verifier has optimise: false"):
        resolve(gold_only)
    mixed = resolve({**base, "verifiers": [{"name": "tests.tiny:digit_fraction", "weight": 2.0},
                                           {"name": "tests.tiny:starts_with_digit", "weight": 3.0,
                                            "optimise": False}]})
    assert [s.weight for s in verifier_specs(mixed)] == [2.0, 0.0]  # gold: scored, weighs nothing


def test_grpo_against_a_reward_model_logs_proxy_and_gold(tmp_path):
    from rlvr.reward_model.model import RewardModel
    from rlvr.trainer.trainer import RLTrainer

    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    rm = RewardModel.from_backbone(str(model_dir), seed=1)
    rm.save(tmp_path / "rm", build_tokenizer())
    raw = tiny_recipe(model_dir, data, trainer={"steps": 2, "save_every": 0, "log_samples_every": 1},
                      reward={"num_workers": 1, "source": "reward_model", "rm_weight": 0.5},
                      reward_model={"path": str(tmp_path / "rm")})
    trainer = RLTrainer(resolve(raw), tmp_path / "run")
    trainer.train()
    trainer.engine.destroy()
    steps = [m for m in read_metrics(tmp_path / "run") if "reward/rm_mean" in m]
    assert len(steps) == 2
    label = "tests.tiny:digit_fraction"
    for m in steps:
        assert m["reward/mean"] == pytest.approx(0.5 * m["reward/rm_mean"], abs=1e-6)  # the RM alone is optimised
        assert m[f"reward/gold_{label}"] == m[f"reward/{label}"]  # the verifier is logged as gold
    # the logged RM score of a sample is the reward model's score of its prompt + completion ids
    import json
    row = json.loads((tmp_path / "run/samples/step-1.jsonl").read_text().splitlines()[0])
    assert row["rm_score"] is not None and row["reward"] == pytest.approx(row["scores"][label])


def _ppo_recipe(model_dir, data, rm_dir, critic=None, **trainer):
    return tiny_recipe(model_dir, data, trainer={"save_every": 0, "log_samples_every": 0, **trainer},
                       reward={"num_workers": 1, "source": "reward_model"},
                       reward_model={"path": str(rm_dir)}, optim={"lr": 1e-2, "micro_batch_size": 8},
                       algorithm={"name": "ppo", "loss_agg": "token-mean", "advantage": {"gamma": 1.0, "lam": 0.95},
                                  "kl": {"beta": 0.01, "placement": "reward", "estimator": "k1"},
                                  "critic": {"lr": 1e-2, "value_clip": 0.2, **(critic or {})}, "ppo_epochs": 2})


def test_ppo_raises_a_fixed_reward_models_score(tmp_path):
    from rlvr.reward_model.model import RewardModel
    from rlvr.trainer.trainer import RLTrainer

    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    RewardModel.from_backbone(str(model_dir), seed=1).save(tmp_path / "rm", build_tokenizer())
    trainer = RLTrainer(resolve(_ppo_recipe(model_dir, data, tmp_path / "rm", steps=12)), tmp_path / "run")
    assert trainer.critic is not None and trainer.ref_model is not None
    trainer.train()
    trainer.engine.destroy()
    steps = [m for m in read_metrics(tmp_path / "run") if "reward/rm_mean" in m]
    assert len(steps) == 12
    for key in ("critic/value_loss", "critic/explained_variance", "critic/value_clip_fraction", "train/kl",
                "train/kl_beta", "train/sqrt_kl_from_init", "reward/gold_tests.tiny:digit_fraction"):
        assert key in steps[-1], key
    first = sum(m["reward/rm_mean"] for m in steps[:3]) / 3
    last = sum(m["reward/rm_mean"] for m in steps[-3:]) / 3
    assert last > first + 0.05, (first, last, [round(m["reward/rm_mean"], 3) for m in steps])
    assert steps[-1]["train/sqrt_kl_from_init"] > 0  # the policy moved away from the reference


def test_ppo_resumed_from_a_checkpoint_matches_the_unbroken_run(tmp_path, no_plots):
    """4 PPO steps straight vs 2 steps, a checkpoint, a fresh trainer resumed from it, 2 more: the same metrics
    (the critic's weights, optimizer and schedule come back from the checkpoint's critic/ state, the running score
    normaliser from the trainer state). One critic-only warm-up step."""
    from rlvr.reward_model.model import RewardModel
    from rlvr.trainer.trainer import RLTrainer

    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    RewardModel.from_backbone(str(model_dir), seed=1).save(tmp_path / "rm", build_tokenizer())

    def run(run_dir, steps, resume=False):
        raw = _ppo_recipe(model_dir, data, tmp_path / "rm", steps=4, save_every=2,
                          critic={"reward_normalize": True, "reward_clip": 3.0, "warmup_steps": 1})
        trainer = RLTrainer(resolve(raw), run_dir, resume=resume)
        if not resume:
            trainer.recipe.trainer.steps = steps  # stop early, as a killed run would, after the step-2 checkpoint
        trainer.train()
        trainer.engine.destroy()

    run(tmp_path / "a", 4)
    run(tmp_path / "b", 2)
    assert (tmp_path / "b/checkpoints/step-2/critic").is_dir()
    run(tmp_path / "b", 4, resume=True)

    def comparable(d):
        return [{k: v for k, v in m.items() if not k.startswith(("time/", "cpu/")) and k != "rollout/tokens_per_s"}
                for m in read_metrics(d) if "reward/rm_mean" in m]

    a, b = comparable(tmp_path / "a"), comparable(tmp_path / "b")
    assert len(a) == len(b) == 4
    assert a[0]["train/critic_warmup"] == 1.0 and "train/loss" not in a[0] and "train/loss" in a[1]
    assert a == b


def test_group_size_one_is_for_ppo_only(tmp_path):
    from rlvr.reward_model.model import RewardModel
    from rlvr.trainer.trainer import RLTrainer

    base = tiny_recipe(tmp_path / "m", tmp_path / "d.jsonl", rollout={"group_size": 1})
    with pytest.raises(RecipeError, match="group_size 1 is for PPO"):
        resolve(base)
    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    RewardModel.from_backbone(str(model_dir), seed=1).save(tmp_path / "rm", build_tokenizer())
    raw = _ppo_recipe(model_dir, data, tmp_path / "rm", steps=2)
    raw["rollout"]["group_size"] = 1
    trainer = RLTrainer(resolve(raw), tmp_path / "run")
    trainer.train()
    trainer.engine.destroy()
    steps = [m for m in read_metrics(tmp_path / "run") if "reward/rm_mean" in m]
    assert [m["reward/samples"] for m in steps] == [4.0, 4.0]  # 4 prompts x 1 sample
    assert all(m["critic/value_loss"] > 0 for m in steps)


def test_ppo_with_no_verifiers_at_all_trains_and_skips_the_solve_rate_and_eval(tmp_path, capsys):
    """``reward.source: reward_model`` with ``verifiers: []``: nothing decides "solved", so no ``reward/solve_rate``
    (and no per-verifier or gold metrics), and the pass@k eval is skipped with a message instead of crashing."""
    from rlvr.reward_model.model import RewardModel
    from rlvr.trainer.trainer import RLTrainer

    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    RewardModel.from_backbone(str(model_dir), seed=1).save(tmp_path / "rm", build_tokenizer())
    raw = _ppo_recipe(model_dir, data, tmp_path / "rm", steps=2)
    raw.update(verifiers=[], eval={"enabled": True, "k": 2})
    raw["reward"].pop("solved_verifier", None)
    recipe = resolve(raw)
    assert recipe.verifiers == [] and recipe.solved_verifier is None
    trainer = RLTrainer(recipe, tmp_path / "run")
    summary = trainer.train()
    trainer.engine.destroy()
    assert "eval skipped: pass@k needs a verifier" in capsys.readouterr().err
    assert summary["eval_before"] is None and summary["eval_after"] is None
    steps = [m for m in read_metrics(tmp_path / "run") if "reward/rm_mean" in m]
    assert len(steps) == 2
    for m in steps:
        assert "reward/solve_rate" not in m and not any(k.startswith("reward/gold_") for k in m)
        assert m["reward/mean"] == pytest.approx(m["reward/rm_mean"], abs=1e-6)  # rm_weight 1, nothing else
        assert "critic/value_loss" in m


def test_recipe_without_verifiers_needs_a_reward_model(tmp_path):
    base = tiny_recipe(tmp_path / "m", tmp_path / "d.jsonl", verifiers=[])
    base["reward"].pop("solved_verifier")
    with pytest.raises(RecipeError, match="no verifiers and reward.source='verifiers': nothing scores"):
        resolve(base)
    rm = {"reward_model": {"path": "rm"}}
    with pytest.raises(RecipeError, match="reward.source='both' .* no verifiers"):
        resolve({**base, **rm, "reward": {"source": "both"}})
    with pytest.raises(RecipeError, match="filter_on='solved' needs a verifier"):
        resolve({**base, **rm, "reward": {"source": "reward_model"},
                 "algorithm": {"dynamic_sampling": {"enabled": True}}})
    assert resolve({**base, **rm, "reward": {"source": "reward_model"}}).solved_verifier is None
