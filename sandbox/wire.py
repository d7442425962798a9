"""What crosses the network between a `remote` backend and `rlvr sandbox serve`'s own endpoint: a `Job` and the
`ExecResult`s of its tests, as JSON-ready dicts (and back, checked).

Only the runs come back, never verdicts: the client judges them with its own checkers (`rlvr.sandbox.judge`), so a
program gets the same verdicts through a server as through a local backend.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rlvr.sandbox.jobs import Job
from rlvr.sandbox.limits import Limits
from rlvr.sandbox.results import ExecResult, ExecStatus

PROTOCOL = 1
"""Version of these forms; a server answers it at `/rlvr/v1/info`."""

_JOB_FIELDS = ("program", "tests", "test_type", "checker", "limits", "language")


def job_to_wire(job: Job) -> dict[str, Any]:
    """The JSON-ready form of `job` (expected outputs included: the server's driver never sees them)."""
    return {"program": job.program, "tests": job.tests, "test_type": job.test_type, "checker": job.checker,
            "limits": asdict(job.limits), "language": job.language}


def job_from_wire(data: Any) -> Job:
    """The Job of a `job_to_wire` dict. Raises ValueError naming a missing or unknown field, or a bad value (as
    `Job` and `Limits` check them)."""
    if not isinstance(data, dict):
        raise ValueError(f"a job must be a JSON object with {', '.join(_JOB_FIELDS)}, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_JOB_FIELDS))
    if unknown:
        raise ValueError(f"a job has unknown field(s) {unknown}; valid: {', '.join(_JOB_FIELDS)}")
    if "program" not in data or "tests" not in data:
        raise ValueError("a job needs 'program' and 'tests'")
    return Job(program=data["program"], tests=data["tests"], test_type=data.get("test_type", "stdio"),
               checker=data.get("checker", "lines"), limits=Limits.from_mapping(data.get("limits")),
               language=data.get("language", "python"))


def result_to_wire(result: ExecResult) -> dict[str, Any]:
    """The JSON-ready form of one test's run (`value` is already in `rlvr.sandbox.harness.codec` form)."""
    return {"status": result.status.value, "elapsed_s": result.elapsed_s, "exit_code": result.exit_code,
            "signal": result.signal, "stdout": result.stdout, "stderr": result.stderr, "value": result.value,
            "detail": result.detail}


def result_from_wire(data: Any) -> ExecResult:
    """The ExecResult of a `result_to_wire` dict. Raises ValueError for anything else (an unknown status, a field of
    the wrong type)."""
    if not isinstance(data, dict):
        raise ValueError(f"a run result must be a JSON object, got {type(data).__name__}")
    try:
        status = ExecStatus(data.get("status"))
    except ValueError:
        raise ValueError(f"unknown run status {str(data.get('status'))[:40]!r}") from None
    for name in ("stdout", "stderr", "detail"):
        if not isinstance(data.get(name, ""), str):
            raise ValueError(f"run result field {name!r} must be a string")
    for name in ("exit_code", "signal"):
        if data.get(name) is not None and (isinstance(data[name], bool) or not isinstance(data[name], int)):
            raise ValueError(f"run result field {name!r} must be an integer or null")
    elapsed = data.get("elapsed_s", 0.0)
    if isinstance(elapsed, bool) or not isinstance(elapsed, (int, float)):
        raise ValueError("run result field 'elapsed_s' must be a number")
    return ExecResult(status=status, elapsed_s=float(elapsed), exit_code=data.get("exit_code"),
                      signal=data.get("signal"), stdout=data.get("stdout", ""), stderr=data.get("stderr", ""),
                      value=data.get("value"), detail=data.get("detail", ""))


def results_from_wire(data: Any, jobs: list[Job]) -> list[list[ExecResult]]:
    """Each job's runs from a server's answer `{"results": [[run, ...], ...]}`, checked against `jobs` (one list per
    job, one run per test). Raises ValueError naming what does not fit."""
    runs = data.get("results") if isinstance(data, dict) else None
    if not isinstance(runs, list) or len(runs) != len(jobs):
        got = f"{len(runs)} lists" if isinstance(runs, list) else type(runs).__name__
        raise ValueError(f"the server answered {got} of results for {len(jobs)} jobs")
    out = []
    for i, (job, job_runs) in enumerate(zip(jobs, runs, strict=True)):
        if not isinstance(job_runs, list) or len(job_runs) != job.n_tests:
            raise ValueError(f"the server answered job {i} with {len(job_runs) if isinstance(job_runs, list) else 0} "
                             f"runs for {job.n_tests} tests")
        out.append([result_from_wire(r) for r in job_runs])
    return out
