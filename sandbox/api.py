"""The public entry points: `run` one program, `run_many` for throughput."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlvr.sandbox.backends import get_backend
from rlvr.sandbox.backends.base import Backend
from rlvr.sandbox.errors import SandboxUnavailable
from rlvr.sandbox.jobs import Job
from rlvr.sandbox.judge import judge
from rlvr.sandbox.languages import parse_language
from rlvr.sandbox.limits import Limits
from rlvr.sandbox.results import ExecResult, ExecStatus, JudgeResult, TestVerdict, Verdict
from rlvr.sandbox.scheduler import execute


def run(program: str, tests: Any, test_type: str = "stdio", checker: str = "lines",
        limits: Limits | Mapping[str, Any] = Limits(), backend: str = "auto") -> JudgeResult:
    """Run `program` (Python source; for another language use `run_many` with `Job(..., language=...)`)
    against `tests` in a sandbox and judge every test.

    test_type: stdio, call or assert (formats in `rlvr.sandbox.jobs`); checker: for stdio and call (see
    `rlvr.sandbox.checkers`); limits: Limits or a dict like {"time_s": 2, "memory_mb": 256}; backend: auto,
    docker, bwrap or none (no isolation: only when named).
    Raises ValueError for malformed tests, checker or limits; SandboxUnavailable when no backend can run (or
    the backend lacks a job's language toolchain).

    >>> run("print(int(input()) * 2)", [{"input": "21\\n", "output": "42\\n"}]).passed  # doctest: +SKIP
    True
    """
    return run_many([Job(program, tests, test_type, checker, Limits.from_mapping(limits))], backend=backend)[0]


def run_many(jobs: Sequence[Job], backend: str | Backend = "auto",
             on_done: Callable[[int], None] | None = None) -> list[JudgeResult]:
    """Judge many programs at once (in job order): several programs per sandbox exec, a warm container
    pool, as many sandboxes in parallel as the backend allows. backend: a name (as for `run`, or remote: the
    servers of `RLVR_SANDBOX_URL`) or a Backend instance (e.g. `rlvr.sandbox.remote_backend(urls, token)`).
    on_done(i) is called from a worker thread as program i finishes (progress bars). Raises as `run` does."""
    if not jobs:
        return []
    impl = backend if isinstance(backend, Backend) else get_backend(backend)
    for language in {job.language for job in jobs}:
        problem = impl.language_problem(parse_language(language))
        if problem:
            raise SandboxUnavailable(problem)
    results = execute(impl, jobs, on_done=on_done)
    return [_judge_one(job, runs, impl.name) for job, runs in zip(jobs, results, strict=True)]


def _judge_one(job: Job, runs: list[ExecResult], backend: str) -> JudgeResult:
    """One program's judgement; a fault of the judge itself marks that program's tests IE (its `error` set) and
    never reaches the other programs of the batch."""
    elapsed = round(sum(r.elapsed_s for r in runs), 4)
    error = next((r.detail for r in runs if r.status is ExecStatus.SANDBOX_ERROR), None)
    try:
        return judge(job, runs, backend, elapsed, error)
    except Exception as e:  # noqa: BLE001 - e.g. a result count that does not match the tests
        why = f"judging failed: {type(e).__name__}: {str(e)[:200]}"
        failed = ExecResult(ExecStatus.SANDBOX_ERROR, detail=why)
        return JudgeResult([TestVerdict(i, Verdict.IE, why, failed) for i in range(job.n_tests)], backend, elapsed, why)
