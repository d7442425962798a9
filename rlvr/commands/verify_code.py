"""`rlvr verify code --file cases.jsonl`: judge programs against their tests in the sandbox.

Each input line is a JSON object with `solution` (Python source), `test_type` (stdio, call or assert),
`tests`, and optionally `checker` and `limits` (`time_s`, `memory_mb`, ...). Prints one JSON line per
input, in input order: the input's fields plus `score` (fraction of tests passed), `passed` (bool) and
`verdicts` (AC, WA, TLE, MLE, RE, CE, OLE per test); a line that cannot be judged gets `error` instead.
A summary goes to stderr. Exit code 0 when every line was judged, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

CHUNK = 64  # programs judged together (and printed) at a time


def run(args: argparse.Namespace) -> int:
    """Judge every line of `args.file`; optional `args.backend` (auto) and `args.mode` (fraction or all)."""
    import sandbox
    from verifiers.code import score_result

    backend = getattr(args, "backend", None) or "auto"
    mode = getattr(args, "mode", None) or "fraction"
    rows, jobs, problems = _read(args.file)
    started, n_passed, n_bad = time.monotonic(), 0, 0
    for lo in range(0, len(rows), CHUNK):
        idx = [i for i in range(lo, min(lo + CHUNK, len(rows))) if problems[i] is None]
        try:
            judged = dict(zip(idx, sandbox.run_many([jobs[i] for i in idx], backend=backend)))
        except sandbox.SandboxError as e:
            print(f"rlvr verify code: {e}", file=sys.stderr)
            return 1
        for i in range(lo, min(lo + CHUNK, len(rows))):
            out: dict[str, Any] = dict(rows[i])
            if problems[i] is not None:
                out.update(score=None, passed=False, verdicts=[], error=problems[i])
                n_bad += 1
            else:
                scored = score_result(judged[i], mode)
                out.update(score=scored["score"], passed=scored["passed"], verdicts=scored["verdicts"])
                n_passed += scored["passed"]
            print(json.dumps(out), flush=True)
    print(f"judged {len(rows) - n_bad} programs ({n_passed} passed, {n_bad} not judged) in "
          f"{time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0 if n_bad == 0 else 1


def _read(path: str) -> tuple[list[dict[str, Any]], list[Any], list[str | None]]:
    """Rows, their sandbox Jobs (None where malformed) and, per row, the problem that stops judging it."""
    import sandbox

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
                    raise ValueError("needs 'solution' (Python source as a string)")
                jobs.append(sandbox.Job(row["solution"], row.get("tests"), row.get("test_type", "stdio"),
                                        row.get("checker") or "lines", sandbox.Limits.from_mapping(row.get("limits"))))
                problems.append(None)
            except ValueError as e:
                jobs.append(None)
                problems.append(f"line {lineno}: {e}")
    return rows, jobs, problems
