"""Numbers too large to evaluate: bound their size, and compare them exactly without evaluating them.

:func:`digits_bound` says, cheaply, how many digits evaluating an expression would create; above
:data:`MAX_DIGITS` the parser keeps the expression unevaluated (``9^{9^{9^9}}`` has about 10^{370,000,000} digits).

Such a number can still be compared exactly. :func:`canonical` rewrites an expression built from integers,
``+``, ``\\times`` and powers (``e``, ``\\pi``, symbols and other functions kept as opaque factors) as a sum of
terms ``c \\cdot \\prod b_i^{E_i}``: ``c`` a rational, each base ``b_i`` a prime or an opaque factor, each exponent
``E_i`` itself such a sum (so towers nest). The form is unique for the cases that matter: a composite base is
factored (``9^{9^{9^9}}`` is ``3^{2 \\cdot 9^{9^9}}``), a coefficient's powers of a base already present move into
its exponent (``2 \\cdot 2^N`` is ``2^{N+1}``), a prime to a small integer power is a coefficient, and like terms are
collected (``x - x`` is 0 however large ``x`` is). Then:

* :func:`reduce_huge` gives back a small expression when the large parts cancel (``2^{2^{64}} - 2^{2^{64}} + 1``
  is ``1``), or None;
* :func:`huge_equal` decides ``a = b``: True when ``a - b`` is the empty sum; False when it is one nonzero term
  (a nonzero rational times positive factors), or when one term outweighs all the others (compared through
  logarithms at fixed precision, ``3^{2A} - 3^A`` is not 0); None (undecided) otherwise.

All work is bounded (terms per sum, operations per call, sizes of the integers factored): on anything else the
answer is None, never a hang.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import mpmath
import sympy

MAX_DIGITS = 20_000
"""Largest exact number (in decimal digits) evaluation may create; 2004! has 5,736."""

_SMALL_DIGITS = 2_000  # a prime power below this many digits is a coefficient, not a factor
_MAX_TERMS = 64
_MAX_OPS = 20_000
_MAX_FACTORED = 10**18  # integers factored into primes; larger ones stay opaque factors
_LOG_PREC = 160  # bits for the magnitude comparison
_MAX_EXPONENT_VALUE = mpmath.mpf(10) ** 15  # b^x with |x| above this is not worked out numerically


class _GiveUp(Exception):
    """The expression is outside what the canonical form covers, or past the work bound."""


# A value: frozenset of (monomial, coefficient); a monomial: frozenset of (base, exponent value).
Val = frozenset
_ZERO: Val = frozenset()
_EMPTY_MONO: frozenset = frozenset()


def _num(r: Fraction) -> Val:
    return _ZERO if r == 0 else frozenset({(_EMPTY_MONO, r)})


def _const(v: Val) -> Fraction | None:
    """The rational ``v`` is, when it has no factors."""
    if not v:
        return Fraction(0)
    if len(v) == 1:
        ((mono, c),) = v
        if not mono:
            return c
    return None


@dataclass
class _Work:
    """Operation budget and the sympy node behind each opaque factor (to rebuild an expression)."""

    ops: int = 0
    nodes: dict = field(default_factory=dict)

    def tick(self, n: int = 1) -> None:
        self.ops += n
        if self.ops > _MAX_OPS:
            raise _GiveUp("work bound")


# ----------------------------------------------------------------------------------------------------
# Size bound


def digits_bound(expr: sympy.Basic) -> float:
    """Upper bound on the decimal digits of exact numbers that evaluating ``expr`` creates (``inf`` for
    power towers and exponents above 10^7). Cheap: never evaluates anything large."""
    try:
        return _bound(expr)
    except (OverflowError, RecursionError, ValueError, TypeError):
        return math.inf


def _bound(e: sympy.Basic) -> float:
    if isinstance(e, sympy.MatrixBase):
        return max((_bound(x) for x in e), default=1.0)
    if e.is_Integer:
        return int(e).bit_length() * 0.30103 + 1
    if e.is_Rational:
        return (int(e.p).bit_length() + int(e.q).bit_length()) * 0.30103 + 2
    if e.is_Atom:
        return 1.0
    if isinstance(e, sympy.Pow):
        base, exponent = e.args
        b, x = _bound(base), _bound(exponent)
        if base in (sympy.S.Zero, sympy.S.One, sympy.S.NegativeOne) or not exponent.is_number:
            return b + x
        if x > 400:  # the exponent alone is astronomically large
            return math.inf
        value = abs(complex(exponent.evalf(15)))
        if value > 1e7:
            return math.inf
        if base.is_Rational:  # digits of p**n and q**n: n * log10 of the larger
            b = math.log10(max(abs(int(base.p)), abs(int(base.q)), 2)) + 1e-9
        return b * max(value, 1.0) + x
    if isinstance(e, (sympy.factorial, sympy.gamma, sympy.factorial2, sympy.binomial, sympy.RisingFactorial)):
        inner = sum(_bound(a) for a in e.args)
        if inner > 400:
            return math.inf
        n = max((abs(complex(a.evalf(15))) for a in e.args if a.is_number), default=1.0)
        return math.inf if n > 1e6 else n * math.log10(max(n, 2.0)) + inner
    return sum(_bound(a) for a in e.args) + 1.0


# ----------------------------------------------------------------------------------------------------
# Public entry points


def canonical(expr: sympy.Basic) -> Val | None:
    """The canonical sum-of-power-products form of ``expr`` (see the module docstring), or None when ``expr``
    is outside it (a negative base to a huge power, a matrix, a float) or past the work bound."""
    try:
        return _canon(expr, _Work())
    except (_GiveUp, RecursionError, ValueError, TypeError, ArithmeticError):
        return None


def reduce_huge(expr: sympy.Basic) -> sympy.Basic | None:
    """``expr`` rewritten without its too-large parts when they cancel (``x^{10^{10}} - x^{10^{10}} + 1`` is
    ``1``; ``\\frac{10^{10^{10}}}{10^{10^{10} - 1}}`` is ``10``), as a sympy expression whose :func:`digits_bound`
    is at most :data:`MAX_DIGITS`; None when the result is still too large or ``expr`` is outside the form."""
    work = _Work()
    try:
        value = _canon(expr, work)
        rebuilt = _to_sympy(value, work)
    except (_GiveUp, RecursionError, ValueError, TypeError, ArithmeticError):
        return None
    if rebuilt is None or digits_bound(rebuilt) > MAX_DIGITS:
        return None
    return rebuilt


def huge_equal(a: sympy.Basic, b: sympy.Basic) -> bool | None:
    """Whether the numbers (or expressions) ``a`` and ``b`` are equal, decided exactly without evaluating them:
    True, False, or None when undecided (see the module docstring). ``9^{9^{9^9}}`` equals ``3^{2 \\cdot 9^{9^9}}``,
    not ``3^{9^{9^9}}`` nor ``3^{2 \\cdot 9^{9^9}} + 1``."""
    work = _Work()
    try:
        diff = _add(_canon(a, work), _neg(_canon(b, work)), work)
        if not diff:
            return True
        return False if _nonzero(diff) else None
    except (_GiveUp, RecursionError, ValueError, TypeError, ArithmeticError, ZeroDivisionError):
        return None


# ----------------------------------------------------------------------------------------------------
# Building the canonical form


def _canon(e: sympy.Basic, work: _Work) -> Val:
    work.tick()
    if not isinstance(e, sympy.Expr) or isinstance(e, sympy.MatrixBase):
        raise _GiveUp("not a scalar expression")
    if e.is_Rational:
        return _num(Fraction(int(e.p), int(e.q)))
    if e.is_Float:
        raise _GiveUp("a float")
    if e.is_number and not e.is_Atom and digits_bound(e) <= _SMALL_DIGITS:
        small = e.doit()
        if isinstance(small, sympy.Expr) and small.is_Rational:
            return _num(Fraction(int(small.p), int(small.q)))
        e = small
    return _structural(e, work)


def _structural(e: sympy.Basic, work: _Work) -> Val:
    if isinstance(e, sympy.Add):
        total = _ZERO
        for arg in e.args:
            total = _add(total, _canon(arg, work), work)
        return total
    if isinstance(e, sympy.Mul):
        product = _num(Fraction(1))
        for arg in e.args:
            product = _mul(product, _canon(arg, work), work)
        return product
    if isinstance(e, sympy.Pow):
        return _pow(_canon(e.args[0], work), _canon(e.args[1], work), work)
    if isinstance(e, sympy.exp):
        return _factor_power(("E",), _canon(e.args[0], work), work)
    if e is sympy.E:
        return _factor_power(("E",), _num(Fraction(1)), work)
    if e is sympy.pi:
        return _factor_power(("pi",), _num(Fraction(1)), work)
    if isinstance(e, sympy.Symbol):
        key = ("symbol", e)
        work.nodes[key] = e
        return _factor_power(key, _num(Fraction(1)), work)
    if isinstance(e, sympy.Function) and e.args:
        key = ("function", type(e).__name__, tuple(_canon(a, work) for a in e.args))
        work.nodes[key] = e
        return _factor_power(key, _num(Fraction(1)), work)
    raise _GiveUp(f"unsupported node {type(e).__name__}")


def _factor_power(base: object, exponent: Val, work: _Work) -> Val:
    return _normal_terms({(frozenset({(base, exponent)}), Fraction(1))}, work)


def _neg(v: Val) -> Val:
    return frozenset((mono, -c) for mono, c in v)


def _add(a: Val, b: Val, work: _Work) -> Val:
    terms: dict = {}
    for mono, c in list(a) + list(b):
        terms[mono] = terms.get(mono, Fraction(0)) + c
    return _normal_terms({(mono, c) for mono, c in terms.items() if c != 0}, work)


def _mul(a: Val, b: Val, work: _Work) -> Val:
    if len(a) * len(b) > _MAX_TERMS:
        raise _GiveUp("too many terms")
    terms: dict = {}
    for m1, c1 in a:
        for m2, c2 in b:
            work.tick()
            mono, c = _mono_mul(m1, m2, work), c1 * c2
            terms[mono] = terms.get(mono, Fraction(0)) + c
    return _normal_terms({(mono, c) for mono, c in terms.items() if c != 0}, work)


def _mono_mul(m1: frozenset, m2: frozenset, work: _Work) -> frozenset:
    powers = dict(m1)
    for base, exponent in m2:
        powers[base] = _add(powers[base], exponent, work) if base in powers else exponent
    return frozenset((b, x) for b, x in powers.items() if x)


def _pow(base: Val, exponent: Val, work: _Work) -> Val:
    k = _const(exponent)
    if k is not None and k.denominator == 1 and 0 <= k <= 8 and len(base) > 1:
        result = _num(Fraction(1))
        for _ in range(int(k)):
            result = _mul(result, base, work)
        return result
    if not base:
        if k is not None and k > 0:
            return _ZERO
        raise _GiveUp("zero to a non-positive power")
    if len(base) > 1:  # (a + b)^E for a large E: an opaque factor
        return _factor_power(("sum", base), exponent, work)
    ((mono, c),) = base
    if k is None or k.denominator != 1:
        # (b^a)^E = b^{aE} needs b > 0 unless a is 1 (x^{1/2} squared back is |x|, not x)
        if any(not _positive_base(b) and _const(x) != 1 for b, x in mono):
            raise _GiveUp("a power of a power of a base of unknown sign")
    sign = Fraction(1)
    if c < 0:
        if k is None or k.denominator != 1:
            raise _GiveUp("a negative base to a power that is not a small integer")
        sign, c = Fraction((-1) ** (int(k) % 2)), -c
    powers: dict = {}
    for b, x in mono:
        powers[b] = _mul(x, exponent, work)
    for part, sign_of_power in ((c.numerator, 1), (c.denominator, -1)):
        for prime, multiplicity in _factor(part).items():
            scaled = _mul(_num(Fraction(sign_of_power * multiplicity)), exponent, work)
            powers[prime] = _add(powers[prime], scaled, work) if prime in powers else scaled
    mono_out = frozenset((b, x) for b, x in powers.items() if x)
    return _normal_terms({(mono_out, sign)}, work)


def _factor(n: int) -> dict:
    """Prime factors of ``n`` (> 0); a number too large to factor quickly is one opaque factor."""
    if n == 1:
        return {}
    if n > _MAX_FACTORED:
        return {("integer", n): 1}
    return {int(p): int(m) for p, m in sympy.factorint(n).items()}


def _normal_terms(terms: set, work: _Work) -> Val:
    """Each term in canonical form, then like terms collected, until nothing changes (see the module docstring)."""
    for _ in range(8):
        collected: dict = {}
        for mono, c in terms:
            mono, c = _normal_term(mono, c, work)
            collected[mono] = collected.get(mono, Fraction(0)) + c
        new = {(mono, c) for mono, c in collected.items() if c != 0}
        if len(new) > _MAX_TERMS:
            raise _GiveUp("too many terms")
        if new == terms:
            break
        terms = new
    return frozenset(terms)


def _normal_term(mono: frozenset, c: Fraction, work: _Work) -> tuple[frozenset, Fraction]:
    work.tick()
    powers = dict(mono)
    for base, exponent in list(powers.items()):
        k = _const(exponent)
        if isinstance(base, int) and k is not None and k.denominator == 1 and abs(k) * math.log10(base) <= _SMALL_DIGITS:
            c *= Fraction(base) ** int(k)  # a prime to a small integer power is a number
            del powers[base]
        elif isinstance(base, tuple) and base[0] == "integer" and k is not None and k.denominator == 1 and abs(k) <= 4:
            c *= Fraction(base[1]) ** int(k)
            del powers[base]
    for base in [b for b in powers if isinstance(b, int)]:
        moved = _multiplicity(base, c.numerator) - _multiplicity(base, c.denominator)
        if moved:  # 2 * 2^N is 2^{N+1}
            c /= Fraction(base) ** moved
            powers[base] = _add(powers[base], _num(Fraction(moved)), work)
            if not powers[base]:
                del powers[base]
    return frozenset(powers.items()), c


def _multiplicity(p: int, n: int) -> int:
    return 0 if n == 0 else int(sympy.multiplicity(p, n))


# ----------------------------------------------------------------------------------------------------
# Back to sympy, and deciding "nonzero"


def _to_sympy(v: Val, work: _Work) -> sympy.Expr | None:
    """``v`` as an unevaluated sympy expression; None when a part cannot be rebuilt."""
    terms = []
    for mono, c in v:
        factors: list[sympy.Expr] = [sympy.Rational(c.numerator, c.denominator)]
        for base, exponent in mono:
            b = _base_to_sympy(base, work)
            x = _to_sympy(exponent, work)
            if b is None or x is None:
                return None
            factors.append(sympy.Pow(b, x, evaluate=False))
        terms.append(sympy.Mul(*factors, evaluate=False) if len(factors) > 1 else factors[0])
    if not terms:
        return sympy.Integer(0)
    return sympy.Add(*terms, evaluate=False) if len(terms) > 1 else terms[0]


def _base_to_sympy(base: object, work: _Work) -> sympy.Expr | None:
    if isinstance(base, int):
        return sympy.Integer(base)
    kind = base[0]
    if kind == "E":
        return sympy.E
    if kind == "pi":
        return sympy.pi
    if kind == "integer":
        return sympy.Integer(base[1])
    if kind == "sum":
        return _to_sympy(base[1], work)
    return work.nodes.get(base)


def _nonzero(v: Val) -> bool:
    """True when the sum ``v`` (no term with a zero coefficient) is provably not 0: one term over positive factors,
    or one term larger than all the others together (through logarithms)."""
    if not all(_positive_mono(mono) for mono, _ in v):
        return False
    if len(v) == 1:
        return True
    if len(v) == 2:
        exact = _two_terms_cancel(v)
        if exact is not None:
            return not exact
    with mpmath.workprec(_LOG_PREC):
        logs = sorted((_log_abs(mono, c) for mono, c in v), reverse=True)
        if any(x is None for x in logs):
            return False
        top, second = logs[0], logs[1]
        # relative error of each logarithm at this precision is far below 2^-100
        slack = (abs(top) + abs(second)) * mpmath.mpf(2) ** -100 + mpmath.log(len(logs)) + 1
        return bool(top - second > slack)


def _two_terms_cancel(v: Val) -> bool | None:
    """For ``a M_1 + b M_2``: whether ``M_1 / M_2 = -b/a`` exactly, when the two differ by small constant powers of
    integer bases (``2^{N+1} - 2 \\cdot 2^N`` folded as ``2^{N+1} - 2^N \\cdot 2``); None when the ratio is not such
    a number (the logarithms decide then)."""
    (m1, c1), (m2, c2) = v
    p1, p2 = dict(m1), dict(m2)
    factors = []
    work = _Work()
    for base in set(p1) | set(p2):
        if isinstance(base, int):
            b = base
        elif base[0] == "integer":
            b = base[1]
        else:
            return None
        difference = _const(_add(p1.get(base, _ZERO), _neg(p2.get(base, _ZERO)), work))
        if difference is None or abs(difference) * math.log10(b) > _SMALL_DIGITS:
            return None
        factors.append(sympy.Pow(sympy.Integer(b), sympy.Rational(difference.numerator, difference.denominator)))
    return bool(sympy.Mul(*factors) == sympy.Rational(-c2.numerator * c1.denominator, c2.denominator * c1.numerator))


def _positive_mono(mono: frozenset) -> bool:
    return all(_positive_base(base) and _real_exponent(x) for base, x in mono)


def _positive_base(base: object) -> bool:
    if isinstance(base, int):
        return True
    return base[0] in ("E", "pi", "integer") or (base[0] == "function" and base[1] == "factorial")


def _real_exponent(x: Val) -> bool:
    return all(_positive_mono(mono) for mono, _ in x)


def _log_abs(mono: frozenset, c: Fraction) -> mpmath.mpf | None:
    """``ln |c \\cdot mono|`` to the working precision, None when a part is out of reach."""
    total = mpmath.log(abs(mpmath.mpf(c.numerator))) - mpmath.log(mpmath.mpf(c.denominator))
    for base, exponent in mono:
        x = _value(exponent)
        log_base = _log_base(base)
        if x is None or log_base is None:
            return None
        total += x * log_base
    return total


def _log_base(base: object) -> mpmath.mpf | None:
    if isinstance(base, int):
        return mpmath.log(base)
    if base[0] == "E":
        return mpmath.mpf(1)
    if base[0] == "pi":
        return mpmath.log(mpmath.pi)
    if base[0] == "integer":
        return mpmath.log(base[1])
    if base[0] == "function" and base[1] == "factorial" and len(base[2]) == 1:
        n = _value(base[2][0])
        return None if n is None or n < 0 else mpmath.loggamma(n + 1)
    return None


def _value(v: Val) -> mpmath.mpf | None:
    """The value of an exponent, when it is within mpmath's reach (``2 \\cdot 3^{774840978}`` is)."""
    total = mpmath.mpf(0)
    for mono, c in v:
        term = mpmath.mpf(c.numerator) / c.denominator
        for base, exponent in mono:
            x = _value(exponent)
            if x is None or abs(x) > _MAX_EXPONENT_VALUE:
                return None
            log_base = _log_base(base)
            if log_base is None:
                return None
            term *= mpmath.exp(x * log_base)
        total += term
    return total
