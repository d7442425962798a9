"""LoRA on the policy, built on ``peft``: wrapping a causal LM with adapters (``model.lora``), checking the recipe's
``target_modules`` against the model's linear layers, merging adapters into full weights (for the rollout engine's
generation copy, vLLM's merged reload and ``rlvr export --merge``), and loading a saved adapter folder.

A LoRA layer computes ``W x + s B A x`` with ``A`` (r, d_in), ``B`` (d_out, r) and ``s = alpha / r`` (Hu et al. 2021,
2106.09685; peft's ``LoraLayer.get_delta_weight``). Only ``A`` and ``B`` train; ``W`` stays frozen, so the reference
policy is the same module with its adapters off (``PeftModel.disable_adapter()``).

Sources: peft ``get_peft_model``, ``LoraConfig``, ``PeftModel.disable_adapter``, ``PeftModel.from_pretrained``,
``merge_and_unload``; peft's ``all-linear`` shorthand (every ``nn.Linear`` but the output layer).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from rlvr.config import LoraConfig, ModelConfig
from rlvr.models.loading import ModelLoadError

ADAPTER = "default"
"""peft's name of the one adapter rlvr trains."""
PEFT_PREFIX = "base_model.model."
"""What peft puts in front of the wrapped model's parameter names."""


class LoraTargetError(ModelLoadError):
    """``model.lora.target_modules`` names a module the model does not have, or one that is not a linear layer."""


def is_lora_model(model: Any) -> bool:
    """True for a ``peft`` model (the policy wrapped with adapters)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def output_layer_names(model: torch.nn.Module) -> set[str]:
    """Full module names of the model's input embedding and output layer (never adapted: tied to each other in many
    models, and peft's ``all-linear`` leaves the output layer out too)."""
    names = set()
    for getter in ("get_output_embeddings", "get_input_embeddings"):
        module = getattr(model, getter, lambda: None)()
        if module is not None:
            names.update(n for n, m in model.named_modules() if m is module)
    return names


def linear_module_names(model: torch.nn.Module, exclude: Iterable[str] = ()) -> list[str]:
    """The short names (last part, e.g. ``q_proj``) of the model's ``nn.Linear`` layers that LoRA can adapt, sorted;
    the output layer and the short names in ``exclude`` (a reward model's scalar head) are left out. Works on a
    meta-device model (nothing is read from the weights)."""
    skip = output_layer_names(model)
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, torch.nn.Linear) and name not in skip} - set(exclude))


def check_target_modules(model: torch.nn.Module, cfg: LoraConfig, exclude: Iterable[str] = ()) -> list[str]:
    """The linear layers ``cfg.target_modules`` selects on ``model`` (short names, sorted); ``exclude``: short names
    that are never adapted (a scalar head, trained whole instead).

    Raises:
        LoraTargetError: a listed name that is not one of the model's adaptable linear layers (the message lists
            them), or a model with no linear layer at all.
    """
    linear = linear_module_names(model, exclude)
    if not linear:
        raise LoraTargetError(f"model.lora: {type(model).__name__} has no linear layer that LoRA could adapt")
    if cfg.target_modules == "all-linear":
        return linear
    unknown = [n for n in cfg.target_modules if n not in linear]
    if unknown:
        import difflib

        hints = [f"{n!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(n, linear, 1))
                 else repr(n) for n in unknown]
        raise LoraTargetError(f"model.lora.target_modules: {', '.join(hints)} is not a linear layer of this model "
                              f"(the output layer and embeddings are never adapted); its linear layers: "
                              f"{', '.join(linear)}; or give target_modules: all-linear")
    return sorted(set(cfg.target_modules))


def meta_model(path: str, cfg: ModelConfig) -> torch.nn.Module:
    """The model of ``path``'s config built on the meta device: its module tree without reading or allocating weights
    (for checks before the load, e.g. ``rlvr check``)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(config_folder(path), revision=cfg.revision,
                                        trust_remote_code=cfg.trust_remote_code)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, trust_remote_code=cfg.trust_remote_code)


def apply_lora(model: torch.nn.Module, cfg: LoraConfig, base_name: str | None = None,
               modules_to_save: list[str] | None = None) -> torch.nn.Module:
    """Wrap ``model`` with fresh adapters (``B = 0``, so the wrapped model computes what ``model`` did); only the
    adapters (and the ``modules_to_save``) require gradients afterwards.

    Args:
        model: an HF causal LM (fp32 master weights).
        cfg: the recipe's ``model.lora``.
        base_name: written into the saved ``adapter_config.json`` as ``base_model_name_or_path`` (the recipe's
            ``model.name``, so a saved adapter names a model any machine can resolve).
        modules_to_save: short names of modules trained whole beside the adapters and saved with them (peft's
            ``modules_to_save``: a trainable copy, e.g. a reward model's or critic's scalar head ``score``); never
            adapted. With them the task is peft's ``SEQ_CLS`` (a sequence-classification model), else ``CAUSAL_LM``.
    Returns:
        the ``peft`` model (``PeftModelForCausalLM``, or ``PeftModelForSequenceClassification`` with
        ``modules_to_save``); its ``base_model.model`` is ``model``, whose layers peft changed in place.
    Raises:
        LoraTargetError: see :func:`check_target_modules`.
    """
    import peft

    targets = check_target_modules(model, cfg, exclude=modules_to_save or ())
    peft_cfg = peft.LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, target_modules=targets,
                               bias="none", task_type="SEQ_CLS" if modules_to_save else "CAUSAL_LM",
                               modules_to_save=modules_to_save or None, base_model_name_or_path=base_name)
    wrapped = peft.get_peft_model(model, peft_cfg)
    if base_name is not None:
        wrapped.peft_config[ADAPTER].base_model_name_or_path = base_name
    if getattr(model, "is_gradient_checkpointing", False):
        # non-reentrant checkpointing needs no grad on the inputs; kept for models that fall back to reentrant
        wrapped.enable_input_require_grads()
    return wrapped


def trainable_parameter_count(model: torch.nn.Module) -> int:
    """Parameters that require gradients (the adapters under LoRA); ZeRO-3 partitions counted whole."""
    return sum(int(getattr(p, "ds_numel", p.numel())) for p in model.parameters() if p.requires_grad)


def _lora_scales(model: torch.nn.Module) -> dict[str, tuple[float, bool]]:
    """Full module name (in ``model``'s own naming) -> (scale alpha / r, fan_in_fan_out) of each LoRA layer."""
    from peft.tuners.lora import LoraLayer

    out = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and ADAPTER in module.scaling:
            if ADAPTER in getattr(module, "lora_embedding_A", {}):
                raise LoraTargetError(f"{name}: LoRA on embeddings is not supported (only linear layers)")
            out[name] = (float(module.scaling[ADAPTER]), bool(getattr(module, "fan_in_fan_out", False)))
    return out


def merged_weights(model: torch.nn.Module, named: Iterable[tuple[str, torch.Tensor]],
                   dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """The base model's full weights with the adapters folded in: ``W + s B A`` for each adapted linear layer, the
    other weights as they are, under the base model's own names (``model.layers.0.self_attn.q_proj.weight``).

    Args:
        model: the ``peft`` model (for each layer's scale).
        named: ``(name, full tensor)`` of every parameter of ``model`` in ``model.named_parameters()`` order (e.g.
            :func:`rlvr.rollout.weight_sync.iter_full_weights`, which gathers ZeRO-3 partitions); a layer's base
            weight and adapters come together, so at most one layer's tensors are held at a time.
        dtype: cast the results to this dtype (the merge itself runs in fp32); ``None`` keeps each weight's dtype.
    Yields:
        ``(name, tensor)``; merged weights are new tensors, the others are what ``named`` gave.
    """
    scales = _lora_scales(model)
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, value in named:
        short = name[len(PEFT_PREFIX):] if name.startswith(PEFT_PREFIX) else name
        layer = next((m for m in (short.split(".base_layer.")[0], short.split(".lora_A.")[0],
                                  short.split(".lora_B.")[0]) if m != short), None)
        if layer is None or f"{PEFT_PREFIX}{layer}" not in scales and layer not in scales:
            yield short, value if dtype is None or value.dtype == dtype else value.to(dtype)
            continue
        if ".base_layer." in short:
            tail = short.split(".base_layer.", 1)[1]
            if tail != "weight":  # the base layer's bias: unchanged by LoRA
                yield f"{layer}.{tail}", value if dtype is None or value.dtype == dtype else value.to(dtype)
                continue
            key = "W"
        elif f".lora_A.{ADAPTER}." in short:
            key = "A"
        elif f".lora_B.{ADAPTER}." in short:
            key = "B"
        else:
            continue  # another adapter's tensors: not part of the merged model
        parts = pending.setdefault(layer, {})
        parts[key] = value
        if len(parts) == 3:
            del pending[layer]
            scale, fan_in_fan_out = scales.get(f"{PEFT_PREFIX}{layer}", scales.get(layer))
            delta = parts["B"].float() @ parts["A"].float() * scale
            if fan_in_fan_out:
                delta = delta.T
            merged = parts["W"].float() + delta
            yield f"{layer}.weight", merged.to(dtype or parts["W"].dtype)
    if pending:
        raise RuntimeError(f"LoRA layers without their base weight or both adapters: {sorted(pending)[:5]}")


def is_adapter_folder(path: str | Path) -> bool:
    """True for a folder holding a saved adapter (``adapter_config.json``), e.g. a LoRA run's ``checkpoints/step-N/
    model``."""
    return (Path(path) / "adapter_config.json").is_file()


def adapter_base_name(path: str | Path) -> str:
    """The base model a saved adapter was trained on (its ``base_model_name_or_path``).

    Raises:
        ModelLoadError: the folder's ``adapter_config.json`` names no base model.
    """
    cfg = json.loads((Path(path) / "adapter_config.json").read_text())
    base = cfg.get("base_model_name_or_path")
    if not base:
        raise ModelLoadError(f"{path}/adapter_config.json names no base model (base_model_name_or_path)")
    return str(base)


def config_folder(path: str | Path) -> str:
    """Where ``path``'s model config is: the base model's folder (or hub name) for a saved adapter folder, which holds
    no ``config.json``; ``path`` itself otherwise.

    Raises:
        ModelLoadError: an adapter folder whose base model cannot be resolved.
    """
    if not is_adapter_folder(path):
        return str(path)
    from rlvr.models.loading import resolve_model_path

    return resolve_model_path(adapter_base_name(path))


def load_merged_adapter(path: str | Path, cfg: ModelConfig, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A plain HF causal LM: the base model a saved adapter names, with the adapter merged into its weights
    (``merge_and_unload``), dropout off.

    Raises:
        ModelLoadError: the base model cannot be resolved or loaded.
    """
    from peft import PeftModel

    from rlvr.models.loading import load_causal_lm, resolve_model_path

    base_cfg = cfg.model_copy(update={"lora": None, "gradient_checkpointing": False})
    base = load_causal_lm(resolve_model_path(adapter_base_name(path)), base_cfg, dtype=dtype)
    merged = PeftModel.from_pretrained(base, str(path)).merge_and_unload()
    if cfg.gradient_checkpointing:
        merged.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        merged.config.use_cache = False
    return merged
