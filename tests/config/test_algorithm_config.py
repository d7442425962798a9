"""Config-time checks of algorithm settings that would otherwise be silent no-ops or do nothing on average (issue 11,
fixes 4 and 11), the per-estimator ``std_normalize`` default, and the ``gspo``/``cispo`` presets."""

import pytest

from rlvr.config import RecipeError, check_resumed_recipe, dump_recipe, recipe_changes, resolve


def _raw(**algorithm) -> dict:
    return {"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}],
            "algorithm": algorithm}


def test_k1_in_the_loss_is_refused_with_the_estimators_to_use():
    with pytest.raises(RecipeError, match=r"zero expected gradient.*'k3'.*'k2'"):
        resolve(_raw(kl={"beta": 0.04, "estimator": "k1", "placement": "loss"}))
    # k1 in the reward, and k1 with beta 0 (no KL at all), are fine
    assert resolve(_raw(kl={"beta": 0.04, "estimator": "k1", "placement": "reward"})).algorithm.kl.estimator == "k1"
    resolve(_raw(kl={"beta": 0.0, "estimator": "k1"}))


def test_kl_target_without_beta_is_refused():
    with pytest.raises(RecipeError, match=r"kl.target=0.01 needs algorithm.kl.beta > 0"):
        resolve(_raw(kl={"beta": 0.0, "target": 0.01}))
    assert resolve(_raw(kl={"beta": 0.1, "target": 0.01})).algorithm.kl.target == 0.01


@pytest.mark.parametrize("estimator, default", [("grpo", True), ("rloo", False), ("reinforce_pp", True)])
def test_std_normalize_defaults_to_the_estimators_paper(estimator, default):
    r = resolve(_raw(advantage={"type": estimator}))
    assert r.algorithm.advantage.std_normalize is default
    assert f"std_normalize: {str(default).lower()}" in dump_recipe(r)  # the resolved recipe spells it out
    assert resolve(_raw(advantage={"type": estimator, "std_normalize": not default})).algorithm.advantage.std_normalize \
        is (not default)


def test_cispo_combinations_that_mean_nothing_are_refused():
    with pytest.raises(RecipeError, match="importance_sampling_level='token'"):
        resolve(_raw(policy_loss="cispo", importance_sampling_level="sequence"))
    with pytest.raises(RecipeError, match="dual-clip"):
        resolve(_raw(policy_loss="cispo", clip_ratio_c=3.0))


def test_gspo_and_cispo_presets_expand_to_the_papers_settings():
    g = resolve({**_raw(), "preset": "gspo"}).algorithm
    assert (g.importance_sampling_level, g.policy_loss, g.clip_low, g.clip_high, g.loss_agg, g.kl.beta) == \
        ("sequence", "ppo_clip", 3e-4, 4e-4, "seq-mean-token-mean", 0.0)
    c = resolve({**_raw(), "preset": "cispo"}).algorithm
    assert (c.policy_loss, c.clip_low, c.clip_high, c.loss_agg, c.kl.beta) == ("cispo", 1.0, 4.0, "token-mean", 0.0)


def test_dynamic_sampling_filters_on_the_solved_verifier_by_default():
    assert resolve(_raw()).algorithm.dynamic_sampling.filter_on == "solved"
    assert resolve(_raw(dynamic_sampling={"filter_on": "reward"})).algorithm.dynamic_sampling.filter_on == "reward"


def test_resume_refuses_a_changed_recipe_and_names_the_keys():
    saved = resolve(_raw())
    changed = resolve({**_raw(kl={"beta": 0.1}), "optim": {"micro_batch_size": 2}})
    assert recipe_changes(saved.model_dump(mode="json"), changed.model_dump(mode="json")) == {
        "algorithm.kl.beta": (0.0, 0.1), "optim.micro_batch_size": (8, 2)}
    with pytest.raises(RecipeError, match=r"2 key\(s\):\n  algorithm.kl.beta: 0.0 -> 0.1\n  optim.micro_batch_size"):
        check_resumed_recipe(dump_recipe(saved), changed)
    with pytest.raises(RecipeError, match=r"1 key\(s\):\n  optim.micro_batch_size: 8 -> 2"):
        check_resumed_recipe(dump_recipe(saved), changed, ["algorithm.kl.beta"])
    check_resumed_recipe(dump_recipe(saved), changed, ["algorithm.kl.beta", "optim"])  # a section allows its keys
    check_resumed_recipe(dump_recipe(saved), saved)


# ------------------------------------------------------------------------------ algorithm.name, the ppo preset
def test_algorithm_name_and_advantage_type_fill_each_other_in():
    for name, adv in [("grpo", "grpo"), ("rloo", "rloo"), ("reinforce_pp", "reinforce_pp"), ("ppo", "gae")]:
        by_name, by_type = resolve(_raw(name=name)).algorithm, resolve(_raw(advantage={"type": adv})).algorithm
        assert (by_name.name, by_name.advantage.type) == (by_type.name, by_type.advantage.type) == (name, adv)
    a = resolve(_raw()).algorithm  # neither: the schema's default estimator
    assert (a.name, a.advantage.type, a.kl.placement, a.kl.estimator) == ("grpo", "grpo", "loss", "k3")


def test_ppo_by_name_puts_the_kl_in_the_reward_with_k1_unless_told_otherwise():
    a = resolve(_raw(name="ppo", kl={"beta": 0.1})).algorithm
    assert (a.advantage.type, a.kl.beta, a.kl.placement, a.kl.estimator) == ("gae", 0.1, "reward", "k1")
    assert resolve(_raw(name="ppo", kl={"beta": 0.1, "estimator": "k3"})).algorithm.kl.estimator == "k3"
    # advantage.type: gae alone (the older spelling) is PPO too, with the same KL defaults
    old = resolve(_raw(advantage={"type": "gae"})).algorithm
    assert (old.name, old.kl.placement, old.kl.estimator) == ("ppo", "reward", "k1")
    # a GRPO recipe keeps GRPO's: k3 in the loss
    assert (lambda k: (k.placement, k.estimator))(resolve(_raw(name="grpo", kl={"beta": 0.04})).algorithm.kl) == \
        ("loss", "k3")


def test_a_name_that_contradicts_the_advantage_or_the_preset_is_refused():
    with pytest.raises(RecipeError, match=r"algorithm.name='ppo' contradicts algorithm.advantage.type='grpo'"):
        resolve(_raw(name="ppo", advantage={"type": "grpo"}))
    with pytest.raises(RecipeError, match=r"algorithm.name='rloo' contradicts algorithm.advantage.type='gae'.*"
                                          r"GAE needs a critic"):
        resolve(_raw(name="rloo", advantage={"type": "gae"}))
    with pytest.raises(RecipeError, match=r"algorithm.name='ppo' contradicts preset 'dapo'.*use preset: ppo"):
        resolve({**_raw(name="ppo"), "preset": "dapo"})
    with pytest.raises(RecipeError, match=r"Input should be 'grpo', 'rloo', 'reinforce_pp' or 'ppo'"):
        resolve(_raw(name="dpo"))


def test_ppo_preset_expands_to_trl_style_settings():
    raw = {**_raw(), "preset": "ppo", "reward": {"source": "reward_model"}, "reward_model": {"path": "rm"},
           "rollout": {"group_size": 1}}
    r = resolve(raw)
    a = r.algorithm
    assert (a.name, a.advantage.type, a.advantage.gamma, a.advantage.lam, a.advantage.std_normalize) == \
        ("ppo", "gae", 1.0, 0.95, True)
    assert (a.clip_low, a.clip_high, a.loss_agg, a.ppo_epochs, a.policy_loss) == (0.2, 0.2, "token-mean", 4, "ppo_clip")
    assert (a.kl.beta, a.kl.estimator, a.kl.placement, a.kl.target) == (0.05, "k1", "reward", None)
    assert (a.critic.value_clip, a.critic.vf_coef, a.critic.init) == (0.2, 1.0, "reward_model")
    assert r.rollout.group_size == 1
    assert "name: ppo" in dump_recipe(r) and "init: reward_model" in dump_recipe(r)
    # the user's keys win over the preset's
    assert resolve({**raw, "algorithm": {"ppo_epochs": 2, "kl": {"beta": 0.0}}}).algorithm.ppo_epochs == 2


def test_critic_init_defaults_to_the_reward_model_when_there_is_one():
    with_rm = {"reward": {"source": "reward_model"}, "reward_model": {"path": "rm"}}
    assert resolve({**_raw(name="ppo"), **with_rm}).algorithm.critic.init == "reward_model"
    assert resolve({**_raw(name="ppo", critic={"init": "policy"}), **with_rm}).algorithm.critic.init == "policy"
    assert resolve(_raw(name="ppo")).algorithm.critic.init == "policy"  # verifiers only: the policy's trunk
    with pytest.raises(RecipeError, match=r"critic.init='reward_model' needs a reward_model: section"):
        resolve(_raw(name="ppo", critic={"init": "reward_model"}))


def test_resume_refuses_a_changed_algorithm_name():
    r = resolve(_raw())
    with pytest.raises(RecipeError, match=r"algorithm.name: 'grpo' -> 'rloo'"):
        check_resumed_recipe(dump_recipe(r), resolve(_raw(name="rloo")))
