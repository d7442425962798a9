"""Closed-form numbers evaluated at arbitrary precision, with an unbounded exponent.

Why: a comparison through Python floats overflows ``e^{1000}`` to ``inf`` and underflows ``e^{-1000}`` to ``0``,
and a tolerance test then passes (``inf - 42 <= inf * 1e-40``; ``|0 - 0| <= 0``): one short answer would equal
every numeric gold. Here values are mpmath numbers (``1.97e+434`` is a number like any other), a value that is
not a finite number (``oo``, ``zoo``, ``nan``) or that sympy cannot evaluate is ``None``, and callers treat
``None`` as "not equal", never as "equal".

Cancellation: sympy's ``evalf`` raises its working precision where the terms of a sum cancel, up to a limit, and
returns a value with no significant digit when they cancel below it. Such a value is zero only if the limit
was high enough for the numbers involved: ``1 - \\tanh(1000)`` is ``5.2e-869`` and ``1 - e^{1000}/(e^{1000}+1)``
is ``5.1e-435``, both zero at sympy's default limit. The limit here is set from the expression's
:func:`magnitude_span` (the orders of magnitude its parts and the saturation of its exponential-type functions
reach), and capped (:data:`MAX_PRECISION_DIGITS`; :data:`SLOW_PRECISION_DIGITS` where a function that is slow at
high precision, such as ``\\Gamma`` of a fraction, appears); a cancellation below a capped limit is undecided:
``None``.
"""

from __future__ import annotations

import mpmath
import sympy

_NO_SIGNIFICANT_BITS = 8
"""sympy's ``evalf`` returns a Float with (almost) no significant bits (``-0.e-191``) when a sum cancels below
the precision asked for: such a value is zero to that precision, not a tiny nonzero number."""

MAX_PRECISION_DIGITS = 4000
"""Most decimal digits a cancelling sum is worked out to (elementary functions: milliseconds)."""

SLOW_PRECISION_DIGITS = 300
"""The cap where the expression holds a function outside :data:`_FAST` (``\\Gamma(1/3)`` at 1000 digits takes
seconds)."""

_MAX_NODES = 400
_LOG10_2 = 0.30102999566398120
_LOG10_E = 0.43429448190325182

# Functions sympy evaluates quickly at thousands of digits.
_FAST = (
    sympy.exp, sympy.log, sympy.sin, sympy.cos, sympy.tan, sympy.cot, sympy.sec, sympy.csc,
    sympy.asin, sympy.acos, sympy.atan, sympy.acot, sympy.asec, sympy.acsc,
    sympy.sinh, sympy.cosh, sympy.tanh, sympy.coth, sympy.sech, sympy.csch,
    sympy.asinh, sympy.acosh, sympy.atanh, sympy.acoth,
    sympy.Abs, sympy.sign, sympy.floor, sympy.ceiling, sympy.re, sympy.im, sympy.arg, sympy.Min, sympy.Max,
)
# Functions whose value near a large argument needs no more digits than the argument's order of magnitude
# (periodic, logarithmic, algebraic); every other function may saturate (tanh(x) = 1 - 2e^{-2x}, gamma, zeta).
_NO_SATURATION = (
    sympy.log, sympy.sin, sympy.cos, sympy.tan, sympy.cot, sympy.sec, sympy.csc,
    sympy.asin, sympy.acos, sympy.atan, sympy.acot, sympy.asec, sympy.acsc, sympy.asinh, sympy.acosh, sympy.atanh,
    sympy.acoth, sympy.Abs, sympy.sign, sympy.floor, sympy.ceiling, sympy.re, sympy.im, sympy.arg, sympy.Min,
    sympy.Max, sympy.LambertW,
)
# Functions that approach their limit like e^{-x^2}.
_GAUSSIAN = (sympy.erf, sympy.erfc, sympy.erfi, sympy.erf2)


def evaluate(expr: sympy.Basic, digits: int) -> mpmath.mpc | None:
    """The value of the closed-form number ``expr`` to ``digits`` significant digits.

    Args:
        expr: a sympy expression with no free symbols (``e^{1000}``, ``999!\\sqrt 2``, ``1/3``).
        digits: significant decimal digits asked of sympy's ``evalf``.

    Returns:
        An ``mpmath.mpc`` (exact copy of sympy's binary result, exponent unbounded), or ``None`` when ``expr``
        is not a finite number (infinite, undefined, symbolic, beyond what sympy can evaluate) or when it
        cancels to no significant digit at the highest precision allowed for it (see the module docstring):
        whether it is zero is then undecided. A sum that cancels within the allowed precision is ``0``.
    """
    value, _ = evaluate_or_undecided(expr, digits)
    return value


def evaluate_or_undecided(expr: sympy.Basic, digits: int) -> tuple[mpmath.mpc | None, bool]:
    """:func:`evaluate`, and whether a ``None`` means "undecided" (a finite number that cancels below the capped
    precision: sympy's ``simplify`` is no way out, it can run for minutes on such numbers) rather than "not a
    finite number"."""
    if not isinstance(expr, sympy.Expr):
        return None, False
    if expr.is_Rational:
        return mpmath.mpc(_to_mpf(expr, True)), False
    limit = precision_limit(expr, digits)
    if limit is None:
        return None, True
    maxn, decided = limit
    try:
        value = expr.evalf(digits, maxn=maxn)
        if not value.is_number or value.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
            return None, False
        re_part, im_part = value.as_real_imag()
        parts = [_to_mpf(re_part, decided), _to_mpf(im_part, decided)]
    except (TypeError, ValueError, ArithmeticError, RecursionError, AttributeError):
        return None, False
    if parts[0] is None or parts[1] is None:
        return None, not decided
    return mpmath.mpc(parts[0], parts[1]), False


def precision_limit(expr: sympy.Expr, digits: int) -> tuple[int, bool] | None:
    """``(maxn, decided)``: the digits up to which sympy may raise its precision on cancellation when evaluating
    ``expr`` to ``digits`` digits, and whether a cancellation below that limit means zero (False: the limit was
    capped below what the expression's magnitudes call for). None when ``expr`` is too large to walk."""
    span = magnitude_span(expr)
    if span is None:
        return None
    cap = MAX_PRECISION_DIGITS if _all_fast(expr) else SLOW_PRECISION_DIGITS
    wanted = digits + 2 * span + 60
    return int(min(wanted, cap)), wanted <= cap


def magnitude_span(expr: sympy.Expr) -> float | None:
    """Decimal orders of magnitude spanned by the numbers in ``expr``: the largest ``|log10|v||`` over its numeric
    parts (integers by their digits, fractions by the digits of both terms), plus, for the argument ``x`` of a
    function that may saturate (``exp``, ``tanh``, ``\\Gamma``...), the digits ``e^{2|x|}`` would have (``x^2``
    for ``erf``-like functions). None when ``expr`` has more than ``_MAX_NODES`` parts."""
    span = 0.0
    count = 0
    for node in sympy.preorder_traversal(expr):
        count += 1
        if count > _MAX_NODES:
            return None
        if not isinstance(node, sympy.Expr) or not node.is_number:
            continue
        if node.is_Rational:
            span = max(span, _digits(int(node.p)), _digits(int(node.q)))
            continue
        if isinstance(node, sympy.Function) and node.args:
            saturates = not isinstance(node, _NO_SATURATION)
            for arg in node.args:
                size = _abs_value(arg)
                if size is None:
                    return None
                if saturates and size > 1:
                    span = max(span, 2 * float(size) * _LOG10_E)
                    if isinstance(node, _GAUSSIAN):
                        span = max(span, float(size) ** 2 * _LOG10_E)
        if node.is_Atom:
            continue
        size = _abs_value(node)
        if size is None:
            return None
        if size != 0:
            span = max(span, abs(float(mpmath.log10(size))))
    return span


def _abs_value(node: sympy.Expr) -> mpmath.mpf | None:
    """``|node|`` to a few digits, None if not a finite number; a part that cancels to no significant digit counts
    as 0 (it is what is being decided, not a magnitude)."""
    try:
        value = node.evalf(15)
        re_part, im_part = value.as_real_imag()
        parts = []
        for part in (re_part, im_part):
            if part.is_zero:
                parts.append(mpmath.mpf(0))
            elif isinstance(part, sympy.Float):
                parts.append(abs(mpmath.mpf(part._mpf_)) if part._prec > _NO_SIGNIFICANT_BITS else mpmath.mpf(0))
            elif part.is_Rational:
                parts.append(abs(mpmath.mpf(int(part.p)) / int(part.q)))
            else:
                return None
    except (TypeError, ValueError, ArithmeticError, RecursionError, AttributeError):
        return None
    size = max(parts)
    return size if mpmath.isfinite(size) else None


def _digits(n: int) -> float:
    return abs(n).bit_length() * _LOG10_2


def _all_fast(expr: sympy.Expr) -> bool:
    return all(isinstance(f, _FAST) for f in expr.atoms(sympy.Function))


def _to_mpf(part: sympy.Expr, decided: bool) -> mpmath.mpf | None:
    if part.is_zero:
        return mpmath.mpf(0)
    if isinstance(part, sympy.Float):
        if part._prec <= _NO_SIGNIFICANT_BITS:
            return mpmath.mpf(0) if decided else None
        value = mpmath.mpf(part._mpf_)
        return value if mpmath.isfinite(value) else None
    if part.is_Rational:
        with mpmath.workprec(max(64, int(part.p).bit_length(), int(part.q).bit_length())):
            return mpmath.mpf(int(part.p)) / int(part.q)
    return None


def relatively_close(a: mpmath.mpc, b: mpmath.mpc, digits: int) -> bool:
    """True when ``a`` and ``b`` agree to ``digits`` significant digits relative to the larger of the two:
    ``|a - b| <= max(|a|, |b|) * 10^-digits``. Zero equals only zero (and values that evaluate to zero), so
    ``e^{-1000}`` is not ``0``, and ``e^{1000}`` is not ``42``."""
    with mpmath.workdps(digits + 20):
        scale = max(abs(a), abs(b))
        if scale == 0:
            return True
        return bool(abs(a - b) <= scale * mpmath.mpf(10) ** (-digits))
