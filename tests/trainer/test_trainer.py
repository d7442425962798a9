"""The trainer end to end on a tiny model: learning, exact resume after kill -9, the DeepSpeed ZeRO path, and the
run directory's contents."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.config import resolve
from rlvr.runs.metrics import read_metrics
from tests import limits
from tests.kill_resume import assert_resume_equals_straight, kill_once_logged
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def _train(raw: dict, run_dir: Path):
    from rlvr.trainer.trainer import RLTrainer

    trainer = RLTrainer(resolve(raw), run_dir)
    summary = trainer.train()
    return trainer, summary


def test_reward_rises_on_trivial_task(tiny, tmp_path):
    raw = tiny_recipe(*tiny, trainer={"steps": 20}, optim={"lr": 1e-2})
    _, summary = _train(raw, tmp_path / "run")
    rewards = [m["reward/mean"] for m in read_metrics(tmp_path / "run") if "reward/mean" in m]
    assert len(rewards) == 20
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert last > first + 0.1, (first, last)


def test_run_directory_contents(tiny, tmp_path):
    raw = tiny_recipe(*tiny, trainer={"steps": 2, "save_every": 1, "keep_checkpoints": 1},
                      eval={"enabled": True, "k": 2})
    # the eval needs an answer extractor: math-style answers come from rlvr.verifiers.math_answer
    trainer, summary = _train(raw, tmp_path / "run")
    run = tmp_path / "run"
    assert (run / "recipe.resolved.yaml").is_file()
    resolved = yaml.safe_load((run / "recipe.resolved.yaml").read_text())
    assert resolved["algorithm"]["clip_high"] == 0.2 and resolved["optim"]["lr"] == 3e-3
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"]  # keep_checkpoints=1
    assert (run / "checkpoints/step-2/model/config.json").is_file()
    assert len((run / "samples/step-1.jsonl").read_text().splitlines()) == 16  # 4 prompts x 4 samples
    assert (run / "plots/curves.png").stat().st_size > 1000
    assert not (run / "plots/curriculum.png").exists()  # plain epochs, no dynamic sampling: nothing to plot
    assert list((run / "tensorboard").glob("events.*"))
    s = json.loads((run / "summary.json").read_text())
    assert s["eval_before"]["num_prompts"] == 8 and s["eval_before"]["k"] == 2
    assert "pass_at_1_change_se" in s
    steps = [m["step"] for m in read_metrics(run)]
    assert steps == [0, 1, 2, 2]  # eval before, two steps, eval after
    m = read_metrics(run)[1]
    for key in ("reward/mean", "reward/std", "reward/solve_rate", "reward/zero_var_groups", "train/entropy",
                "train/clip_fraction", "rollout/response_length", "rollout/truncated", "rollout/tokens_per_s",
                "time/rollout_s", "time/reward_s", "time/update_s", "reward/tests.tiny:digit_fraction"):
        assert key in m, key


def test_kl_to_reference_is_zero_before_the_first_update(tiny, tmp_path):
    raw = tiny_recipe(*tiny, trainer={"steps": 2}, algorithm={"kl": {"beta": 0.1, "estimator": "k3"}})
    _train(raw, tmp_path / "run")
    m = read_metrics(tmp_path / "run")
    assert m[0]["train/kl"] == pytest.approx(0.0, abs=1e-7)  # policy == reference during step 1's only pass
    assert m[1]["train/kl"] > 1e-4  # and drifts after one update


def test_auto_precision_can_train_in_fp32_and_generate_from_a_bf16_copy(tiny, tmp_path, monkeypatch):
    """``trainer.precision: auto`` where the CPU measured fp32 faster for training and bf16 for decoding (the
    measurement mocked): forwards and update without autocast, sampling from a bf16 copy refreshed after the update."""
    import torch

    from rlvr.models import precision
    from rlvr.models.precision import PrecisionChoice
    from rlvr.trainer import trainer_base

    asked = []

    def split(requested, device, shape=None):
        asked.append((requested, torch.device(device).type, shape))
        return PrecisionChoice("fp32", "precision auto: training fp32, generation bf16 (mocked)", "bf16")
    monkeypatch.setattr(trainer_base, "choose_precision", split)
    # the pre-flight memory estimate resolves auto too: on a CPU with native bf16 it would measure (mocked here)
    monkeypatch.setattr(precision, "measure_matmuls", lambda train_shape, decode_shape: (
        {"fp32": 1.0, "bf16": 2.0}, {"fp32": 2.0, "bf16": 1.0}))
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(precision, "_CALIBRATIONS", {})
    trainer, _ = _train(tiny_recipe(*tiny, trainer={"steps": 1, "precision": "auto"}), tmp_path / "run")
    config = trainer.model.config
    assert asked == [("auto", "cpu", (config.hidden_size, config.intermediate_size))]
    assert trainer.autocast_dtype is None and trainer.policy.autocast_dtype is None
    copy = trainer.rollout_engine.generation_model
    assert copy is not trainer.model and {p.dtype for p in copy.parameters()} == {torch.bfloat16}
    for name, weight in copy.named_parameters():  # the copy holds the updated weights
        assert torch.equal(weight, dict(trainer.model.named_parameters())[name].detach().bfloat16()), name
    m = read_metrics(tmp_path / "run")[0]
    assert m["train/rollout_logprob_diff_mean"] < 0.1  # bf16 sampling vs fp32 training: numerics only


@pytest.mark.parametrize("rank", [0, 1])
def test_cpu_ranks_take_rank_0s_measured_precision(monkeypatch, rank):
    """Several CPU ranks: only rank 0 measures ``auto``, and every rank takes its choice (a broadcast)."""
    from types import SimpleNamespace

    import torch

    from rlvr.models.precision import PrecisionChoice
    from rlvr.trainer import trainer as trainer_module
    from rlvr.trainer import trainer_base

    rank0 = PrecisionChoice("fp32", "rank 0's measurement", "bf16")
    measured = []
    monkeypatch.setattr(trainer_base, "choose_precision", lambda *args: measured.append(args) or rank0)

    def broadcast(box, src):
        assert src == 0 and box == ([rank0] if rank == 0 else [None])
        box[0] = rank0
    monkeypatch.setattr(torch.distributed, "broadcast_object_list", broadcast)
    fake = SimpleNamespace(recipe=SimpleNamespace(trainer=SimpleNamespace(precision="auto")), model=None,
                           dist=SimpleNamespace(world_size=2, is_main=rank == 0, device=torch.device("cpu")),
                           _precision_of_the_run=lambda: None)  # a new run: nothing recorded to replay
    assert trainer_module.RLTrainer._choose_precision(fake) is rank0
    assert len(measured) == (1 if rank == 0 else 0)


def test_zero_stage_2_with_epochs_and_mini_batches(tiny, tmp_path):
    raw = tiny_recipe(*tiny, trainer={"steps": 2, "zero_stage": 2},
                      algorithm={"ppo_epochs": 2, "mini_batches": 2}, optim={"micro_batch_size": 4})
    _train(raw, tmp_path / "run")
    m = read_metrics(tmp_path / "run")
    assert [r["train/optimizer_steps"] for r in m] == [4, 4]  # 2 epochs x 2 mini-batches per step
    assert all(0 < r["train/grad_norm"] < 1e3 for r in m)
    assert m[1]["train/ratio_mean"] != pytest.approx(1.0, abs=1e-9)  # later passes are off-policy: ratio moves


def _cli(args: list[str], extra_env: dict | None = None, **kw) -> subprocess.Popen:
    # in-process trainers of earlier tests set RANK/MASTER_PORT here; a child must pick its own port
    dist_vars = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in dist_vars} | {"PYTHONPATH": str(REPO)} | (extra_env or {})
    return subprocess.Popen([sys.executable, "-m", "rlvr.cli", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def _comparable(records: list[dict]) -> list[dict]:
    """Metrics that must match step for step (timings, CPU seconds and throughput are measured, so they may not)."""
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "cpu/")) and "per_s" not in k} for r in records]


def test_resume_after_kill_9_gives_the_same_metrics(tiny, tmp_path):
    raw = tiny_recipe(*tiny, trainer={"steps": 6, "save_every": 2}, eval={"enabled": True, "k": 2})
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(raw))

    straight = _cli(["train", str(recipe), "-o", str(tmp_path / "straight")])
    out, _ = limits.communicate(straight, 300)
    assert straight.returncode == 0, out

    victim = _cli(["train", str(recipe), "-o", str(tmp_path / "killed")])
    kill_once_logged(victim, tmp_path / "killed", 5)  # checkpoint step-4 exists, step 5 is lost
    assert (tmp_path / "killed/checkpoints/step-4").is_dir()

    resumed = _cli(["train", str(recipe), "-o", str(tmp_path / "killed"), "--resume"])
    assert_resume_equals_straight(resumed, tmp_path / "straight", tmp_path / "killed", _comparable,
                                  [0, 1, 2, 3, 4, 5, 6, 6])


def test_a_cold_cache_run_equals_a_warm_cache_run(tiny, tmp_path):
    """The first run on a machine (no kernel timings or precision measurement cached) gives the same metrics and samples
    as the next ones: a measurement draws its inputs from its own generator, never the run's RNG, and a timed choice
    between kernels that round differently keeps its default unless the other is clearly faster."""
    from rlvr import cache_dir

    raw = tiny_recipe(*tiny, trainer={"steps": 3}, eval={"enabled": True, "k": 2})
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(raw))
    built = os.environ.get("TORCH_EXTENSIONS_DIR") or str(cache_dir() / "torch_extensions")  # kernels stay built
    runs, logs = [], []
    for name, cache in (("cold", "cache-a"), ("warm", "cache-a"), ("cold-again", "cache-b")):
        proc = _cli(["train", str(recipe), "-o", str(tmp_path / name)],
                    extra_env={"RLVR_CACHE": str(tmp_path / cache), "TORCH_EXTENSIONS_DIR": built})
        out, _ = limits.communicate(proc, 300)
        assert proc.returncode == 0, out
        runs.append(tmp_path / name)
        logs.append(out)
    assert "measured, saved to" in logs[0] and "measured, saved to" not in logs[1] and "cached:" in logs[1]
    metrics = [_comparable(read_metrics(run)) for run in runs]
    assert metrics[0] == metrics[1] == metrics[2]
    samples = [(run / "samples" / "step-3.jsonl").read_text() for run in runs]
    assert samples[0] == samples[1] == samples[2]


def test_a_resumed_auto_precision_run_keeps_the_precision_it_chose(tiny, tmp_path):
    """trainer.precision auto is measured at a run's start; a resume replays that choice from the checkpoint instead of
    measuring again (a new measurement could choose otherwise and change the run's numbers)."""
    from rlvr.trainer.trainer import RLTrainer

    ckpt = tmp_path / "run" / "checkpoints" / "step-2"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"step": 2, "precision": {"training": "fp32",
                                                                                  "generation": "bf16"}}))
    trainer = RLTrainer.__new__(RLTrainer)
    trainer.recipe, trainer._resume_path = resolve(tiny_recipe(*tiny, trainer={"precision": "auto"})), ckpt
    choice = trainer._precision_of_the_run()
    assert (choice.name, choice.generation) == ("fp32", "bf16") and "as the run chose at its start (step-2)" in \
        choice.reason
    trainer.recipe = resolve(tiny_recipe(*tiny, trainer={"precision": "bf16"}))  # forced in the recipe: not replayed
    assert trainer._precision_of_the_run() is None
    trainer._resume_path = None
    assert trainer._precision_of_the_run() is None
