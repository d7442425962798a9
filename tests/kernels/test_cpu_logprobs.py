"""The log-prob kernels (rlvr/kernels/cpu_logprobs.cpp) against torch's ops in the same autograd function, and by hand."""

from __future__ import annotations

import pytest
import torch

from rlvr.kernels import cpu_logprobs
from rlvr.models.logprobs import token_logprobs_from_logits

needs_kernels = pytest.mark.skipif(cpu_logprobs.logprob_kernels() is None,
                                   reason="the CPU log-prob kernels need AVX-512 and a compiler")


def _logprobs_and_grad(logits: torch.Tensor, tokens: torch.Tensor, grad: torch.Tensor, temperature: float):
    x = logits.clone().requires_grad_(True)
    lp, ent = token_logprobs_from_logits(x, tokens, temperature=temperature)
    (lp * grad).sum().backward()
    return lp.detach(), ent.detach(), x.grad


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_kernels_equal_torch_ops(monkeypatch, dtype, temperature):
    torch.manual_seed(0)
    n, t, v = 3, 21, 1003  # V not a multiple of 16: the masked tail of every row
    logits = (4 * torch.randn(n, t, v)).to(dtype)
    tokens = torch.randint(0, v, (n, t))
    grad = torch.randn(n, t)
    grad[2, 15:] = 0.0  # padding: zero rows of the gradient
    assert cpu_logprobs.kernels_apply(logits)
    lp, ent, g = _logprobs_and_grad(logits, tokens, grad, temperature)
    monkeypatch.setattr(cpu_logprobs, "logprob_kernels", lambda: None)
    assert not cpu_logprobs.kernels_apply(logits)
    lp_ref, ent_ref, g_ref = _logprobs_and_grad(logits, tokens, grad, temperature)
    torch.testing.assert_close(lp, lp_ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent, ent_ref, rtol=0, atol=1e-5)
    assert g.dtype == dtype
    assert torch.equal(g[2, 15:], torch.zeros_like(g[2, 15:]))
    if dtype == torch.float32:
        torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-7)
    else:  # both round an fp32 value to bf16 that may differ in its last bits: one bf16 step (up to 2^-7)
        torch.testing.assert_close(g.float(), g_ref.float(), rtol=2 ** -7, atol=1e-7)


@needs_kernels
def test_kernels_by_hand():
    # V = 3, one position, temperature 2: logp_t = log softmax(logits / 2)_t, d logp_t / d logits = (onehot(t) - p) / 2
    logits = torch.tensor([[[1.0, 3.0, -1.0]]])
    p = torch.softmax(torch.tensor([0.5, 1.5, -0.5]), -1)
    lp, ent, lse = cpu_logprobs.token_logprobs_forward(logits, torch.tensor([[1]]), 2.0)
    torch.testing.assert_close(lp, p[1].log().view(1, 1))
    torch.testing.assert_close(ent, -(p * p.log()).sum().view(1, 1))
    torch.testing.assert_close(lse, torch.tensor([0.5, 1.5, -0.5]).logsumexp(0).view(1, 1))
    grad = cpu_logprobs.token_logprobs_backward(logits, torch.tensor([[1]]), lse, torch.tensor([[3.0]]), 2.0)
    torch.testing.assert_close(grad[0, 0], 3.0 * (torch.tensor([0.0, 1.0, 0.0]) - p) / 2)


@needs_kernels
def test_kernels_refuse_a_token_outside_the_vocabulary_and_other_dtypes():
    logits = torch.randn(1, 2, 7)
    with pytest.raises(RuntimeError, match=r"tokens\[1\] = 7 is outside the vocabulary \[0, 7\)"):
        cpu_logprobs.token_logprobs_forward(logits, torch.tensor([[0, 7]]), 1.0)
    assert not cpu_logprobs.kernels_apply(logits.half())  # fp16 keeps torch's ops
