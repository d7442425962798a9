"""Units of measure in answers: split ``15\\text{ cm}^2`` into ``15`` and ``cm^2``, and compare units.

Rules (what the math verifier does with them):

* a unit on one side only is ignored (gold ``15``, answer ``15\\text{ cm}^2`` is right; MATH golds often
  carry units their questions already fixed);
* two known units must have the same dimension, and the values are compared after conversion to a base
  unit (``2 hours`` equals ``120 minutes``; ``20 cm`` is not ``20 m``; ``cm`` is not ``cm^2``);
* two unknown words (``apples``, ``ways``) are ignored: the number decides.

Conversion factors are exact definitions (inch = 0.0254 m, pound = 0.45359237 kg, US gallon =
3.785411784 L). Months and years have no exact length in days, so they form their own dimension.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_Dim = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Unit:
    """A parsed unit: ``dimension`` as sorted ``(base, power)`` pairs and ``factor`` to the base units;
    ``known`` is False for a word that is not in the table (then ``name`` is the singular word)."""

    name: str
    dimension: _Dim
    factor: Fraction
    known: bool = True


def _u(dim: str, factor: str | int | Fraction) -> tuple[_Dim, Fraction]:
    return ((dim, 1),), Fraction(factor)


_TABLE: dict[str, tuple[_Dim, Fraction]] = {}


def _add(names: str, dim: str, factor: str | int | Fraction) -> None:
    for alias in names.split():
        _TABLE[alias] = _u(dim, factor)


_add("mm millimeter millimeters millimetre millimetres", "length", "0.001")
_add("cm centimeter centimeters centimetre centimetres", "length", "0.01")
_add("m meter meters metre metres", "length", 1)
_add("km kilometer kilometers kilometre kilometres", "length", 1000)
_add("in inch inches", "length", "0.0254")
_add("ft foot feet", "length", "0.3048")
_add("yd yard yards", "length", "0.9144")
_add("mi mile miles", "length", "1609.344")
_add("s sec secs second seconds", "time", 1)
_add("min mins minute minutes", "time", 60)
_add("h hr hrs hour hours", "time", 3600)
_add("day days", "time", 86400)
_add("week weeks wk wks", "time", 604800)
_add("month months", "month", 1)
_add("year years yr yrs", "month", 12)
_add("mg milligram milligrams", "mass", "0.001")
_add("g gram grams", "mass", 1)
_add("kg kilogram kilograms kilo kilos", "mass", 1000)
_add("lb lbs pound pounds", "mass", "453.59237")
_add("oz ounce ounces", "mass", "28.349523125")
_add("ml milliliter milliliters millilitre millilitres cc", "volume", "0.001")
_add("l liter liters litre litres", "volume", 1)
_add("gal gallon gallons", "volume", "3.785411784")
_add("mph", "speed", "0.44704")
_add("kph kmh kmph", "speed", Fraction(1000, 3600))
_add("dollar dollars usd", "usd", 1)
_add("cent cents", "usd", "0.01")
_add("euro euros eur", "eur", 1)
_add("yuan rmb", "cny", 1)
_add("rupee rupees rs inr", "inr", 1)
_add("rad radian radians", "angle", 1)

_GENERIC_WORDS = frozenset(
    "unit units square squared sq cubic cu per degree degrees deg percent percentage pct ".split()
    + "th st nd rd".split()
)
_TEXT_WRAPPER = r"\\(?:text|textrm|textbf|textit|textnormal|mbox|mathrm|mathit|mathbf|operatorname)\s*"
_POWER = r"(?:\s*\^\s*(?:\{\s*(?P<pow1>[23])\s*\}|(?P<pow2>[23])))?"
_TRAILING_TEXT_UNIT = re.compile(
    rf"(?P<unit>{_TEXT_WRAPPER}\{{\s*(?P<word>[A-Za-z][A-Za-z .\-/]*?)\s*\}}){_POWER}\s*$"
)
_TRAILING_PLAIN_UNIT = re.compile(rf"(?:(?<=[\d}}])(?=[A-Za-z]{{2}}|[A-Za-z]\s*\^)|(?<=\s))(?P<word>(?:(?:square|sq\.?|cubic|cu\.?)\s+)?[A-Za-z]+(?:\s*/\s*[A-Za-z]+)?){_POWER}\s*$")
_TRAILING_WORDS = re.compile(r"(?<=[\d}\s])\s*(?P<words>[A-Za-z]{3,}(?:\s+[A-Za-z]{3,})?)\s*$")
_MATH_WORD = re.compile(r"^(?:sqrt|pi|exp|log|ln|sin|cos|tan|sec|csc|cot|inf|infty|infinity|and|or|frac|times|cdot)$|\b(?:and|or)\b")
_LEADING_CURRENCY = re.compile(r"^(?:\\\$|\$|USD\s*|US\$|€|£|¥|₹|Rs\.?\s*)")
_TRAILING_CURRENCY = re.compile(r"(?:€|£|¥|₹|\\\$)\s*$")


def is_unit_word(word: str) -> bool:
    """True for a unit name or a word that only decorates a quantity (``units``, ``square``)."""
    w = word.lower().rstrip(".")
    return w in _TABLE or w in _GENERIC_WORDS or _singular(w) in _TABLE


def parse_unit(text: str) -> Unit | None:
    """Parse a unit such as ``cm``, ``cm^2``, ``square feet``, ``km/h``, ``hours``; ``None`` for an empty
    string. Unknown words give ``Unit(known=False)``."""
    t = " ".join(text.replace("\\", " ").split()).strip().rstrip(".").lower()
    if not t:
        return None
    power = 1
    m = re.match(r"^(?:square|sq\.?)\s+(.+)$", t)
    if m:
        power, t = 2, m.group(1)
    m = re.match(r"^(?:cubic|cu\.?)\s+(.+)$", t)
    if m:
        power, t = 3, m.group(1)
    m = re.match(r"^(.+?)\s*\^\s*\{?\s*([23])\s*\}?$", t)
    if m:
        t, power = m.group(1), int(m.group(2))
    for word, dim in (("squared", 2), ("cubed", 3)):
        if t.endswith(" " + word):
            t, power = t[: -len(word) - 1], dim
    if " per " in t or "/" in t:
        num, den = re.split(r"\s+per\s+|\s*/\s*", t, maxsplit=1)
        a, b = parse_unit(num), parse_unit(den)
        if a is None or b is None or not a.known or not b.known:
            return Unit(t, (), Fraction(1), known=False)
        return _combine(a, b, t)
    entry = _TABLE.get(t) or _TABLE.get(_singular(t))
    if entry is None:
        return Unit(_singular(t), (), Fraction(1), known=False)
    dim, factor = entry
    return Unit(t if power == 1 else f"{t}^{power}", tuple((d, p * power) for d, p in dim), factor**power)


def _combine(a: Unit, b: Unit, name: str) -> Unit:
    dims: dict[str, int] = dict(a.dimension)
    for d, p in b.dimension:
        dims[d] = dims.get(d, 0) - p
    if dict(dims) == {"length": 1, "time": -1}:
        dims = {"speed": 1}
        return Unit(name, (("speed", 1),), a.factor / b.factor)
    return Unit(name, tuple(sorted((d, p) for d, p in dims.items() if p)), a.factor / b.factor)


def _singular(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("es") and word[:-2] in _TABLE:
        return word[:-2]
    if word.endswith("s") and len(word) > 2 and not word.endswith("ss"):
        return word[:-1]
    return word


def split_unit(answer: str) -> tuple[str, Unit | None]:
    """Split a trailing unit off an answer: ``"15\\text{ cm}^2"`` -> ``("15", cm^2)``.

    A plain trailing word counts only if it is a known unit (so ``5n`` keeps its ``n``); a ``\\text{}``
    word counts when something with a digit or a fraction remains before it. Currency signs are units.
    """
    text = answer.strip()
    unit: Unit | None = None
    m = _LEADING_CURRENCY.match(text)
    if m and text[m.end() :].strip():
        text = text[m.end() :].strip()
        name = "usd" if "$" in m.group() or "USD" in m.group() else m.group().strip()
        unit = Unit(name, (("money", 1),), Fraction(1), known=False)
    m = re.search(r"(?:¢|\\cents?(?![A-Za-z])|\\text\s*\{\s*¢\s*\})\s*$", text)
    if m and _has_value(text[: m.start()]):
        return text[: m.start()].strip(), parse_unit("cents")
    m = _TRAILING_CURRENCY.search(text)
    if m and text[: m.start()].strip():
        text = text[: m.start()].strip()
        unit = unit or Unit("currency", (), Fraction(1), known=False)
    m = _TRAILING_TEXT_UNIT.search(text)
    if m and _has_value(text[: m.start()]) and not _is_connector(m.group("word")):
        word = m.group("word")
        power = m.group("pow1") or m.group("pow2")
        return text[: m.start()].strip(), parse_unit(word + (f"^{power}" if power else ""))
    m = _TRAILING_PLAIN_UNIT.search(text)
    if m and _has_value(text[: m.start()]):
        word = m.group("word")
        power = m.group("pow1") or m.group("pow2")
        parsed = parse_unit(word + (f"^{power}" if power else ""))
        if parsed is not None and parsed.known:
            return text[: m.start()].strip(), parsed
        if parsed is not None and all(is_unit_word(w) for w in re.split(r"[\s/]+", word) if w):
            return text[: m.start()].strip(), parsed
    m = _TRAILING_WORDS.search(text)
    if m and _has_value(text[: m.start()]) and not _MATH_WORD.search(m.group("words")):
        return text[: m.start()].strip(), parse_unit(m.group("words"))
    return text, unit


def _has_value(text: str) -> bool:
    return bool(re.search(r"[\d}]|\\pi|\\infty", text))


def _is_connector(word: str) -> bool:
    return word.strip().lower() in {"and", "or", "or ", ", and", "and/or"}


def units_compatible(a: Unit | None, b: Unit | None) -> tuple[bool, Fraction]:
    """``(ok, ratio)``: ``ok`` is False when both units are known and of different dimensions; equal
    quantities then satisfy ``value_a * ratio == value_b`` (``ratio = a.factor / b.factor``). A missing or
    unknown unit on either side gives ``(True, 1)``: the numbers decide."""
    if a is None or b is None or not a.known or not b.known:
        return True, Fraction(1)
    if a.dimension != b.dimension:
        return False, Fraction(1)
    return True, a.factor / b.factor


_AMOUNT_WITH_UNIT = re.compile(
    r"\s*(?P<amount>\d+(?:\.\d+)?)\s*(?:\\text\s*\{\s*)?(?P<word>[A-Za-z]+)\.?\s*(?:,|\band\b)?\s*\}?\s*"
    r"(?:,|\band\b|\\[,;: ]|~)?\s*"
)


def compound_quantity(text: str) -> tuple[Fraction, Unit] | None:
    """A quantity written in several units of one dimension, largest first: ``1 h 30 min`` -> ``(90, min)``,
    ``2 ft 6 in`` -> ``(30, in)``, ``1 hour and 30 minutes`` -> ``(90, minutes)``: the sum in the smallest unit.
    ``None`` for anything else (one amount, unknown words, mixed dimensions, units not in decreasing size)."""
    parts: list[tuple[Fraction, Unit]] = []
    # "\$3 and 5 cents": a leading dollar sign is the first amount's unit
    text = re.sub(r"^\s*(?:\\\$|\$|US\$|USD)\s*(\d+(?:\.\d+)?)(?![\d.])", r"\1 dollars ", text)
    text = re.sub(r"\\text\s*\{\s*(?:and|,)\s*\}", " and ", text)  # "\text{ and }" between two parts
    pos = 0
    while pos < len(text):
        m = _AMOUNT_WITH_UNIT.match(text, pos)
        if m is None or m.end() == pos:
            return None
        unit = parse_unit(m.group("word"))
        if unit is None or not unit.known:
            return None
        parts.append((Fraction(m.group("amount")), unit))
        pos = m.end()
    if len(parts) < 2 or len({unit.dimension for _, unit in parts}) != 1:
        return None
    factors = [unit.factor for _, unit in parts]
    if any(a <= b for a, b in zip(factors, factors[1:])):
        return None  # "30 min 1 h" or "2 m 3 m" is not one quantity
    smallest = parts[-1][1]
    return sum(amount * unit.factor for amount, unit in parts) / smallest.factor, smallest


def bare_amount_ratios(a: Unit | None, b: Unit | None) -> list[Fraction]:
    """Extra ratios under which a money amount with a known unit equals a bare amount: a bare number is in
    dollars, so ``50 cents`` (``a``) equals a bare ``0.50`` (``b``) at ratio 1/100. Empty unless exactly one side
    has a known money unit and the other none."""
    if a is not None and b is None and a.known and a.dimension == (("usd", 1),) and a.factor != 1:
        return [a.factor]
    if b is not None and a is None and b.known and b.dimension == (("usd", 1),) and b.factor != 1:
        return [1 / b.factor]
    return []
