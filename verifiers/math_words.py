"""Numbers written in English words: ``seven``, ``two hundred fifty-six``, ``three and a half``, ``one quarter``.

An answer that is nothing but such a number is that number (``\\boxed{seven}`` for ``7``), and a final sentence
that states its answer in words gives that number, not an earlier digit (:func:`find_number_phrases`).

Covered (:func:`value_from_words`):

* whole numbers to the billions: ``hundred``, ``thousand``, ``million`` and ``billion`` as multipliers, ``a hundred``,
  ``twelve hundred``, ``and`` anywhere between the parts (``one hundred and five``), hyphens or spaces
  (``twenty-one``); a digit amount times a multiplier (``2.5 million``);
* negatives: ``negative seven``, ``minus seven``;
* fractions: ``one half``, ``a third``, ``three quarters``, ``two-thirds``, ``five twelfths``, ``one hundredth``,
  ``seven thirty-seconds`` (a numerator, then a denominator spelled as an ordinal; ``second`` alone is a unit of
  time, not a denominator);
* mixed numbers: ``three and a half``, ``2 and three quarters``;
* decimals: ``three point one four``.

Anything else is ``None``.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

_UNITS = {
    word: n
    for n, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen".split()
    )
}
_TENS = {word: 10 * n for n, word in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
_TOKEN = re.compile(r"[a-z]+")
_MULTIPLIERS = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}

# Ordinals as denominators: "third" is 3, "twelfth" 12, "twentieth" 20, "hundredth" 100.
_IRREGULAR_ORDINALS = {"first": 1, "second": 2, "third": 3, "fifth": 5, "eighth": 8, "ninth": 9, "twelfth": 12}
_ORDINALS: dict[str, int] = {}
for _word, _n in _UNITS.items():
    if _n >= 3 and _n not in _IRREGULAR_ORDINALS.values():
        _ORDINALS[_word + "th"] = _n  # "fourth", "sixth", "thirteenth"
for _word, _n in _TENS.items():
    _ORDINALS[_word[:-1] + "ieth"] = _n
for _word, _n in _MULTIPLIERS.items():
    _ORDINALS[_word + "th"] = _n
_ORDINALS.update({k: v for k, v in _IRREGULAR_ORDINALS.items() if v >= 3})
_ORDINALS["half"] = 2
_ORDINALS["quarter"] = 4
_PLURAL_DENOMINATORS = {("halves" if w == "half" else w + "s"): n for w, n in _ORDINALS.items()}


def number_from_words(text: str) -> int | None:
    """The whole number ``text`` spells out, or ``None`` when it is anything else.

    ``"Seven"`` -> 7, ``"twenty-one"`` -> 21, ``"one hundred and five"`` -> 105, ``"two thousand twenty"``
    -> 2020, ``"twelve hundred"`` -> 1200; ``"seven apples"``, ``"one or two"``, ``""`` -> ``None``.
    """
    words = _words(text)
    if words is None:
        return None
    sign, words = _sign(words)
    if words and words[0] in ("a", "an") and len(words) == 2 and words[1] in _MULTIPLIERS:
        words = ["one", words[1]]  # "a hundred", "a thousand"
    words = [w for w in words if w != "and"]
    if not words or words[0] in _MULTIPLIERS:
        return None
    value = _whole(words)
    return None if value is None or (sign < 0 and value == 0) else sign * value


def fraction_from_words(text: str) -> Fraction | None:
    """A fraction in words (``"one half"`` -> 1/2, ``"three quarters"`` -> 3/4, ``"two-thirds"`` -> 2/3,
    ``"a third"`` -> 1/3, ``"five twelfths"`` -> 5/12), else None. The numerator is a whole number in words (``a``
    for one), the denominator an ordinal, singular for one and plural otherwise."""
    words = _words(text)
    if words is None or len(words) < 2:
        return None
    sign, words = _sign(words)
    split = _denominator_split(words)
    if split is None:
        return None
    head, denominator, plural = split
    if not head:
        return None
    numerator = 1 if head in (["a"], ["an"]) else number_from_words(" ".join(head))
    if numerator is None or numerator <= 0 or (numerator == 1) == plural:
        return None  # "one thirds", "two third"
    return sign * Fraction(numerator, denominator)


@lru_cache(maxsize=4096)
def value_from_words(text: str) -> Fraction | None:
    """The number ``text`` spells out (whole, fraction, mixed number, decimal; see the module docstring), or None.

    ``"two hundred fifty-six"`` -> 256, ``"three and a half"`` -> 7/2, ``"one quarter"`` -> 1/4, ``"2.5 million"``
    -> 2500000, ``"three point one four"`` -> 157/50; ``"seven apples"`` -> None.
    """
    words = _words(text, digits=True)
    if words is None:
        return None
    sign, body = _sign(words)
    value = _unsigned_value(body)
    return None if value is None else sign * value


def find_number_phrases(text: str) -> list[tuple[int, int, Fraction]]:
    """Numbers in words inside prose: ``(start, end, value)`` of each longest phrase :func:`value_from_words` reads,
    in order (``"we get twelve apples"`` -> the span of ``twelve``, 12). A lone ``one`` counts only where it ends
    its sentence or follows ``is``/``are``/``=`` ("each one is red" names no number), and a number after a
    determiner ("the three conditions", "these two") names things rather than states a result; a bare digit is not
    a phrase (a digit amount counts only with a multiplier or fraction words: ``2.5 million``, ``3 and a half``).
    The work is bounded: runs of at most ``_MAX_PHRASE_TOKENS`` words, and the scan stops after ``_MAX_READINGS``
    readings (only text full of number words gets there)."""
    tokens = [(m.start(), m.end(), m.group().lower()) for m in _PHRASE_TOKEN.finditer(text)]
    phrases: list[tuple[int, int, Fraction]] = []
    budget = _MAX_READINGS
    i = 0
    while i < len(tokens) and budget > 0:
        if not _may_start(tokens[i][2]):
            i += 1
            continue
        end = i
        while end + 1 < len(tokens) and end - i < _MAX_PHRASE_TOKENS and _joins(text, tokens[end], tokens[end + 1]):
            end += 1
        found = None
        for last in range(end, i - 1, -1):  # the longest prefix of the run that reads as a number
            words = [t[2] for t in tokens[i : last + 1]]
            if words[-1] in ("and", "a", "an", "point", "negative", "minus") or _is_digits(words[0]) and len(words) == 1:
                continue
            budget -= 1
            value = value_from_words(" ".join(words))
            if value is not None:
                found = (last, value, words)
                break
        if found is None:
            i += 1
            continue
        last, value, words = found
        start, stop = tokens[i][0], tokens[last][1]
        if words == ["one"] and not _lone_one_counts(text, start, stop) or _DETERMINER_BEFORE.search(text[max(0, start - 40) : start]):
            i = last + 1  # "each one", "the three conditions": a word, not a stated number
            continue
        phrases.append((start, stop, value))
        i = last + 1
    return phrases


def is_number_word(word: str) -> bool:
    """True for a word that is part of a number, a fraction or a multiplier (``seven``, ``hundred``, ``halves``)."""
    w = word.lower()
    return (
        w in _UNITS or w in _TENS or w in _MULTIPLIERS or w in _ORDINALS or w in _PLURAL_DENOMINATORS
        or w in ("negative", "minus", "dozen", "dozens", "score", "point")
    )


# ----------------------------------------------------------------------------------------------------


_MAX_WORDS = 40  # no number is spelled with more words; longer text is not read (the work grows with its square)
_MAX_PHRASE_TOKENS = 16  # longer runs of number words are cut: the work per run is quadratic in its length
_MAX_READINGS = 2000  # readings tried per text (a run of nonsense number words costs one per prefix); then it stops
_PHRASE_TOKEN = re.compile(r"\d+(?:\.\d+)?|[A-Za-z]+")
_PHRASE_WORDS = frozenset(
    set(_UNITS) | set(_TENS) | set(_MULTIPLIERS) | set(_ORDINALS) | set(_PLURAL_DENOMINATORS)
    | {"and", "a", "an", "point", "negative", "minus", "first", "firsts", "second", "seconds"}
)
_DETERMINER_BEFORE = re.compile(r"\b(?:the|these|those|each|every|no|any|which|this|that|its|their|our|my|your|"
                                r"first|last|other|next)\s+$", re.IGNORECASE)
_COPULA_BEFORE_ONE = re.compile(r"(?:\bis|\bare|\bbe|\bequals|=|\bwas)\s*$", re.IGNORECASE)


def _may_start(word: str) -> bool:
    return _is_digits(word) or word in _UNITS or word in _TENS or word in ("a", "an", "negative", "minus")


def _joins(text: str, left: tuple[int, int, str], right: tuple[int, int, str]) -> bool:
    """``right`` continues the phrase of ``left``: a number word, separated by spaces or a hyphen only."""
    return right[2] in _PHRASE_WORDS and re.fullmatch(r"[ \t]*-?[ \t]*", text[left[1] : right[0]]) is not None


def _lone_one_counts(text: str, start: int, end: int) -> bool:
    after = text[end : end + 40].lstrip()
    return not after or after[0] in ".!?,;:)" or bool(_COPULA_BEFORE_ONE.search(text[max(0, start - 40) : start]))


def _is_digits(word: str) -> bool:
    return bool(re.fullmatch(r"\d+(?:\.\d+)?", word))


def _words(text: str, digits: bool = False) -> list[str] | None:
    """The lower-case words of ``text`` (hyphens are spaces), or None when it holds anything but words, spaces and
    hyphens (and, with ``digits``, digit amounts)."""
    if not isinstance(text, str) or len(text) > 20 * _MAX_WORDS:
        return None
    lowered = text.lower().strip().rstrip(".")
    allowed = r"[a-z\s\-]" if not digits else r"[a-z0-9.\s\-]"
    if re.sub(allowed, "", lowered):
        return None
    words = re.findall(r"\d+(?:\.\d+)?|[a-z]+", lowered) if digits else _TOKEN.findall(lowered)
    return words if words and len(words) <= _MAX_WORDS else None


def _sign(words: list[str]) -> tuple[int, list[str]]:
    if words and words[0] in ("negative", "minus") and len(words) > 1:
        return -1, words[1:]
    return 1, words


def _denominator_split(words: list[str]) -> tuple[list[str], int, bool] | None:
    """``(numerator words, denominator, plural)`` when ``words`` ends in an ordinal denominator (``thirty-seconds``
    takes two words); ``second`` alone is no denominator."""
    last = words[-1]
    if last == "halves":
        singular, plural = "half", True
    elif last.endswith("s") and (last[:-1] in _ORDINALS or last[:-1] in _IRREGULAR_ORDINALS):
        singular, plural = last[:-1], True
    else:
        singular, plural = last, False
    ordinal = _ORDINALS.get(singular) or _IRREGULAR_ORDINALS.get(singular)
    if ordinal is None:
        return None
    if len(words) >= 3 and words[-2] in _TENS and ordinal < 10:  # "thirty-second(s)", "twenty-fifth(s)"
        return words[:-2], _TENS[words[-2]] + ordinal, plural
    if singular in ("first", "second"):
        return None
    return words[:-1], ordinal, plural


def _unsigned_value(words: list[str]) -> Fraction | None:
    if not words:
        return None
    if "point" in words:  # "three point one four"
        k = words.index("point")
        whole = Fraction(0) if k == 0 else _whole_value(words[:k])
        digits = [_UNITS.get(w) for w in words[k + 1 :]]
        if whole is None or not digits or any(d is None or d > 9 for d in digits):
            return None
        return whole + Fraction(int("".join(str(d) for d in digits)), 10 ** len(digits))
    for k in range(len(words) - 1, 0, -1):  # "three and a half": a whole number and a fraction
        if words[k] == "and":
            fraction = fraction_from_words(" ".join(words[k + 1 :]))
            whole = _whole_value(words[:k])
            if fraction is not None and whole is not None and 0 < fraction < 1:
                return whole + fraction
    fraction = fraction_from_words(" ".join(words)) if not _is_digits(words[0]) else None
    if fraction is not None:
        return fraction
    return _whole_value(words)


def _whole_value(words: list[str]) -> Fraction | None:
    """A whole number in words, or a digit amount times multipliers (``2.5 million``, ``3``)."""
    if _is_digits(words[0]):
        value = Fraction(words[0])
        for w in words[1:]:
            if w not in _MULTIPLIERS:
                return None
            value *= _MULTIPLIERS[w]
        return value
    if any(_is_digits(w) for w in words):
        return None
    number = number_from_words(" ".join(words))
    return None if number is None else Fraction(number)


def _whole(words: list[str]) -> int | None:
    total, current, seen = 0, 0, False
    big = 0  # millions and billions, already complete
    last_big = None
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
            if not 0 < current < 100 or (current >= 10 and current % 10 == 0 and current >= 20):
                return None  # "twelve hundred" is 1200, "twenty hundred" is not a number
            current *= 100
        elif word == "thousand":
            if not 0 < current < 1000 or total:
                return None
            total, current = current * 1000, 0
        elif word in ("million", "billion"):
            size = _MULTIPLIERS[word]
            if not 0 < current < 1000 or total or (last_big is not None and last_big <= size):
                return None
            big, current, last_big = big + current * size, 0, size
        else:
            return None
        seen = True
        if word == "zero" and len(words) > 1:
            return None
    return big + total + current if seen else None
