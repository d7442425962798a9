"""Mean and variance of masked values over the whole global batch, across data-parallel ranks, and whitening with them.

PPO whitens its advantages over the batch. With the batch split over ranks, per-rank statistics (TRL's
``masked_whiten`` called on each rank's shard) give every rank a different scale, so the update depends on the
sharding; here the sum, sum of squares and count are all-reduced first, so 2 ranks give exactly what 1 rank gives on
the whole batch. The all-reduce runs on the device the process group's backend needs: NCCL has no CPU collectives, so
a CPU tensor is moved to the current GPU under NCCL (and back), and gloo gets a CPU tensor.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor


def collective_device(backend: str, fallback: torch.device) -> torch.device:
    """The device a tensor must be on for an all-reduce under ``backend`` (``nccl``: the current GPU; ``gloo``: the
    CPU; other backends: ``fallback``, the tensor's own)."""
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    if backend == "gloo":
        return torch.device("cpu")
    return fallback


def masked_moments(values: Tensor, mask: Tensor, group: dist.ProcessGroup | None = None
                   ) -> tuple[float, float, float]:
    """(mean, unbiased variance, count) of ``values`` where ``mask`` is 1, over every rank of ``group``.

    Args:
        values, mask: same shape, any. group: a process group; ``None`` = the default group when torch.distributed is
            initialised, else this process alone.
    Raises:
        ValueError: shapes differ, or no unmasked value on any rank.
    """
    if values.shape != mask.shape:
        raise ValueError(f"values {tuple(values.shape)} and mask {tuple(mask.shape)} must have the same shape")
    m = mask.double()
    v = values.detach().double() * m
    stats = torch.stack([v.sum(), (v * v).sum(), m.sum()])
    if dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1:
        device = collective_device(dist.get_backend(group), stats.device)
        moved = stats.to(device)
        dist.all_reduce(moved, op=dist.ReduceOp.SUM, group=group)
        stats = moved.to(values.device)
    total, total_sq, count = (float(x) for x in stats)
    if count == 0:
        raise ValueError("masked_moments: no unmasked value in the batch")
    mean = total / count
    # unbiased (Bessel) variance, as TRL's and OpenRLHF's masked_var; one value has variance 0
    var = max(0.0, (total_sq - count * mean * mean) / (count - 1)) if count > 1 else 0.0
    return mean, var, count


def masked_whiten(values: Tensor, mask: Tensor, *, shift_mean: bool = True, group: dist.ProcessGroup | None = None,
                  eps: float = 1e-8) -> Tensor:
    """``(values - mean) / sqrt(var + eps)`` with the global masked statistics; 0 where ``mask`` is 0.

    Args:
        shift_mean: False keeps the mean in (``values / std`` shifted back by the mean, as TRL's ``shift_mean``).
        group, eps: see :func:`masked_moments`.
    """
    mean, var, _ = masked_moments(values, mask, group)
    out = (values.float() - mean) / math.sqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask.float()
