"""A program with its tests (`Job`): checked on creation, and cut down to what may enter the sandbox.

Test formats (`test_type`, with the aliases datasets use):
  stdio  (stdin, stdin_stdout): tests = [{"input": str, "output": str}, ...]
  call   (functional, fn): tests = {"fn_name": str, "cases": [{"args": [...], "expected": ..., "kwargs": {...}?}]}
         The function is a top-level function of that name, or a method of a class `Solution`.
  assert (asserts): tests = Python source run after the program (HumanEval style). Each top-level
         statement that is an assert, a call (e.g. `check(candidate)`) or contains an assert is one test;
         other statements (imports, defs, assignments) are setup.
A `tests` value given as a JSON string (as some datasets store it) is parsed for stdio and call.
`language` (python by default; c, cpp, java, javascript: see `rlvr.sandbox.languages`) says how the program is
compiled and run; languages other than Python have stdio tests only.
"""
from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlvr.sandbox.checkers import Checker, parse_checker
from rlvr.sandbox.languages import Language, java_class_name, parse_language
from rlvr.sandbox.limits import Limits

TEST_TYPES = {
    "stdio": "stdio", "stdin": "stdio", "stdin_stdout": "stdio",
    "call": "call", "functional": "call", "fn": "call",
    "assert": "assert", "asserts": "assert",
}


@dataclass(frozen=True)
class Job:
    """One program and its tests, in `language` (python, c, cpp, java or javascript, or an alias; see
    `rlvr.sandbox.languages`). Raises ValueError on creation when a field has the wrong shape, naming the field
    and the expected shape (an unknown language: naming the supported ones)."""

    program: str
    tests: Any
    test_type: str = "stdio"
    checker: str = "lines"
    limits: Limits = field(default_factory=Limits)
    language: str = "python"

    def __post_init__(self) -> None:
        if not isinstance(self.program, str):
            raise ValueError(f"program must be source text (str), got {type(self.program).__name__}")
        if self.test_type not in TEST_TYPES:
            raise ValueError(f"unknown test_type {self.test_type!r}; valid: {', '.join(TEST_TYPES)}")
        kind = TEST_TYPES[self.test_type]
        lang = parse_language(self.language)
        if lang.name != "python" and kind != "stdio":
            raise ValueError(f"{kind} tests need a Python program; a {lang.name} program can only have stdio tests")
        object.__setattr__(self, "language", lang.name)
        tests = self.tests
        if isinstance(tests, str) and kind != "assert":
            try:
                tests = json.loads(tests)
            except ValueError as e:
                raise ValueError(f"tests for test_type {kind!r} is a string that is not JSON: {e}") from None
        _CHECK[kind](tests)
        # Split once, here: the scheduler's threads read it, and CPython 3.11's ast is not thread-safe
        # ("AST constructor recursion depth mismatch" under concurrent ast.parse).
        object.__setattr__(self, "_units", tuple(split_assert_code(tests)) if kind == "assert" else ())
        object.__setattr__(self, "test_type", kind)
        object.__setattr__(self, "tests", tests)
        object.__setattr__(self, "limits", Limits.from_mapping(self.limits))
        parse_checker(self.checker)

    @property
    def parsed_language(self) -> Language:
        return parse_language(self.language)

    @property
    def parsed_checker(self) -> Checker:
        return parse_checker(self.checker)

    @property
    def n_tests(self) -> int:
        if self.test_type == "stdio":
            return len(self.tests)
        if self.test_type == "call":
            return len(self.tests["cases"])
        return sum(is_test for _, is_test in self._units)

    def sandbox_view(self) -> dict[str, Any]:
        """What the sandbox's driver receives for this job: inputs, call arguments or assert code, and
        limits. Expected outputs and expected return values are left out."""
        lim = self.limits
        view: dict[str, Any] = {
            "program": self.program, "kind": self.test_type, "time_s": float(lim.time_s),
            "memory_mb": int(lim.memory_mb), "output_bytes": int(lim.output_kb * 1024),
            "file_mb": int(lim.scratch_mb), "language": self.language,
        }
        if self.language != "python":  # Python is compiled and run by the driver itself
            lang = self.parsed_language
            view["time_s"] = float(lim.time_s) + lang.startup_s
            names = {"cls": java_class_name(self.program) if lang.name == "java" else "",
                     "memory_mb": int(lim.memory_mb), "compile_memory_mb": int(lim.compile_memory_mb)}
            names["src"] = lang.source.format(**names)
            view.update(source=names["src"], compile=[a.format(**names) for a in lang.compile or ()],
                        run=[a.format(**names) for a in lang.run], tools=list(lang.tools),
                        address_space=lang.address_space, compile_time_s=float(lim.compile_time_s),
                        compile_memory_mb=int(lim.compile_memory_mb))
        if self.test_type == "stdio":
            view["inputs"] = [t.get("input", "") for t in self.tests]
        elif self.test_type == "call":
            view["fn"] = self.tests["fn_name"]
            view["cases"] = [{"args": c["args"], "kwargs": c.get("kwargs", {})} for c in self.tests["cases"]]
        else:
            view["units"] = [{"code": code, "test": is_test} for code, is_test in self._units]
        return view


def split_assert_code(code: str) -> list[tuple[str, bool]]:
    """Cut assert-style test code into top-level statements: (source, is_test) pairs, in order.

    Raises ValueError when the code does not parse or holds no test statement."""
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        raise ValueError(f"assert tests do not parse: {e}") from None
    units = [(ast.unparse(stmt), _is_test(stmt)) for stmt in tree.body]
    if not any(is_test for _, is_test in units):
        raise ValueError("assert tests hold no test: expected top-level asserts or a call such as check(f)")
    return units


def _is_test(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Assert) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return True
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    return any(isinstance(node, ast.Assert) for node in ast.walk(stmt))


def _check_stdio(tests: Any) -> None:
    if not isinstance(tests, list) or not tests:
        raise ValueError(f'stdio tests must be a non-empty list of {{"input": str, "output": str}}, '
                         f'got {_kind(tests)}')
    for i, t in enumerate(tests):
        if not (isinstance(t, Mapping) and isinstance(t.get("output"), str) and isinstance(t.get("input", ""), str)):
            raise ValueError(f'stdio test {i} must be {{"input": str, "output": str}}, got {_kind(t)}')


def _check_call(tests: Any) -> None:
    shape = '{"fn_name": str, "cases": [{"args": [...], "expected": ...}]}'
    if not isinstance(tests, Mapping) or not isinstance(tests.get("fn_name"), str) or not tests["fn_name"].isidentifier():
        raise ValueError(f"call tests must be {shape} with fn_name a Python name, got {_kind(tests)}")
    cases = tests.get("cases")
    if not isinstance(cases, list) or not cases:
        raise ValueError(f"call tests need a non-empty list of cases: {shape}")
    for i, c in enumerate(cases):
        if not isinstance(c, Mapping) or not isinstance(c.get("args"), list) or "expected" not in c:
            raise ValueError(f'call case {i} must be {{"args": [...], "expected": ...}}, got {_kind(c)}')
        if not isinstance(c.get("kwargs", {}), Mapping):
            raise ValueError(f"call case {i}: kwargs must be a dict, got {_kind(c['kwargs'])}")


def _check_assert(tests: Any) -> None:
    if not isinstance(tests, str):
        raise ValueError(f"assert tests must be Python source (str), got {_kind(tests)}")  # parsed by Job itself


def _kind(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


_CHECK = {"stdio": _check_stdio, "call": _check_call, "assert": _check_assert}
