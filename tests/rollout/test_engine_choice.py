"""``rollout.engine: auto``: vLLM when it imports and serves the model, ``hf`` otherwise, said in one printed line.

vLLM is mocked here (a fake ``vllm`` package in ``sys.modules``), so these run with or without it installed; the
real choice on a real vLLM is tested in ``tests/rollout/test_vllm_engine.py``.
"""

from __future__ import annotations

import sys
import types

import pytest
import yaml
from transformers import Qwen2Config

from rlvr.config import resolve
from rlvr.rollout import choice
from rlvr.rollout.choice import EngineChoice, choose_engine, head_size, with_chosen_engine
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset


def _config(hidden: int = 128, heads: int = 4, arch: str = "Qwen2ForCausalLM", **kw) -> Qwen2Config:
    return Qwen2Config(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=2, architectures=[arch], **kw)


def _fake_vllm(monkeypatch, *, platform: str = "cpu", archs=("Qwen2ForCausalLM", "LlamaForCausalLM"),
               head_sizes=(32, 64, 128), import_error: Exception | None = None) -> None:
    """Put a stand-in vLLM 9.9.9 on the path: its registry knows ``archs``, its CPU attention ``head_sizes``."""
    monkeypatch.setattr(choice, "vllm_installed", lambda: True)
    if import_error is not None:
        def broken():
            raise import_error
        monkeypatch.setattr("rlvr.rollout.vllm_engine.import_vllm", broken)
        return
    vllm = types.ModuleType("vllm")
    vllm.__version__ = "9.9.9"
    vllm.ModelRegistry = types.SimpleNamespace(get_supported_archs=lambda: set(archs))
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_unspecified=lambda: platform == "none",
                                                       is_cpu=lambda: platform == "cpu")
    cpu_attn = types.ModuleType("vllm.v1.attention.backends.cpu_attn")
    cpu_attn.CPUAttentionBackend = types.SimpleNamespace(get_supported_head_sizes=lambda: list(head_sizes))
    modules = {"vllm": vllm, "vllm.platforms": platforms, "vllm.v1": types.ModuleType("vllm.v1"),
               "vllm.v1.attention": types.ModuleType("vllm.v1.attention"),
               "vllm.v1.attention.backends": types.ModuleType("vllm.v1.attention.backends"),
               "vllm.v1.attention.backends.cpu_attn": cpu_attn}
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)


def test_auto_picks_hf_when_vllm_is_not_installed(monkeypatch):
    monkeypatch.setattr(choice, "vllm_installed", lambda: False)
    assert choose_engine("auto", _config()) == EngineChoice("hf", "vLLM is not installed")


def test_auto_picks_vllm_when_it_imports_and_serves_the_model(monkeypatch):
    _fake_vllm(monkeypatch)
    assert choose_engine("auto", _config(hidden=128, heads=4)) == \
        EngineChoice("vllm", "vLLM 9.9.9 imports and serves Qwen2ForCausalLM here")


@pytest.mark.parametrize("fake, config, reason", [
    ({}, _config(hidden=32, heads=4), "vLLM's CPU attention has no kernel for head size 8 (it takes [32, 64, 128])"),
    ({}, _config(arch="GPT2LMHeadModel"),
     "vLLM 9.9.9 has no implementation of the model's architectures ['GPT2LMHeadModel']"),
    ({"platform": "none"}, _config(), "vLLM found no device it supports (the CUDA `vllm` wheel on a machine without "
                                      "a GPU?)"),
    ({"import_error": RuntimeError("operator torchvision::nms does not exist")}, _config(),
     "vLLM is installed but does not import (RuntimeError: operator torchvision::nms does not exist)"),
])
def test_auto_picks_hf_and_says_why_when_vllm_cannot_serve_the_model(monkeypatch, fake, config, reason):
    _fake_vllm(monkeypatch, **fake)
    assert choose_engine("auto", config) == EngineChoice("hf", reason)


def test_head_size_is_checked_on_cpu_only(monkeypatch):
    _fake_vllm(monkeypatch, platform="cuda")  # head size 8 is no problem for vLLM's GPU kernels here
    assert choose_engine("auto", _config(hidden=32, heads=4)).name == "vllm"


def test_head_size_prefers_head_dim_over_hidden_over_heads():
    assert head_size(_config(hidden=128, heads=4)) == 32
    assert head_size(_config(hidden=128, heads=4, head_dim=64)) == 64


def test_an_explicit_engine_is_taken_as_asked_and_a_bad_one_is_refused(monkeypatch):
    monkeypatch.setattr(choice, "vllm_installed", lambda: pytest.fail("an explicit engine must not probe vLLM"))
    assert choose_engine("hf", _config()).name == "hf"
    assert choose_engine("vllm", _config()).name == "vllm"
    assert choose_engine("server", _config()).name == "server"
    with pytest.raises(ValueError, match=r"rollout.engine='tgi': expected 'auto', 'hf', 'vllm' or 'server'"):
        choose_engine("tgi", _config())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model", hidden=128), write_addition_dataset(d / "data.jsonl")


def test_auto_is_the_default_and_the_recipe_gets_the_chosen_engine(monkeypatch, tiny, capsys):
    raw = tiny_recipe(*tiny)
    del raw["rollout"]["engine"]
    recipe = resolve(raw)
    assert recipe.rollout.engine == "auto"
    _fake_vllm(monkeypatch)
    chosen = with_chosen_engine(recipe, str(tiny[0]))
    assert chosen.rollout.engine == "vllm" and recipe.rollout.engine == "auto"
    assert capsys.readouterr().err == ("rollout engine: vllm (rollout.engine=auto: vLLM 9.9.9 imports and serves "
                                       "Qwen2ForCausalLM here)\n")
    assert with_chosen_engine(resolve(tiny_recipe(*tiny)), str(tiny[0])).rollout.engine == "hf"  # asked: no line
    assert capsys.readouterr().err == ""


def test_trainer_on_auto_without_vllm_trains_on_hf_and_says_so(monkeypatch, tiny, tmp_path, capsys):
    from rlvr.trainer.trainer import RLTrainer

    monkeypatch.setattr(choice, "vllm_installed", lambda: False)
    raw = tiny_recipe(*tiny, rollout={"engine": "auto"}, trainer={"steps": 1, "log_samples_every": 0})
    trainer = RLTrainer(resolve(raw), tmp_path / "run")
    monkeypatch.setattr("rlvr.trainer.run.write_plots", lambda *args, **kwargs: None)
    trainer.train()
    trainer.engine.destroy()
    printed = capsys.readouterr()
    assert "rollout engine: hf (rollout.engine=auto: vLLM is not installed)" in printed.err.splitlines()
    out = printed.out
    assert "rollout log-prob check (hf vs trainer, step 1)" in out
    assert yaml.safe_load((tmp_path / "run/recipe.resolved.yaml").read_text())["rollout"]["engine"] == "hf"
    assert type(trainer.rollout_engine).__name__ == "HFRolloutEngine"
