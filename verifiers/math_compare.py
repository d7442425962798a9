"""Decide whether a parsed prediction equals a parsed gold answer.

Rules, each a known failure of looser checkers:

* exact numbers compare exactly (``1/2004!`` is not ``1/2006!``; ``10^{100}+1`` is not ``10^{100}``);
  math-verify rounds both sides to 6 decimals, which merges them;
* a decimal matches an exact value that is not equal to it only when it has at least ``min_sig_digits``
  significant digits and the exact value rounds to it at the precision it is written in
  (``4.123105625617661`` is ``\\sqrt{17}``; ``0.333333`` is ``1/3`` but ``0.333334`` is not; ``3.14`` is not
  ``\\pi``; ``0.3333`` is not ``1/3``); two decimals must be equal;
* expressions with variables are equal when their difference expands to 0, or when they agree at several
  fixed sample points (catches trig identities ``\\tan^2 y + 1 = \\sec^2 y`` that ``simplify`` misses);
* tuples keep order, sets and bare lists do not; a tuple never equals a set; a hedged answer (``3, 5`` for
  ``3``) is a list with more elements than the gold, so it is wrong; when one side names its parts
  (``AB=4, CD=5``) and the other gives bare values, the values must come in the same order (``4, 5``);
* ``x = 3`` equals ``3`` when ``x`` is a name (``k``, ``f(x)``, ``f(2)``, ``P(A)``, ``|AB|``, ``A:B``), not
  when it is an equation (``a + 3z = 0`` is not ``0``; ``|z| = 5`` is a locus, not ``5``); equations are
  equal when one is a nonzero multiple of the other, inequalities when one is a positive multiple
  (``-x > -1`` is ``x < 1``); a one-variable relation equals the interval it describes
  (``m \\geq \\sqrt 2`` is ``[\\sqrt 2, \\infty)``);
* a prediction's chain ``a = b = c`` states an answer only when its members agree, symbolically or numerically
  (``x = 12/2 = 6``; ``x = 70/9 \\approx 7.78``): ``x = 5 = 6`` and ``1 + 1 = 3`` state none, whatever the last
  member is;
* units must agree when both sides name known units; percent and degrees convert (``28\\%`` is ``28`` and
  ``0.28``; ``30^\\circ`` is ``\\pi/6``); degrees and radians are angle units that convert
  (``\\pi/3 \\text{ rad}`` is ``60^\\circ``), never equal as bare numbers (``60 \\text{ rad}`` is not ``60^\\circ``);
* general solutions are equal up to renaming the arbitrary constants that appear on one side only and not
  in the problem (:func:`equal_up_to_constants`: ``A + B/x - x`` is ``-x + C + D/x``).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass

import mpmath
import sympy
from sympy.core.function import AppliedUndef

from rlvr.verifiers.math_huge import huge_equal
from rlvr.verifiers.math_numeric import evaluate, evaluate_or_undecided
from rlvr.verifiers.math_parse import Answer, Choice, Region, Relation, Scalar, Seq, Text, is_label
from rlvr.verifiers.math_sets import solution_set
from rlvr.verifiers.math_units import bare_amount_ratios, units_compatible

_SAMPLE_POINTS = (
    sympy.Rational(7, 11), sympy.Rational(13, 9), sympy.Rational(23, 10), sympy.Rational(-5, 7), sympy.Rational(31, 17)
)
_MAX_ITEMS = 64


@dataclass(frozen=True)
class CompareConfig:
    """Tolerances. ``min_sig_digits``: a decimal needs at least this many significant digits to match an
    exact value approximately. ``exact_digits``: digits of agreement taken as exact when sympy cannot prove
    two closed forms equal."""

    min_sig_digits: int = 6
    exact_digits: int = 40


def answers_equal(gold: Answer, pred: Answer, cfg: CompareConfig = CompareConfig()) -> bool:
    """True when ``pred`` states the same answer as ``gold`` (not symmetric: the gold decides the form)."""
    if isinstance(gold, Choice) or isinstance(pred, Choice):
        return isinstance(gold, Choice) and _letter_of(pred) == gold.letter
    if isinstance(gold, Text) or isinstance(pred, Text):
        return _text_of(gold) is not None and _text_of(gold) == _text_of(pred)
    if isinstance(gold, Relation) or isinstance(pred, Relation):
        return _relations_equal(gold, pred, cfg)
    if isinstance(gold, Seq) or isinstance(pred, Seq):
        return _seqs_equal(gold, pred, cfg)
    if isinstance(gold, Region) or isinstance(pred, Region):
        return _regions_equal(gold, pred, cfg)
    return scalars_equal(gold, pred, cfg)


def _letter_of(answer: Answer) -> str | None:
    """The option letter a prediction names: ``(C)``, ``C``, or a lone lower-case ``c``."""
    if isinstance(answer, Choice):
        return answer.letter
    if isinstance(answer, Scalar) and isinstance(answer.value, sympy.Symbol) and len(str(answer.value)) == 1:
        return str(answer.value).upper()
    if isinstance(answer, Text) and len(answer.text) == 1:
        return answer.text.upper()
    return None


def _text_of(answer: Answer) -> str | None:
    if isinstance(answer, Text):
        return answer.text
    if isinstance(answer, Scalar) and isinstance(answer.value, sympy.Symbol):
        return str(answer.value).lower()
    return None


# ----------------------------------------------------------------------------------------------------
# Sequences, sets, intervals


def _seqs_equal(gold: Answer, pred: Answer, cfg: CompareConfig) -> bool:
    if isinstance(gold, Seq) and isinstance(pred, Region) and (gold.open_pair or _relations_only(gold)):
        return _regions_equal(gold, pred, cfg)
    if isinstance(pred, Seq) and isinstance(gold, Region) and (pred.open_pair or _relations_only(pred)):
        return _regions_equal(gold, pred, cfg)
    if isinstance(gold, Seq) and isinstance(pred, Seq) and (
        gold.open_pair and _relations_only(pred) or pred.open_pair and _relations_only(gold)
    ):  # "(0, 1)" against "x > 0 and x < 1"
        return _regions_equal(gold, pred, cfg)
    if isinstance(gold, Seq) and isinstance(pred, Scalar) and isinstance(pred.value, sympy.MatrixBase):
        return _vector_equal(gold, pred, cfg)
    if isinstance(pred, Seq) and isinstance(gold, Scalar) and isinstance(gold.value, sympy.MatrixBase):
        return _vector_equal(pred, gold, cfg)
    g_items = _distinct(gold.items, cfg) if isinstance(gold, Seq) else [gold]
    p_items = _distinct(pred.items, cfg) if isinstance(pred, Seq) else [pred]
    if len(g_items) > _MAX_ITEMS or len(p_items) > _MAX_ITEMS:
        return False
    if not isinstance(gold, Seq) or not isinstance(pred, Seq):
        # one side is a single answer: equal only to a one-element collection (never to a hedge)
        return len(g_items) == 1 and len(p_items) == 1 and answers_equal(g_items[0], p_items[0], cfg)
    tuple_vs_set = gold.kind == "tuple" and pred.kind == "set"
    if tuple_vs_set or gold.kind == "set" and pred.kind == "tuple" and len(gold.items) > 1:
        return False
    g_named, p_named = _names_parts(gold), _names_parts(pred)
    if g_named != p_named and not _any_assignment((pred if g_named else gold).items):
        # "AB=4, CD=5" vs "4, 5" (either way round): one side names the parts, the other gives the
        # values in the same order
        if len(gold.items) != len(pred.items):
            return False
        return all(answers_equal(g, p, cfg) for g, p in zip(gold.items, pred.items, strict=True))
    if gold.kind == "tuple" or pred.kind == "tuple" and _all_assignments(gold.items):
        if len(gold.items) != len(pred.items):
            return False
        return all(answers_equal(g, p, cfg) for g, p in zip(gold.items, pred.items, strict=True))
    if len(g_items) != len(p_items):
        return False
    return all(any(answers_equal(g, p, cfg) for p in p_items) for g in g_items) and all(
        any(answers_equal(g, p, cfg) for g in g_items) for p in p_items
    )


def _relations_only(seq: Seq) -> bool:
    """A list of conditions such as ``x < 2 or x > 3`` (no assignments like ``x = 1``)."""
    return seq.kind == "list" and all(
        isinstance(i, Relation) and not (i.ops[0] == "=" and is_label(i.parts[0])) for i in seq.items
    )


def _names_parts(seq: Seq) -> bool:
    """``AB=4, CD=5``: two or more assignments to different names (not ``x = 1 or x = 2``, two roots)."""
    labels = [i.parts[0] for i in seq.items if isinstance(i, Relation) and i.ops == ("=",) and is_label(i.parts[0])]
    return len(seq.items) >= 2 and len(labels) == len(seq.items) and len(set(labels)) == len(labels)


def _any_assignment(items: tuple[Answer, ...]) -> bool:
    return any(isinstance(i, Relation) and is_label(i.parts[0]) for i in items)


def _all_assignments(items: tuple[Answer, ...]) -> bool:
    return all(isinstance(i, Relation) and is_label(i.parts[0]) for i in items)


def _distinct(items: tuple[Answer, ...], cfg: CompareConfig) -> list[Answer]:
    out: list[Answer] = []
    for item in items[: _MAX_ITEMS + 1]:
        if not any(item == seen or answers_equal(seen, item, cfg) for seen in out):
            out.append(item)
    return out


def _vector_equal(seq: Seq, matrix: Scalar, cfg: CompareConfig) -> bool:
    m = matrix.value
    if seq.kind != "tuple" or 1 not in m.shape or len(seq.items) != len(m):
        return False
    return all(
        answers_equal(Scalar(v, matrix.decimal_digits), item, cfg) for v, item in zip(list(m), seq.items, strict=True)
    )


def _to_set(answer: Answer) -> sympy.Set | None:
    if isinstance(answer, Region):
        return answer.value
    if isinstance(answer, Seq) and answer.open_pair:
        a, b = answer.items
        if isinstance(a, Scalar) and isinstance(b, Scalar):
            return sympy.Interval.open(a.value, b.value)
    if isinstance(answer, Relation):
        return _relation_to_set(answer)
    if isinstance(answer, Seq) and answer.kind == "list" and all(isinstance(i, Relation) for i in answer.items):
        sets = [_relation_to_set(i) for i in answer.items if isinstance(i, Relation)]  # "x < 2 or x > 3"
        if any(s is None for s in sets):
            return None
        if any("=" in i.ops for i in answer.items if isinstance(i, Relation)):
            return sympy.Union(*sets)  # "x = 1 and x = 2": the solutions listed
        # conditions: "and" is both ("x > 0 and x < 1" is (0, 1), not every real), "or" either; commas do not say
        if answer.joined == "and":
            return sympy.Intersection(*sets)
        return sympy.Union(*sets) if answer.joined == "or" else None
    if isinstance(answer, Seq) and answer.kind in ("set", "list") and all(isinstance(i, Scalar) for i in answer.items):
        return sympy.FiniteSet(*[i.value for i in answer.items if isinstance(i, Scalar)])
    return None


def _regions_equal(gold: Answer, pred: Answer, cfg: CompareConfig) -> bool:
    a, b = _to_set(gold), _to_set(pred)
    if a is None or b is None:
        return False
    if a == b:
        return True
    if isinstance(a, sympy.Interval) and isinstance(b, sympy.Interval):
        return (
            a.left_open == b.left_open
            and a.right_open == b.right_open
            and _values_equal(a.start, b.start, None, None, cfg)
            and _values_equal(a.end, b.end, None, None, cfg)
        )
    return _sets_equal(a, b, cfg)


def _sets_equal(a: sympy.Set, b: sympy.Set, cfg: CompareConfig) -> bool:
    """sympy finds the two sets equal, and their boundary points are equal numbers pairwise (sympy orders and
    compares endpoints at limited precision, so ``x > 1 + e^{-1000}`` would be ``x > 1``)."""
    if a == b:
        return True
    try:
        if not a.symmetric_difference(b).is_empty:
            return False
        ends_a, ends_b = a.boundary, b.boundary
    except Exception:  # noqa: BLE001
        return False
    if not (isinstance(ends_a, sympy.FiniteSet) and isinstance(ends_b, sympy.FiniteSet)):
        return True
    if len(ends_a) != len(ends_b):
        return False
    try:
        ordered = [sorted(ends, key=_real_key) for ends in (ends_a, ends_b)]
    except TypeError:
        return False
    return all(_values_equal(x, y, None, None, cfg) for x, y in zip(*ordered, strict=True))


def _real_key(value: sympy.Basic) -> mpmath.mpf:
    number = evaluate(value, 30) if isinstance(value, sympy.Expr) and not value.free_symbols else None
    if number is None:
        raise TypeError(f"not a number: {value}")
    return number.real


# ----------------------------------------------------------------------------------------------------
# Relations


def _relations_equal(gold: Answer, pred: Answer, cfg: CompareConfig) -> bool:
    if isinstance(gold, Relation) and isinstance(pred, Relation):
        return _both_relations_equal(gold, pred, cfg)
    if isinstance(gold, Relation):
        values = _chain_values(gold)
        if values is not None:  # "x = 3", "k \\in [0, 1]", "z = 1 + 1 = 2": the gold's value
            return answers_equal(values[0], pred, cfg)
        if isinstance(pred, (Region, Seq)):
            return _regions_equal(gold, pred, cfg)
        return False
    assert isinstance(pred, Relation)
    if all(op in ("=", "~", "in") for op in pred.ops):  # "x = 5+5+1 = 11", "x = 1/3 \\approx 0.33"
        return any(answers_equal(gold, value, cfg) for value in _chain_values(pred, lenient=True) or ())
    if isinstance(gold, (Region, Seq)):
        return _regions_equal(gold, pred, cfg)
    return False


def _chain_values(rel: Relation, lenient: bool = False) -> list[Answer] | None:
    """What an equality chain says the answer is, or None when it is an equation to compare as such.

    ``x = 3`` and ``k \\in S`` (a name on the left) give their right side; a gold chain of two or more ``=``
    (``1 + 1 = 2 = z``... a computation) gives its last step; with ``\\approx`` the exact value before it
    counts. ``lenient`` (a prediction) reads any chain, ``1 + 1 = 2`` included, but only one whose members agree
    (:func:`_agreeing_members`): ``x = 5 = 6`` and ``1 + 1 = 3`` contradict themselves and are no answer.
    """
    if not all(op in ("=", "~", "in") for op in rel.ops):
        return None
    named = is_label(rel.parts[0])
    if lenient:
        return _agreeing_members(rel, named)
    if not (named or len(rel.ops) >= 2 or _numeric_identity(rel)):
        return None
    if "~" not in rel.ops:
        return [rel.parts[-1]]
    k = rel.ops.index("~")
    exact = rel.parts[k + 1] if k == 0 and named else rel.parts[k]
    return [exact]


def _agreeing_members(rel: Relation, named: bool) -> list[Answer] | None:
    """The values a prediction's chain states (after the name, if it starts with one), when they agree: each
    ``=`` joins equal members (symbolically or numerically; ``70/9 = 7.78`` also counts, a decimal that is the
    exact value rounded), each ``\\approx`` an approximation of the last exact member (rounded or cut off at its
    last digit). Returns the exact members and the correctly rounded approximations, any of which is the answer
    (``x = 12/2 = 6``, ``x = 1/3 \\approx 0.33``); None when two members disagree (``x = 5 = 6``, ``1 + 1 = 3``,
    ``x = 1/3 \\approx 1.3``) or a member cannot be read."""
    members, ops = (rel.parts[1:], rel.ops[1:]) if named else (rel.parts, rel.ops)
    if "in" in ops:
        return None
    if rel.congruence:
        return [members[-1]]  # "2^{100} \\equiv 1 \\mod 3": the residue; its members agree modulo 3, not as numbers
    values = [members[0]]
    exact = members[0]
    for op, prev, nxt in zip(ops, members[:-1], members[1:], strict=True):
        if op == "=":
            if _same_member(prev, nxt):
                values.append(nxt)
                exact = nxt if prev is exact else exact
            elif _decimal_rounding(nxt, prev) or _decimal_rounding(prev, nxt):
                values.append(nxt)
            elif _substitution(rel, named, prev, nxt):
                values.append(nxt)
                exact = nxt
            else:
                return None
        elif _is_rounding_of(nxt, exact):
            values.append(nxt)
        elif not _approximates(nxt, exact):
            return None
    return values


def _substitution(rel: Relation, named: bool, formula: Answer, value: Answer) -> bool:
    """``A = \\frac{1}{2}bh = 12``: a formula in the problem's quantities, then its value at the given ones, which
    cannot be checked here. Only in an assignment (not of a quantity the formula holds: ``x = 2x = 6`` is an
    equation) or as the first of three or more members (``\\frac12 bh = \\frac12 (6)(4) = 12``); ``x + 1 = 3``
    and ``(x+1)^2 = x^2 + 1`` are equations, not substitutions."""
    if not (isinstance(formula, Scalar) and isinstance(value, Scalar)) or formula.too_large or value.too_large:
        return False
    if not isinstance(formula.value, sympy.Expr) or not isinstance(value.value, sympy.Expr):
        return False
    if not formula.value.free_symbols or value.value.free_symbols:
        return False
    if named:
        label = rel.parts[0]
        names = label.value.free_symbols if isinstance(label, Scalar) and isinstance(label.value, sympy.Basic) else set()
        return not names & formula.value.free_symbols
    return len(rel.parts) >= 3 and formula is rel.parts[0]


def _decimal_rounding(approx: Answer, exact: Answer) -> bool:
    """``approx`` is a decimal, ``exact`` is written without decimals, and the decimal is it correctly rounded."""
    return (
        isinstance(approx, Scalar) and isinstance(exact, Scalar) and approx.decimal_digits is not None
        and exact.decimal_digits is None and _is_rounding_of(approx, exact)
    )


def _same_member(a: Answer, b: Answer) -> bool:
    return a == b or answers_equal(a, b) or answers_equal(b, a)


def _numeric_identity(rel: Relation) -> bool:
    """``\\binom{5}{2} = 10``: two closed-form numbers that are equal; the right side is the answer."""
    if rel.ops != ("=",) or not _sides_are_scalars(rel):
        return False
    lhs, rhs = (p.value for p in rel.parts if isinstance(p, Scalar))
    if lhs.free_symbols or rhs.free_symbols:
        return False
    return _numbers_equal(lhs, rhs, None, None, CompareConfig())


def _approximates(approx: Answer, exact: Answer) -> bool:
    """``approx`` is ``exact`` to the digits it is written with, rounded or cut off (``2/3 \\approx 0.666``):
    within one unit of its last digit."""
    return _is_rounding_of(approx, exact, tolerance=sympy.Integer(1))


def _is_rounding_of(approx: Answer, exact: Answer, tolerance: sympy.Rational = sympy.Rational(1, 2)) -> bool:
    if not (isinstance(approx, Scalar) and isinstance(exact, Scalar)) or approx.too_large or exact.too_large:
        return False
    a, e = approx.value, exact.value
    if not (isinstance(a, sympy.Expr) and isinstance(e, sympy.Expr)) or a.free_symbols or e.free_symbols:
        return False
    if approx.decimal_digits is None:  # an integer approximation: within half a unit (``tolerance`` units)
        a_value, e_value = evaluate(a, 30), evaluate(e, 30)
        if a_value is None or e_value is None:
            return False
        with mpmath.workdps(30):
            return bool(abs(a_value - e_value) <= mpmath.mpf(int(tolerance.p)) / int(tolerance.q))
    return rounds_to(a, approx.decimal_digits, e, tolerance=tolerance)


def rounds_to(
    approx: sympy.Expr, sig_digits: int, exact: sympy.Expr, *, tolerance: sympy.Rational = sympy.Rational(1, 2)
) -> bool:
    """True when ``exact`` rounded to ``sig_digits`` significant digits is ``approx``: the decimal is the
    exact value at the precision it is written in (``0.333333`` for ``1/3``, not ``0.333334``; ``0.666667``
    for ``2/3``). Exact arithmetic: ``|approx - exact| <= tolerance`` units of the decimal's last digit.

    Args:
        approx: the decimal's value (an exact rational for a plain decimal literal); nonzero.
        sig_digits: significant digits it was written with (``0.3330`` has 4).
        exact: the exact value it claims to approximate; a number, no free symbols.
        tolerance: units of the last digit; 1/2 (the default) is a correct rounding, 1 also admits a cut-off.
    """
    if sig_digits < 1:
        raise ValueError(f"sig_digits must be >= 1, got {sig_digits}")
    value = evaluate(approx, 30)
    if value is None or value == 0:
        return False
    with mpmath.workdps(30):
        exponent = int(mpmath.floor(mpmath.log10(abs(value))))
    if approx.is_Rational:  # exact decade, so 0.1 or 1000.0 on a power of ten cannot be off by one
        magnitude = abs(sympy.Rational(approx))
        while magnitude >= sympy.Integer(10) ** (exponent + 1):
            exponent += 1
        while magnitude < sympy.Integer(10) ** exponent:
            exponent -= 1
    half_unit = tolerance * sympy.Integer(10) ** (exponent - sig_digits + 1)
    diff = evaluate(approx - exact, sig_digits + 30)
    half = evaluate(half_unit, 30)
    if diff is None or half is None:
        return False  # the exact side is not a finite number
    with mpmath.workdps(sig_digits + 30):
        return bool(abs(diff) <= abs(half) * (1 + mpmath.mpf(10) ** -12))


def _both_relations_equal(gold: Relation, pred: Relation, cfg: CompareConfig) -> bool:
    g_values = _chain_values(gold)
    p_values = _chain_values(pred, lenient=True)
    g_named = g_values is not None and is_label(gold.parts[0])
    p_named = p_values is not None and is_label(pred.parts[0])
    if g_named and p_named and _labels_equal(gold.parts[0], pred.parts[0]):  # "x = 3" vs "x = 1 + 2 = 3"
        assert g_values is not None and p_values is not None
        return any(answers_equal(g_values[0], v, cfg) for v in p_values)
    if g_values is not None and not g_named and p_values is not None:  # computation chains: last steps
        if len(gold.ops) >= 2:
            return any(answers_equal(g_values[0], v, cfg) for v in p_values)
    if g_named and not p_named and len(pred.ops) > 1 and all(op == "=" for op in pred.ops) and (
        _agreeing_members(Relation(pred.ops[1:], pred.parts[1:]), False) is not None  # "y = 2x = 3x" contradicts
    ):
        return answers_equal(gold, Relation(("=",), (pred.parts[0], pred.parts[-1])), cfg)
    if len(gold.ops) == len(pred.ops) == 1 and _sides_are_scalars(gold) and _sides_are_scalars(pred):
        if _single_relations_equal(gold, pred):
            return True
    if gold.ops == pred.ops and len(gold.ops) > 1 and all(_sides_are_scalars(r) for r in (gold, pred)):
        pairs = zip(_chain_links(gold), _chain_links(pred), strict=True)
        if all(_single_relations_equal(g, p) for g, p in pairs):
            return True
    a, b = _relation_to_set(gold), _relation_to_set(pred)
    if a is not None and b is not None and "=" not in gold.ops:
        return _sets_equal(a, b, cfg)
    return False


def _labels_equal(a: Answer, b: Answer) -> bool:
    return a == b or (isinstance(a, Scalar) and isinstance(b, Scalar) and sympy.simplify(a.value - b.value) == 0)


def _sides_are_scalars(rel: Relation) -> bool:
    return all(
        isinstance(p, Scalar) and not p.too_large and not isinstance(p.value, sympy.MatrixBase) for p in rel.parts
    )


def _chain_links(rel: Relation) -> list[Relation]:
    return [Relation((op,), (rel.parts[i], rel.parts[i + 1])) for i, op in enumerate(rel.ops)]


def _normal_form(rel: Relation) -> tuple[str, sympy.Expr]:
    """``(kind, f)`` with the relation meaning ``f kind 0``; ``<``/``<=`` are flipped to ``>``/``>=``."""
    op = rel.ops[0]
    lhs, rhs = (p.value for p in rel.parts if isinstance(p, Scalar))
    if op in ("<", "<="):
        return (">" if op == "<" else ">="), rhs - lhs
    return op, lhs - rhs


def _single_relations_equal(gold: Relation, pred: Relation) -> bool:
    g_kind, f = _normal_form(gold)
    p_kind, h = _normal_form(pred)
    if g_kind != p_kind:
        return False
    ratio = _constant_ratio(f, h)
    if ratio is None or ratio == 0:
        return False
    if g_kind in ("=", "!="):
        return True
    return ratio.real > 0 and abs(ratio.imag) <= abs(ratio.real) * mpmath.mpf(10) ** -20


def _constant_ratio(f: sympy.Expr, h: sympy.Expr) -> mpmath.mpc | None:
    """``f / h`` when it is the same number at every sample point (one equation a multiple of the other).

    Exact at each point, not within a tolerance: with ``r = f(p_0) / h(p_0)``, every other point must give
    ``f(p) h(p_0) - h(p) f(p_0) = 0`` (evaluated as one number, so ``x + e^{-1000} = 1`` is not ``x = 1``)."""
    free = f.free_symbols | h.free_symbols
    first: tuple[sympy.Expr, sympy.Expr] | None = None
    ratio = None
    agreeing = 0
    for point in _sample_points(free):
        try:
            f_k, h_k = f.subs(point), h.subs(point)
        except (TypeError, ValueError, ArithmeticError, RecursionError):
            continue
        (f_value, f_undecided), (h_value, h_undecided) = (evaluate_or_undecided(e, 30) for e in (f_k, h_k))
        if f_undecided or h_undecided:
            return None
        if f_value is None or h_value is None or h_value == 0:
            continue
        if first is None:
            first, ratio, agreeing = (f_k, h_k), f_value / h_value, 1
            continue
        cross = evaluate(f_k * first[1] - h_k * first[0], 30)
        if cross is None or cross != 0:
            return None
        agreeing += 1
    if ratio is not None and agreeing >= (3 if free else 1):
        return ratio
    try:  # too few usable points: ask sympy
        exact = sympy.cancel(sympy.simplify(f / h))
    except Exception:  # noqa: BLE001
        return None
    if not isinstance(exact, sympy.Expr) or exact.free_symbols or not exact.is_finite:
        return None
    return evaluate(exact, 30)


def _relation_to_set(rel: Relation) -> sympy.Set | None:
    """The solution set of a one-variable relation over the reals (``x \\geq 2`` -> ``[2, oo)``,
    ``x \\in [0, 1]`` -> ``[0, 1]``); None for assignments, several variables, or what sympy cannot solve."""
    if rel.ops == ("in",) and is_label(rel.parts[0]):
        target = rel.parts[1]
        return target.value if isinstance(target, Region) else None
    if not _sides_are_scalars(rel) or rel.ops == ("=",) and is_label(rel.parts[0]):
        return None
    return solution_set(rel.ops, [p.value for p in rel.parts if isinstance(p, Scalar)])


# ----------------------------------------------------------------------------------------------------
# Scalars


def scalars_equal(gold: Scalar, pred: Scalar, cfg: CompareConfig = CompareConfig()) -> bool:
    """Compare two scalars: base subscripts, units, percent and degrees first, then the values."""
    if gold.too_large or pred.too_large:  # exact, through the canonical power form (never evaluated, never printed)
        if gold.percent != pred.percent or gold.degree != pred.degree or not units_compatible(pred.unit, gold.unit)[0]:
            return False
        return huge_equal(gold.value, pred.value) is True
    if gold.base is not None or pred.base is not None:
        if gold.base is not None and pred.base is not None:
            return gold.base == pred.base and gold.value == pred.value
        based = gold if gold.base is not None else pred
        other = pred if gold.base is not None else gold
        return other.source.strip() == based.digits
    if gold.degree or pred.degree or _in_radians(gold) or _in_radians(pred):
        angles = _angles_equal(gold, pred, cfg)
        if angles is not None:
            return angles
    ok, ratio = units_compatible(pred.unit, gold.unit)
    if not ok:
        return False
    p_value = pred.value * sympy.Rational(ratio.numerator, ratio.denominator) if ratio != 1 else pred.value
    g_value = gold.value
    candidates = [p_value]
    # "50 cents" for a bare 0.50: a bare amount is in dollars
    candidates += [pred.value * sympy.Rational(r.numerator, r.denominator) for r in bare_amount_ratios(pred.unit, gold.unit)]
    if gold.percent and not pred.percent:
        candidates.append(p_value * 100)
    elif pred.percent and not gold.percent:
        candidates.append(p_value / 100)
    if gold.degree != pred.degree:
        degree_side_is_gold = gold.degree
        other = pred.value if degree_side_is_gold else gold.value
        if _has_pi(other):
            if degree_side_is_gold:
                g_value = g_value * sympy.pi / 180
            else:
                candidates = [c * sympy.pi / 180 for c in candidates]
    return any(_values_equal(g_value, c, gold.decimal_digits, pred.decimal_digits, cfg) for c in candidates)


_ANGLE = (("angle", 1),)


def _in_radians(s: Scalar) -> bool:
    return s.unit is not None and s.unit.known and s.unit.dimension == _ANGLE


def _angles_equal(gold: Scalar, pred: Scalar, cfg: CompareConfig) -> bool | None:
    """Angle units are units: degrees against radians convert (``\\pi/3`` rad is ``60^\\circ``), so the bare
    numbers never match (``60`` rad is not ``60^\\circ``); an angle is never a length or a mass. None when at
    most one side names an angle unit and the other none (the general rules decide: a bare number is read in
    the named unit, or as radians where it holds ``\\pi``)."""
    sides = []
    for s in (gold, pred):
        other_unit = s.unit is not None and s.unit.known and not _in_radians(s)
        if s.degree and other_unit:
            return False  # "60^\\circ cm"
        sides.append("deg" if s.degree else "rad" if _in_radians(s) else "other" if other_unit else None)
    g_kind, p_kind = sides
    if g_kind is None or p_kind is None or g_kind == p_kind:
        return None
    if "other" in sides:
        return False  # "60^\\circ" against "60 cm"
    g_value = gold.value * sympy.pi / 180 if g_kind == "deg" else gold.value
    p_value = pred.value * sympy.pi / 180 if p_kind == "deg" else pred.value
    if gold.percent != pred.percent:
        return False
    return _values_equal(g_value, p_value, gold.decimal_digits, pred.decimal_digits, cfg)


def _has_pi(value: sympy.Basic) -> bool:
    return isinstance(value, sympy.Basic) and value.has(sympy.pi)


def _values_equal(g: sympy.Basic, p: sympy.Basic, g_dec: int | None, p_dec: int | None, cfg: CompareConfig) -> bool:
    if isinstance(g, sympy.MatrixBase) or isinstance(p, sympy.MatrixBase):
        if not (isinstance(g, sympy.MatrixBase) and isinstance(p, sympy.MatrixBase)) or g.shape != p.shape:
            return False
        return all(_values_equal(a, b, g_dec, p_dec, cfg) for a, b in zip(g, p, strict=True))
    if not isinstance(g, sympy.Expr) or not isinstance(p, sympy.Expr):
        return g == p
    if g == p:
        return True
    if g.free_symbols or p.free_symbols:
        return _symbolic_equal(g, p, cfg)
    return _numbers_equal(g, p, g_dec, p_dec, cfg)


def _numbers_equal(g: sympy.Expr, p: sympy.Expr, g_dec: int | None, p_dec: int | None, cfg: CompareConfig) -> bool:
    if g.is_Rational and p.is_Rational:
        if g == p:
            return True
        return _decimal_close(g, p, g_dec, p_dec, cfg)
    if g.is_infinite or p.is_infinite or g.has(sympy.zoo, sympy.nan) or p.has(sympy.zoo, sympy.nan):
        return g == p
    # arbitrary precision, unbounded exponent: e^{1000} is a number, not inf; a side that does not evaluate to a
    # finite number is never equal to anything (math_numeric)
    digits = min(cfg.exact_digits, 300)
    a, b = evaluate(g, digits + 20), evaluate(p, digits + 20)
    if a is None or b is None:
        return False
    # sympy's evalf finds the digits of a difference however small (it raises its precision where terms cancel, up
    # to a limit set by the magnitudes involved), so a difference with significant digits is proven nonzero
    # (42 + e^{-1000} is not 42; 1 - \tanh(1000) is 5e-869), one that cancels to no significant digit within the
    # limit is zero, and one that cancels below a capped limit is undecided: not equal (math_numeric)
    diff = evaluate(g - p, digits + 20)
    if diff is None:
        return False
    if diff == 0:
        return True
    return _decimal_close(g, p, g_dec, p_dec, cfg)


def _decimal_close(g: sympy.Expr, p: sympy.Expr, g_dec: int | None, p_dec: int | None, cfg: CompareConfig) -> bool:
    """One side has decimals with enough significant digits, the other none: equal when the exact value
    rounds to the decimal at the precision it is written in (:func:`rounds_to`)."""
    if (g_dec is None) == (p_dec is None):
        return False  # both exact (already compared exactly) or both decimals (must be equal)
    digits = g_dec if g_dec is not None else p_dec
    assert digits is not None
    if digits < cfg.min_sig_digits:
        return False
    exact = p if g_dec is not None else g
    if exact.is_Rational and _terminating_digits(exact) is not None and _terminating_digits(exact) <= digits:
        return False  # 3.0000001 is not 3: an exact value this short could have been written exactly
    approx = g if g_dec is not None else p
    return rounds_to(approx, digits, exact)


def _terminating_digits(value: sympy.Rational) -> int | None:
    """Significant digits of ``value`` written as a terminating decimal, None if it repeats."""
    q = int(value.q)
    twos = fives = 0
    while q % 2 == 0:
        q //= 2
        twos += 1
    while q % 5 == 0:
        q //= 5
        fives += 1
    if q != 1:
        return None
    scaled = abs(int(value.p)) * 10 ** max(twos, fives) // int(value.q)
    return len(str(scaled).strip("0")) or 1


def _symbolic_equal(g: sympy.Expr, p: sympy.Expr, cfg: CompareConfig) -> bool:
    """Equal when they agree at every sample point (at least 3 usable) or sympy proves ``g - p == 0``.

    Sample points first: substituting numbers is cheap where ``expand``/``simplify`` can take seconds
    (``(a+b+c+d+e)^{40}``) or fail (``\\tan^2 y + 1`` vs ``\\sec^2 y``)."""
    if g.has(sympy.Sum, sympy.Product, sympy.Integral, sympy.Derivative, AppliedUndef) or p.has(
        sympy.Sum, sympy.Product, sympy.Integral, sympy.Derivative, AppliedUndef
    ):
        return _simplify_zero(g - p)  # sample values would make bounds and functions meaningless
    # the difference itself at each point: evalf finds its digits however small, so x + e^{-1000} is not x and
    # e^{-1000} x is not 0, while an identity evaluates to zero (no significant digit)
    points: list[mpmath.mpc] = []
    for point in _sample_points(g.free_symbols | p.free_symbols):
        try:
            at_point = (g - p).subs(point)
        except (TypeError, ValueError, ArithmeticError, RecursionError):
            continue
        diff, undecided = evaluate_or_undecided(at_point, 30)
        if undecided or diff is not None and diff != 0:
            return False  # nonzero somewhere, or a cancellation too deep to decide (no simplify on such numbers)
        if diff is not None:
            points.append(diff)
    if len(points) >= 3:
        return True
    return _simplify_zero(g - p)


def _sample_points(free: set[sympy.Basic]):
    """Fixed, distinct points (one rational value per symbol)."""
    symbols = sorted(free, key=str)
    for shift in range(len(_SAMPLE_POINTS)):
        yield {s: _SAMPLE_POINTS[(shift + k) % len(_SAMPLE_POINTS)] + k for k, s in enumerate(symbols)}


def _simplify_zero(e: sympy.Expr) -> bool:
    try:
        return sympy.simplify(e) == 0
    except Exception:  # noqa: BLE001
        return False


# ----------------------------------------------------------------------------------------------------
# Arbitrary constants

_MAX_RENAMED = 4
# Names that read as arbitrary constants: capitals (C, D, K), subscripted names (C_1, c_2, k_1) and the
# integer constants n, k, m, c. Lower-case a, b, x, y... are parameters or variables and are never renamed.
_CONSTANT_NAME = re.compile(r"^(?:[A-Z]|[A-Za-z]_\{?[A-Za-z0-9]{1,3}\}?|[ckmn])$")


def equal_up_to_constants(
    gold: Answer, pred: Answer, cfg: CompareConfig = CompareConfig(), problem: str | None = None
) -> bool:
    """True when ``pred`` equals ``gold`` after renaming its arbitrary constants: ``Y(x) = A + B/x - x`` is
    ``Y(x) = -x + C + D/x``; ``y = A e^{-x} + B e^{x}`` is ``y = C_1 e^{x} + C_2 e^{-x}``.

    Only constants that appear on one side alone are renamed, one to one (up to 4, every pairing tried),
    only names that read as constants (see ``_CONSTANT_NAME``), and only when both sides share a variable
    (``x``, or the ``y`` of ``y = ...``): two bare names ``K`` and ``M`` are not a renamed solution. A name that appears in ``problem``
    (the question, when known) is given, not arbitrary, and is never renamed; without the problem, a
    renamed given parameter would pass, so pass it where you have it.
    """
    g_free, p_free = _free_symbols(gold), _free_symbols(pred)
    if not g_free & p_free:
        return False  # a general solution has a variable both sides share; "K" vs "M" is two names
    g_only = sorted((s for s in g_free - p_free if _renamable(s, problem)), key=str)
    p_only = sorted((s for s in p_free - g_free if _renamable(s, problem)), key=str)
    if not g_only or len(g_only) != len(p_only) or len(g_only) > _MAX_RENAMED:
        return False
    if len(g_only) != len(g_free - p_free) or len(p_only) != len(p_free - g_free):
        return False  # a one-sided name that is not a free constant (a variable, a given): no renaming
    for perm in itertools.permutations(g_only):
        renamed = _subs_answer(pred, dict(zip(p_only, perm, strict=True)))
        if renamed is not None and answers_equal(gold, renamed, cfg):
            return True
    return False


def _renamable(symbol: sympy.Symbol, problem: str | None) -> bool:
    name = str(symbol)
    if not _CONSTANT_NAME.match(name):
        return False
    if problem is None:
        return True
    base, _, sub = name.partition("_")
    sub = sub.strip("{}")
    spelled = rf"{re.escape(base)}_\{{?{re.escape(sub)}\}}?" if sub else re.escape(base)
    # where the problem writes math in $...$, only its math names things ("A ball..." names nothing)
    math = [m.group() for m in _PROBLEM_MATH.finditer(problem)]
    where = " ".join(math) if math else problem
    return re.search(rf"(?<![A-Za-z\\]){spelled}(?![A-Za-z0-9])", where) is None


_PROBLEM_MATH = re.compile(r"\$\$[^$]{1,3000}\$\$|\$[^$]{1,3000}\$|\\\(.{1,3000}?\\\)|\\\[.{1,3000}?\\\]", re.DOTALL)


def _free_symbols(answer: Answer) -> set[sympy.Symbol]:
    if isinstance(answer, Scalar):
        return set(answer.value.free_symbols) if isinstance(answer.value, sympy.Basic) else set()
    if isinstance(answer, Region):
        return set(answer.value.free_symbols)
    if isinstance(answer, (Seq, Relation)):
        items = answer.items if isinstance(answer, Seq) else answer.parts
        return set().union(*(_free_symbols(i) for i in items))
    return set()


def _subs_answer(answer: Answer, mapping: dict[sympy.Symbol, sympy.Symbol]) -> Answer | None:
    """``answer`` with its symbols renamed (simultaneously); None when sympy cannot substitute."""
    try:
        if isinstance(answer, Scalar):
            if answer.too_large:
                return None
            return dataclasses.replace(answer, value=answer.value.subs(mapping, simultaneous=True))
        if isinstance(answer, Region):
            return Region(answer.value.subs(mapping, simultaneous=True))
        if isinstance(answer, Seq):
            items = [_subs_answer(i, mapping) for i in answer.items]
            return None if any(i is None for i in items) else dataclasses.replace(answer, items=tuple(items))
        if isinstance(answer, Relation):
            parts = [_subs_answer(p, mapping) for p in answer.parts]
            return None if any(p is None for p in parts) else dataclasses.replace(answer, parts=tuple(parts))
    except (TypeError, ValueError, AttributeError):
        return None
    return answer
