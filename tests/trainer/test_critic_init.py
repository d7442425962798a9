"""Where the PPO critic starts (``algorithm.critic.init``): a copy of the reward model, trained head included, or the
policy's trunk with a new head."""

from __future__ import annotations

import torch

from rlvr.config import resolve
from rlvr.reward_model.model import RewardModel, pad_sequences
from rlvr.trainer.critic import build_value_model, critic_source
from tests.tiny import build_tiny_model, build_tokenizer, tiny_recipe


def _setup(tmp_path):
    policy = build_tiny_model(tmp_path / "policy", seed=0)
    # the reward model has other weights than the policy (another seed), so a copy of either is recognisable
    rm = RewardModel.from_backbone(str(build_tiny_model(tmp_path / "rm_backbone", seed=3)), seed=5)
    rm.save(tmp_path / "rm", build_tokenizer())
    return policy, rm


def _recipe(tmp_path, policy, **critic):
    return resolve(tiny_recipe(policy, tmp_path / "d.jsonl", reward={"source": "reward_model"},
                               reward_model={"path": str(tmp_path / "rm")},
                               algorithm={"name": "ppo", "critic": critic}))


def test_the_default_critic_is_the_reward_model_and_its_last_value_is_the_rm_score(tmp_path):
    policy, rm = _setup(tmp_path)
    recipe = _recipe(tmp_path, policy)
    assert recipe.algorithm.critic.init == "reward_model"
    assert critic_source(recipe, str(policy)) == ("reward_model", str(tmp_path / "rm"))
    critic = build_value_model(recipe, str(policy))
    assert torch.equal(critic.rm.head.weight, rm.head.weight)  # the trained head, not a new one
    ids, mask = pad_sequences([[5, 6, 7, 1], [8, 9, 1]], pad_id=0, side="left")
    values = critic(ids, mask)  # (2, 4): one value per position
    with torch.no_grad():
        assert torch.allclose(values[:, -1], rm(ids, mask), atol=1e-6)  # at the last token: the RM's own score
        assert not torch.allclose(values[:, -2], values[:, -1])  # and a value at every position


def test_an_ensemble_critic_starts_from_its_first_member(tmp_path):
    policy, rm = _setup(tmp_path)
    RewardModel.from_backbone(str(policy), seed=9).save(tmp_path / "rm2", build_tokenizer())
    recipe = resolve(tiny_recipe(policy, tmp_path / "d.jsonl", reward={"source": "reward_model"},
                                 reward_model={"paths": [str(tmp_path / "rm"), str(tmp_path / "rm2")]},
                                 algorithm={"name": "ppo"}))
    assert critic_source(recipe, str(policy)) == ("reward_model", str(tmp_path / "rm"))
    assert torch.equal(build_value_model(recipe, str(policy)).rm.head.weight, rm.head.weight)


def test_critic_init_policy_is_the_policys_trunk_with_a_new_head(tmp_path):
    policy, rm = _setup(tmp_path)
    recipe = _recipe(tmp_path, policy, init="policy")
    critic = build_value_model(recipe, str(policy))
    from transformers import AutoModelForCausalLM
    lm = AutoModelForCausalLM.from_pretrained(policy)
    trunk = dict(critic.rm.backbone.named_parameters())
    for name, p in lm.model.named_parameters():
        assert torch.equal(trunk[name], p), name
    d = critic.rm.head.in_features
    assert not torch.equal(critic.rm.head.weight, rm.head.weight)
    assert 0.5 < float(critic.rm.head.weight.detach().std()) * (d + 1) ** 0.5 < 2.0  # drawn normal(0, 1/sqrt(d+1))
