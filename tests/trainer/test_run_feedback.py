"""What a run tells its user: a refusal to mix two runs in one folder, a line per slow phase before the first step,
and verifier failures on the step line."""

from __future__ import annotations

import pytest
import yaml

from rlvr.cli import main
from rlvr.config import resolve
from rlvr.runs.metrics import read_metrics
from rlvr.trainer.progress import TrainProgress, failure_warnings
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset

BROKEN = "tests.trainer.test_run_feedback:always_raises"


def always_raises(completion: str, sample: dict) -> float:
    raise RuntimeError("reads a column the data does not have")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def test_train_refuses_a_folder_holding_another_run(tiny, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    (run / "recipe.resolved.yaml").write_text("the other run's recipe\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe(*tiny)))
    assert main(["train", str(recipe), "-o", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"error: {run} is not empty (it holds metrics.jsonl, recipe.resolved.yaml): pass --resume to continue its " \
           f"run, --overwrite to delete it and start over, or -o for another folder" in err
    assert (run / "metrics.jsonl").read_text() == '{"step": 1, "reward/mean": 0.5}\n'  # neither appended to
    assert (run / "recipe.resolved.yaml").read_text() == "the other run's recipe\n"  # nor overwritten


def test_failure_counts_per_verifier_on_the_step_line_and_a_warning_when_every_sample_failed():
    metrics = {"reward/mean": 0.5, "reward/solve_rate": 0.25, "rollout/response_length": 7.0, "time/rollout_s": 1.0,
               "reward/samples": 16.0, "reward/verifier_failures/math": 3.0, "reward/verifier_failures/mine": 16.0,
               "reward/verifier_failures/format": 0.0}
    assert TrainProgress.format_stats(metrics).endswith("failed: math=3/16,mine=16/16")
    assert failure_warnings(4, metrics, {"mine": "error: KeyError: 'solution'"}) == [
        "WARNING: verifier 'mine' failed on all 16 samples of step 4 (e.g. error: KeyError: 'solution'); the reasons "
        "are in samples/step-4.jsonl"]
    assert TrainProgress.format_stats({**metrics, "reward/verifier_failures/math": 0.0,
                                       "reward/verifier_failures/mine": 0.0}).endswith("1.0s/step")


def test_a_training_step_counts_failed_calls_per_verifier_and_prints_its_phases(tiny, tmp_path, capsys):
    from rlvr.trainer.trainer import RLTrainer

    raw = tiny_recipe(*tiny, trainer={"steps": 1},
                      verifiers=[{"name": "tests.tiny:digit_fraction"}, {"name": BROKEN, "weight": 0.0}],
                      reward={"solved_verifier": None})
    trainer = RLTrainer(resolve(raw), tmp_path / "run")
    trainer.train()
    trainer.engine.destroy()
    (step,) = [m for m in read_metrics(tmp_path / "run") if "reward/mean" in m]
    assert step["reward/samples"] == 16.0
    assert step[f"reward/verifier_failures/{BROKEN}"] == 16.0
    assert step["reward/verifier_failures/tests.tiny:digit_fraction"] == 0.0
    assert step["reward/verifier_failures"] == 16.0
    err = capsys.readouterr().err
    assert f"failed: {BROKEN}=16/16" in err
    assert f"WARNING: verifier '{BROKEN}' failed on all 16 samples of step 1 (e.g. error: RuntimeError: reads a " \
           f"column the data does not have)" in err
    for line in ("loading the policy from", "DeepSpeed engine (ZeRO-0, 1 rank(s)): done in",
                 "training: 1 step(s) of 4 prompts x 4 samples", "pre-flight checks (train): ok"):
        assert line in err, (line, err)


def test_a_quick_quiet_phase_prints_nothing_and_a_slow_one_says_so(capsys):
    import time

    from rlvr.trainer.progress import phase

    with phase("quick", quiet_below_s=5.0):
        pass
    assert capsys.readouterr().err == ""
    with phase("slow", quiet_below_s=0.05):
        time.sleep(0.3)
    err = capsys.readouterr().err
    assert err.startswith("slow ...\nslow: done in 0.") and err.count("\n") == 2
    with phase("loud"):
        pass
    assert capsys.readouterr().err.startswith("loud ...\nloud: done in")


def test_a_verifier_failing_on_every_sample_stops_the_run_after_max_failed_steps(tiny, tmp_path, capsys):
    from rlvr.runs.checkpoint import list_checkpoints

    raw = tiny_recipe(*tiny, trainer={"steps": 5, "save_every": 1, "max_failed_steps": 2},
                      verifiers=[{"name": BROKEN}], reward={"solved_verifier": None})
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(raw))
    run = tmp_path / "run"
    assert main(["train", str(recipe), "-o", str(run)]) == 2
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert line == (f"error: verifier '{BROKEN}' failed on every sample of steps 1-2 (trainer.max_failed_steps=2); "
                    f"first failure: error: RuntimeError: reads a column the data does not have; the run stopped "
                    f"without saving these steps (fix the verifier, then --resume from the last checkpoint)")
    assert [n for n, _ in list_checkpoints(run)] == [1]  # saved after step 1; step 2 (the last failed one) is not
    assert [m["step"] for m in read_metrics(run) if "reward/mean" in m] == [1, 2]


def test_failure_streaks_reset_on_a_step_where_the_verifier_scored_a_sample():
    from rlvr.trainer.progress import FailureStreaks, VerifierFailedError

    streaks = FailureStreaks(2)
    failed = {"reward/samples": 4.0, "reward/verifier_failures/v": 4.0}
    streaks.update(1, failed, {"v": "timeout"})
    streaks.update(2, {**failed, "reward/verifier_failures/v": 3.0})
    streaks.update(3, failed, {"v": "error: x"})
    with pytest.raises(VerifierFailedError, match="steps 3-4 .* first failure: error: x;"):
        streaks.update(4, failed, {"v": "timeout"})
