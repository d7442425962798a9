"""The server side of the ``file`` weight transfer: a vLLM weight-transfer engine that loads the trainer's weights from
safetensors files in a folder both sides see (``/dev/shm`` on one machine: shared memory).

vLLM 0.32 ships weight-transfer engines for GPUs only (``nccl``: a broadcast; ``ipc``: CUDA IPC handles). This one
gives its CPU backend, and any machine without a GPU path between trainer and server, the same protocol behind the
same HTTP routes (``/init_weight_transfer_engine``, ``/start_weight_update``, ``/update_weights``,
``/finish_weight_update``): only the data moves through files instead of NCCL or IPC.

- ``init_info``: ``{"folder": "/dev/shm/rlvr-weights-..."}`` -- where the trainer writes; it must exist here.
- ``start_weight_update``: vLLM's layerwise reload starts (the weights arrive in checkpoint format).
- ``update_info``: ``{"file": "update-3-0.safetensors", "names": [...]}`` -- one chunk: a file name inside the folder
  (a bare name; anything else is refused) and the tensors it holds, loaded with the model's ``load_weights``.
- ``finish_weight_update``: the layerwise reload finishes (kernel-format processing), and output layers tied to the
  input embedding are processed again (:func:`rlvr.rollout.vllm_engine.refresh_tied_output_layers`: on the CPU backend
  the lm_head keeps a packed copy of the embedding that the reload would otherwise leave stale).

The trainer deletes each file once ``/update_weights`` returns. The engine is registered with vLLM's
``WeightTransferEngineFactory`` under :data:`BACKEND` when this module is imported, which happens inside the vLLM
worker process because ``rlvr serve`` names :class:`FileTransferWorkerExtension` as vLLM's ``--worker-extension-cls``
(vLLM imports that class in every worker before it builds the weight-transfer engine, whatever the process start
method). Sources: ``vllm/distributed/weight_transfer/ipc_engine.py`` (the engine this one mirrors), ``base.py`` and
``factory.py`` there, ``vllm/v1/worker/worker_base.py`` (the worker extension).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

BACKEND = "rlvr_file"
"""The name of the engine in vLLM's registry (``--weight-transfer-config '{"backend": "rlvr_file"}'``)."""


@dataclass
class FileTransferInitInfo(WeightTransferInitInfo):
    """Where the trainer writes its weight files."""

    folder: str


@dataclass
class FileTransferUpdateInfo(WeightTransferUpdateInfo):
    """One chunk of an update: a safetensors file in the folder and the names of the tensors it holds."""

    file: str
    names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.file or Path(self.file).name != self.file or self.file in (".", ".."):
            raise ValueError(f"update_info.file must be a bare file name inside the transfer folder, got {self.file!r}")


class FileWeightTransferEngine(WeightTransferEngine[FileTransferInitInfo, FileTransferUpdateInfo]):
    """Loads checkpoint-format weights from safetensors files under vLLM's layerwise reload (see the module)."""

    init_info_cls = FileTransferInitInfo
    update_info_cls = FileTransferUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.folder: Path | None = None

    def init_transfer_engine(self, init_info: FileTransferInitInfo) -> None:
        """Record the folder.

        Raises:
            ValueError: the folder does not exist on this machine (the trainer and the server must share it).
        """
        folder = Path(init_info.folder)
        if not folder.is_dir():
            raise ValueError(f"weight transfer folder {folder} does not exist on the server's machine: the file "
                             "transfer needs a folder both the trainer and the server see (rollout.servers."
                             "transfer_folder), or use weight_transfer nccl between GPUs")
        self.folder = folder

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        """Load one chunk; the base class's device synchronisation is skipped on CPU (no accelerator to wait for)."""
        self.receive_weights(self.parse_update_info(update_info))
        if self.device.type != "cpu":
            torch.accelerator.synchronize()

    def receive_weights(self, update_info: FileTransferUpdateInfo) -> None:
        """Read the chunk's file and hand its tensors to the model's ``load_weights``.

        Raises:
            RuntimeError: no ``/init_weight_transfer_engine`` call yet.
            ValueError: the file holds other tensors than ``names`` says.
        """
        from safetensors.torch import load_file
        from vllm.model_executor.model_loader.mtp_validation import disable_mtp_completeness_check

        if self.folder is None:
            raise RuntimeError("update_weights before init_weight_transfer_engine: the transfer folder is unknown")
        tensors = load_file(str(self.folder / update_info.file), device=str(self.device))
        if update_info.names and sorted(tensors) != sorted(update_info.names):
            raise ValueError(f"{update_info.file} holds {len(tensors)} tensors, not the {len(update_info.names)} "
                             f"named in update_info (first missing: "
                             f"{sorted(set(update_info.names) - set(tensors))[:1]})")
        order = update_info.names or list(tensors)
        with disable_mtp_completeness_check():
            self.model.load_weights((name, tensors[name]) for name in order)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        from rlvr.rollout.vllm_engine import refresh_tied_output_layers

        finalize_layerwise_reload(self.model, self.model_config)
        refresh_tied_output_layers(self.model)

    def shutdown(self) -> None:
        self.folder = None


def register() -> None:
    """Add the engine to vLLM's registry under :data:`BACKEND` (once; a second call does nothing)."""
    try:
        WeightTransferEngineFactory.register_engine(BACKEND, FileWeightTransferEngine)
    except ValueError:  # already registered (the module imported twice under another name)
        pass


register()


class FileTransferWorkerExtension:
    """Named as vLLM's ``--worker-extension-cls`` by ``rlvr serve`` so that vLLM imports this module in its worker
    process, which registers :class:`FileWeightTransferEngine` there. It adds nothing to the worker."""
