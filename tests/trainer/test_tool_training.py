"""Training with tools (``rollout.tools``) on a tiny chat model: the step's ``tools/*`` metrics and ``time/tools_s``,
the turns in ``samples/step-N.jsonl`` (who produced each, whether it was in the loss), a verifier that reads the
trajectory, and an exact resume after ``kill -9``.

The rollout engine is :class:`tests.tools.scripted.AddToolEngine` (a random tiny model never writes a tool call):
every sample calls the ``add`` function tool in the fenced format, some calls fail (equal operands), and the sample
answers after the tool's output. The trainer, the loss, the tool environment and the function tool are the real ones.

The file is also the script the resume test runs: ``python -m tests.trainer.test_tool_training RECIPE RUN_DIR
[--resume]``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rlvr.runs.metrics import read_metrics
from tests import limits
from tests.tiny import skip_plots, write_addition_dataset

REPO = Path(__file__).resolve().parents[2]
TOOL_METRICS = ("tools/calls_per_sample", "tools/error_rate", "tools/timeouts", "tools/turns_per_sample",
                "tools/fraction_of_samples_calling")
VOLATILE = ("time/", "cpu/", "rollout/tokens_per_s")


def tool_recipe(model_dir: Path, data: Path, **trainer) -> dict:
    return {
        "seed": 0,
        "model": {"name": str(model_dir)},
        "data": {"source": {"type": "jsonl", "path": str(data)}, "template": "chat", "eval_size": 4},
        "rollout": {"engine": "hf", "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 64,
                    "tools": [{"name": "tests.tools.scripted:add"}], "max_turns": 3, "max_tool_output_tokens": 16},
        "verifiers": [{"name": "tests.tiny:digit_fraction"}, {"name": "tests.tools.scripted:used_a_tool"}],
        "reward": {"num_workers": 1, "solved_verifier": "tests.tools.scripted:used_a_tool"},
        "algorithm": {"loss_agg": "token-mean", "kl": {"beta": 0.05}},
        "optim": {"lr": 1e-2, "micro_batch_size": 4},
        "trainer": {"steps": 3, "precision": "fp32", "num_threads": 1, "log_samples_every": 1, **trainer},
        "eval": {"enabled": False, "k": 2},
    }


def run(recipe_path: Path, run_dir: Path, resume: bool = False) -> None:
    """Train the recipe with the scripted tool engine (the resume test's child process)."""
    from rlvr.config import load_recipe
    from rlvr.models.loading import load_tokenizer
    from rlvr.trainer.trainer import RLTrainer
    from tests.tools.scripted import AddToolEngine

    recipe = load_recipe(str(recipe_path))
    engine = AddToolEngine(load_tokenizer(recipe.model.name, recipe.model))
    RLTrainer(recipe, run_dir, resume=resume, rollout_engine=engine).train()


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    from tests.tools.scripted import build_tiny_chat_model

    d = tmp_path_factory.mktemp("tool_model")
    return build_tiny_chat_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def _write(raw: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_tool_run_logs_tool_metrics_and_turns(chat_model, tmp_path, no_plots):
    recipe = _write(tool_recipe(*chat_model), tmp_path / "tools.yaml")
    run(recipe, tmp_path / "run")
    metrics = [m for m in read_metrics(tmp_path / "run") if "train/loss" in m]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    for m in metrics:
        assert all(key in m for key in TOOL_METRICS), sorted(m)
        assert m["tools/calls_per_sample"] == 1.0 and m["tools/fraction_of_samples_calling"] == 1.0
        assert m["tools/turns_per_sample"] == 2.0 and m["tools/timeouts"] == 0.0
        assert m["time/tools_s"] >= 0.0
        assert m["rollout/response_length"] < 40  # sampled tokens only: the call and the answer, not the output
    assert 0.0 < sum(m["tools/error_rate"] for m in metrics) < len(metrics)  # equal operands fail, others do not
    # the verifier that reads the trajectory saw the calls' statuses
    assert 0.0 < sum(m["reward/solve_rate"] for m in metrics) < len(metrics)

    rows = [json.loads(line) for line in (tmp_path / "run" / "samples" / "step-2.jsonl").read_text().splitlines()]
    assert len(rows) == 8
    for row in rows:
        turns = row["turns"]
        assert [t["by"] for t in turns] == ["policy", "tool", "policy"]
        assert [t["in_loss"] for t in turns] == [True, False, True]
        assert turns[0]["text"].startswith("```add")
        assert turns[1]["calls"][0]["name"] == "add" and "```output" in turns[1]["text"]
        assert row["completion"] == turns[2]["text"]  # the verifiers scored the final text
        assert row["sampled_tokens"] == turns[0]["tokens"] + turns[2]["tokens"] < row["tokens"]
        ok = turns[1]["calls"][0]["status"] == "ok"
        assert row["scores"]["tests.tools.scripted:used_a_tool"] == float(ok)


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):  # set by in-process trainer tests
        env.pop(key, None)
    return env


def _child(recipe: Path, run_dir: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tests.trainer.test_tool_training", str(recipe), str(run_dir), *extra]
    return subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group: kill -9 reaches the verifier workers


def _finish(proc: subprocess.Popen, label: str) -> None:
    out, _ = limits.communicate(proc, 300)
    assert proc.returncode == 0, f"{label} failed:\n{out[-6000:]}"


@pytest.mark.slow
def test_a_tool_run_killed_with_sigkill_and_resumed_matches_the_unbroken_run(chat_model, tmp_path):
    steps, kill_after = 4, 2
    recipe = _write(tool_recipe(*chat_model, steps=steps, save_every=2, keep_checkpoints=2, log_samples_every=0),
                    tmp_path / "tools.yaml")
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    straight = _child(recipe, unbroken)
    victim = _child(recipe, broken)
    checkpoint = broken / "checkpoints" / f"step-{kill_after}"
    deadline = time.monotonic() + 300
    while not checkpoint.is_dir():  # written to a temp folder, then renamed: present means complete
        assert victim.poll() is None, f"the run ended before checkpoint {kill_after}:\n{victim.stdout.read()[-6000:]}"
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    assert not (broken / "summary.json").exists()
    _finish(_child(recipe, broken, "--resume"), "resume")
    _finish(straight, "unbroken run")

    def comparable(run_dir: Path) -> list[dict]:
        return [{k: v for k, v in m.items() if not k.startswith(VOLATILE)} for m in read_metrics(run_dir)]

    a, b = comparable(unbroken), comparable(broken)
    assert [m["step"] for m in a] == [m["step"] for m in b] == list(range(1, steps + 1))
    assert all(key in a[-1] for key in TOOL_METRICS)
    for step, (ma, mb) in enumerate(zip(a, b, strict=True), start=1):
        assert ma.keys() == mb.keys(), step
        for key in ma:
            same_nan = isinstance(ma[key], float) and math.isnan(ma[key]) and math.isnan(mb[key])
            assert same_nan or ma[key] == mb[key] or abs(ma[key] - mb[key]) <= 1e-6, (step, key, ma[key], mb[key])


if __name__ == "__main__":
    skip_plots()  # PNG plots are not what these tests check
    run(Path(sys.argv[1]), Path(sys.argv[2]), resume="--resume" in sys.argv[3:])
