"""The did-you-mean hint: transpositions are one edit, unrelated words get no hint."""
import pytest

from rlvr.did_you_mean import closest, edit_distance

PRESETS = ["grpo", "dr_grpo", "dapo", "r1_zero", "gspo", "cispo", "ppo", "none"]


@pytest.mark.parametrize("a, b, d", [("gpro", "grpo", 1), ("gpro", "gspo", 2), ("", "abc", 3), ("abc", "abc", 0),
                                     ("ca", "abc", 3), ("kitten", "sitting", 3)])
def test_edit_distance(a, b, d):
    assert edit_distance(a, b) == d == edit_distance(b, a)


@pytest.mark.parametrize("typed, hint", [("gpro", "grpo"), ("grpoo", "grpo"), ("GRPO", "grpo"), ("dapoo", "dapo"),
                                         ("r1zero", "r1_zero"), ("ppo2", "ppo"), ("sft", None), ("banana", None)])
def test_closest_preset(typed, hint):
    assert closest(typed, PRESETS) == hint


def test_closest_keys():
    keys = ["max_new_tokens", "group_size", "prompts_per_step", "temperature"]
    assert closest("max_new_token", keys) == "max_new_tokens"
    assert closest("tempreature", keys) == "temperature"
    assert closest("gruop_size", keys) == "group_size"


def test_a_transposed_preset_suggests_the_preset_meant():
    from rlvr.config import RecipeError, resolve

    with pytest.raises(RecipeError, match=r"unknown preset 'gpro'; did you mean 'grpo'\?"):
        resolve({"preset": "gpro", "model": {"name": "x"}, "data": {"source": {"type": "jsonl", "path": "d.jsonl"}}})
