"""Whole numbers written in English words: ``seven``, ``twenty-one``, ``one hundred and five``.

An answer that is nothing but such a number is that number (``\\boxed{seven}`` for ``7``); a word inside prose
is left alone. Covers 0 to 999,999,999 (``hundred``, ``thousand`` and ``million`` as multipliers, ``a hundred``),
negative numbers (``negative seven``, ``minus seven``), and simple fractions (``one half``, ``three quarters``:
:func:`fraction_from_words`); anything else is ``None``.
"""

from __future__ import annotations

import re
from fractions import Fraction

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
    sign = 1
    if words[0] in ("negative", "minus") and len(words) > 1:
        sign, words = -1, words[1:]
    if words[0] == "a" and len(words) == 2 and words[1] in _MULTIPLIERS:
        words = ["one", words[1]]  # "a hundred", "a thousand"
    words = [w for w in words if w != "and"]
    if not words or words[0] in _MULTIPLIERS:
        return None
    value = _whole(words)
    return None if value is None or (sign < 0 and value == 0) else sign * value


_MULTIPLIERS = ("hundred", "thousand", "million")
# Fractions in words: "one half", "three quarters", "two-thirds", "a third".
_DENOMINATORS = {
    "half": 2, "halves": 2, "third": 3, "quarter": 4, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10,
}


def fraction_from_words(text: str) -> Fraction | None:
    """A fraction in words (``"one half"`` -> 1/2, ``"three quarters"`` -> 3/4, ``"two-thirds"`` -> 2/3,
    ``"a third"`` -> 1/3), else None. Denominators 2 to 10; the numerator is a whole number in words."""
    words = _TOKEN.findall(text.lower())
    if len(words) < 2 or re.sub(r"[a-z\s\-]", "", text.lower().strip().rstrip(".")):
        return None
    last = words[-1]
    denominator = _DENOMINATORS.get(last) or (_DENOMINATORS.get(last[:-1]) if last.endswith("s") else None)
    if denominator is None:
        return None
    head = words[:-1]
    numerator = 1 if head == ["a"] or head == ["an"] else number_from_words(" ".join(head))
    if numerator is None or numerator <= 0:
        return None
    if (numerator == 1) != (last in ("half", "third", "quarter") or not last.endswith("s")):
        return None  # "one thirds", "two third"
    return Fraction(numerator, denominator)


def is_number_word(word: str) -> bool:
    """True for a word that is part of a number, a fraction or a multiplier (``seven``, ``hundred``, ``halves``)."""
    w = word.lower()
    stem = w[:-1] if w.endswith("s") else w
    return (
        w in _UNITS or w in _TENS or w in _MULTIPLIERS or w in _DENOMINATORS or stem in _DENOMINATORS
        or w in ("negative", "minus", "dozen", "dozens", "score")
    )


def _whole(words: list[str]) -> int | None:
    total, current, seen = 0, 0, False
    millions = 0
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
        elif word == "million":
            if not 0 < current < 1000 or total or millions:
                return None
            millions, current = current * 1_000_000, 0
        else:
            return None
        seen = True
        if word == "zero" and len(words) > 1:
            return None
    return millions + total + current if seen else None
