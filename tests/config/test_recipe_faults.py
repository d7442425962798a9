"""Recipes that used to hang, crash with a traceback, or be read as something else: each is one RecipeError line,
from ``rlvr config check`` (no model, no data)."""

from __future__ import annotations

import time

import pytest

from rlvr.config import RecipeError, load_recipe

BASE = """\
preset: grpo
data:
  source: {type: jsonl, path: data.jsonl}
verifiers:
  - name: math
optim:
  lr: 1.0e-6
trainer:
  steps: 3
"""


def _load(tmp_path, text: str, overrides: list[str] | None = None):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return load_recipe(path, overrides)


def _one_line_error(tmp_path, text: str, overrides: list[str] | None = None) -> str:
    with pytest.raises(RecipeError) as caught:
        _load(tmp_path, text, overrides)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_the_base_recipe_loads(tmp_path):
    assert _load(tmp_path, BASE).trainer.steps == 3


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    bomb = 'lol: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        bomb += f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]\n"
    start = time.perf_counter()
    message = _one_line_error(tmp_path, BASE + bomb + "curriculum: {bomb: *i}\n")
    assert time.perf_counter() - start < 5
    assert message.endswith("recipe.yaml: expands to more than 100,000 values once its aliases (*name) are followed: "
                            "a recipe that large is a mistake or an attack")


def test_deep_nesting_is_refused(tmp_path):
    message = _one_line_error(tmp_path, BASE + "seed: " + "[" * 5000 + "]" * 5000 + "\n")
    assert message.endswith("recipe.yaml: nested more than 64 levels deep at line 10, column 70")
    message = _one_line_error(tmp_path, BASE, ["seed=" + "[" * 5000 + "]" * 5000])
    assert message.startswith("--set value '[[[[") and "nested more than 64 levels deep" in message


def test_a_duplicated_section_is_refused(tmp_path):
    message = _one_line_error(tmp_path, BASE + "optim:\n  micro_batch_size: 8\n")
    assert message.endswith("recipe.yaml: key 'optim' appears twice in one mapping (line 6 and line 10): YAML would "
                            "keep the second silently; merge the two into one")
    message = _one_line_error(tmp_path, BASE.replace("  lr: 1.0e-6\n", "  lr: 1.0e-6\n  lr: 2.0e-6\n"))
    assert "key 'lr' appears twice in one mapping (line 7 and line 8)" in message


def test_yaml_merge_keys_still_work(tmp_path):
    text = BASE + "rollout: &r {group_size: 4}\neval:\n  <<: {k: 2}\n  temperature: 0.5\n"
    recipe = _load(tmp_path, text)
    assert recipe.eval.k == 2 and recipe.rollout.group_size == 4


def test_a_preset_that_is_not_a_name(tmp_path):
    expected = "preset: expected one name (none, grpo, dr_grpo, dapo, gspo, cispo, ppo, r1_zero), got list ['grpo']"
    assert _one_line_error(tmp_path, BASE.replace("preset: grpo", "preset: [grpo]")) == expected
    assert _one_line_error(tmp_path, BASE, ["preset=[grpo]"]) == expected
    assert "got dict" in _one_line_error(tmp_path, BASE.replace("preset: grpo", "preset: {a: 1}"))


def test_a_section_given_as_a_word(tmp_path):
    text = BASE + "algorithm: {advantage: gae}\n"
    assert _one_line_error(tmp_path, text) == ("algorithm.advantage: Input should be a valid dictionary or instance of "
                                               "AdvantageConfig (got 'gae')")


@pytest.mark.parametrize("key, text", [("trainer.steps", "trainer:\n  steps: true\n"),
                                       ("optim.lr", "optim:\n  lr: false\n"),
                                       ("eval.k", "eval:\n  k: true\n"),
                                       ("verifiers.0.weight", "verifiers:\n  - {name: math, weight: true}\n")])
def test_a_boolean_is_not_a_number(tmp_path, key, text):
    section = text.split(":")[0]
    base = "".join(block for block in BASE.replace("\n  ", "\0").splitlines(keepends=True)
                   if not block.startswith(section + ":")).replace("\0", "\n  ")
    value = "false" if "false" in text else "true"
    assert _one_line_error(tmp_path, base + text) == f"{key}: expected a number, got {value.title()} (a YAML boolean)"


def test_bools_stay_bools(tmp_path):
    recipe = _load(tmp_path, BASE + "eval:\n  enabled: false\n")
    assert recipe.eval.enabled is False


@pytest.mark.parametrize("override", ["eval.k=1000000000", "rollout.group_size=100000"])
def test_sample_counts_have_an_upper_bound(tmp_path, override):
    key = override.split("=")[0]
    assert _one_line_error(tmp_path, BASE, [override]).startswith(f"{key}: Input should be less than or equal to 1024")


def test_a_recipe_that_is_not_utf8(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_bytes(BASE.encode() + b"# caf\xe9\n")
    with pytest.raises(RecipeError, match=r"recipe.yaml:10: not UTF-8 text \(invalid continuation byte\)$"):
        load_recipe(path)


def test_invalid_yaml_is_one_line(tmp_path):
    message = _one_line_error(tmp_path, BASE + "rollout: [1\nseed: 2\n")
    assert message.endswith("recipe.yaml: not valid YAML: expected ',' or ']', but got ':' at line 11, column 5")


def test_sandbox_python_modules_must_be_module_names(tmp_path):
    recipe = _load(tmp_path, BASE + "sandbox:\n  python_modules: [numpy, scipy.sparse, numpy]\n")
    assert recipe.sandbox.python_modules == ["numpy", "scipy.sparse"]
    assert _load(tmp_path, BASE).sandbox.python_modules == []
    message = _one_line_error(tmp_path, BASE + "sandbox:\n  python_modules: [numpy, 'os; rm']\n")
    assert "sandbox.python_modules" in message and "not Python module names: 'os; rm'" in message


@pytest.mark.parametrize("override, key", [
    ("reward.num_workers=100000", "reward.num_workers"),
    ("rollout.prompts_per_step=1000000000", "rollout.prompts_per_step"),
    (f"seed={2 ** 70}", "seed"),
    ("trainer.steps=10000000000", "trainer.steps"),
    ("rollout.max_new_tokens=99999999999", "rollout.max_new_tokens"),
])
def test_sizes_counts_and_seeds_have_an_upper_bound_named_by_key(tmp_path, override, key):
    with pytest.raises(RecipeError, match=rf"^{key}: Input should be less than or equal to"):
        _load(tmp_path, BASE, [override])


@pytest.mark.parametrize("text", ["verifiers:\n  - {name: math, timeout_s: .inf}\n",
                                  "verifiers:\n  - {name: math, weight: .nan}\n"])
def test_every_float_of_a_recipe_is_finite(tmp_path, text):
    with pytest.raises(RecipeError, match=r"^verifiers\.0\.(timeout_s|weight): Input should be a finite number"):
        _load(tmp_path, BASE.replace("verifiers:\n  - name: math\n", text))


@pytest.mark.parametrize("engine", ["auto", "hf", "vllm"])
def test_off_policy_steps_need_server_rollouts(tmp_path, engine):
    """K >= 1 generates while the trainer updates: an engine that shares or reloads the trainer's weights cannot."""
    message = _one_line_error(tmp_path, BASE, [f"rollout.engine={engine}", "rollout.max_off_policy_steps=1"])
    assert "rollout.max_off_policy_steps=1" in message and "rollout.engine: server" in message
    assert f"rollout.engine={engine!r}" in message
    assert _load(tmp_path, BASE, [f"rollout.engine={engine}"]).rollout.max_off_policy_steps == 0


def test_off_policy_steps_with_server_rollouts_load(tmp_path):
    recipe = _load(tmp_path, BASE, ["rollout.engine=server", "rollout.servers.launch.count=1",
                                          "rollout.max_off_policy_steps=2"])
    assert (recipe.rollout.engine, recipe.rollout.max_off_policy_steps) == ("server", 2)
    assert "rollout.max_off_policy_steps" in _one_line_error(
        tmp_path, BASE, ["rollout.engine=server", "rollout.servers.launch.count=1", "rollout.max_off_policy_steps=-1"])
