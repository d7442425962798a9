"""The recipe reference: every key of a training recipe and of a reward-model recipe, with its type, default and one
line of help, rendered from the schema itself (each field's docstring in :mod:`rlvr.config.schema` is its help), and
the rows of the algorithm table (:mod:`rlvr.algo.table`) that ``algorithm.name``, ``algorithm.policy_loss`` and
``algorithm.correction.type`` name.

    python -m rlvr.config.reference > docs/recipe-reference.md    # make docs does this

``tests/config/test_recipe_reference.py`` fails when ``docs/recipe-reference.md`` differs from what this renders.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from rlvr.algo.table import ALGORITHMS, CORRECTIONS, OBJECTIVES, POLICY_LOSSES, Table, needs
from rlvr.config.schema import AlgorithmConfig, Recipe, RewardModelRecipe
from rlvr.config.stage_schema import DPORecipe, SFTRecipe

HEADER = """# Recipe reference

Every key of a recipe, generated from the schema (`rlvr/config/schema.py`) by `python -m rlvr.config.reference`; do
not edit by hand. Keys are dotted paths (`rollout.group_size`; `verifiers[].name` is a key of each list entry).
`required` means the key has no default. A preset (`preset: grpo`, ...) fills several keys at once; `rlvr config show
RECIPE` prints a recipe with every key filled in, and `--set KEY=VALUE` overrides any key from the command line.
"""


def field_rows(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str, str, str]]:
    """``(key, type, default, help)`` for every field of ``model``, depth first; nested sections are expanded
    (a list of sections as ``key[].field``, a union of sections once per member, named by its ``type``)."""
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        sections = _sections(info.annotation)
        text = _help(info.description)
        if not text and len(sections) == 1:  # a section's own docstring says what it is for
            text = _help(sections[0][0].__doc__)
        if not text and name == "type" and typing.get_origin(info.annotation) is Literal:
            text = "Selects this kind of section."
        table = next((m for m in info.metadata if isinstance(m, Table)), None)
        kind = " | ".join(f'`"{n}"`' for n in table.names()) if table is not None else _type_name(info.annotation)
        yield key, kind, _default(info), text
        for section, is_list in sections:
            label = key + ("[]" if is_list else "")
            tag = section.model_fields.get("type")
            if len(sections) > 1 and tag is not None and tag.default is not PydanticUndefined:
                label += f" (type: {tag.default})"
            yield from field_rows(section, label + ".")


def render() -> str:
    """The whole reference as markdown: training recipes, then SFT, preference and reward-model recipes."""
    out = [HEADER]
    for title, model in (("Training recipes (`rlvr train`, `rlvr check`)", Recipe),
                         ("SFT recipes (`rlvr sft`; `kind: sft`)", SFTRecipe),
                         ("Preference recipes (`rlvr dpo`; `kind: dpo`)", DPORecipe),
                         ("Reward-model recipes (`rlvr rm train`; `kind: reward_model`)", RewardModelRecipe)):
        out += [f"## {title}", "", "| key | type | default | help |", "| --- | --- | --- | --- |"]
        out += [f"| `{k}` | {_cell(t)} | {_cell(d)} | {_cell(h)} |" for k, t, d, h in field_rows(model)]
        out.append("")
    return "\n".join(out + algorithm_rows())


def algorithm_rows() -> list[str]:
    """The algorithm table's rows as markdown: each algorithm with its estimator, baseline, defaults and what it needs
    at the schema's defaults otherwise; each policy loss with the keys it reads."""
    out = ["## Algorithms (`algorithm.name`)", "",
           "The rows of `rlvr/algo/table.py`. *Needs* is at `kl.beta: 0` and one optimizer step per batch; a KL "
           "penalty adds the reference model, several optimizer steps (or the KL in the reward) the policy's old "
           "log-probs.",
           "", "| name | advantages | baseline | normalised over | std_normalize | KL | needs | what it is |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in ALGORITHMS:
        need = needs(AlgorithmConfig(name=row.name))
        held = [what for what, wanted in (("reference", need.reference), ("critic", need.critic),
                                          ("old log-probs", need.old_logprobs)) if wanted] or ["the policy only"]
        out.append(f"| `{row.name}` | `{row.advantages}` | {row.baseline} | {row.normalisation} | "
                   f"`{str(row.std_normalize).lower()}` | {row.kl_estimator} in the {row.kl_placement} | "
                   f"{', '.join(held)} | {_cell(row.summary)} |")
    out += ["", "## Policy losses (`algorithm.policy_loss`)", "", "| name | loss | reads | what it is |",
            "| --- | --- | --- | --- |"]
    for loss in POLICY_LOSSES:
        out.append(f"| `{loss.name}` | `{loss.loss}` | {', '.join(f'`{k}`' for k in loss.settings)} | "
                   f"{_cell(loss.summary)} |")
    out += ["", "## Corrections for stale and mismatched tokens (`algorithm.correction.type`)", "",
            "Each weighs or masks a token's policy-gradient loss by its ratio pi_old / pi_behav (the trainer's "
            "log-prob before the update over the rollout engine's); any but `none` needs the old log-probs. "
            "`docs/server-rollouts.md` compares them.", "", "| name | weights | reads (default) | what it is |",
            "| --- | --- | --- | --- |"]
    for row in CORRECTIONS:
        reads = ", ".join(f"`{k}` ({v:g})" for k, v in row.settings.items()) or "—"
        out.append(f"| `{row.name}` | {f'`{row.weights}`' if row.weights else '—'} | {reads} | {_cell(row.summary)} |")
    out += ["", "## Objectives of SFT and preference recipes (`algorithm.name` of `kind: sft` / `kind: dpo`)", "",
            "The same loop, model workers and checkpoints as the algorithms above, on batches read from data. A "
            "reference is never a resident model: its log-probs are computed once before training and stored in the "
            "run.", "", "| name | kind | loss | data | reads | reference | what it is |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in OBJECTIVES:
        reads = ", ".join(f"`{k}`" for k in row.settings) or "—"
        out.append(f"| `{row.name}` | {row.stage} | `{row.loss}` | {row.data} | {reads} | "
                   f"{'log-probs computed once' if row.reference else 'none'} | {_cell(row.summary)} |")
    return out + [""]


def _sections(annotation: Any) -> list[tuple[type[BaseModel], bool]]:
    """The sections a field holds: ``(model, is_list)`` for a section, a list of sections or a union of them."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, False)]
    if origin in (list, tuple):
        args = typing.get_args(annotation)
        return [(m, True) for m, _ in _sections(args[0])] if args else []
    if origin in (Union, types.UnionType):
        return [s for arg in typing.get_args(annotation) for s in _sections(arg)]
    return []


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if annotation is type(None):
        return "null"
    if origin is Literal:
        return " | ".join(f"`{a!r}`".replace("'", '"') for a in typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        names = list(dict.fromkeys(_type_name(a) for a in typing.get_args(annotation)))
        return "one of the sections below" if names == ["section"] else " or ".join(names)
    if origin in (list, tuple, dict):
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation) if a is not Ellipsis)
        return f"{origin.__name__}[{args}]" if args else origin.__name__
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()
        if isinstance(value, BaseModel):
            return "(section defaults)"
        return f"`{value!r}`"
    if info.default is PydanticUndefined:
        return "required"
    return f"`{info.default!r}`".replace("'", '"') if info.default is not None else "`null`"


_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)\.(?=\s+[A-Z(`\"]|$)")


def _help(doc: str | None) -> str:
    """A docstring in markdown: whole when short, else its first sentence."""
    text = " ".join((doc or "").split()).replace("``", "`")
    if len(text) <= 240:
        return text
    end = _SENTENCE_END.search(text)
    return text[: end.end()] if end else text


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "—"


if __name__ == "__main__":
    print(render(), end="")
