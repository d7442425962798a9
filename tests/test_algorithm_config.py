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
