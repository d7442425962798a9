"""The set of real numbers a one-variable condition describes: ``0 < x \\leq 1`` is ``(0, 1]``.

Used for a relation compared with an interval (``m \\geq \\sqrt 2`` against ``[\\sqrt 2, \\infty)``) and for
set-builder notation (``\\{x \\mid 0 < x \\leq 1\\}``). Conditions are solved by sympy over the reals; one with
several variables, none, or one sympy cannot solve has no set (None), so it is never equal to an interval.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
from sympy.core.function import AppliedUndef

_OPS = {"<": sympy.Lt, "<=": sympy.Le, ">": sympy.Gt, ">=": sympy.Ge, "=": sympy.Eq, "!=": sympy.Ne}


def solution_set(
    ops: Sequence[str], exprs: Sequence[sympy.Expr], variable: sympy.Basic | None = None
) -> sympy.Set | None:
    """The real solutions of the chain ``exprs[0] ops[0] exprs[1] ops[1] ...`` in its one variable.

    Args:
        ops: ``<``, ``<=``, ``>``, ``>=``, ``=`` or ``!=``, one fewer than ``exprs``.
        exprs: the members, sympy expressions.
        variable: the variable, when the caller names it (set-builder notation); otherwise the one unknown of the
            chain, where ``f(x)`` counts as the variable rather than the ``x`` inside it.

    Returns:
        A sympy set, or None when the chain has no single variable (or not ``variable`` alone), an operator
        outside the list, or sympy cannot solve it.
    """
    if len(exprs) != len(ops) + 1 or any(op not in _OPS for op in ops):
        return None
    unknowns: set[sympy.Basic] = set()
    for e in exprs:
        if not isinstance(e, sympy.Expr):
            return None
        unknowns |= e.free_symbols
        unknowns |= set(e.atoms(AppliedUndef))
    inside_calls = {s for a in unknowns if isinstance(a, AppliedUndef) for s in a.free_symbols}
    variables = unknowns - inside_calls
    if variable is not None:
        if variables != {variable}:
            return None
    elif len(variables) != 1:
        return None
    var = variable if variable is not None else variables.pop()
    x = sympy.Dummy("x", real=True)
    exprs = [e.subs(var, x) for e in exprs]
    try:
        conditions = [_OPS[op](exprs[i], exprs[i + 1]) for i, op in enumerate(ops)]
        return sympy.And(*conditions).as_set()
    except Exception:  # noqa: BLE001 - sympy raises many kinds on conditions it cannot solve
        return None
