"""`rlvr verify code --file cases.jsonl`: judge programs against their tests in the sandbox.

Each input line is a JSON object with `solution` (source), `test_type` (stdio, call or assert), `tests`,
and optionally `language` (python, c, cpp, java, javascript; default python), `checker` and `limits`
(`time_s`, `memory_mb`, ...). Prints one JSON line per input, in input order: the input's fields plus
`score` (fraction of tests passed), `passed` (bool) and `verdicts` (AC, WA, TLE, MLE, RE, CE, OLE per
test); a line that cannot be judged (an unknown language, malformed tests) gets `error` instead, and so does a
program whose judging failed (the sandbox broke, a checker raised: its tests read IE, its score is null). One
program's failure never costs the other lines theirs. A
progress bar (programs judged of all) and then a summary go to stderr. Exit code 0 when every line was
judged, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

CHUNK = 64  # programs judged together (and printed) at a time


def run(args: argparse.Namespace) -> int:
    """Judge every line of `args.file`; optional `args.backend` (auto) and `args.mode` (fraction or all)."""
    from rlvr import sandbox
    from rlvr.verifiers.code import score_result

    backend = getattr(args, "backend", None) or "auto"
    mode = getattr(args, "mode", None) or "fraction"
    rows, jobs, problems = _read(args.file)
    started, n_passed, n_bad = time.monotonic(), 0, 0
    with _progress_bar(len(rows)) as advance:
        for lo in range(0, len(rows), CHUNK):
            span = range(lo, min(lo + CHUNK, len(rows)))
            idx = [i for i in span if problems[i] is None]
            advance(len(span) - len(idx))  # lines that cannot be judged
            try:
                judged = dict(zip(idx, sandbox.run_many([jobs[i] for i in idx], backend=backend,
                                                        on_done=lambda _i: advance(1))))
            except sandbox.SandboxError as e:
                print(f"rlvr verify code: {e}", file=sys.stderr)
                return 1
            chunk_passed, chunk_bad = _print_chunk(rows, problems, judged, span, mode, score_result)
            n_passed += chunk_passed
            n_bad += chunk_bad
    print(f"judged {len(rows) - n_bad} programs ({n_passed} passed, {n_bad} not judged) in "
          f"{time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0 if n_bad == 0 else 1


@contextmanager
def _progress_bar(total: int) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (as `rlvr verify math` has); yields `advance(n)`, safe to call from
    the sandbox's worker threads."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("verify code"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        task = progress.add_task("verify", total=total)
        yield lambda n: progress.advance(task, n)


def _print_chunk(rows: list[dict[str, Any]], problems: list[str | None], judged: dict[int, Any], span: range,
                 mode: str, score_result: Callable[..., dict[str, Any]]) -> tuple[int, int]:
    """Print the output lines of rows in span; returns (passed, not judged) among them."""
    n_passed = n_bad = 0
    for i in span:
        out: dict[str, Any] = dict(rows[i])
        if problems[i] is not None:
            out.update(score=None, passed=False, verdicts=[], error=problems[i])
            n_bad += 1
        elif judged[i].error:  # the machinery failed on this program: no score, its tests read IE
            out.update(score=None, passed=False, verdicts=judged[i].codes, error=judged[i].error)
            n_bad += 1
        else:
            scored = score_result(judged[i], mode)
            out.update(score=scored["score"], passed=scored["passed"], verdicts=scored["verdicts"])
            n_passed += scored["passed"]
        print(json.dumps(out), flush=True)
    return n_passed, n_bad


def _read(path: str) -> tuple[list[dict[str, Any]], list[Any], list[str | None]]:
    """Rows, their sandbox Jobs (None where malformed) and, per row, the problem that stops judging it."""
    from rlvr import sandbox

    rows: list[dict[str, Any]] = []
    jobs: list[Any] = []
    problems: list[str | None] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError(f"expected a JSON object, got {type(row).__name__}")
            except ValueError as e:
                rows.append({"line": lineno})
                jobs.append(None)
                problems.append(f"line {lineno}: not a JSON object ({e})")
                continue
            rows.append(row)
            try:
                if not isinstance(row.get("solution"), str):
                    raise ValueError("needs 'solution' (source as a string)")
                jobs.append(sandbox.Job(row["solution"], row.get("tests"), row.get("test_type", "stdio"),
                                        row.get("checker") or "lines", sandbox.Limits.from_mapping(row.get("limits")),
                                        row.get("language") or "python"))
                problems.append(None)
            except ValueError as e:
                jobs.append(None)
                problems.append(f"line {lineno}: {e}")
    return rows, jobs, problems
