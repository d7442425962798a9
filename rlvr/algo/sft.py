"""Supervised fine-tuning's loss: the negative log-likelihood of the tokens the model must learn (a completion, or the
assistant turns of a conversation), never of the prompt, system, user or tool text.

Shapes: R rows of a micro-batch, T response tokens (the tokens after each row's prompt). A pure function of tensors
and an explicit denominator (the number of trained tokens in the whole optimizer step, over every rank and
micro-batch), so micro-batches summed by gradient accumulation give exactly the step's token-mean loss.
"""

from __future__ import annotations

from torch import Tensor


def sft_loss(logprobs: Tensor, mask: Tensor, num_tokens: float) -> Tensor:
    """Token-mean negative log-likelihood: ``-sum(logprobs * mask) / num_tokens``.

    Args:
        logprobs: (R, T) fp32 log-probs of each target token under the model.
        mask: (R, T) 1.0 on the tokens that are trained on, 0.0 elsewhere (prompt text, tool output, template
            boilerplate, padding).
        num_tokens: the trained tokens of the whole step (all ranks, all micro-batches), >= 1.
    Returns:
        a scalar tensor (with the graph of ``logprobs``).
    Raises:
        ValueError: shapes that differ, or ``num_tokens`` below 1.
    """
    if logprobs.shape != mask.shape or logprobs.dim() != 2:
        raise ValueError(f"logprobs {tuple(logprobs.shape)} and mask {tuple(mask.shape)} must be one (R, T) shape")
    if not num_tokens >= 1:
        raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
    return -(logprobs * mask).sum() / num_tokens
