"""A typed Python function as a tool (``rollout.tools: [{name: my_tools:lookup, kwargs: {table: x.csv}}]``): its schema
comes from its signature and docstring (:mod:`rlvr.tools.schema`), the recipe's ``kwargs`` are bound (hidden from
the model), the model's arguments are checked against the signature before the call. A parameter named ``row``
receives the calling sample's dataset row (hidden from the model too; the row the environment's ``reset`` got:
without its gold fields unless ``rollout.environment_sees_gold: true``)::

    def lookup(key: str, row: dict) -> str:  # the model sees and passes ``key`` only
        return row["table"].get(key, "not found")

Calls of one round run in threads, in this process (the function is the user's own, trusted code; only its
arguments come from the model). A call that raises, returns bytes that are not UTF-8 or something with no text form,
or runs past ``timeout_s`` answers the model with a short error; a timed-out call's thread cannot be killed and
finishes in the background (write functions that end).
"""

from __future__ import annotations

import concurrent.futures
import inspect
import json
import time
from collections.abc import Callable
from typing import Any

from rlvr.import_paths import resolve_import_path
from rlvr.tools.calls import ToolResult, short_error
from rlvr.tools.schema import function_schema

ROW_PARAMETER = "row"
"""A function tool's parameter of this name receives the calling sample's dataset row."""


def import_function(path: str) -> Callable[..., Any]:
    """``package.module:function`` -> the function (:func:`rlvr.import_paths.resolve_import_path`).

    Raises:
        ValueError (:class:`rlvr.import_paths.ImportPathError`): not of that form, or the module/function is not
            there (named, with the closest name where the function's is mistyped).
    """
    return resolve_import_path(path, "tool")


def as_text(value: Any) -> tuple[str, str | None]:
    """A function's return value as the text the model sees, or ``(text, error)`` when it has none."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8"), None
        except UnicodeDecodeError:
            return "", "Error: the tool returned bytes that are not UTF-8 text."
    if value is None:
        return "", None
    try:
        return json.dumps(value, ensure_ascii=False), None
    except (TypeError, ValueError):
        try:
            return str(value), None
        except Exception as e:  # noqa: BLE001 - a broken __str__ is the tool's fault, shown to the model
            return "", f"Error: the tool's result has no text form ({type(e).__name__})."


class FunctionTool:
    """A Python function as a tool.

    Args:
        fn: the function (typed parameters; docstring with ``Args:`` descriptions).
        name: the name the model calls (default: the function's).
        kwargs: arguments bound by the recipe (not shown to the model, not overridable by it).
        timeout_s: wall-clock limit per round of calls.
        max_workers: threads running one round's calls.
    Raises:
        rlvr.tools.schema.ToolSchemaError: a parameter without a JSON-typeable annotation.
        ValueError: ``kwargs`` names a parameter the function does not have, or ``row`` (filled per call).
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None, kwargs: dict[str, Any] | None = None,
                 timeout_s: float = 10.0, max_workers: int = 8) -> None:
        self.fn = fn
        self.bound = dict(kwargs or {})
        self.signature = inspect.signature(fn)
        unknown = sorted(set(self.bound) - set(self.signature.parameters))
        if unknown and not any(p.kind is p.VAR_KEYWORD for p in self.signature.parameters.values()):
            raise ValueError(f"tool {name or fn.__name__}: kwargs {unknown} are not parameters of the function")
        if ROW_PARAMETER in self.bound:
            raise ValueError(f"tool {name or fn.__name__}: kwargs cannot set {ROW_PARAMETER!r}: that parameter "
                             "receives the calling sample's row")
        self.wants_row = ROW_PARAMETER in self.signature.parameters
        """The function has a ``row`` parameter: each call gets its sample's row there."""
        hidden = {ROW_PARAMETER} if self.wants_row else set()
        self.schema = function_schema(fn, name, frozenset(self.bound) | hidden)
        self.name = self.schema["function"]["name"]
        self.timeout_s = timeout_s
        self.max_workers = max_workers

    def run_batch(self, arguments: list[dict[str, Any]], sessions: list[dict[str, Any]],
                  rows: list[dict[str, Any]] | None = None) -> list[ToolResult]:
        """One round of calls; ``rows[i]``: the row of the sample that made call ``i`` (for a ``row`` parameter)."""
        results: list[ToolResult | None] = [None] * len(arguments)
        hidden = {ROW_PARAMETER: None} if self.wants_row else {}
        runnable = []
        for i, args in enumerate(arguments):
            if not isinstance(args, dict):
                results[i] = ToolResult(f"Error: arguments for {self.name} must be a JSON object.", "malformed")
                continue
            clash = sorted(set(args) & (set(self.bound) | set(hidden)))
            try:
                if clash:
                    raise TypeError(f"unexpected argument {clash[0]!r}")
                self.signature.bind(**self.bound, **hidden, **args)
            except TypeError as e:
                results[i] = ToolResult(short_error(f"Error: bad arguments for {self.name}: {e}"), "malformed")
                continue
            runnable.append(i)
        if not runnable:
            return results  # type: ignore[return-value]
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(self.max_workers, len(runnable)),
                                                     thread_name_prefix=f"tool-{self.name}")
        start = time.perf_counter()
        futures = {pool.submit(self._call, {**arguments[i], ROW_PARAMETER: rows[i] if rows is not None else {}}
                               if self.wants_row else arguments[i]): i for i in runnable}
        try:
            done, _ = concurrent.futures.wait(futures, timeout=self.timeout_s)
            for future, i in futures.items():
                if future not in done:
                    results[i] = ToolResult(f"TimeoutError: {self.name} ran longer than {self.timeout_s:g} s",
                                            "timeout", time.perf_counter() - start)
                    continue
                results[i] = future.result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return results  # type: ignore[return-value]

    def _call(self, args: dict[str, Any]) -> ToolResult:
        start = time.perf_counter()
        try:
            value = self.fn(**self.bound, **args)
        except Exception as e:  # noqa: BLE001 - the model is shown the error and may recover
            return ToolResult(short_error(f"{type(e).__name__}: {e}"), "error", time.perf_counter() - start)
        text, error = as_text(value)
        return ToolResult(error or text, "error" if error else "ok", time.perf_counter() - start)
