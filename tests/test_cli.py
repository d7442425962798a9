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


def test_a_full_disk_outside_a_checkpoint_is_one_line(monkeypatch, capsys, tmp_path):
    """A plot or metrics line that cannot be written ends the run with one line, not a traceback."""
    import errno

    from rlvr import cli

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "plots" / "curves.png"))

    monkeypatch.setattr(cli, "_cmd_train", full)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {name: x}\n")
    assert cli.main(["train", str(recipe)]) == 2
    assert capsys.readouterr().err == (
        f"error: no space left on the disk while writing {tmp_path / 'plots' / 'curves.png'}: free space there, then "
        f"--resume (checkpoints are written whole or not at all, so the newest one is intact)\n")


def test_a_writer_thread_that_meets_a_full_disk_prints_no_traceback(monkeypatch, capsys, tmp_path):
    """TensorBoard's event writer thread dies on ENOSPC; the main thread reports it at its next flush (one line)."""
    import errno
    import threading

    from rlvr import cli

    def full(args):
        def writer():
            raise OSError(errno.ENOSPC, "No space left on device")

        def broken():
            raise ValueError("a writer thread's bug")

        for target in (writer, broken):
            t = threading.Thread(target=target)
            t.start()
            t.join()
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "tensorboard"))

    monkeypatch.setattr(cli, "_cmd_train", full)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)  # restored after the test
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {name: x}\n")
    assert cli.main(["train", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "OSError" not in err and "No space left on device" not in err  # the writer thread stayed quiet
    assert "ValueError: a writer thread's bug" in err  # any other thread error is printed as Python does
    assert err.endswith(f"error: no space left on the disk while writing {tmp_path / 'tensorboard'}: free space "
                        f"there, then --resume (checkpoints are written whole or not at all, so the newest one is "
                        f"intact)\n")


def test_a_full_disk_that_names_no_file_is_named_by_the_run_folder(tiny, monkeypatch, capsys, tmp_path):
    """A write through a file object (matplotlib's PNG, TensorBoard's event file) fails with ENOSPC and no file name:
    the line names the run folder, so that "free space there" says where."""
    import errno

    import rlvr.trainer.trainer as trainer_module

    class FullDisk:
        def __init__(self, *args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trainer_module, "RLTrainer", FullDisk)
    run = tmp_path / "run"
    err = _error(capsys, ["train", _write(tmp_path, tiny_recipe(*tiny)), "-o", str(run)])
    assert err == (f"error: no space left on the disk while writing {run}: free space there, then --resume "
                   f"(checkpoints are written whole or not at all, so the newest one is intact)\n")


def test_ctrl_c_in_training_is_one_line_naming_how_to_continue(monkeypatch, capsys, tmp_path):
    import argparse

    from rlvr.cli import interrupted_line

    run = tmp_path / "run"
    args = argparse.Namespace(recipe="recipes/demo.yaml")

    class Trainer:
        step_done = 11

        class recipe:  # noqa: N801
            class trainer:  # noqa: N801
                steps = 30

    assert interrupted_line(args, run, None) == (
        f"interrupted before training started; no checkpoint was written: `rlvr train recipes/demo.yaml -o {run} "
        f"--overwrite` starts the run again")
    for step in (2, 10, 4):
        (run / "checkpoints" / f"step-{step}").mkdir(parents=True)
    (run / "checkpoints" / ".tmp-step-12").mkdir()
    assert interrupted_line(args, run, Trainer()) == (
        f"interrupted at step 11 of 30; the newest checkpoint is step-10: `rlvr train recipes/demo.yaml -o {run} "
        f"--resume` continues from it (the steps after it are redone, with the same numbers)")


def test_a_reader_that_leaves_early_is_no_traceback(tmp_path):
    """`rlvr config show RECIPE | head -1`: the closed pipe ends the command quietly."""
    import subprocess
    import sys

    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {name: x}\ndata: {source: {type: jsonl, path: d.jsonl}}\nverifiers: [{name: math}]\n")
    # `true` exits before rlvr has imported: every write meets a closed pipe
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {sys.executable} -m rlvr.cli config show {recipe} | true"],
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_resume_of_a_complete_run_says_so_and_loads_nothing(tmp_path, capsys):
    import json

    from rlvr.cli import completed_steps, main

    run = tmp_path / "run"
    (run / "checkpoints" / "step-3").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"steps": 3, "final_checkpoint": str(run / "checkpoints/step-3")}))
    assert completed_steps(run, 3) == 3 and completed_steps(run, 5) is None
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {name: not-loaded}\ndata: {source: {type: jsonl, path: d.jsonl}}\n"
                      "verifiers: [{name: math}]\ntrainer: {steps: 3}\n")
    assert main(["train", str(recipe), "-o", str(run), "--resume"]) == 0
    assert capsys.readouterr().err == (
        f"{run}: the run is complete (3 of trainer.steps=3 steps, summary.json written): nothing to resume. To train "
        f"it further: --resume --set trainer.steps=N --allow-changed trainer.steps\n")
    (run / "checkpoints" / "step-4").mkdir()  # a newer checkpoint than the summary's: not the finished run
    assert completed_steps(run, 3) is None


def test_the_last_line_names_the_plots_the_run_drew(tmp_path):
    from rlvr.cli import run_plots

    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "curves.png").write_bytes(b"png")
    assert run_plots(tmp_path) == [tmp_path / "plots" / "curves.png"]
    (tmp_path / "plots" / "tools.png").write_bytes(b"png")
    assert run_plots(tmp_path) == [tmp_path / "plots" / "curves.png", tmp_path / "plots" / "tools.png"]
