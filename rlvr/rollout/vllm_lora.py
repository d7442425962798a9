"""A LoRA policy in vLLM: the engine keeps the base weights it loaded and serves the policy's current adapter, loaded
alone after each optimizer step (``LoRARequest``), instead of reloading merged full weights.

The way is chosen once, when the engine is built (:func:`choose_lora_sync`, ``model.lora.vllm_adapter``): ``adapter``
where vLLM can serve the adapter, ``merged`` (base + (alpha / r) B A reloaded with ``reload_weights``) where it
cannot; ``auto`` takes the adapter on a GPU where vLLM can serve it, else merged weights, saying why in one line.
vLLM cannot serve an adapter whose rank is above its largest ``max_lora_rank``, one on a module its LoRA layers do
not wrap (:func:`servable_modules`), or any adapter on a platform whose LoRA support fails to start or to load the
first adapter. On vLLM's CPU backend it can, but its LoRA layers are plain torch ops that slow generation far more
than the smaller sync saves (measured: ``benchmarks/bench_vllm_lora_sync.py``), so ``auto`` merges there.

After each update :class:`AdapterFolders` writes the adapters (gathered whole under ZeRO-3) with ``peft``'s
``save_pretrained`` into a new folder of a temporary directory, and the engine generates with a new
``LoRARequest(name, id, path)``: vLLM caches adapters by id, and its prefix cache keys blocks by the adapter's name and
path, so a new update needs a new id, name and folder. The previous folder is removed once the next one is loaded;
the directory goes when the engine does, or at exit.

Sources: vLLM ``LoRARequest`` (``vllm/lora/request.py``), ``LoRAConfig.max_lora_rank`` and its allowed ranks
(``vllm/config/lora.py`` ``MaxLoRARanks``), ``LLMEngine.add_lora``/``remove_lora``, the LoRA-wrapped layers
(``vllm/lora/layers``, ``BaseLayerWithLoRA``) and the model's ``packed_modules_mapping``; ``peft``
``PeftModel.save_pretrained``.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from rlvr.models.lora import ADAPTER
from rlvr.rollout.weight_sync import is_zero3_param

VLLM_LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM 0.32 accepts (``vllm/config/lora.py`` ``MaxLoRARanks``); the installed vLLM's own
list is read by :func:`vllm_lora_ranks`."""

LoraSyncWay = Literal["adapter", "merged"]

CPU_BACKEND_REASON = ("vllm_adapter=auto on vLLM's CPU backend, whose LoRA layers run as plain torch ops: with the "
                      "adapter, generation took 2.2x (rank 8) to 14x (rank 64) as long for 0.8-1.0 s less sync a "
                      "step (SmolLM2-135M, benchmarks/RESULTS.md); set model.lora.vllm_adapter=adapter to serve the "
                      "adapter anyway")
"""Why ``auto`` takes merged weights on vLLM's CPU backend (``benchmarks/bench_vllm_lora_sync.py``)."""


class LoraSyncError(ValueError):
    """``model.lora.vllm_adapter: adapter`` where vLLM cannot serve the adapter (the message says why)."""


def vllm_lora_ranks() -> tuple[int, ...]:
    """The ``max_lora_rank`` values the installed vLLM accepts, ascending; :data:`VLLM_LORA_RANKS` where its config
    does not list them (another vLLM version)."""
    import typing

    try:
        from vllm.config.lora import MaxLoRARanks
    except ImportError:
        return VLLM_LORA_RANKS
    ranks = sorted(int(r) for r in typing.get_args(MaxLoRARanks) if isinstance(r, int))
    return tuple(ranks) or VLLM_LORA_RANKS


def vllm_max_lora_rank(rank: int, allowed: Iterable[int] = VLLM_LORA_RANKS) -> int | None:
    """The smallest of vLLM's ``allowed`` ``max_lora_rank`` values that holds a rank-``rank`` adapter (vLLM pads a
    smaller adapter up to it), or ``None`` when ``rank`` is above them all.

    Raises:
        ValueError: ``rank < 1``.
    """
    if rank < 1:
        raise ValueError(f"model.lora.rank must be >= 1, got {rank}")
    return min((r for r in allowed if r >= rank), default=None)


@dataclass(frozen=True)
class LoraSyncChoice:
    """How a LoRA policy reaches vLLM after each update."""

    requested: str
    """``model.lora.vllm_adapter``: ``auto``, ``adapter`` or ``merged``."""
    way: LoraSyncWay
    """``adapter``: a new ``LoRARequest`` per update; ``merged``: merged full weights with ``reload_weights``."""
    reason: str
    """Why this way (printed once when the engine starts)."""
    max_lora_rank: int | None = None
    """The ``max_lora_rank`` vLLM is started with (``adapter`` only)."""

    def fall_back(self, why: str) -> "LoraSyncChoice":
        """The ``merged`` choice after vLLM refused the adapter for ``why``.

        Raises:
            LoraSyncError: the recipe asked for ``adapter`` (only ``auto`` falls back).
        """
        if self.requested == "adapter":
            raise LoraSyncError(f"model.lora.vllm_adapter=adapter, but vLLM cannot serve the adapter: {why}; set "
                                f"model.lora.vllm_adapter to auto (merged weights where the adapter fails) or merged")
        return LoraSyncChoice(self.requested, "merged", f"{why}, so merged weights instead (vllm_adapter=auto)")

    def line(self) -> str:
        """One line for the log: the way used and why."""
        if self.way == "adapter":
            return (f"[rlvr] LoRA policy -> vLLM: the adapter alone, loaded after each update (LoRARequest, "
                    f"max_lora_rank {self.max_lora_rank}; base weights untouched): {self.reason}")
        return f"[rlvr] LoRA policy -> vLLM: merged weights (base + B A alpha / rank) reloaded after each update: " \
               f"{self.reason}"


def choose_lora_sync(requested: str, rank: int, targets: Iterable[str] | None = None,
                     servable: Iterable[str] | None = None,
                     allowed_ranks: Iterable[int] = VLLM_LORA_RANKS, cpu_backend: bool = False) -> LoraSyncChoice:
    """Decide how a LoRA policy reaches vLLM.

    Args:
        requested: ``model.lora.vllm_adapter``: ``auto`` (the adapter where vLLM can serve it on a GPU, else merged
            weights), ``adapter`` (the adapter, or an error) or ``merged``.
        rank: ``model.lora.rank``.
        targets: short names of the policy's adapted modules (``q_proj``, ...); ``None``: not checked.
        servable: short names of the modules vLLM's LoRA layers cover in the engine's model (:func:`servable_modules`,
            known once the engine is built); ``None``: not checked yet.
        allowed_ranks: the ``max_lora_rank`` values vLLM accepts (:func:`vllm_lora_ranks`).
        cpu_backend: vLLM runs on its CPU backend, whose LoRA layers are plain torch ops: ``auto`` takes merged
            weights there (see :data:`CPU_BACKEND_REASON`); ``adapter`` still serves the adapter.
    Returns:
        the choice; ``way == "adapter"`` carries the ``max_lora_rank`` to start vLLM with.
    Raises:
        ValueError: ``requested`` is not one of the three, or ``rank < 1``.
        LoraSyncError: ``requested == "adapter"`` and vLLM cannot serve the adapter.
    """
    if requested not in ("auto", "adapter", "merged"):
        raise ValueError(f"model.lora.vllm_adapter must be 'auto', 'adapter' or 'merged', got {requested!r}")
    allowed = sorted(allowed_ranks)
    max_rank = vllm_max_lora_rank(rank, allowed)
    if requested == "merged":
        return LoraSyncChoice(requested, "merged", "model.lora.vllm_adapter=merged")
    adapter = LoraSyncChoice(requested, "adapter", f"model.lora.vllm_adapter={requested}", max_rank)
    if max_rank is None:
        return adapter.fall_back(f"rank {rank} is above vLLM's largest max_lora_rank ({allowed[-1]})")
    if cpu_backend and requested == "auto":
        return LoraSyncChoice(requested, "merged", CPU_BACKEND_REASON)
    if targets is not None and servable is not None:
        missing = sorted(set(targets) - set(servable))
        if missing:
            return adapter.fall_back(f"vLLM's LoRA layers do not cover {', '.join(missing)} (it wraps "
                                     f"{', '.join(sorted(servable)) or 'no module'} of this model)")
    return adapter


def servable_modules(model: torch.nn.Module) -> list[str]:
    """Short names of the HF modules vLLM's LoRA layers cover in ``model``, a vLLM model started with
    ``enable_lora`` (run inside the engine: ``llm.apply_model``): each LoRA-wrapped module, a packed one
    (``qkv_proj``, ``gate_up_proj``) as the HF modules it packs (``q_proj``, ``k_proj``, ``v_proj``, ...). Sorted."""
    from vllm.lora.layers import BaseLayerWithLoRA

    packed = dict(getattr(model, "packed_modules_mapping", None) or {})
    names: set[str] = set()
    for name, module in model.named_modules():
        if isinstance(module, BaseLayerWithLoRA):
            short = name.rsplit(".", 1)[-1]
            names.update(packed.get(short, [short]))
    return sorted(names)


def policy_targets(model: Any) -> list[str]:
    """Short names of the modules a ``peft`` model's adapter is on (its ``target_modules``), sorted; ``[]`` where the
    config names them by a pattern (a string) rather than a list."""
    targets = model.peft_config[ADAPTER].target_modules
    return sorted(targets) if not isinstance(targets, str) else []


def adapter_tensors(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The full values of ``model``'s adapters (``lora_A``/``lora_B`` of the trained adapter), by their ``peft``
    parameter names; ZeRO-3 partitions are gathered in one collective (every rank must call this).

    Args:
        model: the ``peft`` model (``A``: (r, d_in), ``B``: (d_out, r) per adapted layer).
        dtype: cast to this dtype (vLLM's weight dtype: it casts adapters to it anyway); ``None`` keeps theirs.
    Returns:
        name -> a tensor the caller may keep (copied out of ZeRO-3's gather buffer, or detached).
    Raises:
        ValueError: ``model`` has no adapter parameter.
    """
    marks = (f".lora_A.{ADAPTER}.", f".lora_B.{ADAPTER}.")
    params = [(n, p) for n, p in model.named_parameters() if any(m in n for m in marks)]
    if not params:
        raise ValueError(f"{type(model).__name__} has no LoRA adapter parameters (lora_A/lora_B.{ADAPTER})")
    partitioned = [p for _, p in params if is_zero3_param(p)]
    if partitioned:
        import deepspeed

        with deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None):
            return {n: p.detach().to(dtype or p.dtype, copy=True) for n, p in params}
    return {n: p.detach().to(dtype or p.dtype) for n, p in params}


class AdapterFolders:
    """Adapter folders of one engine under a temporary directory: :meth:`write` makes ``update-N`` for update N,
    :meth:`drop` removes one; the directory is removed by :meth:`close`, when this object is collected, or at exit.

    Args:
        prefix: the temporary directory's name prefix (``rlvr-lora-rank0-``).
        root: where to make it; ``None``: the system's temporary directory.
    """

    def __init__(self, prefix: str = "rlvr-lora-", root: str | Path | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.path), ignore_errors=True)

    def write(self, model: Any, update: int, dtype: torch.dtype | None = None) -> Path:
        """Save ``model``'s adapter (``adapter_config.json``, ``adapter_model.safetensors``) for update ``update``
        with ``peft``'s ``save_pretrained``, its tensors gathered whole (:func:`adapter_tensors`) and cast to
        ``dtype``; returns the folder.

        Raises:
            OSError: the folder cannot be written (disk full); ValueError: ``model`` has no adapter.
        """
        folder = self.path / f"update-{update}"
        model.save_pretrained(str(folder), state_dict=adapter_tensors(model, dtype), safe_serialization=True,
                              selected_adapters=[ADAPTER])
        return folder

    def drop(self, folder: str | Path) -> None:
        """Remove an adapter folder vLLM no longer needs."""
        shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        """Remove the directory and every folder in it."""
        self._cleanup()
