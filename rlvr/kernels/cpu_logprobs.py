"""The token log-prob over the full vocabulary through AVX-512 kernels (``cpu_logprobs.cpp``), for
:class:`rlvr.models.logprobs._FusedTokenLogprobs` on a CPU.

Forward gives, per position, the log-prob of its token, the entropy and the logsumexp of softmax(logits /
temperature); backward writes ``(onehot(t) - softmax(x)) * g / temperature`` in the logits' dtype. Each is one pass
per row of logits with no (positions, V) fp32 buffer, where torch's ops make about ten such passes, each over a fresh
allocation (``benchmarks/RESULTS.md`` has the update's time both ways). Where the kernels do not build or run (no
compiler, no AVX-512), :func:`logprob_kernels` returns None and the trainer keeps torch's ops.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("cpu_logprobs.cpp")


@lru_cache(maxsize=1)
def logprob_kernels() -> ModuleType | None:
    """The compiled ``token_logprobs_forward`` / ``token_logprobs_backward``, or None (the reason printed once)."""
    from rlvr.kernels.build import build_kernels

    return build_kernels("rlvr_logprob_kernels", SOURCE, "the CPU log-prob kernels",
                         "the trainer's log-prob uses torch's ops")


def kernels_apply(logits: Tensor) -> bool:
    """Whether the kernels take ``logits``: a bf16 or fp32 CPU tensor, and the kernels built here."""
    return (logits.device.type == "cpu" and logits.dtype in (torch.bfloat16, torch.float32)
            and logprob_kernels() is not None)


def token_logprobs_forward(logits: Tensor, tokens: Tensor, temperature: float) -> tuple[Tensor, Tensor, Tensor]:
    """(N, T, V) logits, (N, T) token ids -> log-probs, entropies and logsumexps of softmax(logits / temperature),
    (N, T) fp32 nats each.

    Raises:
        RuntimeError: a token id outside [0, V), or logits not bf16/fp32 on the CPU.
    """
    n, t, v = logits.shape
    out = logprob_kernels().token_logprobs_forward(logits.reshape(n * t, v).contiguous(),
                                                   tokens.reshape(n * t).contiguous(), float(temperature))
    return tuple(x.view(n, t) for x in out)


def token_logprobs_backward(logits: Tensor, tokens: Tensor, lse: Tensor, grad: Tensor, temperature: float) -> Tensor:
    """The gradient of the log-probs w.r.t. (N, T, V) ``logits`` given (N, T) ``grad`` and the forward's ``lse``:
    ``(onehot(t) - softmax(logits / temperature)) * grad / temperature``, (N, T, V) in the logits' dtype."""
    n, t, v = logits.shape
    out = logprob_kernels().token_logprobs_backward(
        logits.reshape(n * t, v).contiguous(), tokens.reshape(n * t).contiguous(), lse.reshape(n * t).contiguous(),
        grad.reshape(n * t).float().contiguous(), float(temperature))
    return out.view(n, t, v)
