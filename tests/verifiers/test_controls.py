"""Control rewards: the random reward is a fixed function of seed, prompt and completion with the asked rate, and
reward.control swaps the recipe's optimised verifiers for a control while keeping them as gold."""
import pytest

from rlvr.config import resolve
from rlvr.runs.verifier_inputs import verifier_specs
from rlvr.verifiers.controls import random_reward


def test_random_reward_is_a_fixed_coin_with_the_asked_rate():
    sample = {"prompt": "Which number is larger, 71 or 39?"}
    draws = [random_reward(f"\\boxed{{{i}}}", sample) for i in range(4000)]
    assert set(draws) == {0.0, 1.0} and 0.47 < sum(draws) / len(draws) < 0.53
    assert draws == [random_reward(f"\\boxed{{{i}}}", sample) for i in range(4000)]  # same inputs, same rewards
    other_seed = [random_reward(f"\\boxed{{{i}}}", sample, seed=1) for i in range(4000)]
    assert other_seed != draws
    assert {random_reward(str(i), sample, p=0.0) for i in range(50)} == {0.0}
    assert {random_reward(str(i), sample, p=1.0) for i in range(50)} == {1.0}
    with pytest.raises(ValueError, match="p must be in"):
        random_reward("x", sample, p=1.5)


def _recipe(**reward):
    return resolve({"seed": 7, "model": {"name": "x"}, "data": {"source": {"type": "jsonl", "path": "d.jsonl"}},
                    "verifiers": [{"name": "math"}, {"name": "boxed_format", "weight": 0.1}], "reward": reward})


@pytest.mark.parametrize("control, name, kwargs", [("random", "random_reward", {"seed": 7}),
                                                   ("format", "boxed_format", {})])
def test_a_control_run_optimises_the_control_and_keeps_the_recipes_verifiers_as_gold(control, name, kwargs):
    specs = verifier_specs(_recipe(control=control))
    assert [(s.name, s.weight) for s in specs] == [("math", 0.0), ("boxed_format", 0.0), (name, 1.0)]
    assert specs[-1].kwargs == kwargs
    assert [(s.name, s.weight) for s in verifier_specs(_recipe())] == [("math", 1.0), ("boxed_format", 0.1)]


def test_a_control_whose_batches_the_gold_would_choose_is_refused():
    raw = {"seed": 7, "model": {"name": "x"}, "data": {"source": {"type": "jsonl", "path": "d.jsonl"}},
           "verifiers": [{"name": "math"}], "reward": {"control": "random"}}
    with pytest.raises(ValueError, match="reward.control='random' with algorithm.dynamic_sampling.filter_on='solved': "
                                         "the solved flag comes from the recipe's verifiers"):
        resolve({**raw, "algorithm": {"dynamic_sampling": {"enabled": True}}})
    with pytest.raises(ValueError, match="with curriculum.sampler='pools'"):
        resolve({**raw, "curriculum": {"sampler": "pools"}})
    ok = resolve({**raw, "algorithm": {"dynamic_sampling": {"enabled": True, "filter_on": "reward"}}})
    assert ok.algorithm.dynamic_sampling.filter_on == "reward"
    assert resolve({**raw, "reward": {}, "algorithm": {"dynamic_sampling": {"enabled": True}}})  # a real run may
