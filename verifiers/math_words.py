"""Whole numbers written in English words: ``seven``, ``twenty-one``, ``one hundred and five``.

An answer that is nothing but such a number is that number (``\\boxed{seven}`` for ``7``); a word inside prose
is left alone. Covers 0 to 999,999 (``thousand`` and ``hundred`` as multipliers); anything else is ``None``.
"""

from __future__ import annotations

import re

_UNITS = {
    word: n
    for n, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen".split()
    )
}
_TENS = {word: 10 * n for n, word in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
_TOKEN = re.compile(r"[a-z]+")


def number_from_words(text: str) -> int | None:
    """The whole number ``text`` spells out, or ``None`` when it is anything else.

    ``"Seven"`` -> 7, ``"twenty-one"`` -> 21, ``"one hundred and five"`` -> 105, ``"two thousand twenty"``
    -> 2020; ``"seven apples"``, ``"one or two"``, ``""`` -> ``None``.
    """
    words = _TOKEN.findall(text.lower())
    if not words or re.sub(r"[a-z\s\-]", "", text.lower().strip().rstrip(".")):
        return None  # something other than words, spaces and hyphens
    words = [w for w in words if w != "and"]
    total, current, seen = 0, 0, False
    for word in words:
        if word in _UNITS:
            if current % 10 or 0 < current % 100 < 20:
                return None  # "seven eight", "ten seven"
            current += _UNITS[word]
        elif word in _TENS:
            if current % 100:
                return None  # "five twenty"
            current += _TENS[word]
        elif word == "hundred":
            if not 0 < current < 10:
                return None
            current *= 100
        elif word == "thousand":
            if not 0 < current < 1000 or total:
                return None
            total, current = current * 1000, 0
        else:
            return None
        seen = True
        if word == "zero" and len(words) > 1:
            return None
    return total + current if seen else None
