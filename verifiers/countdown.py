"""Countdown / equation verifier: reach ``target`` using each given number exactly once.

The expression is parsed with :mod:`ast` and evaluated by a small tree walk over exact fractions: only
integer literals, the allowed binary operators and parentheses are accepted, so nothing is ever handed to
``eval`` and no name, call or attribute can run. (The TinyZero countdown reward evaluates with ``eval``.)

Example::

    >>> countdown("<answer>(6 - 2) * 5</answer>", {"numbers": [2, 5, 6], "target": 20})["score"]
    1.0
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from fractions import Fraction

from rlvr.verifiers.registry import verifier

_OPERATORS: dict[type[ast.operator], str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_MAX_EXPRESSION_CHARS = 500
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_EXPRESSION_CHARS = re.compile(r"^[\d\s+\-*/×÷().=]+$")


class EquationError(ValueError):
    """The expression is not a valid countdown equation; the message says why."""


def extract_equation(completion: str) -> str | None:
    """The equation a completion proposes: the last ``<answer>`` block, else the last ``\\boxed{}``, else
    the last line made only of digits, operators and parentheses. Of ``lhs = rhs`` the side with more
    operators is kept."""
    from rlvr.verifiers.math_extract import find_boxed

    candidates = _ANSWER_TAG.findall(completion)
    text = candidates[-1] if candidates else None
    if text is None:
        boxes = find_boxed(completion)
        text = boxes[-1] if boxes else None
    if text is None:
        lines = [ln.strip() for ln in completion.strip().splitlines() if ln.strip()]
        text = next((ln for ln in reversed(lines) if _EXPRESSION_CHARS.match(ln) and re.search(r"\d", ln)), None)
    if text is None:
        return None
    text = text.replace("\\times", "*").replace("\\cdot", "*").replace("\\div", "/").replace("×", "*").replace("÷", "/")
    text = text.replace("\\left", "").replace("\\right", "").replace("$", "").strip()
    if "=" in text:  # "(6-2)*5 = 20" or "20 = (6-2)*5": keep the side with the most operators
        text = max(text.split("="), key=lambda side: sum(side.count(op) for op in "+-*/")).strip()
    return text or None


def evaluate_equation(expression: str, allowed_operators: str = "+-*/") -> tuple[Fraction, list[int]]:
    """Evaluate ``expression`` exactly; return its value and the integer literals it uses.

    Raises:
        EquationError: too long (> 500 chars), not parseable, uses something other than non-negative
            integer literals, parentheses and ``allowed_operators``, or divides by zero.
    """
    if len(expression) > _MAX_EXPRESSION_CHARS:
        raise EquationError(f"expression has {len(expression)} characters, more than {_MAX_EXPRESSION_CHARS}")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise EquationError(f"not an arithmetic expression: {expression!r}") from exc
    used: list[int] = []
    return _eval(tree.body, allowed_operators, used), used


def _eval(node: ast.AST, allowed: str, used: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        symbol = _OPERATORS[type(node.op)]
        if symbol not in allowed:
            raise EquationError(f"operator {symbol!r} is not allowed (allowed: {allowed})")
        left, right = _eval(node.left, allowed, used), _eval(node.right, allowed, used)
        if symbol == "+":
            return left + right
        if symbol == "-":
            return left - right
        if symbol == "*":
            return left * right
        if right == 0:
            raise EquationError("division by zero")
        return left / right
    raise EquationError(f"{type(node).__name__} is not allowed; use integers, {allowed} and parentheses")


@verifier("countdown", score_range=(0.0, 1.0))
def countdown(
    completion: str,
    sample: dict,
    *,
    numbers_field: str = "numbers",
    target_field: str = "target",
    allowed_operators: str = "+-*/",
) -> dict:
    """1.0 when the proposed equation uses each of ``sample[numbers_field]`` exactly once (as a multiset),
    only ``allowed_operators`` and parentheses, and evaluates exactly to ``sample[target_field]``; else 0.0.

    Returns ``{"score", "reason"}``. Raises ``KeyError`` naming the missing field when the sample lacks
    the numbers or the target (the reward counts that as a verifier error, not as a wrong answer).
    """
    for name in (numbers_field, target_field):
        if name not in sample:
            raise KeyError(f"countdown needs sample[{name!r}]; the sample has {sorted(sample)}")
    numbers = [int(n) for n in sample[numbers_field]]
    target = Fraction(sample[target_field])
    expression = extract_equation(completion)
    if expression is None:
        return {"score": 0.0, "reason": "no equation found"}
    try:
        value, used = evaluate_equation(expression, allowed_operators)
    except EquationError as exc:
        return {"score": 0.0, "reason": str(exc)}
    if Counter(used) != Counter(numbers):
        return {"score": 0.0, "reason": f"uses {sorted(used)}, expected each of {sorted(numbers)} once"}
    if value != target:
        return {"score": 0.0, "reason": f"evaluates to {value}, expected {target}"}
    return {"score": 1.0, "reason": "ok"}
