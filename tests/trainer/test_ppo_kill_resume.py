"""A PPO run killed with SIGKILL after a checkpoint and resumed with the same command gives the metrics of a run that
never stopped, step for step: the policy, the critic (weights, Adam moments, LR schedule), the running reward
normaliser, the adaptive KL coefficient, the data order and the RNG all come back from ``checkpoints/step-N``.

Three ``rlvr train`` processes on the tiny model and a fixed tiny reward model: one uninterrupted, one killed
(``kill -9`` of its process group, so its verifier workers go too) once ``checkpoints/step-2`` is there, and the same
command again with ``--resume``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from rlvr.runs.metrics import read_metrics
from tests import limits
from tests.tiny import build_tiny_model, build_tokenizer, tiny_recipe, write_addition_dataset

REPO = Path(__file__).resolve().parents[2]
STEPS = 4
KILL_AFTER = 2
VOLATILE = ("time/", "cpu/", "rollout/tokens_per_s")  # cpu/seconds_total: CPU time differs run to run
"""Wall-clock metrics: the only ones allowed to differ."""


def _recipe(tmp_path: Path) -> Path:
    from rlvr.reward_model.model import RewardModel

    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    RewardModel.from_backbone(str(model_dir), seed=1).save(tmp_path / "rm", build_tokenizer())
    raw = tiny_recipe(model_dir, data, trainer={"steps": STEPS, "save_every": 2, "keep_checkpoints": 2,
                                                "log_samples_every": 0},
                      reward={"num_workers": 1, "source": "reward_model"},
                      reward_model={"path": str(tmp_path / "rm")}, optim={"lr": 1e-2, "micro_batch_size": 8},
                      algorithm={"name": "ppo", "loss_agg": "token-mean", "ppo_epochs": 2,
                                 # adaptive beta: its state must come back too
                                 "kl": {"beta": 0.05, "target": 0.01, "horizon": 10},
                                 "critic": {"lr": 1e-2, "reward_normalize": True, "reward_clip": 3.0,
                                            "warmup_steps": 1}})
    path = tmp_path / "ppo.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):  # set by in-process trainer tests
        env.pop(key, None)
    return env


def _train(recipe: Path, run_dir: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "rlvr.cli", "train", str(recipe), "-o", str(run_dir), *extra]
    return subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group: kill -9 reaches the verifier workers


def _finish(proc: subprocess.Popen, label: str) -> None:
    out, _ = limits.communicate(proc, 300)
    assert proc.returncode == 0, f"{label} failed:\n{out[-6000:]}"


def _comparable(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.startswith(VOLATILE)} for m in read_metrics(run_dir)]


def test_ppo_killed_with_sigkill_and_resumed_matches_the_unbroken_run(tmp_path):
    recipe = _recipe(tmp_path)
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    straight = _train(recipe, unbroken)
    victim = _train(recipe, broken)  # the two share the 2 cores; neither's numbers depend on timing
    checkpoint = broken / "checkpoints" / f"step-{KILL_AFTER}"
    deadline = time.monotonic() + 300
    while not checkpoint.is_dir():  # written to a temp folder, then renamed: present means complete
        assert victim.poll() is None, f"the run ended before checkpoint {KILL_AFTER}:\n{victim.stdout.read()[-6000:]}"
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    assert not (broken / "summary.json").exists()  # it did die mid-run
    logged = [m["step"] for m in read_metrics(broken)]
    assert KILL_AFTER <= len(logged) < STEPS, logged

    _finish(_train(recipe, broken, "--resume"), "resume")
    _finish(straight, "unbroken run")

    a, b = _comparable(unbroken), _comparable(broken)
    assert [m["step"] for m in a] == [m["step"] for m in b] == list(range(1, STEPS + 1))
    assert a[0]["train/critic_warmup"] == 1.0 and "train/loss" in a[1]  # the warm-up step, then the policy trains
    assert len({m["train/kl_beta"] for m in a[1:]}) > 1  # the adaptive controller moved beta: its state was live
    for step, (ma, mb) in enumerate(zip(a, b, strict=True), start=1):
        assert ma.keys() == mb.keys(), step
        for key in ma:
            assert ma[key] == mb[key] or abs(ma[key] - mb[key]) <= 1e-6, (step, key, ma[key], mb[key])
