"""The trainer's side of a weight sync to vLLM servers, through vLLM's weight-transfer protocol.

Every transfer runs the same four calls on each server (vLLM's routes, ``VLLM_SERVER_DEV_MODE=1``):
``/init_weight_transfer_engine`` once, then per sync ``/start_weight_update``, one or more ``/update_weights`` and
``/finish_weight_update`` (which also labels the new weights with their version). Only the data path differs:

- ``nccl`` (GPU trainer, servers on other GPUs or nodes): vLLM's ``NCCLTrainerWeightTransferEngine`` broadcasts each
  tensor from the trainer's GPU (NCCL rank 0) to every server worker (ranks 1..; each server's ranks start after the
  previous server's, :class:`FleetSyncClient`);
- ``ipc`` (a server on the trainer's own GPU): vLLM's ``IPCTrainerWeightTransferEngine`` hands CUDA IPC handles of
  the trainer's tensors to the server, which maps them without a copy through the network;
- ``file`` (no GPU path; vLLM's CPU backend): :class:`FileTransfer` writes safetensors files into a folder both sides
  see (``/dev/shm`` on one machine: shared memory) and names each file in ``/update_weights``; the server's engine is
  :mod:`rlvr.serving.file_weight_transfer`.

The ``nccl`` and ``ipc`` paths are vLLM's own trainer engines driven with rlvr's weights (:class:`TrainerWeights`);
they need a GPU and cannot run on a CPU-only machine. The weights are the trainer's full tensors in the servers'
dtype (:func:`trainer_weights`: ZeRO-3 partitions gathered a chunk at a time, as for the in-process engine); a LoRA
policy sends its merged weights (base + (alpha / r) B A under the base model's names), not the adapter.

Every trainer rank runs a sync (ZeRO-3 gathers are collectives); rank 0 alone talks to the servers and sends.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from rlvr.models.lora import is_lora_model, merged_weights
from rlvr.rollout.server_client import ServerClient
from rlvr.rollout.weight_sync import is_zero3_param, iter_full_weights

TORCH_DTYPES = {"torch.float32": torch.float32, "torch.bfloat16": torch.bfloat16, "torch.float16": torch.float16}


def trainer_weights(model: torch.nn.Module, dtype: torch.dtype, chunk_bytes: int = 1 << 30,
                    on_chunk: Callable[[str], None] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's full weights as the servers load them: HF checkpoint names, ``dtype``, ZeRO-3 partitions gathered
    (:func:`rlvr.rollout.weight_sync.iter_full_weights`); a LoRA policy's merged weights under the base names. Every
    rank must run it to the end (the gathers are collectives)."""
    lora = is_lora_model(model)
    weights = iter_full_weights(model, dtype=None if lora else dtype, chunk_bytes=chunk_bytes, on_chunk=on_chunk)
    return merged_weights(model, weights, dtype=dtype) if lora else weights


def weight_metadata(model: torch.nn.Module, dtype: torch.dtype) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    """``(name, dtype, shape)`` of what :func:`trainer_weights` yields, in order, without gathering anything: the same
    walk over meta tensors of the full shapes (a ZeRO-3 parameter's ``ds_shape``)."""
    def meta() -> Iterator[tuple[str, torch.Tensor]]:
        for name, param in model.named_parameters():
            shape = tuple(param.ds_shape) if is_zero3_param(param) else tuple(param.shape)
            yield name, torch.empty(shape, dtype=param.dtype, device="meta")

    lora = is_lora_model(model)
    named = merged_weights(model, meta(), dtype=dtype) if lora else (
        (name, t.to(dtype)) for name, t in meta())
    return [(name, t.dtype, tuple(t.shape)) for name, t in named]


class FleetSyncClient:
    """vLLM's ``VLLMWeightSyncClient`` protocol over several servers: each call goes to every server at once (an NCCL
    broadcast needs all of them inside ``/update_weights`` together) and returns when all have answered.

    Args:
        clients: the servers.
        world_sizes: each server's worker count (NCCL ranks): server i's workers take ranks ``1 + sum(world_sizes[:i])``
            onwards, after the trainer's rank 0.
        timeout_s: limit of each call (``rollout.weight_sync_timeout_s``).
    Raises (from every call): the first server's :class:`rlvr.rollout.server_client.ServerError`.
    """

    def __init__(self, clients: list[ServerClient], world_sizes: list[int], timeout_s: float) -> None:
        self.clients = clients
        self.world_sizes = world_sizes
        self.timeout_s = timeout_s
        self.weight_version: str | None = None
        """The label :meth:`finish_weight_update` gives the new weights when vLLM's engine passes none."""
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(clients)), thread_name_prefix="rlvr-weight-sync")

    def each(self, call: Callable[[int, ServerClient], Any]) -> list[Any]:
        """``call(i, client)`` for every server at once; the results in server order."""
        futures = [self._pool.submit(call, i, c) for i, c in enumerate(self.clients)]
        return [f.result() for f in futures]

    def post_all(self, path: str, what: str, json: Any = None, params: dict[str, Any] | None = None) -> None:
        """``POST path`` on every server at once."""
        self.each(lambda i, c: c.post(path, what, json=json, params=params, timeout_s=self.timeout_s))

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        def init(i: int, client: ServerClient) -> None:
            info = dict(init_info)
            if "rank_offset" in info:  # NCCL: this server's workers after the trainer and the servers before it
                info["rank_offset"] = 1 + sum(self.world_sizes[:i])
            client.post("/init_weight_transfer_engine", "to set up the weight transfer", json={"init_info": info},
                        timeout_s=self.timeout_s)

        self.each(init)

    def start_weight_update(self) -> None:
        self.post_all("/start_weight_update", "to start a weight update")

    def update_weights(self, update_info: Any) -> None:
        infos = update_info if isinstance(update_info, list) else [update_info]
        if any("ipc_handles" in info for info in infos):  # CUDA IPC handles travel pickled (vLLM's HTTP client)
            from vllm.distributed.weight_transfer.clients import _json_safe_update_payload

            update_info = _json_safe_update_payload(update_info)
        self.post_all("/update_weights", "to load new weights", json={"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        version = weight_version if weight_version is not None else self.weight_version
        self.post_all("/finish_weight_update", "to finish a weight update",
                      json={"weight_version": version} if version is not None else None)

    def close(self) -> None:
        self._pool.shutdown(wait=False)


class TrainerWeights:
    """vLLM's ``WeightSource`` over the policy (:func:`trainer_weights`), for its ``nccl`` and ``ipc`` trainer engines:
    each iteration is a fresh pass over the current weights."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype, chunk_bytes: int = 1 << 30) -> None:
        self.model = model
        self.dtype = dtype
        self.chunk_bytes = chunk_bytes
        self.on_chunk: Callable[[str], None] | None = None

    def metadata(self) -> list[Any]:
        from vllm.distributed.weight_transfer.base import ParamMeta

        return [ParamMeta(name, dtype, shape) for name, dtype, shape in weight_metadata(self.model, self.dtype)]

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return trainer_weights(self.model, self.dtype, self.chunk_bytes, self.on_chunk)

    def held_names(self) -> None:
        return None


class VLLMTrainerTransfer:
    """The ``nccl`` or ``ipc`` transfer: vLLM's trainer engine for it, built once (the NCCL rendezvous happens then).

    Args:
        kind: ``nccl`` or ``ipc``.
        fleet: the servers' sync client.
        source: the policy's weights.
        rank: this trainer process's rank (0 sends).
        master_address, master_port: ``nccl``: where the trainer's end of the broadcast group listens (an address the
            servers reach).
    Raises:
        ImportError: vLLM is not installed on the trainer's machine (its trainer engines are vLLM's).
    """

    def __init__(self, kind: str, fleet: FleetSyncClient, source: TrainerWeights, rank: int,
                 master_address: str | None = None, master_port: int | None = None) -> None:
        import vllm.distributed.weight_transfer.factory as factory

        if kind == "nccl":
            from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

            info: Any = NCCLTrainerInitInfo(master_address=master_address, master_port=master_port,
                                            world_size=1 + sum(fleet.world_sizes), rank=rank)
        else:
            from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

            info = IPCTrainerInitInfo(rank=rank)
        self.engine = factory.WeightTransferTrainerFactory.trainer_init(info, client=fleet, source=source)
        self.fleet = fleet

    def send(self, version: str) -> None:
        """Send the current weights (start, update, finish with ``version`` on every server)."""
        self.fleet.weight_version = version
        self.engine.send_weights()

    def close(self) -> None:
        try:
            self.engine.shutdown()
        finally:
            self.fleet.close()


class FileTransfer:
    """The ``file`` transfer: safetensors files in a folder the servers read (see the module).

    Args:
        fleet: the servers' sync client.
        root: where to make the transfer folder; ``None``: ``/dev/shm`` where it exists, else the temporary folder.
        is_sender: this rank writes and calls the servers (rank 0); the others only join the ZeRO-3 gathers.
        chunk_bytes: bytes of tensors per file (one ``/update_weights`` each), bounding the trainer's extra memory.
    """

    def __init__(self, fleet: FleetSyncClient, root: str | Path | None = None, is_sender: bool = True,
                 chunk_bytes: int = 1 << 30) -> None:
        self.fleet = fleet
        self.is_sender = is_sender
        self.chunk_bytes = chunk_bytes
        self.folder: Path | None = None
        if is_sender:
            if root is None:
                root = "/dev/shm" if Path("/dev/shm").is_dir() else None
            self.folder = Path(tempfile.mkdtemp(prefix="rlvr-weights-", dir=root))
            self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.folder), ignore_errors=True)
            fleet.init_weight_transfer_engine({"folder": str(self.folder)})

    def send(self, weights: Iterator[tuple[str, torch.Tensor]], version: str,
             stage: Callable[[str], None] = lambda what: None) -> int:
        """Send ``weights`` as version ``version``; returns the bytes written (0 on other ranks than the sender)."""
        from safetensors.torch import save_file

        if not self.is_sender:
            for _ in weights:  # the gathers are collectives: every rank walks the weights
                pass
            return 0
        assert self.folder is not None
        stage("start_weight_update on the servers")
        self.fleet.start_weight_update()
        chunk: dict[str, torch.Tensor] = {}
        size = written = files = 0

        def flush() -> None:
            nonlocal chunk, size, written, files
            name = f"version-{version}-{files}.safetensors"
            path = self.folder / name
            stage(f"writing {path} ({size / 2**20:.0f} MiB)")
            save_file(chunk, str(path))
            try:
                stage(f"the servers loading {name} (update_weights)")
                self.fleet.update_weights({"file": name, "names": list(chunk)})
            finally:
                path.unlink(missing_ok=True)
            written += size
            files += 1
            chunk, size = {}, 0

        for name, tensor in weights:
            chunk[name] = tensor.detach().to("cpu").contiguous()
            size += tensor.numel() * tensor.element_size()
            if size >= self.chunk_bytes:
                flush()
        if chunk:
            flush()
        stage("finish_weight_update on the servers")
        self.fleet.finish_weight_update(version)
        return written

    def close(self) -> None:
        """Remove the transfer folder (also done when this object is collected, or at exit)."""
        if self.folder is not None:
            self._cleanup()
            self.folder = None
        self.fleet.close()
