"""The RMSNorm / SwiGLU kernels (rlvr/kernels/cpu_fused_layers.cpp): by hand, against transformers' modules, and
patched into a model."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from rlvr.kernels import cpu_fused_layers
from rlvr.kernels.cpu_fused_layers import fuse_cpu_layers, fused_layer_kernels, rms_norm, silu_mul
from tests.tiny import build_tiny_model

needs_kernels = pytest.mark.skipif(fused_layer_kernels() is None, reason="the fused layer kernels need AVX2 and a "
                                                                         "compiler")


@needs_kernels
def test_rms_norm_by_hand():
    # x = (3, 4), weight = (1, 2), eps 0: r = 1 / sqrt((9 + 16) / 2), y = weight * x * r
    x = torch.tensor([[3.0, 4.0]], requires_grad=True)
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    y = rms_norm(x, w, 0.0)
    r = 1 / math.sqrt(12.5)
    torch.testing.assert_close(y, torch.tensor([[3 * r, 8 * r]]))
    y.backward(torch.tensor([[1.0, 0.0]]))
    # grad_x = r * (w * g - x * r^2 * mean(w g x)) = r * ((1, 0) - (3, 4) * 0.08 * 1.5); grad_w = g * x * r
    torch.testing.assert_close(x.grad, torch.tensor([[r * 0.64, -r * 0.48]]))
    torch.testing.assert_close(w.grad, torch.tensor([3 * r, 0.0]))


@needs_kernels
@pytest.mark.parametrize("hidden", [576, 37])  # 37: rows not a multiple of the 8-lane vectors
def test_rms_norm_equals_transformers_module(hidden):
    torch.manual_seed(0)
    norm = LlamaRMSNorm(hidden, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.3 * torch.randn(hidden))
    x = torch.randn(3, 67, hidden, requires_grad=True)
    grad = torch.randn(3, 67, hidden)
    ref = norm(x)
    ref_x, ref_w = torch.autograd.grad(ref, (x, norm.weight), grad)
    y = rms_norm(x, norm.weight, 1e-5)
    got_x, got_w = torch.autograd.grad(y, (x, norm.weight), grad)
    assert y.shape == ref.shape and y.dtype == torch.float32
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_x, ref_x, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_w, ref_w, rtol=1e-5, atol=1e-4)  # a sum over 201 rows


@needs_kernels
@pytest.mark.parametrize("hidden", [576, 37])
def test_rms_norm_in_bf16_is_the_fp32_output_rounded_once(hidden):
    """Under bf16 autocast the norm writes the bits autocast's cast of its fp32 output would give, and its backward
    takes the bf16 gradient as the fp32 one of the same values."""
    torch.manual_seed(0)
    w = (1 + 0.3 * torch.randn(hidden)).requires_grad_(True)
    x = torch.randn(3, 67, hidden, requires_grad=True)
    grad = torch.randn(3, 67, hidden).to(torch.bfloat16)
    y32 = rms_norm(x, w, 1e-5)
    ref_x, ref_w = torch.autograd.grad(y32, (x, w), grad.float())
    y16 = rms_norm(x, w, 1e-5, bf16_out=True)
    got_x, got_w = torch.autograd.grad(y16, (x, w), grad)
    assert y16.dtype == torch.bfloat16 and torch.equal(y16, y32.detach().to(torch.bfloat16))
    assert got_x.dtype == torch.float32
    # the same formula over the same values; the compiler may fuse the scalar tail's products differently
    torch.testing.assert_close(got_x, ref_x, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got_w, ref_w, rtol=1e-6, atol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # a patched module picks bf16 under autocast, fp32 outside
        norm = LlamaRMSNorm(hidden, eps=1e-5)
        assert fuse_cpu_layers(torch.nn.Sequential(norm)) == 1
        assert norm(x).dtype == torch.bfloat16
    assert norm(x).dtype == torch.float32


@needs_kernels
def test_silu_mul_by_hand():
    gate = torch.tensor([0.0, 1.0, -2.0], requires_grad=True)
    up = torch.tensor([5.0, 2.0, 3.0], requires_grad=True)
    out = silu_mul(gate, up)
    s = torch.sigmoid(gate.detach())
    torch.testing.assert_close(out, torch.tensor([0.0, 2 * s[1].item(), -6 * s[2].item()]))
    out.backward(torch.ones(3))
    torch.testing.assert_close(up.grad, gate.detach() * s)  # silu(gate)
    torch.testing.assert_close(gate.grad, up.detach() * s * (1 + gate.detach() * (1 - s)))  # up * silu'(gate)


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_equals_torch(dtype):
    torch.manual_seed(0)
    gate = (4 * torch.randn(5, 1539)).to(dtype).requires_grad_(True)  # 1539: a tail past the 8-lane vectors
    up = torch.randn(5, 1539).to(dtype).requires_grad_(True)
    grad = torch.randn(5, 1539).to(dtype)
    out = silu_mul(gate, up)
    got = torch.autograd.grad(out, (gate, up), grad)
    # the reference in fp32, rounded once to dtype, as the kernel computes
    g32, u32 = gate.detach().float().requires_grad_(True), up.detach().float().requires_grad_(True)
    ref = F.silu(g32) * u32
    ref_grads = torch.autograd.grad(ref, (g32, u32), grad.float())
    assert out.dtype == dtype and all(g.dtype == dtype for g in got)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2 ** -8, atol=1e-6)  # one rounding
    torch.testing.assert_close(out.float(), ref.to(dtype).float(), **tol)
    for g, r in zip(got, ref_grads, strict=True):
        torch.testing.assert_close(g.float(), r.to(dtype).float(), **tol)


@needs_kernels
def test_the_kernels_name_a_bad_input():
    kernels = fused_layer_kernels()
    with pytest.raises(RuntimeError, match=r"x: expected a contiguous 2-d fp32 CPU tensor, got BFloat16"):
        kernels.rms_norm_forward(torch.ones(2, 8, dtype=torch.bfloat16), torch.ones(8), 1e-6)
    with pytest.raises(RuntimeError, match=r"weight: expected \(8,\), got \[9\]"):
        kernels.rms_norm_forward(torch.ones(2, 8), torch.ones(9), 1e-6)
    with pytest.raises(RuntimeError, match=r"grad: expected a contiguous fp32 or bf16 CPU tensor of shape \[2, 8\], "
                                           r"got Half"):
        kernels.rms_norm_backward(torch.ones(2, 8, dtype=torch.half), torch.ones(2, 8), torch.ones(8), torch.ones(2))
    with pytest.raises(RuntimeError, match=r"up: expected a contiguous BFloat16 CPU tensor of shape \[4\], got Float"):
        kernels.silu_mul_forward(torch.ones(4, dtype=torch.bfloat16), torch.ones(4))
    with pytest.raises(RuntimeError, match="gate: expected a contiguous bf16 or fp32 CPU tensor, got Half"):
        kernels.silu_mul_forward(torch.ones(4, dtype=torch.half), torch.ones(4, dtype=torch.half))


def _loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits.float()
    loss = logits.log_softmax(-1)[..., :-1, :].gather(-1, ids[:, 1:, None]).sum()
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@needs_kernels
@pytest.mark.parametrize("autocast", [False, True])
def test_a_patched_model_computes_what_transformers_does(tmp_path, autocast):
    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path), dtype=torch.float32)
    ids = torch.randint(3, model.config.vocab_size, (2, 19), generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        ref_logits, ref_grads = _loss_and_grads(model, ids)
        layers = model.config.num_hidden_layers
        assert fuse_cpu_layers(model) == 3 * layers + 1  # two norms and an MLP a layer, the final norm
        logits, grads = _loss_and_grads(model, ids)
    if autocast:  # SwiGLU rounds once to bf16 instead of twice: bf16-sized differences
        torch.testing.assert_close(logits, ref_logits, rtol=0, atol=0.05)
        for name, grad in grads.items():
            assert torch.nn.functional.cosine_similarity(grad.flatten(), ref_grads[name].flatten(), dim=0) > 0.99
    else:
        torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)
        for name, grad in grads.items():
            torch.testing.assert_close(grad, ref_grads[name], rtol=1e-4, atol=1e-5, msg=name)


@needs_kernels
def test_inputs_the_kernels_do_not_take_run_the_modules_own_forward(tmp_path, monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path), dtype=torch.float32)
    fuse_cpu_layers(model)
    calls = []
    monkeypatch.setattr(cpu_fused_layers, "rms_norm", lambda *a, **kw: calls.append(a) or None)
    norm = model.model.norm
    x = torch.randn(2, 3, model.config.hidden_size, dtype=torch.bfloat16)
    ref = type(norm).forward(norm, x)
    assert torch.equal(norm(x), ref) and not calls  # bf16 activations: transformers' op
    norm(x.float())
    assert len(calls) == 1  # fp32: the kernel


def test_models_without_those_modules_or_without_kernels_are_left_alone(tmp_path, monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path), dtype=torch.float32)
    monkeypatch.setattr(cpu_fused_layers, "fused_layer_kernels", lambda: None)
    assert fuse_cpu_layers(model) == 0
    assert not any("forward" in m.__dict__ for m in model.modules())
    monkeypatch.undo()
    gelu = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU())
    assert fuse_cpu_layers(gelu) == 0
    model.config.hidden_act = "gelu"  # the MLPs read their config: only the norms are taken
    if fused_layer_kernels() is not None:
        assert fuse_cpu_layers(model) == 2 * model.config.num_hidden_layers + 1
