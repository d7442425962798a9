"""Memory for long responses: log-probs in chunks (the full (N, T, V) logits never exist in fp32), micro-batches by
token budget, and gradient checkpointing, each giving the same numbers as the plain path."""

from __future__ import annotations

import pytest
import torch

from rlvr.models.logprobs import token_logprobs_from_logits
from rlvr.trainer.micro_batches import plan_micro_batches


def _run(logits: torch.Tensor, tokens: torch.Tensor, chunk: int, entropy_grad: bool):
    x = logits.clone().requires_grad_(True)
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp, ent = token_logprobs_from_logits(x, tokens, temperature=0.7, entropy_grad=entropy_grad,
                                             chunk_tokens=chunk)
    (lp.sum() + (ent.sum() if entropy_grad else 0.0)).backward()
    return lp.detach(), ent.detach(), x.grad, saved


def _reference(logits: torch.Tensor, tokens: torch.Tensor, temperature: float):
    """The plain formula under autograd: fp32 log-softmax of the whole (N, T, V) batch."""
    x = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(x.float() / temperature, dim=-1)
    lp = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    return x, lp, ent


@pytest.mark.parametrize("entropy_grad", [False, True])
def test_chunked_logprobs_equal_the_plain_formula_and_never_hold_full_fp32_logits(entropy_grad):
    n, t, v = 3, 40, 500
    torch.manual_seed(0)
    logits = torch.randn(n, t, v).to(torch.bfloat16)  # what the forward returns under bf16 autocast
    tokens = torch.randint(0, v, (n, t))
    x, lp_ref, ent_ref = _reference(logits, tokens, 0.7)
    (lp_ref.sum() + (ent_ref.sum() if entropy_grad else 0.0)).backward()
    lp_all, ent_all, grad_all, saved_all = _run(logits, tokens, chunk=10**9, entropy_grad=entropy_grad)
    lp, ent, grad, saved = _run(logits, tokens, chunk=24, entropy_grad=entropy_grad)  # 8 positions x 3 rows a chunk
    for got_lp, got_ent, got_grad in ((lp_all, ent_all, grad_all), (lp, ent, grad)):
        torch.testing.assert_close(got_lp, lp_ref.detach(), rtol=0, atol=1e-5)
        torch.testing.assert_close(got_ent, ent_ref.detach(), rtol=0, atol=1e-4)
        # bf16 gradients: at most two bf16 rounding steps (2^-8 relative each) apart
        torch.testing.assert_close(got_grad.float(), x.grad.float(), rtol=2 ** -7, atol=1e-6)
    # chunked, backward keeps only the bf16 input and (N, T) statistics, never an fp32 (N, T, V) buffer; without an
    # entropy gradient (the fused backward) not even unchunked
    assert all(s.numel() <= n * 8 * v for s in saved if s.dtype == torch.float32)
    if not entropy_grad:
        assert all(s.numel() <= n * t for s in saved_all if s.dtype == torch.float32)
    else:  # the checkpointed plain formula keeps the fp32 copy when the chunk is the whole batch
        assert any(s.dtype == torch.float32 and s.numel() == n * t * v for s in saved_all)


def test_fused_logprob_gradient_by_hand():
    # V = 3, one position, temperature 2: d logp_t / d logits = (onehot(t) - softmax(logits / 2)) / 2
    logits = torch.tensor([[[1.0, 3.0, -1.0]]], requires_grad=True)
    lp, ent = token_logprobs_from_logits(logits, torch.tensor([[1]]), temperature=2.0)
    p = torch.softmax(torch.tensor([0.5, 1.5, -0.5]), -1)
    torch.testing.assert_close(lp, torch.log(p[1]).view(1, 1))
    torch.testing.assert_close(ent, -(p * p.log()).sum().view(1, 1))
    (3.0 * lp.sum()).backward()
    torch.testing.assert_close(logits.grad[0, 0], 3.0 * (torch.tensor([0.0, 1.0, 0.0]) - p) / 2)


def test_chunked_logprobs_without_grad_and_bad_arguments():
    logits, tokens = torch.randn(2, 5, 7), torch.randint(0, 7, (2, 5))
    a, _ = token_logprobs_from_logits(logits, tokens, chunk_tokens=2)
    b, _ = token_logprobs_from_logits(logits, tokens)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(ValueError, match="chunk_tokens"):
        token_logprobs_from_logits(logits, tokens, chunk_tokens=0)
    with pytest.raises(ValueError, match=r"logits \(2, 5, 7\) do not match tokens \(2, 4\)"):
        token_logprobs_from_logits(logits, tokens[:, :4])


def test_micro_batches_by_rows_and_by_padded_tokens():
    idx = [7, 3, 5, 1, 9, 2]
    assert plan_micro_batches(idx, [10] * 6, max_rows=4) == [[7, 3, 5, 1], [9, 2]]
    # budget 100 padded tokens: 2 x 50, then 2 x 10, a 100-token row alone, the last one alone (it would pad to 100)
    assert plan_micro_batches(idx, [10, 50, 10, 10, 100, 10], 8, 100) == [[7, 3], [5, 1], [9], [2]]
    # a row longer than the budget still gets a micro-batch of its own
    assert plan_micro_batches([0, 1], [300, 5], 8, 100) == [[0], [1]]
    assert plan_micro_batches([], [], 8, 100) == []
    with pytest.raises(ValueError, match="max_tokens"):
        plan_micro_batches([0], [1], 8, 0)
    with pytest.raises(ValueError, match="2 lengths for 1 indices"):
        plan_micro_batches([0], [1, 2], 8)


def _count_checkpointed_layers(model: torch.nn.Module) -> list[int]:
    """Wrap each decoder layer's checkpoint function (HF ``GradientCheckpointingLayer``) to count its calls."""
    calls: list[int] = []
    for module in model.modules():
        func = getattr(module, "_gradient_checkpointing_func", None)
        if func is not None:
            def counted(*args, _func=func, **kwargs):
                calls.append(1)
                return _func(*args, **kwargs)
            module._gradient_checkpointing_func = counted
    return calls


def test_token_budget_and_gradient_checkpointing_leave_the_training_numbers_unchanged(tmp_path, no_plots):
    """The memory knobs change how the batch is computed, never what: same losses and metrics within fp32 rounding."""
    from rlvr.config import resolve
    from rlvr.runs.metrics import read_metrics
    from rlvr.trainer.trainer import RLTrainer
    from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset

    model = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    variants = {"plain": ({}, {}),
                "budget": ({"micro_batch_tokens": 40}, {}),  # prompts ~20 tokens + 8 new: 1-2 rows per micro-batch
                "checkpointing": ({}, {"gradient_checkpointing": True})}
    results = {}
    for name, (optim, model_cfg) in variants.items():
        raw = tiny_recipe(model, data, optim=optim, model=model_cfg, trainer={"steps": 2, "log_samples_every": 0})
        trainer = RLTrainer(resolve(raw), tmp_path / name)
        recomputed = _count_checkpointed_layers(trainer.model)
        trainer.train()
        assert (sum(recomputed) > 0) == (name == "checkpointing"), name  # the option really recomputes layers
        trainer.engine.destroy()
        results[name] = [m for m in read_metrics(tmp_path / name) if "train/loss" in m]
    for name in ("budget", "checkpointing"):
        for a, b in zip(results[name], results["plain"], strict=True):
            for key in ("train/loss", "train/entropy", "train/grad_norm", "reward/mean"):
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), (name, key)
