"""Parse a normalized answer string into a small typed structure that comparison can reason about.

An answer is one of:

* :class:`Scalar`: a sympy number/expression or matrix, plus what the text said about it (percent sign,
  degrees, unit, fewest significant digits among its decimal literals, a base subscript like ``204_5``);
* :class:`Seq`: a tuple ``(a, b)`` (order matters), a set ``\\{a, b\\}`` or a bare list ``a, b`` / ``a and b``
  (order does not matter); ``a \\pm b`` is the list ``a + b, a - b``;
* :class:`Region`: intervals and unions of them (``[2, \\infty)``, ``(-\\infty, 1) \\cup (1, \\infty)``), set differences
  (``\\mathbb{R} \\setminus \\{0\\}``) and set-builder notation (``\\{x \\mid 0 < x \\leq 1\\}``, solved by
  :mod:`rlvr.verifiers.math_sets`);
* :class:`Relation`: a chain ``a = b = c`` or ``x \\geq 5`` or ``x \\in [0, 1]``;
* :class:`Text`: words (``\\text{odd}``), :class:`Choice`: a multiple-choice letter.

The structure (lists, tuples, relations, intervals) is split here by our own scanner; only the leaves go to
latex2sympy (the LaTeX parser math-verify uses), so structure rules stay explicit and testable. Decimal
literals are replaced by exact fractions before parsing, so no float rounding can merge ``0.1`` and
``0.10000001``; their significant digits are kept for the tolerance rule in :mod:`rlvr.verifiers.math_compare`.
Before anything is evaluated, :func:`rlvr.verifiers.math_huge.digits_bound` bounds the size of the exact numbers
evaluation would create; a power tower or a 10^10-digit number is kept unevaluated (``too_large``) instead of
hanging, unless its large parts cancel exactly (``2^{2^{64}} - 2^{2^{64}} + 1`` is ``1``,
:func:`rlvr.verifiers.math_huge.reduce_huge`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Union

import sympy
from sympy.core.function import AppliedUndef

from rlvr.verifiers.math_huge import MAX_DIGITS, digits_bound, reduce_huge
from rlvr.verifiers.math_latex import latex_to_sympy
from rlvr.verifiers.math_normalize import normalize
from rlvr.verifiers.math_sets import solution_set
from rlvr.verifiers.math_units import Unit, compound_quantity, parse_unit, split_unit
from rlvr.verifiers.math_words import is_number_word, value_from_words


class AnswerParseError(ValueError):
    """The answer text could not be parsed; the message names the text."""


@dataclass(frozen=True)
class Scalar:
    """A number, expression or matrix. ``decimal_digits``: fewest significant digits among the decimal
    literals it was written with (None: no decimals). ``base``/``digits``: ``204_5`` (value 54). ``too_large``:
    evaluation would create numbers above :data:`MAX_DIGITS` digits, so ``value`` is left unevaluated."""

    value: sympy.Basic
    decimal_digits: int | None = None
    percent: bool = False
    degree: bool = False
    unit: Unit | None = None
    base: int | None = None
    digits: str | None = None
    too_large: bool = False
    source: str = ""


@dataclass(frozen=True)
class Seq:
    """``tuple``: ``(a, b)``, order matters; ``set``: ``\\{a, b\\}``; ``list``: ``a, b`` / ``a and b``."""

    kind: Literal["tuple", "set", "list"]
    items: tuple[Answer, ...]
    open_pair: bool = False  # "(a, b)": an ordered pair or the open interval (a, b)
    joined: str = ""  # a bare list's separators: "and", "or", "," or "mixed" ("x > 0 and x < 1" is one interval)


@dataclass(frozen=True)
class Region:
    """An interval, a union of intervals, or another sympy set (``\\emptyset``)."""

    value: sympy.Set


@dataclass(frozen=True)
class Relation:
    """``parts[0] ops[0] parts[1] ops[1] ...``; ops are ``=``, ``~`` (approximately), ``<``, ``<=``, ``>``,
    ``>=``, ``!=``, ``in``. ``congruence``: an ``=`` was written ``\\equiv`` (``2^{100} \\equiv 1 \\mod 3``), so its
    members agree modulo something, not as numbers."""

    ops: tuple[str, ...]
    parts: tuple[Answer, ...]
    congruence: bool = False


@dataclass(frozen=True)
class Text:
    """A word answer, lower-cased, articles dropped (``\\text{The Odd}`` -> ``odd``)."""

    text: str


@dataclass(frozen=True)
class Choice:
    """A multiple-choice letter ``A``-``J``."""

    letter: str


Answer = Union[Scalar, Seq, Region, Relation, Text, Choice]

_RELATION_OPS = {
    "=": "=", "\\approx": "~", "\\simeq": "~", "\\equiv": "=",
    "<": "<", "\\lt": "<", ">": ">", "\\gt": ">",
    "\\leq": "<=", "\\le": "<=", "\\leqslant": "<=", "\\geq": ">=", "\\ge": ">=", "\\geqslant": ">=",
    "\\neq": "!=", "\\ne": "!=", "\\in": "in",
}
_RELATION_RE = re.compile(r"\\(?:approx|simeq|equiv|leqslant|geqslant|leq|geq|le|ge|lt|gt|neq|ne|in)(?![A-Za-z])|=|<|>")
_LIST_WORD_RE = re.compile(r"(?<![A-Za-z\\])(?:and|or)(?![A-Za-z])|\\(?:land|wedge|lor|vee)(?![A-Za-z])")
_AND_WORDS = frozenset(("and", "\\land", "\\wedge"))
_OR_WORDS = frozenset(("or", "\\lor", "\\vee"))
_DECIMAL_RE = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?![\d.])")
_TRIG_RE = re.compile(r"\\(?:sin|cos|tan|sec|csc|cot)(?![A-Za-z])")
# "i" as the imaginary unit, not a subscript or bound index ("x_i", "x_{i}", "\\sum_{i=1}"); "e^{i\\pi}" counts
_IMAGINARY_RE = re.compile(r"(?<![A-Za-z\\_{])i(?![A-Za-z])|(?<!_\{)(?<=\{)i(?![A-Za-z])")
_CHOICE_RE = re.compile(r"^\(?([A-J])\)?$|^\(([A-J])\)\s*\S")  # "C", "(C)", "(C) 42" (the option's text)
# "E: the third listed risk factor", "B. 42", "D) none": a letter, then the option's text
_CHOICE_TEXT_RE = re.compile(r"^\(?([A-J])\)?\s*[:.)]\s+\S")
# another option letter, a list separator or "or" in the text makes it a hedge ("(A) and (B)", "A: first,
# or B", "C: the second option, 7" from two boxes), not one option
_OPTION_MARK_RE = re.compile(r"(?<![A-Za-z\\{])[A-J](?![A-Za-z])|[,;]|(?<![A-Za-z])or(?![A-Za-z])")
_BASE_RE = re.compile(r"^(\d+)_\{?(\d{1,2})\}?$")
_RATIO_RE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*:\s*(-?\d+(?:\.\d+)?)$")
_THOUSANDS_RE = re.compile(r"^-?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?$")
_DECIMAL_COMMA_RE = re.compile(r"^-?\d+,\d+$")
_WORDS_RE = re.compile(r"^[A-Za-z][A-Za-z' \-]*[A-Za-z.!]?$")
_FUNC_WORDS = frozenset("sin cos tan sec csc cot log ln exp sqrt pi infty frac".split())


def parse_answer(text: str, *, decimal_comma: bool = False) -> Answer:
    """Parse an extracted answer (any LaTeX/plain spelling) into an :data:`Answer`.

    Args:
        text: the answer, e.g. ``"\\frac{1}{2}"``, ``"x = 3"``, ``"(1, 2), (3, 4)"``.
        decimal_comma: read a lone ``1000,99`` as a decimal number (set when the gold is one number);
            otherwise it is the list ``1000, 99``.

    Raises:
        AnswerParseError: nothing is left after normalization.
    """
    s = normalize(text)
    if not s:
        raise AnswerParseError(f"empty answer after normalization: {text!r}")
    return _parse_top(s, decimal_comma)


@lru_cache(maxsize=4096)
def _parse_top(s: str, decimal_comma: bool) -> Answer:
    unwrapped = re.sub(r"^\\text\s*\{([^{}]*)\}$", r"\1", s).strip()  # "\text{C: the second option}"
    choice = _CHOICE_TEXT_RE.match(unwrapped)
    if choice and not _OPTION_MARK_RE.search(unwrapped, choice.end() - 1):  # one option, not a hedge
        return Choice(choice.group(1))
    parts = _split_top(s, ";")
    if len(parts) > 1:
        return Seq("list", tuple(_as_record(_parse_group(p, decimal_comma)) for p in parts if p.strip()))
    return _parse_group(s, decimal_comma)


def _as_record(answer: Answer) -> Answer:
    """``p=5, q=2`` inside a ``;``-separated list is one solution: the tuple of its values."""
    if isinstance(answer, Seq) and answer.kind == "list" and all(_is_assignment(a) for a in answer.items):
        return Seq("tuple", tuple(a.parts[-1] for a in answer.items if isinstance(a, Relation)))
    return answer


def _parse_group(s: str, decimal_comma: bool) -> Answer:
    s = s.strip()
    s = _TEXT_QUANTITY.sub(r"\1", s)  # "\text{75 cents}": an amount and its unit, not words
    compound = _compound(s) or _number_in_words(s)
    if compound is not None:  # "1 h 30 min", "30^\\circ 30'", "one hundred and five": one quantity, not a list
        return compound
    value, _ = split_unit(s)
    if _THOUSANDS_RE.match(value):  # "1,000.99", "12,345 \\text{ m}^2"
        return _parse_scalar(s.replace(",", "", value.count(",")))
    if decimal_comma and _DECIMAL_COMMA_RE.match(s):
        return _parse_scalar(s.replace(",", "."))
    split, separators = _split_list(s)
    parts = [p for p in split if p.strip()]
    if len(parts) > 1:
        items: list[Answer] = []
        for part in parts:
            item = _parse_element(part)
            if isinstance(item, Seq) and item.kind == "list":
                items.extend(item.items)  # "1 \pm \sqrt 5, -2" has three elements
            else:
                items.append(item)
        return Seq("list", tuple(items), joined=_joined(separators))
    return _parse_element(s)


def _joined(separators: list[str]) -> str:
    kinds = {"and" if sep in _AND_WORDS else "or" if sep in _OR_WORDS else "," for sep in separators}
    return kinds.pop() if len(kinds) == 1 else "mixed"


_TEXT_QUANTITY = re.compile(r"^\\text\s*\{\s*(\d[\d.,]*\s+[A-Za-z][A-Za-z ]*)\}$")


def _parse_element(s: str) -> Answer:
    s = s.strip()
    if not s:
        raise AnswerParseError("empty element")
    choice = _CHOICE_RE.match(s)
    if choice:
        return Choice(choice.group(1) or choice.group(2))
    if _is_text(s):
        return _number_in_words(s) or Text(_text_key(s))
    pieces, ops = _split_relations(s)
    if ops:
        if any(not p.strip() for p in pieces):
            raise AnswerParseError(f"relation with an empty side: {s!r}")
        congruence = bool(re.search(r"\\equiv(?![A-Za-z])", s))
        return Relation(tuple(ops), tuple(_parse_piece(p) for p in pieces), congruence=congruence)
    differences = _split_top(s, "\\setminus")
    if len(differences) > 1:  # "\mathbb{R} \setminus \{0\}": left to right, after any union on the left
        result = _as_set(_parse_element(differences[0]))
        for part in differences[1:]:
            result = sympy.Complement(result, _as_set(_parse_element(part)))
        return Region(result)
    unions = _split_top(s, "\\cup")
    if len(unions) > 1:
        return Region(sympy.Union(*[_as_set(_parse_element(u)) for u in unions]))
    if re.search(r"\\(?:pm|mp)(?![A-Za-z])", s):  # "\pm", not "\pmod"
        return _expand_pm(s)
    bracketed = _parse_brackets(s)
    if bracketed is not None:
        return bracketed
    scaled = _scaled_vector(s)
    if scaled is not None:
        return scaled
    return _parse_scalar(s)


_VECTOR_OPEN = re.compile(r"\(|\\langle(?![A-Za-z])")


def _scaled_vector(s: str) -> Seq | None:
    """``2(1, 2, 3)``, ``\\sqrt{2}\\cdot\\langle 1, 2\\rangle``: a number times a vector written as a tuple, which
    is the tuple of the products; None for anything else (the factor must be a number: ``f(1, 2)`` is a call)."""
    if not (s.endswith(")") or s.endswith("\\rangle")) or "," not in s:
        return None
    for m in _VECTOR_OPEN.finditer(s):
        vector, factor_text = s[m.start() :], s[: m.start()].strip()
        factor_text = re.sub(r"\\(?:cdot|times)\s*$", "", factor_text).strip()
        if not factor_text or not _wraps(vector, len(m.group())):
            continue
        try:
            seq = _parse_brackets(vector)
            factor = _parse_scalar(factor_text)
        except AnswerParseError:
            return None
        if not (isinstance(seq, Seq) and seq.kind == "tuple" and len(seq.items) >= 2):
            return None
        if factor.too_large or factor.unit or factor.percent or factor.degree or factor.base is not None:
            return None
        value = factor.value
        if not isinstance(value, sympy.Expr) or value.free_symbols or isinstance(value, sympy.MatrixBase):
            return None
        items = []
        for item in seq.items:
            if not isinstance(item, Scalar) or item.too_large or isinstance(item.value, sympy.MatrixBase):
                return None
            digits = [d for d in (factor.decimal_digits, item.decimal_digits) if d is not None]
            items.append(Scalar(_evaluate(value * item.value), min(digits) if digits else None, source=item.source))
        return Seq("tuple", tuple(items))
    return None


def _parse_piece(s: str) -> Answer:
    """One side of a relation; an unreadable middle step of a chain (``1 = \\zzz = 0``) becomes text."""
    try:
        return _parse_element(s)
    except AnswerParseError:
        return Text(" ".join(s.split()))


def _expand_pm(s: str) -> Answer:
    plus = s.replace("\\pm", "+", 1).replace("\\mp", "-", 1)
    minus = s.replace("\\pm", "-", 1).replace("\\mp", "+", 1)
    items = []
    for variant in (plus, minus):
        variant = re.sub(r"^\s*\+", "", variant)
        item = _parse_element(variant)
        items.extend(item.items if isinstance(item, Seq) and item.kind == "list" else [item])
    return Seq("list", tuple(items))


def _parse_brackets(s: str) -> Answer | None:
    opener, closer = s[:1], s[-1:]
    if s.startswith("\\{") and s.endswith("\\}") and _wraps(s, 2):
        inner = s[2:-2]
        kind: str = "set"
    elif s.startswith("\\langle") and s.endswith("\\rangle"):
        inner = s[len("\\langle") : -len("\\rangle")]
        kind = "tuple"
    elif opener == "{" and closer == "}" and _wraps(s, 1):
        return _parse_group(s[1:-1], False)  # a TeX group: "{1,3}" is printed as "1,3", a bare list
    elif opener in "([" and closer in ")]" and _wraps(s, 1):
        inner = s[1:-1]
        kind = "bracket"
    else:
        return None
    separator = ";" if kind == "bracket" and ";" in inner and "," not in _top_level_chars(inner) else ","
    parts = [p for p in _split_top(inner, separator)]
    if kind == "set":
        if not inner.strip():
            return Region(sympy.EmptySet)
        builder = _set_builder(inner)
        if builder is not None:
            return builder
        return Seq("set", tuple(_parse_element(p) for p in parts))
    if kind == "tuple":
        return Seq("tuple", tuple(_parse_element(p) for p in parts))
    if len(parts) == 1:
        return _parse_element(inner) if opener == "(" and closer == ")" else Seq("list", (_parse_element(inner),))
    items = tuple(_parse_element(p) for p in parts)
    if len(parts) == 2 and (opener == "[" or closer == "]" or _has_infinity(items)):
        return Region(_interval(items, opener, closer))
    if opener == "(" and closer == ")":
        return Seq("tuple", items, open_pair=len(items) == 2)
    return Seq("list", items)


_SET_BUILDER = re.compile(
    r"^\s*(?P<var>[A-Za-z](?:_\{?[A-Za-z0-9]{1,3}\}?)?)\s*(?:\\in\s*(?P<domain>[^|:]+?))?\s*(?:\||:|\\colon)\s*(?P<cond>.+)$",
    re.DOTALL,
)


_MAX_CONDITIONS = 16


def _set_builder(inner: str) -> Region | Seq | None:
    """``\\{x \\mid 0 < x \\leq 1\\}`` (the inside of the braces): the real numbers the condition holds for, within
    the domain if one is named (``x \\in \\mathbb{R}``). Conditions joined by ``and`` or a comma hold together,
    ``or`` joins alternatives (``and`` first). None when ``inner`` is no set-builder form or a condition is not
    one in the named variable that sympy can solve."""
    m = _SET_BUILDER.match(inner)
    if m is None:
        return None
    try:
        variable = _parse_scalar(m.group("var")).value
        domain = _as_set(_parse_element(m.group("domain"))) if m.group("domain") else sympy.Interval(-sympy.oo, sympy.oo)
        parts, separators = _split_list(m.group("cond"))
        if len(parts) > _MAX_CONDITIONS:
            return None  # sympy's solving grows with every condition
        alternatives: list[sympy.Set] = []
        current: list[sympy.Set] = []
        for k, part in enumerate(parts):
            condition = _parse_element(part)
            if isinstance(condition, Relation) and condition.ops == ("in",) and condition.parts[0] == Scalar(
                variable, source=m.group("var")
            ):
                found = _as_set(condition.parts[1])
            elif isinstance(condition, Relation) and all(isinstance(p, Scalar) for p in condition.parts):
                found = solution_set(condition.ops, [p.value for p in condition.parts if isinstance(p, Scalar)],
                                     variable)
            else:
                return None
            if found is None:
                return None
            current.append(found)
            if k == len(separators) or separators[k] in _OR_WORDS:
                alternatives.append(sympy.Intersection(*current))
                current = []
        result = sympy.Intersection(domain, sympy.Union(*alternatives))
    except (AnswerParseError, TypeError, ValueError):
        return None
    if isinstance(result, sympy.FiniteSet) and len(result) > 0:  # "\{x \mid x^2 = 1\}" lists its roots
        return Seq("set", tuple(Scalar(v, source=str(v)) for v in result))
    return Region(result)


def _has_infinity(items: tuple[Answer, ...]) -> bool:
    return any(isinstance(i, Scalar) and i.value in (sympy.oo, -sympy.oo) for i in items)


def _interval(items: tuple[Answer, ...], opener: str, closer: str) -> sympy.Set:
    ends = []
    for item in items:
        if not isinstance(item, Scalar) or isinstance(item.value, sympy.MatrixBase) or item.too_large:
            raise AnswerParseError("interval endpoints must be numbers or expressions")
        ends.append(item.value)
    try:
        return sympy.Interval(ends[0], ends[1], left_open=opener == "(", right_open=closer == ")")
    except (TypeError, ValueError) as exc:
        raise AnswerParseError(f"bad interval endpoints {ends}") from exc


def _as_set(answer: Answer) -> sympy.Set:
    if isinstance(answer, Region):
        return answer.value
    if isinstance(answer, Seq) and answer.kind in ("set", "list") and all(isinstance(i, Scalar) for i in answer.items):
        return sympy.FiniteSet(*[i.value for i in answer.items if isinstance(i, Scalar)])
    if isinstance(answer, Seq) and answer.open_pair:
        a, b = answer.items
        if isinstance(a, Scalar) and isinstance(b, Scalar):
            return sympy.Interval.open(a.value, b.value)
    if isinstance(answer, Scalar) and not isinstance(answer.value, sympy.MatrixBase):
        return sympy.FiniteSet(answer.value)
    raise AnswerParseError("a union needs intervals or sets on both sides")


def _parse_scalar(s: str) -> Scalar:
    source = s
    percent = False
    m = re.search(r"\\%\s*$", s)
    if m:
        percent, s = True, s[: m.start()].strip()
    s, unit = split_unit(s)
    if re.search(r"\\%\s*$", s):
        percent, s = True, re.sub(r"\\%\s*$", "", s).strip()
    degree = False
    has_trig = bool(_TRIG_RE.search(s))
    if "^{\\circ}" in s and not has_trig:
        degree, s = True, s.replace("^{\\circ}", " ").strip()
    base = _BASE_RE.match(s)
    if base and int(base.group(2)) >= 2 and all(int(d) < int(base.group(2)) for d in base.group(1)):
        digits, radix = base.group(1), int(base.group(2))
        return Scalar(sympy.Integer(int(digits, radix)), base=radix, digits=digits, source=source)
    ratio = _RATIO_RE.match(s)
    if ratio and float(ratio.group(2)) != 0:
        s = f"\\frac{{{ratio.group(1)}}}{{{ratio.group(2)}}}"
    elif ratio:
        raise AnswerParseError(f"not a ratio: {s!r}")
    if not s:
        raise AnswerParseError(f"no value in {source!r}")
    decimal_digits = None
    decimals = list(_DECIMAL_RE.finditer(s))
    if decimals:
        decimal_digits = min(_significant_digits(m.group(1), m.group(2)) for m in decimals)
        s = _DECIMAL_RE.sub(_decimal_to_fraction, s)
    expr = _latex_to_sympy(s, convert_degrees=has_trig)
    if _IMAGINARY_RE.search(s):
        expr = expr.subs(sympy.Symbol("i"), sympy.I)
    if digits_bound(expr) > MAX_DIGITS:
        reduced = reduce_huge(expr)  # "x - x" of a tower is 0: evaluate what is left when the large parts cancel
        if reduced is None:
            return Scalar(expr, decimal_digits, percent, degree, unit, too_large=True, source=source)
        expr = reduced
    expr = _evaluate(_real_odd_roots(expr))
    return Scalar(expr, decimal_digits, percent, degree, unit, source=source)


def _real_odd_roots(expr: sympy.Basic) -> sympy.Basic:
    """An odd root of a negative number is the real one, as in a contest (``\\sqrt[3]{-8}`` is ``-2``,
    ``\\sqrt[3]{2 - \\sqrt 5}`` is ``(1 - \\sqrt 5)/2``); sympy's principal root is complex. Powers ``p/q`` with
    ``q`` odd of a base that is a negative real number become ``\\pm |b|^{p/q}``."""

    def is_odd_root_of_negative(e: sympy.Basic) -> bool:
        if not (isinstance(e, sympy.Pow) and e.exp.is_Rational and not e.exp.is_Integer and e.exp.q % 2 == 1):
            return False
        base = e.base
        return bool(base.is_number and not base.free_symbols and base.is_extended_negative)

    def real_root(e: sympy.Pow) -> sympy.Expr:
        magnitude = sympy.Pow(-e.base, e.exp)
        return -magnitude if e.exp.p % 2 else magnitude

    try:
        return expr.replace(is_odd_root_of_negative, real_root)
    except (TypeError, ValueError, AttributeError, RecursionError):
        return expr


def _significant_digits(whole: str, frac: str) -> int:
    digits = (whole + frac).lstrip("0")
    return max(1, len(digits))


def _decimal_to_fraction(m: re.Match[str]) -> str:
    whole, frac = m.group(1) or "0", m.group(2)
    if len(whole) + len(frac) > 4000:  # Python refuses to read longer integers from text
        raise AnswerParseError(f"a decimal of {len(whole) + len(frac)} digits")
    return f"(\\frac{{{int(whole + frac)}}}{{{10 ** len(frac)}}})"


@lru_cache(maxsize=4096)
def _latex_to_sympy(s: str, convert_degrees: bool) -> sympy.Basic:
    try:
        result = latex_to_sympy(s, convert_degrees)
    except Exception as exc:  # noqa: BLE001 - the ANTLR parser raises plain Exception
        raise AnswerParseError(f"cannot parse {s!r}: {str(exc).splitlines()[0]}") from exc
    if isinstance(result, list):
        raise AnswerParseError(f"cannot parse {s!r}")
    return result


def _evaluate(expr: sympy.Basic) -> sympy.Basic:
    try:
        expr = expr.doit()
        if isinstance(expr, sympy.MatrixExpr):  # "\\sqrt{2}\\begin{pmatrix}1\\\\2\\end{pmatrix}": the evaluated matrix
            expr = sympy.ImmutableMatrix(expr.as_explicit())
        return expr
    except Exception:  # noqa: BLE001 - leave what sympy cannot evaluate as it is
        return expr


_AMOUNT = r"(\d+(?:\.\d+)?)"
_PRIME = r"(?:'|′|\^\{?\\prime\}?|\\prime)"
_DOUBLE_PRIME = r"(?:''|″|\"|\^\{?\\prime\\prime\}?|\\prime\\prime)"
_DEGREES_MINUTES = re.compile(
    rf"^{_AMOUNT}\s*\^\{{\\circ\}}\s*{_AMOUNT}\s*{_PRIME}(?:\s*{_AMOUNT}\s*{_DOUBLE_PRIME})?$"
)


_FEET_INCHES = re.compile(rf"^(\d+)\s*{_PRIME}\s*(\d+(?:\.\d+)?)\s*{_DOUBLE_PRIME}$")


def _number_in_words(s: str) -> Scalar | None:
    """``seven``, ``\\text{Twenty-one}``, ``negative seven``, ``three quarters``, ``three and a half``, ``2.5 million``:
    a number in words (:func:`rlvr.verifiers.math_words.value_from_words`), possibly followed by one or two words
    naming what is counted (``seven apples``, ``\\text{three ways}``, kept as an unknown unit); None for other
    text."""
    plain = re.sub(r"\\text\s*\{([^{}]*)\}", r" \1 ", s).strip()
    if _DIGITS_THEN_WORDS.fullmatch(plain):  # a digit amount with multiplier or fraction words, nothing else
        value = value_from_words(plain)
        return None if value is None else Scalar(sympy.Rational(value.numerator, value.denominator), source=s)
    if not _is_text(s):
        return None
    words = _number_words(s)
    for cut in range(len(words), max(0, len(words) - 2) - 1, -1):
        head, tail = words[:cut], words[cut:]
        if not head or any(is_number_word(w) or w in _NOT_COUNTED for w in tail):
            continue
        value = value_from_words(" ".join(head))
        if value is not None:
            unit = split_unit(f"1 {' '.join(tail)}")[1] if tail else None
            return Scalar(sympy.Rational(value.numerator, value.denominator), unit=unit, source=s)
    return None


_DIGITS_THEN_WORDS = re.compile(r"\d+(?:\.\d+)?\s+[A-Za-z][A-Za-z \-]*")


# Words after a number that change it rather than name what is counted ("seven times", "one more").
_NOT_COUNTED = frozenset("times more less fewer greater smaller larger percent or and to of over per point plus "
                         "squared cubed th".split())


def _number_words(s: str) -> list[str]:
    plain = re.sub(r"\\text\s*\{([^{}]*)\}", r" \1 ", s)
    return re.findall(r"[a-z]+", plain.lower().replace("-", " "))


def _compound(s: str) -> Scalar | None:
    """An angle in degrees, minutes and seconds (``30^{\\circ}30'`` is 30.5 degrees), or an amount in several
    units of one dimension (``1 h 30 min`` is 90 min); None for anything else."""
    m = _DEGREES_MINUTES.match(s)
    if m:
        degrees = sympy.Rational(m.group(1)) + sympy.Rational(m.group(2)) / 60 + sympy.Rational(m.group(3) or 0) / 3600
        return Scalar(degrees, degree=True, source=s)
    m = _FEET_INCHES.match(s)
    if m:  # 5'3": feet and inches (no degree sign, so not an angle)
        inches = sympy.Rational(m.group(1)) * 12 + sympy.Rational(m.group(2))
        return Scalar(inches, unit=parse_unit("in"), source=s)
    quantity = compound_quantity(s)
    if quantity is not None:
        value, unit = quantity
        return Scalar(sympy.Rational(value.numerator, value.denominator), unit=unit, source=s)
    return None


def _is_assignment(answer: Answer) -> bool:
    return isinstance(answer, Relation) and all(op == "=" for op in answer.ops) and is_label(answer.parts[0])


def is_label(answer: Answer) -> bool:
    """True for the name side of an assignment: ``x``, ``f(x)``, ``f(2)``, ``P(A)``, ``y_1``, ``A:B``,
    ``NO/BO``, ``(p, q)``, ``|AB|``, ``\\angle ABC``, a one-word name (``AB``, ``area``)."""
    if isinstance(answer, Choice):  # "D = (0, 1)": a capital letter on the left is a name
        return True
    if isinstance(answer, Text):  # "AB = 4" (a segment), "area = 12", "P(X=2) = 1/4" (a probability)
        return bool(re.fullmatch(r"[a-z]{1,12}|\\?[A-Za-z]{1,4}\s*\(.{1,40}\)", answer.text))
    if isinstance(answer, Seq):
        if answer.kind == "list" and len(answer.items) == 1 and isinstance(answer.items[0], Text):
            return bool(re.fullmatch(r"[a-z]{3,8}", answer.items[0].text))  # "[ABC] = 12": an area
        return answer.kind == "tuple" and all(is_label(i) for i in answer.items)
    if not isinstance(answer, Scalar) or answer.too_large or isinstance(answer.value, sympy.MatrixBase):
        return False
    if _CALL_LABEL.fullmatch(answer.source.strip()):  # "f(-1)" parses as -f: read the text
        return True
    return _symbols_only(answer.value)


# A function's value by its usual names: "f(-1)", "g'(2)", "P(A)", "\Pr(A)", "E(X)", "Var(X)". Not "x(x+1)":
# a variable times a bracket is an expression.
_CALL_LABEL = re.compile(r"(?:[fghpqFGHPQE]'*|\\Pr|Var|Cov|\\operatorname\{[A-Za-z]+\})\s*\([^()]{1,40}\)")


_TRIG = (sympy.sin, sympy.cos, sympy.tan, sympy.cot, sympy.sec, sympy.csc)
# An angle's name: a vertex (A, B, C) or a Greek letter; "\sin x = 1/2" stays an equation to solve.
_ANGLE_NAME = re.compile(r"[A-Z]|alpha|beta|gamma|theta|phi|varphi|psi|omega")


def _symbols_only(e: sympy.Basic) -> bool:
    if isinstance(e, (sympy.Symbol, AppliedUndef)):
        return True
    if isinstance(e, sympy.Abs):  # "|AB| = 1", "|\vec{a}| = 3": a length; "|z| = 5" stays a locus
        names = [str(s) for s in e.args[0].free_symbols]
        return _symbols_only(e.args[0]) and all(n.isupper() or n.startswith("vec{") for n in names)
    if isinstance(e, _TRIG):  # "\sin A = 3/5", "\tan\theta = 2", "\cos\angle ABC = 1/2"
        arg = e.args[0]
        if isinstance(arg, sympy.Symbol):
            return bool(_ANGLE_NAME.fullmatch(str(arg)))
        return _symbols_only(arg) and sympy.Symbol("angle") in arg.free_symbols
    if isinstance(e, sympy.Pow):
        return e.args[1] == -1 and _symbols_only(e.args[0])
    if isinstance(e, sympy.Mul):
        return all(_symbols_only(a) for a in e.args)
    return False


def _is_text(s: str) -> bool:
    plain = re.sub(r"\\text\s*\{([^{}]*)\}", r" \1 ", s).strip()
    if not _WORDS_RE.match(plain):
        return False
    words = re.findall(r"[A-Za-z]+", plain)
    if any(w.lower() in _FUNC_WORDS for w in words) or "\\" in plain:
        return False
    return any(len(w) > 1 for w in words) or "\\text" in s


def _text_key(s: str) -> str:
    plain = re.sub(r"\\text\s*\{([^{}]*)\}", r" \1 ", s)
    words = re.findall(r"[A-Za-z0-9]+", plain.lower())
    return " ".join(w for w in words if w not in ("the", "a", "an"))


# ----------------------------------------------------------------------------------------------------
# Top-level scanning: split at separators that are not inside (), [], {}, \{ \} or \begin..\end.


def _depth_walk(s: str):
    """Yield ``(index, depth)`` for every character; brackets of any kind count (intervals mix them)."""
    depth = 0
    i = 0
    n = len(s)
    while i < n:
        if s.startswith("\\begin", i):
            depth += 1
        elif s.startswith("\\end", i):
            depth = max(0, depth - 1)
        elif s.startswith("\\{", i) or s.startswith("\\langle", i):
            yield i, depth
            depth += 1
            i += 2
            continue
        elif s.startswith("\\}", i) or s.startswith("\\rangle", i):
            depth = max(0, depth - 1)
            yield i, depth
            i += 2
            continue
        ch = s[i]
        if ch == "\\":
            m = re.match(r"\\[A-Za-z]+", s[i:])
            step = m.end() if m else 2
            for k in range(step):
                if i + k < n:
                    yield i + k, depth
            i += step
            continue
        if ch in "([{":
            yield i, depth
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
            yield i, depth
        else:
            yield i, depth
        i += 1


def _wraps(s: str, opener_len: int) -> bool:
    """True when the bracket opening ``s`` closes only at its very end."""
    for i, depth in _depth_walk(s):
        if depth == 0 and opener_len <= i < len(s) - opener_len:
            return False
    return True


def _top_level_chars(s: str) -> str:
    return "".join(s[i] for i, depth in _depth_walk(s) if depth == 0)


def _split_top(s: str, sep: str) -> list[str]:
    parts: list[str] = []
    start = 0
    positions = [i for i, depth in _depth_walk(s) if depth == 0 and s.startswith(sep, i)]
    if sep.startswith("\\"):
        positions = [i for i in positions if not s[i + len(sep) : i + len(sep) + 1].isalpha()]
    for i in positions:
        parts.append(s[start:i])
        start = i + len(sep)
    parts.append(s[start:])
    return [p.strip() for p in parts]


def _split_list(s: str) -> tuple[list[str], list[str]]:
    """``s`` cut at top-level commas and list words (``and``, ``or``, ``\\land``...), and the separators, in order."""
    top = {i for i, depth in _depth_walk(s) if depth == 0}
    cuts: list[tuple[int, int]] = [(i, i + 1) for i in sorted(top) if s[i] == ","]
    cuts += [(m.start(), m.end()) for m in _LIST_WORD_RE.finditer(s) if m.start() in top]
    cuts.sort()
    parts: list[str] = []
    separators: list[str] = []
    start = 0
    for a, b in cuts:
        if a < start:
            continue
        parts.append(s[start:a])
        separators.append(s[a:b])
        start = b
    parts.append(s[start:])
    return [p.strip() for p in parts], separators


def _split_relations(s: str) -> tuple[list[str], list[str]]:
    top = {i for i, depth in _depth_walk(s) if depth == 0}
    pieces: list[str] = []
    ops: list[str] = []
    start = 0
    for m in _RELATION_RE.finditer(s):
        if m.start() not in top or m.start() < start:
            continue
        pieces.append(s[start : m.start()])
        ops.append(_RELATION_OPS[m.group()])
        start = m.end()
    pieces.append(s[start:])
    return [p.strip() for p in pieces], ops
