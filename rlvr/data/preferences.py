"""Preference data, the format ``rlvr rm train`` and ``rlvr dpo`` read: JSONL rows grouped by prompt, each group a
list of responses and the pairs ranked among them.

Two row formats (both may appear in one file):

- ``{"prompt": P, "chosen": A, "rejected": B}``: one pair, A preferred.
- ``{"prompt": P, "responses": [A, B, C, ...]}``: K responses ranked best first; all K(K-1)/2 pairs are formed.

A prompt is text (taken as it is: ``rlvr rm pairs`` writes the rendered chat prompt) or, for ``rlvr dpo``, a
conversation (a list of ``{"role", "content"}`` messages); a response is text or a list of assistant messages. Rows
with the same prompt are merged into one :class:`PreferenceGroup`, and a response that recurs is kept once, so a
prompt's responses go through the model in one forward pass each and sit in the same batch as their pairs.

Errors: :class:`rlvr.data.sources.DataError` naming the file, the line and what was expected.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.data.sources import DataError, _read_jsonl

Text = str | list[dict[str, Any]]
"""A prompt or response: text, or a list of chat messages."""


@dataclass
class PreferenceGroup:
    """One prompt's responses and the preferences among them."""

    prompt: Text
    responses: list[Text] = field(default_factory=list)
    pairs: list[tuple[int, int]] = field(default_factory=list)
    """(chosen index, rejected index) into ``responses``."""
    row: dict[str, Any] = field(default_factory=dict)
    """The first row of this prompt (its other fields, e.g. a gold ``answer``, for a generation eval)."""

    def add_response(self, text: Text) -> int:
        """Index of ``text`` in ``responses`` (appended when new)."""
        try:
            return self.responses.index(text)
        except ValueError:
            self.responses.append(text)
            return len(self.responses) - 1


def _text(row: dict[str, Any], key: str, where: str) -> Text:
    value = row[key]
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        return value
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: {key!r} must be a non-empty string or a list of chat messages, got {value!r:.120}")
    return value


def parse_rows(rows: list[dict[str, Any]], where: str) -> list[PreferenceGroup]:
    """Group preference rows by prompt (first-seen order).

    Raises:
        DataError: no rows; a row with neither ``chosen``/``rejected`` nor ``responses`` (or without ``prompt``); a
            pair whose chosen and rejected are identical; a ranked list with fewer than 2 or repeated responses.
    """
    if not rows:
        raise DataError(f"{where} holds no rows: a reward model needs preference pairs")
    groups: dict[str, PreferenceGroup] = {}
    for lineno, row in enumerate(rows, 1):
        at = f"{where} row {lineno}"
        has_pair = "chosen" in row and "rejected" in row
        if "prompt" not in row or not (has_pair or "responses" in row):
            raise DataError(f"{at}: expected the fields 'prompt' + 'chosen' + 'rejected', or 'prompt' + 'responses' "
                            f"(ranked best first); its fields are {sorted(row)}")
        prompt = row["prompt"]
        if not (isinstance(prompt, str) or (isinstance(prompt, list) and prompt)):
            raise DataError(f"{at}: 'prompt' must be a string or a list of chat messages, got {type(prompt).__name__}")
        key = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)
        group = groups.setdefault(key, PreferenceGroup(prompt, row=row))
        if has_pair:
            chosen, rejected = _text(row, "chosen", at), _text(row, "rejected", at)
            if chosen == rejected:
                raise DataError(f"{at}: 'chosen' and 'rejected' are identical ({chosen!r:.80}); a pair needs two "
                                f"different responses")
            ranked = [chosen, rejected]
        else:
            ranked = row["responses"]
            if not isinstance(ranked, list) or len(ranked) < 2:
                raise DataError(f"{at}: 'responses' must be a list of at least 2 responses ranked best first, got "
                                f"{ranked!r:.120}")
            ranked = [_text({"responses": r}, "responses", at) for r in ranked]
            if len({json.dumps(r, sort_keys=True) for r in ranked}) != len(ranked):
                raise DataError(f"{at}: 'responses' holds the same response twice; a ranking needs distinct ones")
        idx = [group.add_response(r) for r in ranked]
        for a in range(len(idx)):
            for b in range(a + 1, len(idx)):
                if (idx[a], idx[b]) not in group.pairs:
                    group.pairs.append((idx[a], idx[b]))
    return list(groups.values())


def load_preference_groups(path: str | Path, searched: tuple[str, ...] = ()) -> list[PreferenceGroup]:
    """Read a JSONL file of preference rows into groups (see :func:`parse_rows`); ``searched``: the folders a recipe's
    relative path was looked up in, named when the file is missing. Raises DataError."""
    path = Path(path).expanduser()
    if not path.is_file():
        where = f" (looked in {' and '.join(searched)})" if searched else ""
        raise DataError(f"preference file not found: {path}{where}")
    return parse_rows(_read_jsonl(path), str(path))


def split_groups(groups: list[PreferenceGroup], eval_fraction: float, seed: int
                 ) -> tuple[list[PreferenceGroup], list[PreferenceGroup]]:
    """(train, eval) by prompt: a seeded shuffle, ``eval_fraction`` of the prompts held out (at least one when > 0).

    Raises:
        DataError: fewer than 2 prompts when a held-out split is asked for.
    """
    if eval_fraction == 0:
        return list(groups), []
    if len(groups) < 2:
        raise DataError(f"data.eval_fraction={eval_fraction} needs at least 2 distinct prompts, the data has "
                        f"{len(groups)}; give data.eval_source instead")
    order = list(groups)
    random.Random(seed).shuffle(order)
    n_eval = max(1, round(eval_fraction * len(order)))
    return order[n_eval:], order[:n_eval]
