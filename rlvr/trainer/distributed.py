"""Process-group set-up for DeepSpeed: one process on a laptop, or many under ``torchrun``/``deepspeed``."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed() -> DistInfo:
    """Join (or create) the process group: gloo on CPU, nccl on GPU.

    A plain ``rlvr train`` (no launcher) gets the single-process environment DeepSpeed expects (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT on a free port).
    """
    import deepspeed

    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        deepspeed.init_distributed(dist_backend=backend, verbose=False)
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank, device=device)


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks (identity with one process). Works on CPU tensors with gloo."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def all_gather_objects(obj: object) -> list[object]:
    """Every rank's ``obj``, in rank order (``[obj]`` with one process)."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        out: list[object] = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out
    return [obj]


def all_reduce_max(value: int) -> int:
    """The largest ``value`` over ranks (``value`` itself with one process)."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())
    return value


def record_grad_norm_without_zero(engine: object) -> None:
    """Make ``engine.get_global_grad_norm()`` answer at ZeRO stage 0, where DeepSpeed computes the norm while clipping
    but does not keep it (``DeepSpeedEngine.clip_fp32_gradients``); with ZeRO 1-3 its optimizer keeps it already.

    Needs ``gradient_clipping > 0`` in the DeepSpeed config (use ``inf`` to measure without clipping). The norm is of
    the gradients after the reduction over ranks, so it is the same on every rank and equal to a 1-rank run's.
    """
    from deepspeed.runtime.utils import clip_grad_norm_

    def clip_and_record() -> None:
        norm = clip_grad_norm_(parameters=engine.module.parameters(), max_norm=engine.gradient_clipping(),
                               mpu=engine.mpu)
        engine._global_grad_norm = float(norm)

    engine.clip_fp32_gradients = clip_and_record
