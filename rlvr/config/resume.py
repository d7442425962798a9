"""Resuming a run: the recipe given now against the run's own ``recipe.resolved.yaml``, key by key."""

from __future__ import annotations

import contextlib
from typing import Any

import yaml
from pydantic import BaseModel

from rlvr.config.schema import Recipe, RecipeError, read_old_advantage_type


def flatten_keys(tree: dict, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists (e.g. ``verifiers``) stay whole values."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten_keys(value, name + "."))
        else:
            out[name] = value
    return out


def recipe_changes(saved: dict, current: dict) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose value differs between two resolved recipes (``model_dump(mode="json")`` dicts), with
    ``(saved, current)`` values; a key present in one only is compared against ``None``."""
    a, b = flatten_keys(saved), flatten_keys(current)
    return {k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


AUTO_KEYS = ("rollout.engine", "trainer.precision", "model.lora.vllm_adapter", "algorithm.critic.lora.vllm_adapter")
"""Keys whose ``auto`` value is resolved at start; on resume, ``auto`` matches whatever the run resolved it to."""

RESTORED_FROM_CHECKPOINT = ("optim.lr", "optim.betas", "optim.weight_decay")
"""Keys a resumed run takes from the checkpoint's optimizer and LR-scheduler state, whatever the recipe says."""


def _with_new_keys(saved: dict, cls: type[BaseModel] = Recipe) -> dict:
    """The saved recipe read by this version's schema, so keys added since the run was written take their defaults on
    both sides (a run of an older rlvr resumes unless the recipe changes a key); the saved dict as it is when this
    schema no longer reads it."""
    try:
        return cls.model_validate(saved).model_dump(mode="json")
    except (ValueError, TypeError):
        return saved


def check_resumed_recipe(saved_yaml: str, recipe: BaseModel, allow_changed: list[str] | tuple[str, ...] = ()) -> None:
    """Refuse to resume a run with a recipe that differs from the run's own ``recipe.resolved.yaml``.

    Args:
        saved_yaml: the run's ``recipe.resolved.yaml``. recipe: the recipe given now.
        allow_changed: dotted keys (or sections: ``optim`` allows every ``optim.*`` key) that may differ.
    Raises:
        RecipeError: listing every changed key that is not allowed, with both values; or a change to a key in
            :data:`RESTORED_FROM_CHECKPOINT` (allowed or not: the checkpoint would silently override it).
    """
    saved = yaml.safe_load(saved_yaml) or {}
    if isinstance(saved.get("algorithm"), dict):  # a run resolved before algorithm.name was the one key
        with contextlib.suppress(ValueError):  # a contradiction is left for the comparison to name
            saved["algorithm"] = read_old_advantage_type(saved["algorithm"])
    saved = _with_new_keys(saved, type(recipe))
    changes = recipe_changes(saved, recipe.model_dump(mode="json"))
    # ``auto`` resolves per machine and the run records what it chose (``rollout.engine: hf``): auto matches it
    changes = {k: (old, new) for k, (old, new) in changes.items() if not (k in AUTO_KEYS and new == "auto")}
    overridden = [k for k in changes if k in RESTORED_FROM_CHECKPOINT]
    if overridden:
        raise RecipeError(f"--resume: {', '.join(overridden)} changed, but a resumed run takes them from the "
                          "checkpoint's optimizer and LR-scheduler state (the change would do nothing): start a new "
                          "run to change them")
    allowed = tuple(allow_changed)
    refused = {k: v for k, v in changes.items()
               if not any(k == a or k.startswith(a.rstrip(".") + ".") for a in allowed)}
    if refused:
        lines = "\n".join(f"  {k}: {old!r} -> {new!r}" for k, (old, new) in refused.items())
        flags = " ".join(f"--allow-changed {k}" for k in refused)
        raise RecipeError(f"--resume: the recipe differs from the run's recipe.resolved.yaml in {len(refused)} "
                          f"key(s):\n{lines}\nresume with the run's recipe, or accept the changes with {flags}")
