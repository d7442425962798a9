"""The trainer with ``rollout.max_off_policy_steps`` on the tiny model and a scripted slow engine: K = 0 is the
synchronous loop as it was, K = 1 and 2 never train a sample staler than K and never produce more than K steps ahead,
drops are what a scripted engine forces, a failing engine stops the run with its message, and a killed K = 1 run
resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest
import yaml

from rlvr.runs.metrics import read_metrics
from tests.kill_resume import assert_resume_equals_straight, kill_once_logged
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset
from tests.trainer.async_worker import run
from tests.trainer.slow_engine import SlowScriptedEngine

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.usefixtures("no_plots")  # PNG plots are not what these tests check


NOT_CONTACTED = {"urls": ["http://127.0.0.1:9"]}
"""``rollout.servers`` of the recipes here: a server address is required, but these tests pass their own scripted
engine, so nothing is ever sent to it."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def _trainer(tiny, run_dir: Path, k: int, steps: int, **engine_kw):
    from rlvr.config import resolve
    from rlvr.models.loading import load_tokenizer
    from rlvr.trainer.trainer import RLTrainer

    rollout = {"engine": "server", "servers": NOT_CONTACTED, "max_off_policy_steps": k} if k else {}
    recipe = resolve(tiny_recipe(*tiny, trainer={"steps": steps}, rollout=rollout,
                                 algorithm={"loss_agg": "token-mean", "kl": {"beta": 0.05, "estimator": "k3"}}))
    engine = SlowScriptedEngine(load_tokenizer(recipe.model.name, recipe.model), **engine_kw)
    return RLTrainer(recipe, run_dir, rollout_engine=engine), engine


def _comparable(records: list[dict]) -> list[dict]:
    """Metrics that do not depend on timing (timings, CPU seconds, throughput and staleness are measured)."""
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "cpu/", "rollout/staleness",
                                                              "rollout/collector_")) and "per_s" not in k}
            for r in records]


def _collector_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rollout-collector" and t.is_alive()]


def test_k_0_gives_the_metrics_the_synchronous_loop_gave_before_asynchrony_existed(tiny, tmp_path):
    """The same 3-step run (tiny model, scripted engine, KL in the loss) through today's step, compared with the
    metrics recorded from the loop before ``max_off_policy_steps`` existed (tests/data/sync_step_metrics.json): the same
    keys, the same values (to float rounding on another CPU), and no thread."""
    recorded = json.loads((REPO / "tests/data/sync_step_metrics.json").read_text())["metrics"]
    trainer, _ = _trainer(tiny, tmp_path / "run", k=0, steps=3)
    trainer.train()
    got = _comparable(read_metrics(tmp_path / "run"))
    assert [sorted(r) for r in got] == [sorted(r) for r in recorded]
    for mine, theirs in zip(got, recorded, strict=True):
        assert mine == pytest.approx(theirs, rel=1e-6, abs=1e-9)
    assert trainer.collector is None and not _collector_threads()


@pytest.mark.parametrize("k", [1, 2])
def test_a_slow_trainer_trains_samples_exactly_k_stale_and_never_staler(tiny, tmp_path, k):
    """Each update takes 0.3 s more than it does (a scripted slow trainer) while a batch takes ~0.05 s: the producer
    runs ahead and waits on admission, so the batch of step j is started at version j - K, never earlier. The engine
    stamps the version it holds; an evaluation every 2 steps pauses the producer."""
    trainer, engine = _trainer(tiny, tmp_path / "run", k=k, steps=6, delay_s=0.01, stamp=True)
    trainer.recipe.eval.enabled, trainer.recipe.eval.every = True, 2
    update = trainer.update

    def slow_update(*args, **kwargs):
        time.sleep(0.3)
        return update(*args, **kwargs)
    trainer.update = slow_update
    histograms = []
    log_histogram = trainer.logger.histogram
    trainer.logger.histogram = lambda tag, values, step: (histograms.append((tag, list(values), step)),
                                                         log_histogram(tag, values, step))
    trainer.train()
    steps = [m for m in read_metrics(tmp_path / "run") if "rollout/staleness_max" in m]
    assert [m["step"] for m in steps] == [1, 2, 3, 4, 5, 6]
    assert [m["rollout/staleness_max"] for m in steps] == [min(j, k) for j in range(6)]
    assert all(m["rollout/stale_samples_dropped"] == 0 and m["reward/samples"] == 16 for m in steps)
    assert trainer.collector.max_lead == k
    assert all(step - version <= k for step, version in trainer.collector.started)
    training_calls = [v for v, n in zip(engine.calls, engine.sizes, strict=True) if n == 4]  # not the evals' (n=2)
    assert training_calls == [max(0, j - k) for j in range(6)]  # the weights each batch was generated from
    staleness = [(values, step) for tag, values, step in histograms if tag == "rollout/staleness"]
    assert staleness == [([min(j, k)] * 16, j + 1) for j in range(6)]
    assert {"time/rollout_wait_s", "rollout/collector_rollout_s", "rollout/collector_reward_s"} <= set(steps[0])
    assert "time/rollout_s" not in steps[0]  # the producer's seconds overlap the update: not a stage of the step
    assert [m["step"] for m in read_metrics(tmp_path / "run") if "eval/pass_at_1" in m] == [0, 2, 4, 6]
    assert not _collector_threads()


def test_a_slow_engine_whose_batches_straddle_syncs_keeps_each_groups_first_version(tiny, tmp_path):
    """Groups take 0.15 s each (0.6 s a batch), longer than an update: syncs land inside batches, later groups of a
    batch carry the newer version, and the bound holds with nothing to drop."""
    trainer, engine = _trainer(tiny, tmp_path / "run", k=1, steps=4, delay_s=0.15, stamp=True)
    trainer.train()
    steps = [m for m in read_metrics(tmp_path / "run") if "rollout/staleness_max" in m]
    assert all(m["rollout/staleness_max"] <= 1 and m["rollout/stale_samples_dropped"] == 0 for m in steps)
    assert trainer.collector.max_lead <= 1
    assert any(len(set(groups)) > 1 for groups in engine.stamped)  # some batch straddled a sync
    for j, groups in enumerate(engine.stamped[:4]):
        assert all(j - v <= 1 for v in groups) and groups == sorted(groups)


def test_an_engine_reporting_an_old_version_gets_that_group_dropped_and_counted(tiny, tmp_path):
    """K = 1. In the batch of step 3 (engine call 2) group 1 reports 2 versions older than the engine holds (a server
    that missed updates): that batch starts at version 1 or 2, so the group is 3 or 2 steps stale when step 3 trains
    (version 2): its 4 samples are dropped, the other 3 groups train."""
    trainer, _ = _trainer(tiny, tmp_path / "run", k=1, steps=4, stamp=True, reported_lag={(2, 1): 2})
    trainer.train()
    steps = [m for m in read_metrics(tmp_path / "run") if "rollout/staleness_max" in m]
    assert [m["rollout/stale_samples_dropped"] for m in steps] == [0, 0, 4, 0]
    third = steps[2]
    assert third["rollout/staleness_max"] >= 2
    assert (third["rollout/groups_kept"], third["rollout/batch_filled"], third["reward/samples"]) == (3, 0.75, 12)
    assert len((tmp_path / "run/samples/step-3.jsonl").read_text().splitlines()) == 12
    assert all(m["reward/samples"] == 16 for m in steps if m is not third)


SETUPS = {
    # group_size 2: the scripted texts make half the groups zero-variance, so dynamic sampling draws more rounds, and
    # the pools sampler draws by the solve rates the producer's thread observes
    "dynamic_sampling_pools": dict(rollout={"group_size": 2},
                                   algorithm={"loss_agg": "token-mean",
                                              "dynamic_sampling": {"enabled": True, "max_rounds": 3}},
                                   curriculum={"sampler": "pools", "pools": {"min_samples": 2}}),
    "ppo": dict(algorithm={"name": "ppo", "loss_agg": "token-mean", "critic": {"lr": 1e-2}}),
}


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_k_1_trains_on_what_k_0_trains_on_when_samples_do_not_depend_on_the_weights(tiny, tmp_path, setup):
    """The producer runs the synchronous path's collection: with an engine whose samples ignore the weights, a K = 1
    run (dynamic sampling with a solve-rate curriculum, or PPO with a critic) gives the K = 0 run's metrics, timing and
    staleness aside."""
    from rlvr.config import resolve
    from rlvr.models.loading import load_tokenizer
    from rlvr.trainer.trainer import RLTrainer

    runs = []
    for k in (0, 1):
        sections = {key: dict(value) for key, value in SETUPS[setup].items()}
        sections["rollout"] = {**sections.get("rollout", {}), **({"engine": "server", "servers": NOT_CONTACTED,
                                                                  "max_off_policy_steps": 1}
                                                               if k else {})}
        recipe = resolve(tiny_recipe(*tiny, trainer={"steps": 4}, **sections))
        engine = SlowScriptedEngine(load_tokenizer(recipe.model.name, recipe.model), delay_s=0.01, stamp=True)
        RLTrainer(recipe, tmp_path / f"k{k}", rollout_engine=engine).train()
        runs.append(read_metrics(tmp_path / f"k{k}"))
    sync, off_policy = _comparable(runs[0]), _comparable(runs[1])
    for a, b in zip(sync, off_policy, strict=True):
        assert b.pop("rollout/stale_samples_dropped", 0.0) == 0.0
        assert {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)} == {}
    assert all(m["rollout/staleness_max"] <= 1 for m in runs[1])
    if setup == "dynamic_sampling_pools":
        assert max(m["rollout/rounds"] for m in runs[1]) > 1
    else:
        assert "critic/value_loss" in runs[1][-1]


def test_an_exception_in_the_producer_stops_the_run_with_its_message(tiny, tmp_path):
    trainer, _ = _trainer(tiny, tmp_path / "run", k=1, steps=5, fail_at_call=2)
    try:
        with pytest.raises(RuntimeError, match="scripted engine failure at call 2") as info:
            trainer.train()
    finally:
        trainer.close()
    assert "producing the batch of step 3" in "".join(info.value.__notes__)
    assert "generate" in [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert [m["step"] for m in read_metrics(tmp_path / "run")] == [1, 2]  # the steps before it were trained
    assert not _collector_threads()


def _worker(recipe: Path, run_dir: Path, *extra: str) -> subprocess.Popen:
    # in-process trainers of earlier tests set RANK/MASTER_PORT here; a child must pick its own port
    dist_vars = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in dist_vars} | {"PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "tests.trainer.async_worker", str(recipe), str(run_dir), *extra],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_a_killed_k_1_run_resumes_with_the_in_flight_batches_drawn_again(tiny, tmp_path):
    """kill -9 once step 5 is logged (checkpoint step-4 saved while the producer had step 5's batch made or under
    way), then resume: the run continues from step 5 with the curriculum as it was after step 4's batch, so the
    in-flight batches are generated again for the same prompts. With an engine that ignores the weights, everything
    but timing and staleness equals an unbroken K = 1 run."""
    raw = tiny_recipe(*tiny, trainer={"steps": 6, "save_every": 2}, eval={"enabled": True, "k": 2},
                      rollout={"engine": "server", "servers": NOT_CONTACTED, "max_off_policy_steps": 1})
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(raw))

    run(recipe, tmp_path / "straight")  # the unbroken run, in this process

    victim = _worker(recipe, tmp_path / "killed")
    kill_once_logged(victim, tmp_path / "killed", 5)
    assert (tmp_path / "killed/checkpoints/step-4").is_dir()
    saved = json.loads((tmp_path / "killed/checkpoints/step-4/trainer_state.json").read_text())
    assert saved["curriculum"]["sampler"]["position"] == 4 * 4  # 4 batches of 4 prompts, not the in-flight ones

    resumed = _worker(recipe, tmp_path / "killed", "--resume")
    assert_resume_equals_straight(resumed, tmp_path / "straight", tmp_path / "killed", _comparable,
                                  [0, 1, 2, 3, 4, 5, 6, 6])
    for step in (5, 6):
        assert (tmp_path / "straight/samples" / f"step-{step}.jsonl").read_text() == \
            (tmp_path / "killed/samples" / f"step-{step}.jsonl").read_text()
