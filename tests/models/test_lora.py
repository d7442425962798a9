"""LoRA on a tiny model (rlvr.models.lora): the target-module check, adapter-only gradients, adapters off = the base
model, merged weights = the adapter model, and a saved adapter folder loading as the merged model."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.config import LoraConfig, ModelConfig
from rlvr.models.loading import load_causal_lm, resolve_model_path
from rlvr.models.lora import (
    LoraTargetError,
    apply_lora,
    is_adapter_folder,
    linear_module_names,
    merged_weights,
    meta_model,
)
from tests.tiny import build_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _lora_model(path, **lora):
    cfg = ModelConfig(name=str(path), lora=LoraConfig(**{"rank": 4, "alpha": 8, **lora}))
    return apply_lora(load_causal_lm(str(path), cfg), cfg.lora, base_name=str(path)), cfg


def _randomise_adapters(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)


def _ids():
    return torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])


def test_unknown_target_module_lists_the_models_linear_layers(tiny_dir):
    model = meta_model(str(tiny_dir), ModelConfig(name=str(tiny_dir)))  # no weights read
    assert linear_module_names(model) == ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
    with pytest.raises(LoraTargetError) as err:
        apply_lora(model, LoraConfig(target_modules=["q_proj", "qproj", "lm_head"]))
    msg = str(err.value)
    assert "'qproj' (did you mean 'q_proj'?)" in msg and "'lm_head'" in msg
    assert "down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj" in msg


def test_only_adapters_train_and_base_weights_stay_bit_identical(tiny_dir):
    model, _ = _lora_model(tiny_dir)
    base_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_A" in n or "lora_B" in n for n in trainable)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):
        loss = model(input_ids=_ids()).logits.float().logsumexp(-1).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    for n, p in model.named_parameters():
        if "lora_" not in n:
            assert torch.equal(p, base_before[n]), n
    assert any(p.abs().sum() > 0 for n, p in model.named_parameters() if "lora_B" in n)  # adapters moved



@pytest.mark.parametrize("use_reentrant", [False, True])
def test_gradient_checkpointing_gives_the_adapters_the_same_gradients(tiny_dir, use_reentrant):
    """With gradient checkpointing the frozen embeddings' output needs no grad; reentrant checkpointing would then
    give the adapters no gradient at all unless the inputs are made to require grad (``enable_input_require_grads``,
    which :func:`apply_lora` calls). Both kinds give the gradients of a run without checkpointing."""
    def grads(checkpointing: bool) -> dict:
        cfg = ModelConfig(name=str(tiny_dir), gradient_checkpointing=checkpointing,
                          lora=LoraConfig(rank=4, alpha=8))
        base = load_causal_lm(str(tiny_dir), cfg)
        if checkpointing and use_reentrant:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        model = apply_lora(base, cfg.lora)
        _randomise_adapters(model, seed=3)
        model.train()  # HF checkpoints in train mode only
        assert model.base_model.model.is_gradient_checkpointing == checkpointing
        model(input_ids=_ids()).logits.float().logsumexp(-1).mean().backward()
        return {n: p.grad for n, p in model.named_parameters() if p.requires_grad}

    want, got = grads(False), grads(True)
    assert got.keys() == want.keys() and len(got) == 2 * 7 * 2  # A and B of 7 linear layers in each of 2 blocks
    for name, g in got.items():
        assert g is not None and float(g.abs().max()) > 0, name
        torch.testing.assert_close(g, want[name], rtol=1e-5, atol=1e-6)


def test_adapters_off_give_the_base_models_logits(tiny_dir):
    base = load_causal_lm(str(tiny_dir), ModelConfig(name=str(tiny_dir)))
    want = base(input_ids=_ids()).logits
    model, _ = _lora_model(tiny_dir)
    _randomise_adapters(model)
    with torch.no_grad():
        on = model(input_ids=_ids()).logits
        with model.disable_adapter():
            off = model(input_ids=_ids()).logits
    assert not torch.allclose(on, want, atol=1e-3)  # the adapters change the output ...
    torch.testing.assert_close(off, want, rtol=0, atol=0)  # ... and switched off, the base model is back exactly


def test_merged_weights_equal_the_adapter_model(tiny_dir):
    model, _ = _lora_model(tiny_dir, target_modules="all-linear")
    _randomise_adapters(model, seed=1)
    merged = dict(merged_weights(model, ((n, p.detach()) for n, p in model.named_parameters())))
    assert not any("lora_" in n or "base_layer" in n for n in merged)
    plain = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    assert set(merged) == {n for n, _ in plain.named_parameters()}
    plain.load_state_dict(merged, strict=False)
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=_ids()).logits, model(input_ids=_ids()).logits,
                                   rtol=1e-5, atol=1e-5)


def test_a_saved_adapter_folder_loads_as_the_merged_model(tiny_dir, tmp_path):
    model, cfg = _lora_model(tiny_dir)
    _randomise_adapters(model, seed=2)
    model.save_pretrained(tmp_path / "adapter")
    assert is_adapter_folder(tmp_path / "adapter") and not (tmp_path / "adapter" / "config.json").exists()
    assert resolve_model_path(str(tmp_path / "adapter")) == str(tmp_path / "adapter")
    loaded = load_causal_lm(str(tmp_path / "adapter"), ModelConfig(name=str(tmp_path / "adapter")))
    assert not hasattr(loaded, "peft_config")  # a plain HF model
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=_ids()).logits, model(input_ids=_ids()).logits,
                                   rtol=1e-5, atol=1e-5)


def test_rlvr_check_reports_an_unknown_target_module_before_loading_weights(tiny_dir, tmp_path):
    from rlvr.config import resolve
    from rlvr.preflight.checks import check_lora_targets
    from rlvr.preflight.report import Report
    from tests.tiny import tiny_recipe, write_addition_dataset

    data = write_addition_dataset(tmp_path / "data.jsonl")
    bad = resolve(tiny_recipe(tiny_dir, data, model={"lora": {"target_modules": ["q_proj", "w_in"]}}))
    report = Report()
    check_lora_targets(report, bad, str(tiny_dir))
    text = report.render()
    assert "error" in text and "'w_in'" in text and "q_proj" in text and "up_proj" in text
    good = resolve(tiny_recipe(tiny_dir, data, model={"lora": {"rank": 4, "target_modules": ["q_proj", "v_proj"]}}))
    report = Report()
    check_lora_targets(report, good, str(tiny_dir))
    assert "error" not in report.render() and "q_proj, v_proj" in report.render()
