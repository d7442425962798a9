"""Closed-form numbers evaluated at arbitrary precision, with an unbounded exponent.

Why: a comparison through Python floats overflows ``e^{1000}`` to ``inf`` and underflows ``e^{-1000}`` to ``0``,
and a tolerance test then passes (``inf - 42 <= inf * 1e-40``; ``|0 - 0| <= 0``): one short answer would equal
every numeric gold. Here values are mpmath numbers (``1.97e+434`` is a number like any other), a value that is
not a finite number (``oo``, ``zoo``, ``nan``) or that sympy cannot evaluate is ``None``, and callers treat
``None`` as "not equal", never as "equal".
"""

from __future__ import annotations

import mpmath
import sympy

_NO_SIGNIFICANT_BITS = 8
"""sympy's ``evalf`` returns a Float with (almost) no significant bits (``-0.e-191``) when a sum cancels below
the precision asked for: such a value is zero to that precision, not a tiny nonzero number."""


def evaluate(expr: sympy.Basic, digits: int) -> mpmath.mpc | None:
    """The value of the closed-form number ``expr`` to ``digits`` significant digits.

    Args:
        expr: a sympy expression with no free symbols (``e^{1000}``, ``999!\\sqrt 2``, ``1/3``).
        digits: significant decimal digits asked of sympy's ``evalf`` (it raises its working precision
            itself where terms cancel).

    Returns:
        An ``mpmath.mpc`` (exact copy of sympy's binary result, exponent unbounded), or ``None`` when ``expr``
        is not a finite number: infinite, undefined, symbolic, or beyond what sympy can evaluate.
    """
    if not isinstance(expr, sympy.Expr):
        return None
    try:
        value = expr.evalf(digits)
        if not value.is_number or value.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
            return None
        re_part, im_part = value.as_real_imag()
        parts = [_to_mpf(re_part), _to_mpf(im_part)]
    except (TypeError, ValueError, ArithmeticError, RecursionError, AttributeError):
        return None
    if parts[0] is None or parts[1] is None:
        return None
    return mpmath.mpc(parts[0], parts[1])


def _to_mpf(part: sympy.Expr) -> mpmath.mpf | None:
    if part.is_zero:
        return mpmath.mpf(0)
    if isinstance(part, sympy.Float):
        if part._prec <= _NO_SIGNIFICANT_BITS:
            return mpmath.mpf(0)
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
