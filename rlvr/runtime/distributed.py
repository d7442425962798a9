"""The ranks of a run: the process group set up for DeepSpeed (one process on a laptop, or many under
``torchrun``/``deepspeed``), and the few collectives rlvr uses (sums, maxima, object gathers), each a no-op copy with
one process and run on the backend's device (CPU under gloo, the GPU under NCCL).

A thread can run its collectives on a process group of its own (:func:`thread_process_group`): the asynchronous
rollout producer's (dynamic sampling's counts, the curriculum's tables) then never interleave with the update's, which
the trainer's thread runs on the default group at the same time."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from rlvr.runtime.extensions import prepare_extension_builds, use_one_ninja


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
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT on a free port). DeepSpeed's first use on a machine builds its CPU
    communication op (~45 s, then cached: :func:`rlvr.runtime.extensions.prepare_extension_builds`).
    """
    prepare_extension_builds()
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
        from rlvr.library_output import quiet

        use_one_ninja()  # DeepSpeed builds its CPU communication op here: the same ninja as rlvr's kernels
        # DeepSpeed prints "... built successfully" on stdout after building its CPU communication op
        with contextlib.redirect_stdout(io.StringIO()) if quiet() else contextlib.nullcontext():
            deepspeed.init_distributed(dist_backend=backend, verbose=False)
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank, device=device)


_thread = threading.local()


@contextlib.contextmanager
def thread_process_group(group: "dist.ProcessGroup | None") -> Iterator[None]:
    """The helpers below run on ``group`` in this thread while the context is open (``None``: the default group).
    Every rank must enter it around the same collectives, as with any group."""
    before = getattr(_thread, "group", None)
    _thread.group = group
    try:
        yield
    finally:
        _thread.group = before


def _group() -> "dist.ProcessGroup | None":
    return getattr(_thread, "group", None)


def collective_device() -> torch.device:
    """The device collectives of this thread's process group (:func:`thread_process_group`, else the default one) run
    on: CPU for gloo, the current accelerator otherwise.

    NCCL has no CPU path: ``all_reduce`` of a CPU tensor raises on the first multi-GPU step, so every helper below
    moves its tensor here and back.
    """
    backend = str(dist.get_backend(_group()))
    if backend == "gloo" or backend.startswith("cpu:gloo"):  # "cpu:gloo,cuda:nccl" serves CPU tensors too
        return torch.device("cpu")
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    accel = torch.accelerator.current_accelerator()
    if accel is None:
        raise RuntimeError(f"process-group backend {backend!r} is not gloo, and no accelerator is present for its "
                           "collectives")
    return torch.device(accel.type, torch.accelerator.current_device_index())


def _all_reduce(values: torch.Tensor, op: dist.ReduceOp) -> torch.Tensor:
    """``op`` over ranks, on the backend's device; returns a new tensor on ``values``' device and dtype."""
    on_device = values.to(collective_device(), copy=True)
    dist.all_reduce(on_device, op=op, group=_group())
    return on_device.to(values.device)


def _multi_rank() -> bool:
    return dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks (a copy of it with one process); any device, run on the backend's."""
    return _all_reduce(values, dist.ReduceOp.SUM) if _multi_rank() else values.clone()


def all_gather_objects(obj: object) -> list[object]:
    """Every rank's ``obj``, in rank order (``[obj]`` with one process). Under NCCL, torch pickles into tensors on
    the current CUDA device (set by :func:`init_distributed`)."""
    if _multi_rank():
        out: list[object] = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj, group=_group())
        return out
    return [obj]


def all_reduce_max(value: float) -> float:
    """The largest ``value`` over ranks (``value`` itself with one process); an ``int`` stays an ``int``."""
    if not _multi_rank():
        return value
    dtype = torch.int64 if isinstance(value, int) else torch.float64
    result = _all_reduce(torch.tensor([value], dtype=dtype), dist.ReduceOp.MAX).item()
    return int(result) if isinstance(value, int) else float(result)
