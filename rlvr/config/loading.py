"""Reading a recipe: YAML, ``--set a.b=value`` overrides, the preset expanded under the user's keys, validation with
one error line per problem, and the resolved recipe written back as YAML.

``preset`` (``grpo``, ``dr_grpo``, ``dapo``, ``r1_zero``, ``gspo``, ``cispo``, ``ppo``) expands into explicit keys under
the user's own (the user's values win); ``--set a.b=value`` overrides any key. The resolved recipe, with every default
spelled out, is written into the run directory as ``recipe.resolved.yaml``.

Errors: :class:`rlvr.config.schema.RecipeError` with one line per problem, naming the key (and the closest valid key for
a typo), the bad value and what was expected.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from rlvr.algo.table import ALGORITHMS, CORRECTIONS
from rlvr.config.presets import PRESETS
from rlvr.config.schema import (
    HFSource,
    HumanEvalSource,
    JsonlSource,
    ReasoningGymSource,
    Recipe,
    RecipeError,
    RewardModelRecipe,
    read_old_advantage_type,
)
from rlvr.config.stage_schema import DPORecipe, SFTRecipe, StageRecipe
from rlvr.config.yaml_input import RecipeYAMLError, load_yaml
from rlvr.did_you_mean import closest


def deep_merge(base: dict, override: dict) -> dict:
    """``override`` on top of ``base``; nested dicts merge, everything else (lists included) is replaced."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply ``--set a.b=value`` strings; values are parsed as YAML (``1e-6``, ``true``, ``[1, 2]``).

    Raises:
        RecipeError: an override without ``=`` or with an empty key.
    """
    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise RecipeError(f"--set {item!r}: expected KEY=VALUE, e.g. --set optim.lr=1e-6")
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {} if child is None else child
                if not isinstance(child, dict):
                    raise RecipeError(f"--set {item!r}: {part!r} holds a {type(child).__name__}, not a section")
            node = child
        node[parts[-1]] = _parse_value(text)
    return out


def _parse_value(text: str) -> Any:
    """YAML, plus numbers YAML 1.1 reads as strings (``1e-6``, ``-3E5``)."""
    if not text.strip():
        return None
    try:
        value = load_yaml(text)
    except RecipeYAMLError as exc:
        raise RecipeError(f"--set value {text!r}: {exc}") from None
    if isinstance(value, str):
        for cast in (int, float):
            try:
                return cast(value)
            except ValueError:
                pass
    return value


def _model_at(loc: tuple, root: type[BaseModel]) -> type[BaseModel] | None:
    """The pydantic model class that owns the field at ``loc`` (used to suggest a close key for a typo)."""
    model: Any = root
    for part in loc:
        if isinstance(part, int) or model is None:
            model = getattr(model, "_item_model", None) if model else None
            continue
        fields = getattr(model, "model_fields", {})
        if part not in fields:
            # a discriminated-union tag like 'reasoning_gym' appears in the loc: pick that member
            member = _UNION_MEMBERS.get(part)
            if member is not None:
                model = member
                continue
            return model
        ann = fields[part].annotation
        model = _first_model(ann)
    return model


def _first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def _refuse_bools_as_numbers(raw: Any, model: type[BaseModel] | None, prefix: str) -> None:
    """A YAML ``true``/``false`` where the schema wants a number (pydantic would read ``steps: true`` as 1).

    Raises:
        RecipeError: naming the key.
    """
    if model is None or not isinstance(raw, dict):
        return
    fields = getattr(model, "model_fields", {})
    for key, value in raw.items():
        field = fields.get(key)
        if field is None:
            continue
        dotted = f"{prefix}{key}"
        allowed = _leaf_types(field.annotation)
        if isinstance(value, bool) and bool not in allowed and allowed & {int, float}:
            raise RecipeError(f"{dotted}: expected a number, got {value!r} (a YAML boolean)")
        sub = _first_model(field.annotation)
        if isinstance(value, dict) and "type" in value and value.get("type") in _UNION_MEMBERS:
            sub = _UNION_MEMBERS[value["type"]]
        if isinstance(value, list):
            for i, item in enumerate(value):
                _refuse_bools_as_numbers(item, sub, f"{dotted}.{i}.")
        else:
            _refuse_bools_as_numbers(value, sub, f"{dotted}.")


def _leaf_types(annotation: Any) -> set[Any]:
    """The plain types a field accepts at its top level (``int | None`` -> {int, NoneType}; a Literal: its values')."""
    origin = get_origin(annotation)
    if origin in (Union, UnionType):
        return {t for a in get_args(annotation) for t in _leaf_types(a)}
    if origin is Literal:
        return {type(a) for a in get_args(annotation)}
    if origin is Annotated:
        return _leaf_types(get_args(annotation)[0])
    return {annotation}


_UNION_MEMBERS: dict[str, type[BaseModel]] = {
    "jsonl": JsonlSource, "hf": HFSource, "reasoning_gym": ReasoningGymSource, "humaneval": HumanEvalSource}


def format_validation_error(err: ValidationError, root: type[BaseModel] | None = None) -> str:
    """One line per problem: the dotted key, what is wrong, the value given, and the closest valid key for typos
    (looked up in ``root``, default :class:`Recipe`)."""
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        key = ".".join(str(p) for p in loc if not (isinstance(p, str) and p in _UNION_MEMBERS)) or "(recipe)"
        if e["type"] == "extra_forbidden":
            owner = _model_at(loc[:-1], root or Recipe)
            valid = sorted(getattr(owner, "model_fields", {}))
            close = closest(str(loc[-1]), valid, max_share=0.5)
            hint = ""
            if close:
                suggestion = key.rsplit(".", 1)[0] + "." + close if "." in key else close
                hint = f"; did you mean {suggestion!r}?"
            lines.append(f"unknown key {key!r}{hint} (valid keys here: {', '.join(valid)})")
        elif e["type"] == "value_error":  # a validator's own message, which names the value (and the key, often)
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(msg if not loc or key in msg else f"{key}: {msg}")
        elif e["type"] == "missing":
            lines.append(f"missing required key {key!r}")
        else:
            value = e.get("input")
            shown = repr(value) if not isinstance(value, dict) else "{...}"
            lines.append(f"{key}: {e['msg']} (got {shown})")
    return "\n".join(lines)


def load_recipe_dict(path: str | Path) -> dict:
    """Read a YAML recipe into a dict. Raises RecipeError when missing, unreadable or not a mapping."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe file not found: {path}")
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
    except RecipeYAMLError as exc:
        raise RecipeError(f"{path}: {exc}") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise RecipeError(f"{path}:{line}: not UTF-8 text ({exc.reason})") from None
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: expected a mapping of sections (model, data, rollout, ...), "
                          f"got {type(raw).__name__}")
    return raw


def resolve(raw: dict) -> Recipe:
    """Expand the preset under the user's keys and validate. Raises RecipeError listing every problem."""
    preset = raw.get("preset", "none")
    if not isinstance(preset, str):
        raise RecipeError(f"preset: expected one name ({', '.join(PRESETS)}), got {type(preset).__name__} {preset!r}")
    if preset not in PRESETS:
        close = closest(str(preset), PRESETS)
        hint = f"; did you mean {close!r}?" if close else ""
        raise RecipeError(f"unknown preset {preset!r}{hint} (valid: {', '.join(PRESETS)})")
    if isinstance(raw.get("algorithm"), dict):  # the older advantage.type read as algorithm.name, before the preset's
        try:
            raw = {**raw, "algorithm": read_old_advantage_type(raw["algorithm"])}
        except ValueError as err:
            raise RecipeError(str(err)) from None
    merged = deep_merge(PRESETS[preset], raw)
    _refuse_bools_as_numbers(merged, Recipe, "")
    _refuse_preset_contradiction(preset, raw)
    try:
        return Recipe.model_validate(merged)
    except ValidationError as err:
        raise RecipeError(format_validation_error(err)) from None


def _refuse_preset_contradiction(preset: str, raw: dict) -> None:
    """``algorithm.name`` in the recipe against the algorithm its preset sets, where their baselines differ (e.g.
    ``preset: grpo`` with ``algorithm.name: ppo``: GRPO's settings would be given to an algorithm with a critic); a
    preset of one group-relative algorithm with another's name is fine (``preset: dapo``, ``name: rloo``). Named here,
    where the preset is known. Raises RecipeError."""
    name = raw["algorithm"].get("name") if isinstance(raw.get("algorithm"), dict) else None
    preset_name = PRESETS[preset].get("algorithm", {}).get("name")
    if not (isinstance(name, str) and name in ALGORITHMS and preset_name):
        return
    mine, theirs = ALGORITHMS[name], ALGORITHMS[preset_name]
    if mine.baseline != theirs.baseline:
        fitting = [p for p, body in PRESETS.items()
                   if ALGORITHMS[body.get("algorithm", {}).get("name", "grpo")].baseline == mine.baseline
                   and p != "none"]
        instead = " or ".join(f"preset: {p}" for p in fitting) or "preset: none"
        raise RecipeError(f"algorithm.name={name!r} contradicts preset {preset!r}, which sets algorithm.name="
                          f"{preset_name!r} (a {theirs.baseline} baseline, {name} has a {mine.baseline} one): use "
                          f"{instead}, or drop algorithm.name")


RECIPE_KINDS: dict[str | None, tuple[str, str]] = {
    None: ("rlvr train", "a policy recipe (model, data, rollout, verifiers, ...)"),
    "reward_model": ("rlvr rm train", "a reward-model recipe (kind: reward_model)"),
    "sft": ("rlvr sft", "an SFT recipe (kind: sft)"),
    "dpo": ("rlvr dpo", "a preference recipe (kind: dpo)"),
}
"""A recipe's top-level ``kind`` (none for an RL policy recipe) -> the command that trains it, and what it is."""

_POLICY_KEYS = {"preset", "rollout", "reward", "curriculum", "reward_model", "sandbox"}
"""Top-level keys only an RL policy recipe has (a recipe without ``kind`` that holds none of them is not named as
one: validation then says what is missing)."""


def _refuse_wrong_kind(path: str | Path, raw: dict, want: str | None) -> None:
    """A recipe handed to the command of another kind: name the command it is for. Raises RecipeError."""
    kind = raw.get("kind")
    if kind is not None and kind not in RECIPE_KINDS:
        kinds = ", ".join(repr(k) for k in RECIPE_KINDS if k)
        close = closest(str(kind), [k for k in RECIPE_KINDS if k])
        hint = f"; did you mean {close!r}?" if close else ""
        raise RecipeError(f"{path}: unknown kind {kind!r}{hint} (valid: {kinds}, or no kind for an RL recipe)")
    if kind == want:
        return
    command, what = RECIPE_KINDS[want]
    if kind is not None:
        other, other_what = RECIPE_KINDS[kind]
        raise RecipeError(f"{path} is {other_what}: train it with `{other} {path}`; `{command}` takes {what}")
    policy_keys = sorted(set(raw) & (_POLICY_KEYS | ({"verifiers", "algorithm", "optim", "trainer", "eval"}
                                                     if want == "reward_model" else set())))
    if policy_keys:
        raise RecipeError(f"{path} is a policy recipe (it has {', '.join(policy_keys)}): train it with `rlvr "
                          f"train {path}`; `{command}` takes {what}")
    if want is not None:  # otherwise validation says what is missing (kind)
        raise RecipeError(f"{path}: no kind: {want!r}; `{command}` takes {what}")


def anchor_data_paths(recipe: Recipe | RewardModelRecipe | StageRecipe, recipe_path: str | Path) -> None:
    """Resolve the recipe's relative data files (``data.source.path``; ``data.eval_source.path`` of a reward-model
    recipe) as its ``module:function`` verifiers are: in the recipe's folder first, then in the working directory
    (where a ``--set`` path given on the command line is usually meant). A file found becomes its absolute path; a
    file found nowhere keeps its path and the folders looked in, for the data error to name."""
    folders = list(dict.fromkeys([Path(recipe_path).resolve().parent, Path.cwd().resolve()]))
    data = recipe.data
    for source in (data.source, getattr(data, "eval_source", None)):
        if not isinstance(source, JsonlSource):
            continue
        path = Path(source.path).expanduser()
        if path.is_absolute():
            continue
        found = next((folder / path for folder in folders if (folder / path).is_file()), None)
        if found is not None:
            source.path = os.path.normpath(found)
        else:
            source._searched = tuple(str(f) for f in folders)


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Load, apply ``--set`` overrides, expand the preset, validate, resolve relative data files
    (:func:`anchor_data_paths`). Raises RecipeError (also for a reward-model recipe, naming ``rlvr rm train``)."""
    raw = load_recipe_dict(path)
    _refuse_wrong_kind(path, raw, None)
    recipe = resolve(apply_overrides(raw, overrides or []))
    anchor_data_paths(recipe, path)
    return recipe


def describe_algorithm(recipe: Recipe) -> str:
    """One line naming what a resolved recipe trains with (``rlvr config show`` prints it above the YAML), e.g.
    ``algorithm ppo (preset ppo): advantage gae, critic from the reward model runs/rm, KL k1 in the reward, beta
    0.05, reward from reward model``."""
    a = recipe.algorithm
    row = ALGORITHMS[a.name]
    preset = f" (preset {recipe.preset})" if recipe.preset != "none" else ""
    parts = [f"advantage {row.advantages.rpartition(':')[2].removesuffix('_advantages')}"]
    if row.baseline == "critic":
        rm = recipe.reward_model
        parts.append(f"critic from the reward model {rm.path or rm.paths[0]}" if a.critic.init == "reward_model"
                     and rm is not None else "critic on the policy's trunk")
    parts.append(f"KL {a.kl.estimator} in the {a.kl.placement}, beta {a.kl.beta}" if a.kl.beta > 0 else "no KL penalty")
    if a.correction.type != "none":
        c = a.correction
        settings = ", ".join(f"{k} {getattr(c, k):g}" for k in CORRECTIONS[c.type].settings)
        parts.append(f"correction {c.type} ({settings})")
    parts.append(f"reward from {recipe.reward.source.replace('_', ' ')}")
    return f"algorithm {a.name}{preset}: {', '.join(parts)}"


def dump_recipe(recipe: BaseModel) -> str:
    """The resolved recipe as YAML, every default spelled out (written to ``recipe.resolved.yaml``)."""
    return yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False, width=120)


def load_reward_model_recipe(path: str | Path, overrides: list[str] | None = None) -> RewardModelRecipe:
    """Load a reward-model recipe (``rlvr rm train``), apply ``--set`` overrides, validate. Raises RecipeError."""
    raw = load_recipe_dict(path)
    _refuse_wrong_kind(path, raw, "reward_model")
    raw = apply_overrides(raw, overrides or [])
    try:
        recipe = RewardModelRecipe.model_validate(raw)
    except ValidationError as err:
        raise RecipeError(format_validation_error(err, RewardModelRecipe)) from None
    anchor_data_paths(recipe, path)
    return recipe


def load_stage_recipe(path: str | Path, kind: str, overrides: list[str] | None = None) -> StageRecipe:
    """Load an SFT (``kind: sft``) or preference (``kind: dpo``) recipe, apply ``--set`` overrides, validate, resolve
    its relative data files and chat-template file. Raises RecipeError (also for a recipe of another kind, naming the
    command it is for)."""
    raw = load_recipe_dict(path)
    _refuse_wrong_kind(path, raw, kind)
    raw = apply_overrides(raw, overrides or [])
    cls = SFTRecipe if kind == "sft" else DPORecipe
    _refuse_bools_as_numbers(raw, cls, "")
    try:
        recipe = cls.model_validate(raw)
    except ValidationError as err:
        raise RecipeError(format_validation_error(err, cls)) from None
    anchor_data_paths(recipe, path)
    _read_chat_template(recipe, path)
    return recipe


def _read_chat_template(recipe: StageRecipe, recipe_path: str | Path) -> None:
    """``data.chat_template`` given as a ``.jinja`` file (relative: the recipe's folder, then the working directory)
    becomes the file's text. Raises RecipeError for a ``.jinja`` path that is in neither."""
    value = recipe.data.chat_template
    if value is None or "{" in value or not value.strip().endswith(".jinja"):
        return
    path = Path(value).expanduser()
    folders = [Path(recipe_path).resolve().parent, Path.cwd().resolve()]
    found = path if path.is_absolute() else next((f / path for f in folders if (f / path).is_file()), None)
    if found is None or not found.is_file():
        raise RecipeError(f"data.chat_template: file not found: {value} (looked in "
                          f"{' and '.join(str(f) for f in folders)})")
    recipe.data.chat_template = found.read_text(encoding="utf-8")


def recipe_kind(path: str | Path) -> str | None:
    """The top-level ``kind`` of the recipe at ``path`` (None: an RL policy recipe). Raises RecipeError as
    :func:`load_recipe_dict`."""
    kind = load_recipe_dict(path).get("kind")
    return kind if isinstance(kind, str) else None


def load_any_recipe(path: str | Path, overrides: list[str] | None = None
                    ) -> Recipe | RewardModelRecipe | StageRecipe:
    """A recipe of whatever kind the file's top-level ``kind`` says (none: a policy recipe). Raises RecipeError."""
    kind = recipe_kind(path)
    if kind == "reward_model":
        return load_reward_model_recipe(path, overrides)
    if kind in ("sft", "dpo"):
        return load_stage_recipe(path, kind, overrides)
    return load_recipe(path, overrides)
