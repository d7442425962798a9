"""trainer.precision: auto picks bf16 only where the device computes it natively (CPU capability mocked both ways)."""
import warnings
from pathlib import Path

import pytest
import torch

from rlvr.config import RecipeError, resolve
from rlvr.models import precision
from rlvr.models.precision import choose_precision
from tests.tiny import tiny_recipe


@pytest.fixture
def cpu_with(monkeypatch):
    """Mock the CPU: ``cpu_with(avx512_bf16=..., amx=...)``, torch's kernels at ``capability`` (the real machine may
    be an AVX2 one or an AMX one: nothing of it may leak into these tests)."""
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)

    def mock(avx512_bf16: bool, amx: bool, capability: str = "AVX512") -> None:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    return mock


def test_auto_on_avx2_only_cpu_is_fp32(cpu_with):
    cpu_with(avx512_bf16=False, amx=False, capability="AVX2")
    choice = choose_precision("auto", "cpu")
    assert choice.name == "fp32" and choice.autocast_dtype is None and choice.vllm_dtype == "float32"
    assert "no native bf16" in choice.reason


@pytest.mark.parametrize("avx512_bf16,amx,named", [(True, False, "AVX512_BF16"), (False, True, "AMX"),
                                                    (True, True, "AVX512_BF16 + AMX")])
def test_auto_on_native_bf16_cpu_is_bf16(cpu_with, avx512_bf16, amx, named):
    cpu_with(avx512_bf16=avx512_bf16, amx=amx)
    choice = choose_precision("auto", "cpu")
    assert choice.name == "bf16" and choice.autocast_dtype is torch.bfloat16 and choice.vllm_dtype == "bfloat16"
    assert f"native bf16 ({named}" in choice.reason


def test_kernels_capped_below_avx512_count_as_emulated(cpu_with, monkeypatch):
    cpu_with(avx512_bf16=True, amx=True, capability="AVX2")
    assert choose_precision("auto", "cpu").name == "fp32"
    cpu_with(avx512_bf16=True, amx=True, capability="AVX512")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert choose_precision("auto", "cpu").name == "fp32"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert choose_precision("auto", "cpu").name == "bf16"


def test_forced_bf16_on_emulating_cpu_warns_with_the_slowdown(cpu_with):
    cpu_with(avx512_bf16=False, amx=False)
    with pytest.warns(UserWarning, match="about 20x slower than fp32"):
        choice = choose_precision("bf16", "cpu")
    assert choice.name == "bf16"


def test_forced_bf16_on_native_cpu_and_forced_fp32_do_not_warn(cpu_with):
    cpu_with(avx512_bf16=True, amx=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert choose_precision("bf16", "cpu").name == "bf16"
        assert choose_precision("fp32", "cpu").name == "fp32"


def test_cpu_flags_are_read_where_torch_lacks_the_checks(cpu_with, monkeypatch):
    cpu_with(avx512_bf16=False, amx=False)
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx2", "fma"})
    assert choose_precision("auto", "cpu").name == "fp32"
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx2", "avx512f", "amx_bf16"})
    assert choose_precision("auto", "cpu").name == "bf16"


def test_cuda_device_without_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100")
    assert choose_precision("auto", "cuda:0").name == "fp32"
    with pytest.raises(ValueError, match="Tesla V100 does not support bf16"):
        choose_precision("bf16", "cuda:0")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert choose_precision("auto", "cuda:0").name == "bf16"


def test_unknown_precision_name():
    with pytest.raises(ValueError, match="'fp16' is not one of"):
        choose_precision("fp16", "cpu")


def _trainer(trainer: dict):
    raw = tiny_recipe(Path("tiny-model"), Path("x.jsonl"))
    raw["trainer"] = trainer
    return resolve(raw).trainer


def test_config_default_is_auto_and_precision_is_one_key():
    assert _trainer({}).precision == "auto"
    assert _trainer({"precision": "fp32"}).precision == "fp32"
    with pytest.raises(RecipeError, match="unknown key 'trainer.bf16'"):
        _trainer({"bf16": False})
    with pytest.raises(RecipeError, match="precision"):
        _trainer({"precision": "fp16"})


def test_the_choice_is_announced_once_on_stderr(capsys):
    from rlvr.models.precision import PrecisionChoice, announce_precision

    choice = PrecisionChoice("fp32", "precision fp32 (set in the recipe): test-only reason 1f3a")
    announce_precision(choice)
    announce_precision(choice)
    out, err = capsys.readouterr()
    assert out == "" and err == "[rlvr] precision fp32 (set in the recipe): test-only reason 1f3a\n"
