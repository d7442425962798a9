"""The command line: one clear error line (exit 2, no traceback) for bad input, before any model is loaded; eval."""

import json
import re

import pytest
import yaml

from rlvr.cli import main
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def _write(tmp_path, raw, name="r.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    # the error is the first line but for phase lines: on a fresh clone DeepSpeed's one-time op build (~30 s) says
    # "distributed set-up (DeepSpeed) ..." before the recipe's inputs are opened
    lines = [ln for ln in err.splitlines() if not (ln.endswith(" ...") or re.search(r": done in [0-9.]+ s$", ln))]
    assert lines and lines[0].startswith("error: ") and "Traceback" not in err, err
    return "\n".join(lines) + "\n"


def test_typo_names_the_closest_key(tiny, tmp_path, capsys):
    raw = tiny_recipe(*tiny)
    raw["rollout"]["group_sise"] = 4
    err = _error(capsys, ["config", "check", _write(tmp_path, raw)])
    assert "unknown key 'rollout.group_sise'; did you mean 'rollout.group_size'?" in err


def test_wrong_type_names_field_value_and_expectation(tiny, tmp_path, capsys):
    raw = tiny_recipe(*tiny, optim={"lr": "fast"})
    err = _error(capsys, ["config", "check", _write(tmp_path, raw)])
    assert "optim.lr" in err and "'fast'" in err and "number" in err


@pytest.mark.parametrize("override,needle", [
    (["optim.lr=-1e-6"], "optim.lr: Input should be greater than 0 (got -1e-06)"),
    (["rollout.samples_per_step=10"], "rollout.samples_per_step=10 is not divisible by rollout.group_size=4"),
    (["model.name=/no/such/model"], "model.name='/no/such/model': no model folder there"),
    (["data.source.path=/no/such.jsonl"], "data.source.path: file not found: /no/such.jsonl"),
    (["verifiers=[{name: no_such_verifier}]"], "no_such_verifier"),
])
def test_bad_recipe_values_fail_before_training(tiny, tmp_path, capsys, override, needle):
    recipe = _write(tmp_path, tiny_recipe(*tiny))
    err = _error(capsys, ["train", recipe, "-o", str(tmp_path / "run"), *sum((["--set", o] for o in override), [])])
    assert needle in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_dataset_problems(tiny, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    recipe = _write(tmp_path, tiny_recipe(tiny[0], empty))
    assert "holds no rows" in _error(capsys, ["train", recipe, "-o", str(tmp_path / "run")])
    no_answer = tmp_path / "no_answer.jsonl"
    no_answer.write_text('{"question": "1+1=?", "answer": "2"}\n{"question": "2+2=?"}\n')
    recipe = _write(tmp_path, tiny_recipe(tiny[0], no_answer))
    err = _error(capsys, ["train", recipe, "-o", str(tmp_path / "run")])
    assert f"{no_answer}:2 has no 'answer' field (data.answer_field); its fields are ['question']" in err
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "1+1=?", "answer": "2"}\n{not json\n')
    recipe = _write(tmp_path, tiny_recipe(tiny[0], broken))
    assert f"{broken}:2: not valid JSON" in _error(capsys, ["train", recipe, "-o", str(tmp_path / "run")])


def test_a_recipe_of_the_other_kind_names_its_command(tiny, tmp_path, capsys):
    policy = _write(tmp_path, tiny_recipe(*tiny), "policy.yaml")
    reward_model = _write(tmp_path, {"kind": "reward_model", "data": {"source": {"type": "jsonl", "path": "p.jsonl"}}},
                          "rm.yaml")
    err = _error(capsys, ["train", reward_model, "-o", str(tmp_path / "run")])
    assert "is a reward-model recipe" in err and f"rlvr rm train {reward_model}" in err and "unknown key" not in err
    err = _error(capsys, ["rm", "train", policy, "-o", str(tmp_path / "run")])
    assert "is a policy recipe" in err and f"`rlvr train {policy}`" in err and "unknown key" not in err
    assert not (tmp_path / "run").exists()


def test_eval_without_recipe_outside_a_run_dir_says_so(tiny, tmp_path, capsys):
    err = _error(capsys, ["eval", str(tiny[0])])
    assert "no --recipe given" in err and "recipe.resolved.yaml" in err


def test_train_then_eval_the_run(tiny, tmp_path, capsys):
    raw = tiny_recipe(*tiny, trainer={"steps": 1}, eval={"enabled": False, "k": 2})
    recipe = _write(tmp_path, raw)
    assert main(["train", recipe, "-o", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--k", "3"]) == 0  # the run's recipe.resolved.yaml by default
    result = json.loads(capsys.readouterr().out)
    assert result["num_prompts"] == 8 and result["k"] == 3
    assert result["model"].endswith("checkpoints/step-1/model")
    assert 0.0 <= result["pass_at_1"] <= result["pass_at_k"] <= 1.0
    # a second train into the same folder without --resume/--overwrite is refused
    err = _error(capsys, ["train", recipe, "-o", str(tmp_path / "run")])
    assert "is not empty" in err and "--resume" in err and "--overwrite" in err
