"""Text from a dataset must never become a control token: a question holding ``<|im_end|>\\n<|im_start|>user`` would
otherwise end the user's turn and forge another when the rendered prompt is tokenized.

``data.special_tokens_in_text`` chooses: ``refuse`` such a row (one line naming it), or ``split`` it: the template is
rendered with placeholders where the row's text goes, the template's pieces are tokenized as before (its control
tokens stay control tokens) and the row's text with the tokenizer's ``split_special_tokens=True`` (the string
``<|im_end|>`` becomes the ordinary tokens of its characters). Rows without such strings are tokenized exactly as
they always were (the whole rendered prompt at once).
"""

from __future__ import annotations

import re
from typing import Any

from transformers import PreTrainedTokenizerBase

_PLACEHOLDER = "\x00rlvr-text-{}\x00"
_PLACEHOLDER_RE = re.compile("\x00rlvr-text-(\\d+)\x00")


def special_strings(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """The text of every special token the tokenizer would parse out of a string (its special tokens and the added
    tokens marked special), longest first."""
    found = set(getattr(tokenizer, "all_special_tokens", []) or [])
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            found.add(str(token))
    return sorted((s for s in found if s), key=len, reverse=True)


def find_special(text: str, specials: list[str]) -> str | None:
    """The special-token string that occurs first in ``text`` (the longest one at that place), or None."""
    found = [(text.find(s), -len(s), s) for s in specials if s in text]
    return min(found)[2] if found else None


def with_placeholders(texts: list[str]) -> tuple[list[str], dict[str, str]]:
    """Placeholders standing for ``texts`` in a rendered template, and the map back to the texts."""
    marks = [_PLACEHOLDER.format(k) for k in range(len(texts))]
    return marks, dict(zip(marks, texts, strict=True))


def tokenize_split(tokenizer: PreTrainedTokenizerBase, rendered: str, texts: dict[str, str]) -> list[int]:
    """Token ids of ``rendered`` (a template rendered with :func:`with_placeholders`' marks): the template's pieces as
    the tokenizer parses them, each placeholder's text with special tokens split into ordinary ones.

    Raises:
        ValueError: a placeholder of ``texts`` is missing from ``rendered`` (the template dropped the text).
    """
    ids: list[int] = []
    pos = 0
    seen = set()
    for m in _PLACEHOLDER_RE.finditer(rendered):
        if rendered[pos:m.start()]:
            ids += tokenizer(rendered[pos:m.start()], add_special_tokens=False)["input_ids"]
        ids += tokenizer(texts[m.group(0)], add_special_tokens=False, split_special_tokens=True)["input_ids"]
        seen.add(m.group(0))
        pos = m.end()
    if rendered[pos:]:
        ids += tokenizer(rendered[pos:], add_special_tokens=False)["input_ids"]
    missing = set(texts) - seen
    if missing:
        raise ValueError(f"the prompt template dropped {len(missing)} piece(s) of the row's text")
    return ids


def row_texts(row: dict[str, Any], fields: list[str]) -> list[tuple[str, str]]:
    """``(field, text)`` of the row's text fields among ``fields`` (what a template puts in the prompt)."""
    return [(f, row[f]) for f in fields if f and isinstance(row.get(f), str)]
