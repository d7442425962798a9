"""The built-in ``python`` tool: the model's code runs in the sandbox (:mod:`rlvr.sandbox`), contained exactly like
judged code (same backends, same :class:`~rlvr.sandbox.Limits`), all calls of a round as one ``run_many`` (the
sandbox's warm pool: no container start per call). The model is shown what the program printed; a timeout, an
exception, a crash, a print past the output limit or a sandbox failure is shown as a short error, never raised.

Optional state between the calls of one sample (``session=True``): each call first re-runs that sample's earlier
cells with their output discarded, so variables, functions and imports persist across turns as in a notebook
(a cell that timed out or hit a limit is not re-run). The replay costs the earlier cells' run time again, and
nothing is shared between samples: each sample's cells live in its own session dict.

Optional access to the sample's dataset row (``row_variable: ROW``): each call's code starts with that variable
holding the row as a dict (its JSON round trip; the row the environment's ``reset`` got: without its gold fields
unless ``rollout.environment_sees_gold: true``), so the model's code can read a sample's table, text or data.
"""

from __future__ import annotations

import json
import time
from typing import Any

from rlvr.tools.calls import ToolResult, short_error

_SESSION_PRELUDE = '''\
import contextlib, io
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    for cell in CELLS:
        try:
            exec(compile(cell, "<cell>", "exec"), G)
        except BaseException:
            pass
'''


def row_binding(name: str, row: dict[str, Any]) -> str:
    """The lines that bind ``name`` to ``row`` (through JSON) before a call's code."""
    data = json.dumps(row, ensure_ascii=False, default=str)
    return f"import json as _json\n{name} = _json.loads({data!r})\n"


def session_program(cells: list[str], code: str) -> str:
    """The program that replays ``cells`` silently in the module's namespace, then runs ``code`` there."""
    return (f"exec({_SESSION_PRELUDE!r}, {{'CELLS': {cells!r}, 'G': globals()}})\n"
            f"exec(compile({code!r}, '<cell>', 'exec'), globals())\n")


class PythonTool:
    """Runs Python code in the sandbox.

    Args:
        time_s, memory_mb, output_kb: limits per call (:class:`rlvr.sandbox.Limits`; output past ``output_kb`` is
            cut and reported as an error).
        session: keep the sample's earlier cells (see the module docstring).
        backend: sandbox backend (``auto``, ``docker``, ``bwrap``; ``none`` only when named).
        row_variable: a Python name: every call's code finds its sample's row in it (see the module docstring);
            None (the default): the code sees no row.
    Raises:
        ValueError: ``row_variable`` is not a Python identifier.
    """

    name = "python"

    def __init__(self, time_s: float = 5.0, memory_mb: int = 512, output_kb: int = 64, session: bool = False,
                 backend: str = "auto", row_variable: str | None = None) -> None:
        from rlvr.sandbox import Limits

        if row_variable is not None and not row_variable.isidentifier():
            raise ValueError(f"python tool: row_variable={row_variable!r} is not a Python name")
        self.limits = Limits(time_s=time_s, memory_mb=memory_mb, output_kb=output_kb)
        self.session = session
        self.backend = backend
        self.row_variable = row_variable
        self.wants_row = row_variable is not None
        self.schema = {"type": "function", "function": {
            "name": "python",
            "description": "Run Python code and see what it prints (stdout). Print the values you need."
                           + (" Variables persist between calls." if session else ""),
            "parameters": {"type": "object", "properties": {
                "code": {"type": "string", "description": "Python source code to run."}}, "required": ["code"]}}}

    def run_batch(self, arguments: list[dict[str, Any]], sessions: list[dict[str, Any]],
                  rows: list[dict[str, Any]] | None = None) -> list[ToolResult]:
        """One round of calls as one sandbox ``run_many``; ``rows[i]``: the row of call ``i``'s sample (read with
        ``row_variable``)."""
        from rlvr.sandbox import Job, run_many

        codes = [a.get("code") for a in arguments]
        results: list[ToolResult | None] = [None] * len(codes)
        jobs, index = [], []
        for i, code in enumerate(codes):
            if not isinstance(code, str):
                results[i] = ToolResult("Error: the python tool needs a 'code' string argument.", "malformed")
                continue
            program = self.program(code, sessions[i], rows[i] if rows is not None else {})
            jobs.append(Job(program, [{"input": "", "output": ""}], "stdio", "lines", self.limits))
            index.append(i)
        start = time.perf_counter()
        try:
            judged = run_many(jobs, backend=self.backend) if jobs else []
        except Exception as e:  # a sandbox that fails answers every call with the error; the step goes on
            seconds = time.perf_counter() - start
            for i in index:
                results[i] = ToolResult(short_error(f"Error: the sandbox failed: {type(e).__name__}: {e}"), "error",
                                        seconds / max(len(index), 1))
            return results  # type: ignore[return-value]
        for i, judgement in zip(index, judged, strict=True):
            results[i] = self._result(judgement)
            if self.session and results[i].status in ("ok", "error") and "sandbox failed" not in results[i].output:
                sessions[i].setdefault("cells", []).append(codes[i])
        return results  # type: ignore[return-value]

    def program(self, code: str, session: dict[str, Any], row: dict[str, Any]) -> str:
        """The program a call of ``code`` runs: the code itself, after the session's earlier cells (``session``) and
        with ``row`` bound to ``row_variable`` where those are asked for."""
        program = session_program(session.get("cells", []), code) if self.session else code
        if self.row_variable is None:
            return program
        # the code runs as <cell>: its traceback's line numbers count from its own first line
        cell = program if self.session else f"exec(compile({code!r}, '<cell>', 'exec'), globals())\n"
        return row_binding(self.row_variable, row) + cell

    def _result(self, judgement: Any) -> ToolResult:
        from rlvr.sandbox import ExecStatus

        if judgement.error or not judgement.verdicts:
            return ToolResult(short_error(f"Error: the sandbox failed: {judgement.error}"), "error",
                              judgement.elapsed_s)
        run = judgement.verdicts[0].result
        out, seconds = run.stdout, run.elapsed_s
        note = "\n[bytes that are not UTF-8 are shown as \ufffd]" if "\ufffd" in out else ""
        if run.status is ExecStatus.OK:
            return ToolResult(out + note, "ok", seconds)
        if run.status is ExecStatus.TIMEOUT:
            return ToolResult(f"{out}\nTimeoutError: the code ran longer than {self.limits.time_s:g} s", "timeout",
                              seconds)
        if run.status is ExecStatus.OUTPUT_LIMIT:
            return ToolResult(f"{out}\nError: output limit exceeded (more than {self.limits.output_kb:g} KiB printed)",
                              "error", seconds)
        if run.status is ExecStatus.MEMORY:
            return ToolResult(f"{out}\nMemoryError: more than {self.limits.memory_mb} MiB", "error", seconds)
        detail = _traceback_tail(run.stderr) or run.detail or run.status.value
        return ToolResult(out + note + ("\n" if out and not out.endswith("\n") else "") + short_error(detail),
                          "error", seconds)


def _traceback_tail(stderr: str) -> str:
    """The model's part of a traceback: from its first ``<cell>``/program frame on (harness frames dropped)."""
    lines = stderr.strip().splitlines()
    if not lines:
        return ""
    for i, line in enumerate(lines):
        if 'File "<cell>"' in line:
            return "Traceback (most recent call last):\n" + "\n".join(lines[i:])
    return "\n".join(lines[-12:])
