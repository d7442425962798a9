"""Output checkers, run on the host after the sandbox: the expected output never enters the sandbox.

For stdio tests (`Checker.same_output`):
  exact     byte-for-byte equal text (a missing final newline or a trailing space is WA);
  lines     line by line after stripping whitespace from both ends of each line (so CRLF = LF, and
            " 7 " = "7") and dropping empty lines at the start and the end, as the graders of APPS, TACO
            and LiveCodeBench compare; every line must match, none may be missing or extra, and spaces
            inside a line count ("1  2" is not "1 2");
  lines_ci  `lines`, ignoring case;
  float:TOL whitespace-separated tokens; numeric tokens (ASCII decimal notation only, as a contest checker
            reads them: `1_000.5` or full-width digits are text) may differ by TOL absolute or TOL relative to
            the expected number, other tokens must be equal; the token counts must match ("float_1e-6" and a
            bare "float" (TOL 1e-6) are accepted too);
  json      both parse as JSON and are the same value (`same_value`).
For call tests (`Checker.same_value`) the returned value, in JSON form (`json_form`: tuples are lists,
sets sorted lists, dict keys strings), must equal the expected one: bools only equal bools, numbers compare
as numbers (within TOL for float:TOL), strings, lists and dicts exactly. An integer and a float compare exactly,
as rationals, never through a double: `10 ** 400` is a wrong answer to `2.5`, not an OverflowError.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

CHECKERS = ("exact", "lines", "lines_ci", "float:<tol>", "json")
_FLOAT = re.compile(r"^float(?:[:_](?P<tol>.+))?$")
# A number as contest checkers read one: ASCII digits, an optional sign, point and exponent. Python's float()
# also takes "1_000.5", full-width digits, "infinity" and surrounding spaces, which a checker must not.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z", re.ASCII)


@dataclass(frozen=True)
class Checker:
    """A parsed checker name: kind is exact, lines, lines_ci, float or json; tol only for float."""

    kind: str
    tol: float = 0.0

    def same_output(self, got: str, expected: str) -> tuple[bool, str]:
        """Whether stdout `got` matches `expected`, and a one-line reason when it does not."""
        if self.kind == "exact":
            return (True, "") if got == expected else (False, _first_difference(got, expected))
        if self.kind in ("lines", "lines_ci"):
            g, e = _lines(got), _lines(expected)
            if self.kind == "lines_ci":
                g, e = [x.casefold() for x in g], [x.casefold() for x in e]
            if g == e:
                return True, ""
            if len(g) != len(e):
                return False, f"{len(g)} lines of output, expected {len(e)}"
            k = next(i for i, (a, b) in enumerate(zip(g, e)) if a != b)
            return False, f"line {k + 1}: got {_short(g[k])}, expected {_short(e[k])}"
        if self.kind == "float":
            g, e = got.split(), expected.split()
            if len(g) != len(e):
                return False, f"{len(g)} tokens of output, expected {len(e)}"
            for k, (a, b) in enumerate(zip(g, e)):
                if a != b and not _close(a, b, self.tol):
                    return False, f"token {k + 1}: got {_short(a)}, expected {_short(b)} (tolerance {self.tol:g})"
            return True, ""
        try:
            g_value = json.loads(got)
        except (ValueError, RecursionError):
            return False, "output is not JSON"
        return self.same_value(g_value, json.loads(expected))

    def same_value(self, got: Any, expected: Any) -> tuple[bool, str]:
        """Whether `got`, a value in JSON form (see `json_form`), equals the expected JSON value; reason
        when not."""
        ok = _same(got, expected, self.tol if self.kind == "float" else 0.0)
        return (True, "") if ok else (False, f"returned {_short(repr(got))}, expected {_short(repr(expected))}")


def parse_checker(name: str) -> Checker:
    """Parse a checker name ("lines", "float:1e-6", ...); raises ValueError naming it and the valid ones."""
    if not isinstance(name, str):
        raise ValueError(f"checker must be a string, one of {', '.join(CHECKERS)}; got {name!r}")
    if name in ("exact", "lines", "lines_ci", "json"):
        return Checker(name)
    m = _FLOAT.match(name)
    if m:
        try:
            tol = float(m.group("tol")) if m.group("tol") else 1e-6
        except ValueError:
            tol = -1.0
        if not (tol >= 0 and math.isfinite(tol)):
            raise ValueError(f"checker {name!r}: the tolerance must be a number >= 0, as in 'float:1e-6'")
        return Checker("float", tol)
    raise ValueError(f"unknown checker {name!r}; valid checkers: {', '.join(CHECKERS)}")


def json_form(data: Any) -> Any:
    """The JSON form of a value in `rlvr.sandbox.harness.codec` form (as a program's call returned it): tuples
    become lists, sets sorted lists, dict keys strings, bytes text, complex [real, imag]. It builds no set
    and hashes no key the program chose (only strings), so crafted hash collisions cannot stall the host.
    Raises ValueError for an unknown tag."""
    if isinstance(data, list):
        return [json_form(x) for x in data]
    if not isinstance(data, dict):
        return data
    tag, v = data.get("~"), data.get("v")
    if tag == "tuple":
        return [json_form(x) for x in v]
    if tag in ("set", "frozenset"):
        items = [json_form(x) for x in v]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=repr)
    if tag == "dict":
        return {_json_key(json_form(k)): json_form(x) for k, x in v}
    if tag == "bytes":
        return bytes.fromhex(v).decode("utf-8", "replace")
    if tag == "complex":
        return [v[0], v[1]]
    raise ValueError(f"unknown value tag {tag!r}")


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    return json.dumps(key) if isinstance(key, (bool, type(None))) else str(key)


def _same(got: Any, expected: Any, tol: float) -> bool:
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, (int, float)):
        if not isinstance(got, (int, float)):
            return False
        if isinstance(got, float) or isinstance(expected, float):
            return _close_numbers(got, expected, tol)
        return got == expected
    if isinstance(expected, list):
        return isinstance(got, list) and len(got) == len(expected) and all(
            _same(g, e, tol) for g, e in zip(got, expected))
    if isinstance(expected, dict):
        return isinstance(got, dict) and got.keys() == expected.keys() and all(
            _same(got[k], expected[k], tol) for k in expected)
    return type(got) is type(expected) and got == expected


def _close(a: str, b: str, tol: float) -> bool:
    if not (_DECIMAL.match(a) and _DECIMAL.match(b)):
        return False
    return _close_numbers(float(a), float(b), tol)


def _close_numbers(x: int | float, y: int | float, tol: float) -> bool:
    """|x - y| <= tol, or <= tol * |y| (y is the expected number). Two floats compare as doubles; an int and a
    float compare exactly as rationals, so an int of any size never overflows a conversion to double."""
    for v in (x, y):
        if isinstance(v, float) and math.isnan(v):
            return isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
    if any(isinstance(v, float) and math.isinf(v) for v in (x, y)):
        return x == y
    if isinstance(x, float) and isinstance(y, float):
        diff = abs(x - y)
        return diff <= tol or diff <= tol * abs(y)
    exact = abs(Fraction(x) - Fraction(y))
    return exact <= Fraction(tol) or exact <= Fraction(tol) * abs(Fraction(y))


def _lines(text: str) -> list[str]:
    lines = [line.strip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    start = next((i for i, line in enumerate(lines) if line), len(lines))
    return lines[start:]


def _first_difference(got: str, expected: str) -> str:
    k = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
    return f"output differs at character {k + 1}: got {_short(got[k:k + 20])}, expected {_short(expected[k:k + 20])}"


def _short(text: str, n: int = 60) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")
