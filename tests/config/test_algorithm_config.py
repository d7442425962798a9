"""Config-time checks of algorithm settings that would otherwise be silent no-ops or do nothing on average (issue 11,
fixes 4 and 11), the per-estimator ``std_normalize`` default, and the ``gspo``/``cispo`` presets."""

import pytest
import yaml

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


@pytest.mark.parametrize("name, default", [("grpo", True), ("rloo", False), ("reinforce_pp", True), ("ppo", True)])
def test_std_normalize_defaults_to_the_estimators_paper(name, default):
    r = resolve(_raw(name=name))
    assert r.algorithm.advantage.std_normalize is default
    assert f"std_normalize: {str(default).lower()}" in dump_recipe(r)  # the resolved recipe spells it out
    assert resolve(_raw(name=name, advantage={"std_normalize": not default})).algorithm.advantage.std_normalize \
        is (not default)


def test_a_setting_the_chosen_loss_does_not_read_is_refused():
    with pytest.raises(RecipeError, match=r"algorithm.importance_sampling_level='sequence' has no meaning with "
                                          r"algorithm.policy_loss='cispo', which reads algorithm.clip_low, "
                                          r"algorithm.clip_high: remove it \(default 'token'\)"):
        resolve(_raw(policy_loss="cispo", importance_sampling_level="sequence"))
    with pytest.raises(RecipeError, match=r"algorithm.clip_ratio_c=3.0 has no meaning with algorithm.policy_loss="
                                          r"'cispo'.*\(default None\)"):
        resolve(_raw(policy_loss="cispo", clip_ratio_c=3.0))
    assert resolve(_raw(policy_loss="ppo_clip", clip_ratio_c=3.0)).algorithm.clip_ratio_c == 3.0


def test_an_unknown_loss_or_algorithm_names_the_closest_and_the_valid_ones():
    with pytest.raises(RecipeError, match=r"^unknown policy loss 'cisp'; did you mean 'cispo'\? \(valid "
                                          r"algorithm.policy_loss: ppo_clip, cispo\)$"):
        resolve(_raw(policy_loss="cisp"))
    with pytest.raises(RecipeError, match=r"^unknown algorithm 'dpo'; did you mean 'ppo'\? \(valid algorithm.name: "
                                          r"grpo, rloo, reinforce_pp, ppo\)$"):
        resolve(_raw(name="dpo"))


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
@pytest.mark.parametrize("old, name", [("grpo", "grpo"), ("rloo", "rloo"), ("reinforce_pp", "reinforce_pp"),
                                       ("gae", "ppo")])
def test_the_older_advantage_type_is_read_as_algorithm_name(old, name):
    """``algorithm.name`` is the one key of the choice; a recipe that still writes ``advantage.type`` loads as the
    same algorithm, and its resolved recipe holds the one key only."""
    by_type, by_name = resolve(_raw(advantage={"type": old})), resolve(_raw(name=name))
    assert by_type.algorithm == by_name.algorithm
    assert by_type.algorithm.name == name
    assert "type" not in by_type.model_dump()["algorithm"]["advantage"]
    assert dump_recipe(by_type) == dump_recipe(by_name)
    assert resolve(_raw(name=name, advantage={"type": old})).algorithm == by_name.algorithm  # both keys agreeing: fine
    a = resolve(_raw()).algorithm  # neither: the schema's default
    assert (a.name, a.kl.placement, a.kl.estimator) == ("grpo", "loss", "k3")


def test_ppo_by_name_puts_the_kl_in_the_reward_with_k1_unless_told_otherwise():
    a = resolve(_raw(name="ppo", kl={"beta": 0.1})).algorithm
    assert (a.kl.beta, a.kl.placement, a.kl.estimator) == (0.1, "reward", "k1")
    assert resolve(_raw(name="ppo", kl={"beta": 0.1, "estimator": "k3"})).algorithm.kl.estimator == "k3"
    # a GRPO recipe keeps GRPO's: k3 in the loss
    assert (lambda k: (k.placement, k.estimator))(resolve(_raw(name="grpo", kl={"beta": 0.04})).algorithm.kl) == \
        ("loss", "k3")
    with pytest.raises(RecipeError, match=r"algorithm.name='ppo' \(a critic, per-token rewards\) puts the KL penalty "
                                          r"in the per-token reward: set algorithm.kl.placement='reward'"):
        resolve(_raw(name="ppo", kl={"beta": 0.1, "placement": "loss"}))


def test_a_name_that_contradicts_the_older_key_or_the_preset_is_refused():
    with pytest.raises(RecipeError, match=r"^algorithm.name='ppo' contradicts algorithm.advantage.type='grpo', the "
                                          r"older spelling of algorithm.name='grpo' \(PPO's advantages come from a "
                                          r"critic\): remove algorithm.advantage.type"):
        resolve(_raw(name="ppo", advantage={"type": "grpo"}))
    with pytest.raises(RecipeError, match=r"algorithm.name='rloo' contradicts algorithm.advantage.type='gae'.*"
                                          r"GAE needs a critic"):
        resolve(_raw(name="rloo", advantage={"type": "gae"}))
    with pytest.raises(RecipeError, match=r"algorithm.advantage.type='dapo': the older spelling of algorithm.name "
                                          r"takes 'grpo', 'rloo', 'reinforce_pp', 'gae'"):
        resolve(_raw(advantage={"type": "dapo"}))
    with pytest.raises(RecipeError, match=r"^algorithm.name='ppo' contradicts preset 'dapo', which sets "
                                          r"algorithm.name='grpo' \(a group baseline, ppo has a critic one\): use "
                                          r"preset: ppo, or drop algorithm.name$"):
        resolve({**_raw(name="ppo"), "preset": "dapo"})
    with pytest.raises(RecipeError, match=r"algorithm.name='grpo' contradicts preset 'ppo'.*use preset: grpo or "
                                          r"preset: dr_grpo or preset: dapo"):
        resolve({**_raw(name="grpo"), "preset": "ppo"})
    # a preset of one group-relative algorithm with another's name: its settings, that estimator (as the older key
    # allowed: preset dapo with advantage.type rloo)
    for raw in ({**_raw(name="rloo"), "preset": "dapo"}, {**_raw(advantage={"type": "rloo"}), "preset": "dapo"}):
        a = resolve(raw).algorithm
        assert (a.name, a.clip_high, a.dynamic_sampling.enabled, a.advantage.std_normalize) == ("rloo", 0.28, True, True)


def test_ppo_preset_expands_to_trl_style_settings():
    raw = {**_raw(), "preset": "ppo", "reward": {"source": "reward_model"}, "reward_model": {"path": "rm"},
           "rollout": {"group_size": 1}}
    r = resolve(raw)
    a = r.algorithm
    assert (a.name, a.advantage.gamma, a.advantage.lam, a.advantage.std_normalize) == ("ppo", 1.0, 0.95, True)
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


def test_resume_reads_a_run_resolved_with_the_older_key():
    """A run whose recipe.resolved.yaml has both algorithm.name and advantage.type (written before name was the one
    key) resumes with the same recipe, and a real change is still named."""
    saved = resolve(_raw(name="ppo")).model_dump(mode="json")
    saved["algorithm"]["advantage"]["type"] = "gae"
    check_resumed_recipe(yaml.safe_dump(saved), resolve(_raw(name="ppo")))
    with pytest.raises(RecipeError, match=r"algorithm.name: 'ppo' -> 'grpo'"):
        check_resumed_recipe(yaml.safe_dump(saved), resolve(_raw(name="grpo")))
