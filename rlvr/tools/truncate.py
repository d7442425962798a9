"""Bounding a tool answer: cut in the middle to a token budget, with a marker that says how much was cut."""

from __future__ import annotations

from typing import Any

MAX_CHARS_BEFORE_TOKENIZING = 200_000
"""Text beyond this is cut by characters first (a 10 MB print is never tokenized whole)."""


def cut_middle(text: str, max_tokens: int, tokenizer: Any) -> tuple[str, bool]:
    """``text`` if it has at most ``max_tokens`` tokens, else its head and tail around a marker
    ``[... N tokens cut ...]`` (N counted, or estimated from characters for huge text), fitting ``max_tokens``.
    Returns ``(text, was_cut)``."""
    chars_cut = 0
    if len(text) > MAX_CHARS_BEFORE_TOKENIZING:
        half = MAX_CHARS_BEFORE_TOKENIZING // 2
        chars_cut = len(text) - 2 * half
        text = text[:half] + text[-half:]
    ids = tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)  # as the model sees it
    if len(ids) <= max_tokens and not chars_cut:
        return text, False
    total = len(ids) + (round(chars_cut * len(ids) / max(len(text), 1)) if chars_cut else 0)
    keep = max(max_tokens - 12, 2)  # room for the marker
    head, tail = ids[:keep - keep // 2], ids[len(ids) - keep // 2:]
    marker = f"\n[... {total - len(head) - len(tail)} tokens cut ...]\n"
    return tokenizer.decode(head) + marker + tokenizer.decode(tail), True
