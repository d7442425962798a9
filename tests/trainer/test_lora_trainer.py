"""GRPO with LoRA (``model.lora``) on the tiny model: only adapters train, the reference is the policy with its
adapters off (no second model), the hf engine's generation copy holds the merged weights, checkpoints hold the adapters
alone, and a run killed with kill -9 resumes step for step."""

import json
import os
import signal
import time

import pytest
import torch
import yaml

from rlvr.config import resolve
from rlvr.runs.metrics import read_metrics
from tests import limits
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset
from tests.trainer.test_trainer import _cli, _comparable

LORA = {"rank": 4, "alpha": 8, "target_modules": "all-linear"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def _ids():
    return torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])


def test_lora_run_trains_adapters_only_with_the_base_as_reference(tiny, tmp_path):
    from transformers import AutoModelForCausalLM

    from rlvr.kernels.cpu_fused_layers import fuse_cpu_layers
    from rlvr.trainer.trainer import RLTrainer
    from rlvr.trainer.workers import AdapterOffWorker

    raw = tiny_recipe(*tiny, model={"lora": LORA}, trainer={"steps": 2, "save_every": 1, "keep_checkpoints": 1},
                      algorithm={"kl": {"beta": 0.1, "estimator": "k3"}}, optim={"lr": 3e-2})
    trainer = RLTrainer(resolve(raw), tmp_path / "run")
    assert trainer.ref_model is None and isinstance(trainer.reference, AdapterOffWorker)
    opt_params = [p for g in trainer.engine.optimizer.param_groups for p in g["params"]]
    named = dict(trainer.model.named_parameters())
    adapter_ids = {id(p) for n, p in named.items() if "lora_" in n}
    assert {id(p) for p in opt_params} == adapter_ids  # the optimizer holds the adapters and nothing else
    trainer.train()

    base = AutoModelForCausalLM.from_pretrained(str(tiny[0]))
    for name, p in base.named_parameters():  # base weights bit-identical after the updates
        peft_name = f"base_model.model.{name}"
        if peft_name not in named:
            peft_name = peft_name.replace(".weight", ".base_layer.weight").replace(".bias", ".base_layer.bias")
        assert torch.equal(named[peft_name].detach(), p.detach()), name
    m = read_metrics(tmp_path / "run")
    assert m[0]["train/kl"] == pytest.approx(0.0, abs=1e-7)  # adapters start at B = 0: policy == base
    assert m[1]["train/kl"] > 1e-6  # and the updates moved the policy away from the base (adapters off)
    assert m[0]["train/rollout_logprob_diff_mean"] < 1e-4  # the merged generation copy samples like the trainer
    assert all("time/sync_s" in r for r in m if "train/kl" in r)

    with torch.no_grad():  # the generation copy is the merged model: same logits as the adapter model
        gen = trainer.rollout_engine.generation_model
        assert not hasattr(gen, "peft_config")
        torch.testing.assert_close(gen(input_ids=_ids()).logits, trainer.model(input_ids=_ids()).logits,
                                   rtol=1e-5, atol=1e-5)
        fuse_cpu_layers(base)  # as the trainer's model computes on a CPU
        with trainer.model.disable_adapter():  # the reference: exactly the base model's output
            torch.testing.assert_close(trainer.model(input_ids=_ids()).logits, base(input_ids=_ids()).logits,
                                       rtol=0, atol=0)
    ckpt = tmp_path / "run/checkpoints/step-2"
    assert (ckpt / "model/adapter_config.json").is_file() and not (ckpt / "model/config.json").exists()
    states = torch.load(next((ckpt / "deepspeed").rglob("mp_rank_00_model_states.pt")), weights_only=False)
    assert states["module"] and all("lora_" in k for k in states["module"])  # adapters only, no base weight

    # export round trip: the merged model folder gives the adapter model's logits; eval-style loading of the
    # checkpoint folder (load_causal_lm on an adapter folder) gives the same merged model
    from rlvr.cli import main
    from rlvr.models.loading import load_causal_lm

    assert main(["export", str(tmp_path / "run"), "--merge", "-o", str(tmp_path / "merged")]) == 0
    exported = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))
    loaded = load_causal_lm(str(ckpt / "model"), resolve(raw).model)
    with torch.no_grad():
        want = trainer.model(input_ids=_ids()).logits
        torch.testing.assert_close(exported(input_ids=_ids()).logits, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(loaded(input_ids=_ids()).logits, want, rtol=1e-5, atol=1e-5)
    assert (tmp_path / "merged/tokenizer_config.json").is_file()
    # the pre-flight of `rlvr eval` on the run reads the adapter's base model's configs (an adapter has none)
    from rlvr.models.loading import load_tokenizer
    from rlvr.preflight.report import Report
    from rlvr.preflight.template_checks import check_eos

    report = Report()
    check_eos(report, resolve(raw), load_tokenizer(str(ckpt / "model"), resolve(raw).model), str(ckpt / "model"))
    assert [f for f in report.findings if f.level in ("warn", "error")] == [], report.findings
    umask = os.umask(0)
    os.umask(umask)
    assert {f.name: oct(f.stat().st_mode & 0o777) for f in (tmp_path / "merged").iterdir()} == {
        f.name: oct(0o666 & ~umask) for f in (tmp_path / "merged").iterdir()}  # no private 0600 weights
    trainer.close()


def test_lora_resume_after_kill_9_gives_the_same_metrics(tiny, tmp_path):
    raw = tiny_recipe(*tiny, model={"lora": LORA}, trainer={"steps": 5, "save_every": 2},
                      algorithm={"kl": {"beta": 0.05, "estimator": "k3"}}, optim={"lr": 3e-2})
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(raw))
    straight = _cli(["train", str(recipe), "-o", str(tmp_path / "straight")])
    out, _ = limits.communicate(straight, 300)
    assert straight.returncode == 0, out

    victim = _cli(["train", str(recipe), "-o", str(tmp_path / "killed")])
    metrics = tmp_path / "killed/metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline:  # kill -9 once step 3 is logged (checkpoint step-2 exists, step 3 is lost)
        if metrics.exists() and any(json.loads(line)["step"] == 3 for line in metrics.read_text().splitlines()):
            break
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert (tmp_path / "killed/checkpoints/step-2").is_dir()

    resumed = _cli(["train", str(recipe), "-o", str(tmp_path / "killed"), "--resume"])
    out, _ = limits.communicate(resumed, 300)
    assert resumed.returncode == 0, out
    assert "resumed from" in out
    a = _comparable(read_metrics(tmp_path / "straight"))
    b = _comparable(read_metrics(tmp_path / "killed"))
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5]
    assert a == b


def test_lora_step_with_gradient_checkpointing_moves_the_adapters(tiny, tmp_path):
    """model.gradient_checkpointing with LoRA: the frozen embeddings' output needs no grad, yet a step's gradients
    reach every adapter (peft and apply_lora make the inputs require grad) and the base weights stay as loaded."""
    from rlvr.trainer.trainer import RLTrainer

    raw = tiny_recipe(*tiny, model={"lora": LORA, "gradient_checkpointing": True},
                      trainer={"steps": 2, "save_every": 0}, algorithm={"kl": {"beta": 0.1}}, optim={"lr": 3e-2})
    trainer = RLTrainer(resolve(raw), tmp_path / "run")
    assert trainer.model.base_model.model.is_gradient_checkpointing
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    after = dict(trainer.model.named_parameters())
    for name, p in after.items():
        if "lora_" not in name:
            assert torch.equal(p.detach(), before[name]), name
    # B starts at 0, so A's first gradient is 0; after two steps every A and B has moved
    moved = {n for n, p in after.items() if "lora_" in n and not torch.equal(p.detach(), before[n])}
    assert moved == {n for n in after if "lora_" in n}
    m = [r for r in read_metrics(tmp_path / "run") if "train/grad_norm" in r]
    assert len(m) == 2 and all(r["train/grad_norm"] > 0 for r in m)
    trainer.close()
