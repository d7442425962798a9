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
from rlvr.data.sources import DataError
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
    """Split, render and tokenize every prompt (``add_special_tokens=False``: the template already has them)."""
    train_rows, eval_rows, shots = split_rows(rows, cfg, seed)

    def prompts(split: list[dict[str, Any]]) -> list[Prompt]:
        texts = [render_prompt(r, tokenizer, cfg, shots) for r in split]
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        return [Prompt(i, r, t, list(x)) for i, (r, t, x) in enumerate(zip(split, texts, ids, strict=True))]

    return PromptSet(train=prompts(train_rows), eval=prompts(eval_rows), shots=shots)
