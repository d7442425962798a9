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
    assert f"error: {run} holds a run that stopped before its first checkpoint (it holds metrics.jsonl, " \
           f"recipe.resolved.yaml), so there is nothing to resume: pass --overwrite to start it over, or -o for " \
           f"another folder" in err
    assert (run / "metrics.jsonl").read_text() == '{"step": 1, "reward/mean": 0.5}\n'  # neither appended to
    assert (run / "recipe.resolved.yaml").read_text() == "the other run's recipe\n"  # nor overwritten


def test_failure_counts_per_verifier_on_the_step_line_and_a_warning_when_every_sample_failed():
    metrics = {"reward/mean": 0.5, "reward/solve_rate": 0.25, "rollout/response_length": 7.0, "time/rollout_s": 1.0,
               "reward/samples": 16.0, "reward/infra_failures/math": 3.0, "reward/infra_failures/mine": 16.0,
               "reward/infra_failures/format": 0.0}
    assert TrainProgress.format_stats(metrics).endswith("failed: math=3/16,mine=16/16")
    assert failure_warnings(4, metrics, {"mine": "error: KeyError: 'solution'"}) == [
        "WARNING: verifier 'mine' failed on all 16 samples of step 4 (e.g. error: KeyError: 'solution'); the reasons "
        "are in samples/step-4.jsonl"]
    assert TrainProgress.format_stats({**metrics, "reward/infra_failures/math": 0.0,
                                       "reward/infra_failures/mine": 0.0}).endswith("1.0s/step")


def test_a_step_whose_groups_were_all_filtered_out_says_so_instead_of_a_reward_of_zero():
    metrics = {"reward/mean": 0.0, "reward/solve_rate": 0.0, "rollout/response_length": 0.0,
               "rollout/groups_generated": 24.0, "train/skipped_empty_batch": 1.0, "time/rollout_wait_s": 27.5,
               "time/sync_s": 0.5}
    assert TrainProgress.format_stats(metrics) == ("no group kept: dynamic sampling filtered out all 24 groups "
                                                   "sampled (each all right or all wrong); update skipped 28.0s/step")


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
    assert step[f"reward/infra_failures/{BROKEN}"] == 16.0
    assert step["reward/infra_failures/tests.tiny:digit_fraction"] == 0.0
    assert step["reward/infra_failures"] == 16.0
    assert (step["reward/infra_failure_rate"], step["reward/left_out"]) == (1.0, 16.0)  # all left out of the loss
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
    assert line == (f"error: '{BROKEN}' failed for the machinery on more than 50% of the samples of steps 1-2 (100% "
                    f"on step 2; reward.max_failure_rate=0.5, trainer.max_failed_steps=2); first failure: error: "
                    f"RuntimeError: reads a column the data does not have; the run stopped without saving these steps "
                    f"(fix the verifier or its sandbox, then --resume from step-1)")
    assert [n for n, _ in list_checkpoints(run)] == [1]  # saved after step 1; step 2 (the last failed one) is not
    assert [m["step"] for m in read_metrics(run) if "reward/mean" in m] == [1, 2]


def test_failure_streaks_count_steps_above_the_failure_rate_and_reset_below_it():
    from rlvr.trainer.progress import FailureStreaks, VerifierFailedError

    streaks = FailureStreaks(2, max_rate=0.5, resume_hint=lambda: "then start again with --overwrite")
    failed = {"reward/samples": 4.0, "reward/infra_failure_rate": 0.75, "reward/infra_failures/v": 3.0,
              "reward/infra_failures/w": 0.0}
    streaks.update(1, failed, {"v": "timeout"})
    streaks.update(2, {**failed, "reward/infra_failure_rate": 0.5})  # not more than the rate: the streak resets
    streaks.update(3, failed, {"v": "error: x"})
    with pytest.raises(VerifierFailedError) as e:
        streaks.update(4, {**failed, "reward/infra_failures/w": 1.0, "reward/infra_failure_rate": 1.0},
                       {"v": "timeout", "w": "error: y"})
    assert str(e.value) == (
        "'v', 'w' failed for the machinery on more than 50% of the samples of steps 3-4 (100% on step 4; "
        "reward.max_failure_rate=0.5, trainer.max_failed_steps=2); first failure: error: x; the run stopped without "
        "saving these steps (fix the verifier or its sandbox, then start again with --overwrite)")
    once = FailureStreaks(1, max_rate=0.1)
    once.update(1, {"reward/samples": 10.0, "reward/infra_failure_rate": 0.1})  # 10% is not more than 10%
    with pytest.raises(VerifierFailedError, match="samples of step 2 "):
        once.update(2, {"reward/samples": 10.0, "reward/infra_failure_rate": 0.2, "reward/infra_failures/v": 2.0})


def test_ctrl_c_is_one_line_that_says_how_to_continue(tiny, tmp_path):
    """SIGINT in the middle of a run: no traceback, exit code 130, the step reached and the command that continues;
    SIGUSR1 before it prints every thread's stack and the run goes on."""
    import os
    import signal
    import subprocess
    import sys
    import time

    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe(*tiny, trainer={"steps": 500, "save_every": 1})))
    run = tmp_path / "run"
    # a shell that starts jobs in the background (nohup, `&` in a script) hands them SIGINT ignored, and Python keeps
    # an ignored SIGINT ignored: the run gets the default disposition back, as a terminal's Ctrl-C would find it
    proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "train", str(recipe), "-o", str(run)],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            env={**{k: v for k, v in os.environ.items()  # in-process trainers' rendezvous
                                    if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")},
                                 "PYTHONPATH": os.getcwd()})
    deadline = time.monotonic() + 280
    while not list((run / "checkpoints").glob("step-2")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGUSR1)  # every thread's stack to stderr; the run goes on
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # say where it waits
        proc.send_signal(signal.SIGUSR1)
        time.sleep(3.0)
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the run did not exit within 120 s of SIGINT; its threads then:\n{err[-8000:]}")
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert "Current thread 0x" in err and "(most recent call first)" in err  # the SIGUSR1 dump
    (line,) = [ln for ln in err.splitlines() if ln.startswith("interrupted")]
    assert line.startswith("interrupted at step ") and f"-o {run} --resume` continues from it" in line, line


def test_ctrl_c_swallowed_by_a_destructor_still_ends_the_run_after_the_step(tiny, tmp_path, capsys, monkeypatch):
    """SIGINT that lands in a ``__del__`` (Python prints "Exception ignored" and goes on) stops the run at the next
    step boundary, with the same line and exit code as any Ctrl-C."""
    import signal
    import sys

    from rlvr.runtime import interrupts
    from rlvr.trainer.trainer import RLTrainer
    from tests.runtime.test_interrupts import InterruptedWhileCollected

    step = RLTrainer.step

    def step_then_swallowed_interrupt(self):
        result = step(self)
        if self.step_done == 2:
            InterruptedWhileCollected()  # collected at once: its KeyboardInterrupt is swallowed
        return result

    monkeypatch.setattr(RLTrainer, "step", step_then_swallowed_interrupt)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # restored after the test, as is SIGINT's handler
    monkeypatch.setattr(interrupts, "_pending", False)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        recipe = tmp_path / "r.yaml"
        recipe.write_text(yaml.safe_dump(tiny_recipe(*tiny, trainer={"steps": 5, "save_every": 1})))
        run = tmp_path / "run"
        assert main(["train", str(recipe), "-o", str(run)]) == 130
    finally:
        signal.signal(signal.SIGINT, handler)
    err = capsys.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err, err[-3000:]
    (line,) = [ln for ln in err.splitlines() if ln.startswith("interrupted")]
    assert line.startswith("interrupted at step 2 of 5; the newest checkpoint is step-2: "), line
    assert [m["step"] for m in read_metrics(run) if "reward/mean" in m] == [1, 2]


def test_collapse_watch_names_what_happened_once():
    from rlvr.trainer.progress import CollapseWatch

    watch = CollapseWatch(steps=3, entropy_floor=0.01)
    flat = {"reward/zero_var_groups": 1.0, "reward/solve_rate": 1.0, "train/entropy": 0.5}
    assert watch.update(1, flat) is None and watch.update(2, {**flat, "reward/zero_var_groups": 0.5}) is None
    assert watch.update(3, flat) is None and watch.update(4, flat) is None
    line = watch.update(5, flat)
    assert line.startswith("WARNING: the run has stopped learning at step 5: every group's rewards have been equal for "
                           "3 steps (every sample solves its prompt): the group-relative advantage is 0")
    assert "trainer.stop_on_collapse" in line
    assert watch.update(6, flat) is None  # said once
    low = CollapseWatch(steps=2, entropy_floor=0.01)
    low.update(1, {"reward/zero_var_groups": 0.25, "train/entropy": 0.004})
    assert "entropy has been under 0.01 nats a token for 2 steps" in low.update(2, {"train/entropy": 0.002})
    ds = CollapseWatch(steps=1, entropy_floor=0.0)  # dynamic sampling: the groups before its filter count
    assert ds.update(1, {"rollout/zero_var_groups_before_filter": 0.5, "reward/zero_var_groups": 1.0}) is None


def test_stop_on_collapse_ends_a_run_whose_rewards_carry_nothing(tiny, tmp_path, capsys):
    from rlvr.trainer.trainer import RLTrainer

    raw = tiny_recipe(*tiny, trainer={"steps": 20, "collapse_steps": 2, "stop_on_collapse": True},
                      verifiers=[{"name": "random_reward", "kwargs": {"p": 1.0}}], reward={"solved_verifier": None})
    trainer = RLTrainer(resolve(raw), tmp_path / "run")
    summary = trainer.train()
    assert summary["steps"] == 2 and summary["stopped_learning_at"] == 2
    out, err = capsys.readouterr()
    assert "the run stopped learning (trainer.stop_on_collapse): stopping after step 2" in out
    assert "WARNING: the run has stopped learning at step 2: every group's rewards have been equal for 2 steps" in err
    assert (tmp_path / "run" / "checkpoints" / "step-2").is_dir()
