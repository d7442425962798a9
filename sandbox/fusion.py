"""SandboxFusion's `/run_code` API, both ways: the request a `remote` backend sends to a SandboxFusion server, and
what `rlvr sandbox serve` reads and answers at its own `/run_code`.

The API (SandboxFusion's `RunCodeRequest` / `RunCodeResponse`): a POST of
`{"code", "language", "compile_timeout", "run_timeout", "memory_limit_MB", "stdin", "files", "fetch_files"}`,
answered by `{"status": "Success" | "Failed" | "SandboxError", "message", "compile_result", "run_result", "files"}`
where each result is `{"status": "Finished" | "TimeLimitExceeded" | "Error", "execution_time", "return_code",
"stdout", "stderr"}`.

How rlvr judges on a SandboxFusion server: the `code` it sends is rlvr's own in-sandbox driver (the program every local
backend runs, `rlvr.sandbox.harness`) and the `stdin` is the driver's batch request, so the server runs the driver,
the driver runs the program against its tests exactly as it does locally, and the events it prints come back as
`run_result.stdout`, read by the same code as a local driver's (`rlvr.sandbox.batch.run_batch`). The driver gives
every program run its own user, IPC and pid namespaces where the server's sandbox lets it make them (as locally);
where it cannot, it says so and the client asks again without them (`namespaces=False`): the server's isolation is
then the only one, and a program that kills everything it can reach takes its driver down with it (its tests read
IE, as a local sandbox that breaks).
"""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from rlvr.sandbox.batch import COMPILE_S, DONE_S, HELLO_S, SYNTAX_CHECK_S, request_bytes
from rlvr.sandbox.harness import driver_source
from rlvr.sandbox.jobs import Job
from rlvr.sandbox.limits import Limits
from rlvr.sandbox.results import ExecResult, ExecStatus

RUN_CODE_PATH = "/run_code"
DRIVER_MB = 512
"""MiB asked for beyond the largest job's memory: the driver and its fork server live in the same allowance."""
FUSION_LANGUAGES = {"python": "python", "cpp": "cpp", "c": "c", "java": "java", "nodejs": "javascript",
                    "javascript": "javascript", "js": "javascript"}
"""SandboxFusion language names `rlvr sandbox serve` runs, and rlvr's name for each."""


def worst_case_s(jobs: Sequence[Job]) -> float:
    """Seconds one driver may take for `jobs` run one after another before any host deadline fires: its start, each
    job's compile (or Python syntax check) allowance, twice each test's time limit plus 10 s, and each clean-up (the
    deadlines of `rlvr.sandbox.batch.run_batch`). A client waits this long (plus a margin) at most."""
    total = HELLO_S
    for job in jobs:
        compile_s = SYNTAX_CHECK_S if job.language == "python" else COMPILE_S + job.limits.compile_time_s
        total += compile_s + job.n_tests * (2 * job.limits.time_s + 10.0) + DONE_S
    return total


NO_NAMESPACES = "cannot give each program its own namespaces"
"""What the driver's fatal line says when the server's sandbox cannot make per-run namespaces."""


def driver_request(jobs: Sequence[Job], namespaces: bool = True) -> dict[str, Any]:
    """The `/run_code` request that runs `jobs` through rlvr's driver on a SandboxFusion server (module docstring);
    `namespaces`: ask the driver for per-run namespaces (it refuses to start where it cannot make them).

    The driver's scratch is a fresh folder under /tmp with a random name (the server may run several requests in
    one file system); `run_timeout` is :func:`worst_case_s`, `memory_limit_MB` the largest job's memory (or compiler
    memory) plus :data:`DRIVER_MB`."""
    scratch = f"/tmp/rlvr-{uuid.uuid4().hex}"
    stdin = request_bytes(jobs, pid_namespace=False, scratch=[scratch], nproc=None, python="python3",
                          namespaces=namespaces)
    memory = max(max(j.limits.memory_mb, j.limits.compile_memory_mb if j.language != "python" else 0) for j in jobs)
    return {"code": driver_source(), "language": "python", "stdin": stdin.decode("utf-8"),
            "compile_timeout": 10.0, "run_timeout": round(worst_case_s(jobs), 3),
            "memory_limit_MB": int(memory + DRIVER_MB), "files": {}, "fetch_files": []}


def driver_output(answer: Any) -> tuple[str, str]:
    """The driver's stdout and stderr from a `/run_code` answer to :func:`driver_request`.

    Raises ValueError when the answer is not a SandboxFusion response, or says the server failed (`SandboxError`,
    no `run_result`, a run that ended in `Error`): a failure of the machinery, not of any program."""
    if not isinstance(answer, dict) or answer.get("status") not in ("Success", "Failed", "SandboxError"):
        raise ValueError(f"not a SandboxFusion /run_code answer: {str(answer)[:200]}")
    run = answer.get("run_result")
    if answer["status"] == "SandboxError" or not isinstance(run, dict):
        raise ValueError(f"the server could not run the driver: {str(answer.get('message') or answer)[:300]}")
    if run.get("status") == "Error":
        raise ValueError(f"the server could not run the driver: {str(run.get('stderr'))[:300]}")
    stdout, stderr = run.get("stdout") or "", run.get("stderr") or ""
    if not isinstance(stdout, str) or not isinstance(stderr, str):
        raise ValueError("the server's run_result has a stdout or stderr that is not a string")
    return stdout, stderr


class RunCodeRequest:
    """A `/run_code` request as `rlvr sandbox serve` reads it: `job` is the program as one stdio test whose input is
    `stdin` (its expected output unused), under `limits`.

    Raises ValueError naming a bad field: a missing `code` or `language`, a language the server does not run, a
    timeout or memory out of `Limits`' bounds, `files` or `fetch_files` (not supported here). Unknown fields are
    ignored, as SandboxFusion ignores them."""

    def __init__(self, data: Any, *, output_kb: int, default_memory_mb: int = 1024) -> None:
        if not isinstance(data, dict):
            raise ValueError(f"the request must be a JSON object, got {type(data).__name__}")
        code, language = data.get("code"), data.get("language")
        if not isinstance(code, str):
            raise ValueError("'code' must be a string (the program's source)")
        if language not in FUSION_LANGUAGES:
            raise ValueError(f"language {language!r} is not run here; languages: {', '.join(FUSION_LANGUAGES)}")
        stdin = data.get("stdin")
        if stdin is not None and not isinstance(stdin, str):
            raise ValueError("'stdin' must be a string or null")
        if any(v is not None for v in (data.get("files") or {}).values()) or data.get("fetch_files"):
            raise ValueError("'files' and 'fetch_files' are not supported by this server (send them empty)")
        memory = data.get("memory_limit_MB", -1)
        if isinstance(memory, bool) or not isinstance(memory, int):
            raise ValueError("'memory_limit_MB' must be an integer (-1: the server's default)")
        self.language = FUSION_LANGUAGES[language]
        limits = {"time_s": _seconds(data, "run_timeout"), "compile_time_s": _seconds(data, "compile_timeout"),
                  "memory_mb": memory if memory > 0 else default_memory_mb, "output_kb": output_kb}
        self.limits = Limits.from_mapping(limits)
        self.job = Job(code, [{"input": stdin or "", "output": ""}], "stdio", "lines", self.limits, self.language)


def _seconds(data: dict, name: str) -> float:
    value = data.get(name, 10)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 600:
        raise ValueError(f"{name!r} must be a number of seconds in (0, 600], got {value!r}")
    return float(value)


def run_code_response(run: ExecResult, language: str) -> dict[str, Any]:
    """SandboxFusion's answer for one program run by `rlvr sandbox serve` (status mapping in docs/services.md).

    A program that did not compile has a `compile_result` with return code 1 (Python: a `run_result`, as the
    interpreter's syntax error would be); a timeout is `TimeLimitExceeded`; a run killed at its memory or output
    limit is `Finished` with the signal's negative return code (-9); a sandbox failure is `SandboxError`."""
    def result(status: str, code: int | None, stdout: str = "", stderr: str = "") -> dict[str, Any]:
        return {"status": status, "execution_time": round(run.elapsed_s, 4), "return_code": code,
                "stdout": stdout, "stderr": stderr}

    if run.status is ExecStatus.SANDBOX_ERROR:
        return {"status": "SandboxError", "message": run.detail or "the sandbox failed", "compile_result": None,
                "run_result": None, "files": {}}
    if run.status is ExecStatus.COMPILE_ERROR:
        failed = result("Finished", 1, "", run.stderr or run.detail)
        compiled, ran = (None, failed) if language == "python" else (failed, None)
        return {"status": "Failed", "message": "", "compile_result": compiled, "run_result": ran, "files": {}}
    if run.status is ExecStatus.TIMEOUT:
        ran = result("TimeLimitExceeded", None, run.stdout, run.stderr)
    else:
        code = run.exit_code if run.exit_code is not None else (-run.signal if run.signal else None)
        if code is None:
            code = 0 if run.status is ExecStatus.OK else -9
        ran = result("Finished", code, run.stdout, run.stderr)
    ok = ran["status"] == "Finished" and ran["return_code"] == 0 and run.status is ExecStatus.OK
    return {"status": "Success" if ok else "Failed", "message": "", "compile_result": None, "run_result": ran,
            "files": {}}
