"""The prompt set of a run: rows rendered and tokenized once, split into a fixed held-out eval set and training prompts.

The split is a seeded shuffle of the rows deduplicated by prompt text, so no eval prompt ever appears among the
training prompts (or the few-shot examples), and the same recipe gives the same split on every machine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

from rlvr.config import DataConfig
from rlvr.data.sources import DataError, row_origin
from rlvr.data.special_text import find_special, special_strings, tokenize_split, with_placeholders
from rlvr.data.templates import render_prompt


@dataclass
class Prompt:
    """One prompt: its dataset row, rendered text and token ids."""

    index: int
    """Stable index within its split (keys per-prompt statistics such as solve rates)."""
    row: dict[str, Any]
    text: str
    token_ids: list[int]


@dataclass
class PromptSet:
    train: list[Prompt]
    eval: list[Prompt]
    shots: list[dict[str, Any]]


def split_rows(rows: list[dict[str, Any]], cfg: DataConfig, seed: int
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, eval, few-shot) rows. Raises DataError when too few distinct prompts remain for training."""
    seen: set[str] = set()
    unique = []
    for row in rows:
        key = str(row[cfg.prompt_field])
        if key not in seen:
            seen.add(key)
            unique.append(row)
    random.Random(seed).shuffle(unique)
    if cfg.eval_size and len(unique) <= cfg.eval_size + cfg.few_shot:
        raise DataError(f"data.eval_size={cfg.eval_size} (+ data.few_shot={cfg.few_shot}) needs more distinct prompts "
                        f"than the dataset has: {len(unique)} after removing {len(rows) - len(unique)} duplicates. "
                        f"Lower data.eval_size or use a larger or more varied dataset.")
    n_eval = cfg.eval_size
    eval_rows, rest = unique[:n_eval], unique[n_eval:]
    shots, train_rows = rest[:cfg.few_shot], rest[cfg.few_shot:]
    if cfg.max_train_prompts is not None:
        train_rows = train_rows[:cfg.max_train_prompts]
    if not train_rows:
        raise DataError(f"no training prompts left: {len(unique)} distinct prompts, {n_eval} held out for eval, "
                        f"{len(shots)} used as few-shot examples")
    return train_rows, eval_rows, shots


def build_prompt_set(rows: list[dict[str, Any]], tokenizer: PreTrainedTokenizerBase, cfg: DataConfig,
                     seed: int) -> PromptSet:
    """Split, render and tokenize every prompt (``add_special_tokens=False``: the template already has them).

    A row whose text holds a special token's string (``<|im_end|>``) is refused or split into ordinary tokens, by
    ``data.special_tokens_in_text`` (:mod:`rlvr.data.special_text`).

    Raises:
        DataError: too few distinct prompts; with ``refuse``, a row (or few-shot example) holding a special token's
            string, named by its file and line.
    """
    train_rows, eval_rows, shots = split_rows(rows, cfg, seed)
    specials = special_strings(tokenizer)
    position = {id(row): i for i, row in enumerate(rows)}  # to name a row of a source without line numbers
    shot_fields = [cfg.prompt_field, cfg.shot_field or cfg.answer_field]

    def special_field(row: dict[str, Any], fields: list[str | None]) -> bool:
        return _special_field(row, position.get(id(row)), fields, specials, cfg)

    shots_special = any(special_field(s, shot_fields) for s in shots)

    def prompts(split: list[dict[str, Any]]) -> list[Prompt]:
        texts = [render_prompt(r, tokenizer, cfg, shots) for r in split]
        ids = [list(x) for x in tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []
        for j, row in enumerate(split):
            if shots_special or special_field(row, [cfg.prompt_field]):
                ids[j] = _split_ids(row, shots, tokenizer, cfg, shot_fields)
        return [Prompt(i, r, t, x) for i, (r, t, x) in enumerate(zip(split, texts, ids, strict=True))]

    return PromptSet(train=prompts(train_rows), eval=prompts(eval_rows), shots=shots)


def _special_field(row: dict[str, Any], index: int | None, fields: list[str | None], specials: list[str],
                   cfg: DataConfig) -> bool:
    """Whether a text field of ``row`` holds a special token's string; with ``refuse`` that is a DataError."""
    for name in fields:
        found = next(filter(None, (find_special(t, specials) for t in _field_texts(row, name))), None)
        if found is None:
            continue
        if cfg.special_tokens_in_text == "refuse":
            raise DataError(f"{row_origin(row, index)}: {name!r} holds {found!r}, the text of a special token of the "
                            f"tokenizer: tokenized as is it would become that control token. Remove it, or set "
                            f"data.special_tokens_in_text: split to keep it as ordinary text")
        return True
    return False


def _split_ids(row: dict[str, Any], shots: list[dict[str, Any]], tokenizer: PreTrainedTokenizerBase,
               cfg: DataConfig, shot_fields: list[str | None]) -> list[int]:
    """``row``'s prompt ids with every piece of dataset text (its question, the few-shot examples) tokenized with
    special tokens split into ordinary ones."""
    texts = _field_texts(row, cfg.prompt_field)
    texts += [t for shot in shots for f in shot_fields for t in _field_texts(shot, f)]
    marks, back = with_placeholders(texts)
    it = iter(marks)
    marked_row = {**row, cfg.prompt_field: _marked(row[cfg.prompt_field], it)}
    marked_shots = [{**shot, **{f: _marked(shot[f], it) for f in shot_fields if f}} for shot in shots]
    return tokenize_split(tokenizer, render_prompt(marked_row, tokenizer, cfg, marked_shots), back)


def _field_texts(row: dict[str, Any], name: str | None) -> list[str]:
    """The dataset text a prompt field holds: its text, or each message's content of a conversation."""
    value = row.get(name) if name else None
    if isinstance(value, list):
        return [str(m["content"]) for m in value]
    return [] if value is None else [str(value)]


def _marked(value: Any, marks: Any) -> Any:
    """``value`` with its text (or each message's content) replaced by the next placeholders of ``marks``."""
    if isinstance(value, list):
        return [{**m, "content": next(marks)} for m in value]
    return next(marks)
