"""Linear layers over oneDNN-prepacked bf16 weights (the hf engine's generation copy on a CPU): the same outputs as
``F.linear`` bit for bit, the same parameters (tied weights stay tied), re-packing after a weight change, and the
support test's answer on each kind of CPU."""

import pytest
import torch
import torch.nn.functional as F

from rlvr.kernels.build import kernels_supported
from rlvr.kernels.machine import cpu_native_bf16
from rlvr.kernels.packed_linear import PackedLinear, pack_linears, packing_supported, repack
from tests.tiny import build_tiny_model

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


def packing_supported_here() -> bool:
    return cpu_native_bf16()[0] and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def _onednn_packs_bf16() -> bool:
    """Whether oneDNN can pack a bf16 weight on this CPU at all (it needs avx512bw/vl/dq or avx_ne_convert: not on an
    AVX2-only CPU, where the engine never packs since the CPU has no native bf16)."""
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(16, 16, dtype=torch.bfloat16), 16)
    except RuntimeError:
        return False
    return True


needs_bf16_packing = pytest.mark.skipif(not _onednn_packs_bf16(), reason="oneDNN cannot pack bf16 on this CPU")


class TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(24, 40, bias=True)
        self.head = torch.nn.Linear(40, 24, bias=False)
        self.embed = torch.nn.Embedding(24, 40)
        self.head.weight = torch.nn.Parameter(self.embed.weight.T.contiguous())  # an untied stand-in
        self.tied = torch.nn.Linear(40, 24, bias=False)
        self.tied.weight = self.embed.weight  # tied like an LM head


def _bf16_model() -> TwoLayers:
    torch.manual_seed(0)
    return TwoLayers().to(torch.bfloat16).requires_grad_(False)


@needs_bf16_packing
@pytest.mark.parametrize("rows", [1, 7, 16, 300])
def test_packed_outputs_equal_f_linear_bit_for_bit(rows):
    model = _bf16_model()
    x = torch.randn(rows, 1, 24, dtype=torch.bfloat16)
    expected_up = F.linear(x, model.up.weight, model.up.bias)
    expected_tied = F.linear(expected_up, model.tied.weight)
    assert pack_linears(model) == 3
    assert type(model.up) is PackedLinear and isinstance(model.up, torch.nn.Linear)
    with torch.no_grad():
        assert torch.equal(model.up(x), expected_up)
        assert torch.equal(model.tied(model.up(x)), expected_tied)


@needs_bf16_packing
def test_parameters_stay_the_same_objects_and_repack_follows_a_change():
    model = _bf16_model()
    before = dict(model.named_parameters(remove_duplicate=False))
    pack_linears(model)
    after = dict(model.named_parameters(remove_duplicate=False))
    assert list(after) == list(before) and all(after[k] is before[k] for k in before)
    assert model.tied.weight is model.embed.weight
    x = torch.randn(4, 24, dtype=torch.bfloat16)
    with torch.no_grad():
        model.up.weight.add_(1.0)  # a weight sync writes the parameters in place
        stale = model.up(x)
        repack(model)
        fresh = model.up(x)
    assert torch.equal(fresh, F.linear(x, model.up.weight, model.up.bias))
    assert not torch.equal(stale, fresh)  # the packed copy is a snapshot until repacked


def test_support_needs_bf16_cpu_parameters_and_native_bf16(monkeypatch):
    monkeypatch.setattr("rlvr.kernels.machine.cpu_native_bf16", lambda: (True, "mocked"))
    assert packing_supported(_bf16_model())
    assert not packing_supported(TwoLayers())  # fp32 parameters
    monkeypatch.setattr("rlvr.kernels.machine.cpu_native_bf16", lambda: (False, "mocked AVX2"))
    assert not packing_supported(_bf16_model())


@needs_bf16_packing
def test_the_generation_copy_is_packed_exactly_where_supported(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from rlvr.rollout.hf import HFRolloutEngine
    from tests.tiny import build_tokenizer

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m", hidden=32))
    tok = build_tokenizer()
    monkeypatch.setattr("rlvr.kernels.fused_decode.decode_kernels", lambda: None)  # no fused decode step: see below
    for native in (True, False):
        monkeypatch.setattr("rlvr.kernels.machine.cpu_native_bf16", lambda native=native: (native, "mocked"))
        engine = HFRolloutEngine(model, tok, [tok.eos_token_id], autocast_dtype=torch.bfloat16)
        kinds = {type(m) for m in engine.generation_model.modules() if isinstance(m, torch.nn.Linear)}
        assert kinds == ({PackedLinear} if native else {torch.nn.Linear})
        assert engine.fused is None


@pytest.mark.skipif(not kernels_supported()[0] or not packing_supported_here(),
                    reason="needs a CPU with native bf16 and AVX-512 (the fused decode kernels)")
def test_with_the_fused_decode_step_the_model_keeps_no_packed_copy(tmp_path):
    """The fused decoder packs its own copies of every decode GEMM; the model's packed copies would be a second one,
    so its linears go back to F.linear on the plain weights, or (a tile GEMM, outputs a multiple of 64) read their
    slice of the decoder's pack (only the prefill calls them)."""
    from transformers import AutoModelForCausalLM

    from rlvr.kernels.fused_decode import TileLinear
    from rlvr.rollout.hf import HFRolloutEngine
    from tests.tiny import build_tokenizer

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m", hidden=32))
    engine = HFRolloutEngine(model, build_tokenizer(), [0], autocast_dtype=torch.bfloat16)
    assert engine.fused is not None
    kinds = {name.rsplit(".", 1)[-1]: type(m) for name, m in engine.generation_model.named_modules()
             if isinstance(m, torch.nn.Linear)}
    assert PackedLinear not in kinds.values()
    # hidden 32: q/o 32 and k/v 16 wide, the vocabulary 48; gate/up 64 wide each (a whole group of a tile pack)
    tiled = engine.fused.layers[0].gate_up.gemm in ("amx", "dot")  # else oneDNN, where measured faster
    assert kinds["gate_proj"] is kinds["up_proj"] is (TileLinear if tiled else torch.nn.Linear)
    assert {kinds[n] for n in ("q_proj", "k_proj", "v_proj", "o_proj", "down_proj", "lm_head")} == {torch.nn.Linear}
