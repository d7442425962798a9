"""fp32 decoding's linear layers through the AVX2 GEMM (rlvr/kernels/fp32_decode.py, fp32_decode_kernels.cpp): the
kernel against a float64 reference at every tail of its blocking, bad input named, the decode-time routing (small
no-grad fp32 inputs only, layers restored after), the measured choice and its cache, and the hf engine sampling
through it where the fused fp32 step does not run. Skipped where the kernel cannot be built (no AVX2 or no compiler)."""

import json

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from rlvr.kernels import fp32_decode
from rlvr.kernels.fp32_decode import fp32_decode_linears, fp32_kernels, measured_fp32_decode
from rlvr.kernels.timings import cached_timings
from rlvr.rollout import decode
from tests.tiny import build_tiny_model, build_tokenizer


@pytest.fixture(scope="module")
def kernels():
    built = fp32_kernels()
    if built is None:
        pytest.skip("the fp32 decode kernel does not build here (needs AVX2 and a compiler)")
    return built


# rows: the 4-row blocks and their tails; out features: the 3-column blocks and their tails; in features: whole
# 8-lane chunks, a tail, and SmolLM2's width
@pytest.mark.parametrize("rows", [1, 3, 4, 6, 16])
@pytest.mark.parametrize("out_features,in_features", [(1, 8), (2, 13), (7, 576), (64, 5)])
@pytest.mark.parametrize("bias", [False, True])
def test_fp32_linear_is_x_times_w_transposed_plus_bias(kernels, rows, out_features, in_features, bias):
    gen = torch.Generator().manual_seed(rows * 1000 + out_features)
    x = torch.randn(rows, in_features, generator=gen)
    w = torch.randn(out_features, in_features, generator=gen)
    b = torch.randn(out_features, generator=gen) if bias else None
    expected = x.double() @ w.double().T + (b.double() if bias else 0)
    out = kernels.fp32_linear(x, w, b)
    assert out.shape == (rows, out_features) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5 * in_features ** 0.5)


def test_fp32_linear_names_bad_input(kernels):
    x, w = torch.zeros(2, 8), torch.zeros(3, 8)
    with pytest.raises(RuntimeError, match="x: expected a contiguous 2-d fp32 CPU tensor, got BFloat16"):
        kernels.fp32_linear(x.bfloat16(), w, None)
    with pytest.raises(RuntimeError, match="weight: expected 8 input features \\(x's\\), got 5"):
        kernels.fp32_linear(x, torch.zeros(3, 5), None)
    with pytest.raises(RuntimeError, match="bias: expected 3 entries, got 2"):
        kernels.fp32_linear(x, w, torch.zeros(2))
    with pytest.raises(RuntimeError, match="weight: .* \\(not contiguous\\)"):
        kernels.fp32_linear(x, torch.zeros(8, 3).T, None)


class _Counting:
    """Stands in for the kernels module, counting the calls that reach ``fp32_linear``."""

    def __init__(self, kernels):
        self.kernels, self.calls = kernels, 0

    def fp32_linear(self, x, w, b):
        self.calls += 1
        return self.kernels.fp32_linear(x, w, b)


def _tiny(tmp_path):
    return AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "tiny", hidden=32, init_std=0.2)).eval()


def test_decoding_through_the_kernel_samples_what_f_linear_samples(tmp_path, kernels):
    model, tok = _tiny(tmp_path), build_tokenizer()
    ids = torch.tensor([[tok.pad_token_id, 5, 9, 11], [4, 8, 15, 16]])
    mask = (ids != tok.pad_token_id).long()
    args = dict(max_new_tokens=12, temperature=1.0, top_k=0, top_p=1.0, eos_ids=[tok.eos_token_id],
                pad_id=tok.pad_token_id)
    torch.manual_seed(0)
    plain_tokens, plain_lp = decode.sample(model, ids, mask, 3, **args)
    counting = _Counting(kernels)
    with fp32_decode_linears(model, counting):
        torch.manual_seed(0)
        tokens, lp = decode.sample(model, ids, mask, 3, **args)
        # a forward with grad (the trainer's) keeps F.linear even inside the block
        with torch.enable_grad():
            calls = counting.calls
            model(input_ids=ids[:1, 1:]).logits.sum().backward()
            assert counting.calls == calls
    assert counting.calls > 0
    assert torch.equal(tokens, plain_tokens)  # fp32 sums in another order: the same draws here
    torch.testing.assert_close(lp, plain_lp, atol=1e-5, rtol=0)
    assert all("forward" not in m.__dict__ for m in model.modules())  # every layer as before


def test_larger_inputs_keep_f_linear(kernels):
    layer = torch.nn.Linear(8, 4)
    counting = _Counting(kernels)
    with fp32_decode_linears(layer, counting), torch.no_grad():
        small, large = torch.randn(2, 3, 8), torch.randn(fp32_decode.MAX_ROWS + 1, 8)
        torch.testing.assert_close(layer(small), F.linear(small, layer.weight, layer.bias))
        assert counting.calls == 1
        torch.testing.assert_close(layer(large), F.linear(large, layer.weight, layer.bias))
        assert counting.calls == 1


@pytest.mark.parametrize("kernel_s,torch_s,chosen", [(1e-3, 2e-3, True), (3e-3, 2e-3, False)])
def test_the_kernel_is_used_where_it_measures_faster_measured_once_per_machine(tmp_path, kernels, monkeypatch, capsys,
                                                                              kernel_s, torch_s, chosen):
    measured = []

    def timings(kernels, weights):
        measured.append([tuple(w.shape) for w in weights])
        return {"kernel": kernel_s, "torch": torch_s}

    monkeypatch.setattr(fp32_decode, "fp32_decode_timings", timings)
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))
    model = _tiny(tmp_path)
    for _ in range(2):  # the second reads the first one's measurement
        assert (measured_fp32_decode(model) is kernels) == chosen
    linears = [tuple(m.weight.shape) for m in model.modules() if type(m) is torch.nn.Linear]
    assert measured == [linears]  # every layer of a model under 64 MB, once
    err = capsys.readouterr().err
    assert f"using {'fp32_linear' if chosen else 'F.linear'}" in err
    assert "measured, saved to" in err and "cached:" in err
    assert measured_fp32_decode(torch.nn.Embedding(4, 4)) is None  # no linear layer: nothing to measure


def test_without_the_fused_step_the_hf_engine_decodes_fp32_linears_through_the_kernel_where_it_is_faster(
        tmp_path, kernels, monkeypatch):
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.hf import HFRolloutEngine

    monkeypatch.setattr(fp32_decode, "fp32_decode_timings", lambda kernels, weights: {"kernel": 1.0, "torch": 2.0})
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))
    # a model the fused fp32 step does not take (e.g. another architecture)
    monkeypatch.setattr("rlvr.kernels.fused_decode.build_fused_decoder", lambda model: None)
    model, tok = _tiny(tmp_path), build_tokenizer()
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], autocast_dtype=None)
    assert engine.fused is None
    assert engine.fp32_kernels is kernels and engine.generation_model is model
    prompt = tok("12+3=?")["input_ids"]
    torch.manual_seed(7)
    for completion in engine.generate([prompt], 3, SamplingParams(temperature=1.0, max_new_tokens=8))[0]:
        full = torch.tensor([prompt + completion.token_ids])
        with torch.no_grad():
            logits = model(input_ids=full).logits[0, len(prompt) - 1:-1]
        expected = logits.log_softmax(-1).gather(-1, torch.tensor(completion.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=1e-4, rtol=0)
    assert all("forward" not in m.__dict__ for m in model.modules())
    bf16 = HFRolloutEngine(_tiny(tmp_path), tok, [tok.eos_token_id], autocast_dtype=torch.bfloat16)
    assert bf16.fp32_kernels is None  # a bf16 generation copy: not this path


def test_cached_timings_measure_once_and_again_after_a_corrupt_file(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))
    calls = []

    def measure():
        calls.append(1)
        return {"a": 0.5, "b": 0.25}

    first = cached_timings("probe", {"shape": [4, 8]}, ("a", "b"), measure)
    again = cached_timings("probe", {"shape": [4, 8]}, ("a", "b"), measure)
    assert first[0] == again[0] == {"a": 0.5, "b": 0.25} and len(calls) == 1
    assert first[1].startswith("measured, saved to") and again[1].startswith("cached:")
    (path,) = (tmp_path / "cache").glob("probe-*.json")
    assert json.loads(path.read_text())["key"]["shape"] == [4, 8]
    cached_timings("probe", {"shape": [4, 9]}, ("a", "b"), measure)  # another key: measured
    assert len(calls) == 2
    path.write_text("{not json")
    assert cached_timings("probe", {"shape": [4, 8]}, ("a", "b"), measure)[1].startswith("measured, saved to")
    assert len(calls) == 3
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "file"))
    (tmp_path / "file").write_text("not a folder")
    assert cached_timings("probe", {"shape": [4, 8]}, ("a", "b"), measure) == ({"a": 0.5, "b": 0.25},
                                                                              "measured, not cached")
