"""One batch of jobs through one in-sandbox driver: the request it reads, the events it writes back, and
the deadlines the host holds it to (the outer time limit: a driver that falls silent is killed with its
sandbox by the backend)."""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rlvr.sandbox.harness import forkserver_source, runner_source
from rlvr.sandbox.jobs import Job
from rlvr.sandbox.results import ExecResult, ExecStatus

HELLO_S = 30.0  # the driver must be up within this many seconds (a cold Python on a loaded machine)
COMPILE_S = 20.0  # extra seconds for a job's first event beyond its compile limit (the driver compiles first)
SYNTAX_CHECK_S = 10.0  # extra seconds for a Python job's first event: the driver's syntax check (at most 5 s)
FORK_SERVER = os.environ.get("RLVR_SANDBOX_FORKSERVER", "1") != "0"
DONE_S = 15.0  # seconds for the clean-up after a job (kill everything, wipe scratch)


class Channel(Protocol):
    """A byte pipe to one driver process: its stdin, and its stdout read line by line."""

    def send(self, data: bytes) -> None:
        """Write all of data to the driver's stdin."""

    def read_line(self, timeout_s: float) -> bytes | None:
        """The next stdout line (without newline), None at end of stream; raises TimeoutError after
        timeout_s seconds without a full line."""

    def diagnostics(self) -> str:
        """The end of the driver's stderr, for error messages."""


@dataclass
class BatchOutcome:
    """What came back from one batch.

    results[i]: all ExecResults of job i when it finished, else None. partial: results so far of the job
    that was running when the batch broke. broken: why the driver stopped early (None when it did not).
    reusable: the sandbox is clean and may run another batch.
    """

    results: list[list[ExecResult] | None]
    partial: dict[int, list[ExecResult]] = field(default_factory=dict)
    broken: str | None = None
    reusable: bool = False

    @property
    def running(self) -> int | None:
        """Index of the job that was running when the batch broke (None when it did not break, or it broke
        before any job started)."""
        return next(iter(self.partial), None)


def request_bytes(jobs: Sequence[Job], *, pid_namespace: bool, scratch: Sequence[str], nproc: int | None,
                  python: str = "python3", fork_server: bool | None = None,
                  idle_exit_s: float | None = None, namespaces: bool = True) -> bytes:
    """The driver's stdin for a batch: a decimal byte count, a newline, then the JSON batch.

    pid_namespace: the driver may kill(-1) (never outside a private pid namespace). scratch: writable
    folders it wipes after each job (the first holds the work folder). nproc: RLIMIT_NPROC for programs,
    or None (Docker counts processes with its pids limit instead). fork_server: fork Python programs from
    a warm interpreter (`sandbox/harness/forkserver.py`) instead of starting one per run (default: on,
    unless RLVR_SANDBOX_FORKSERVER=0). idle_exit_s: after the batch the driver waits this many seconds
    for another on the same stdin, then exits (None: until end of stream). The settings of a warm driver's
    first batch (all but jobs and idle_exit_s) hold for its later batches. namespaces: every program run
    (and compiler) gets new user, IPC and pid namespaces (`_enter_run_namespaces` in the harness); the
    driver refuses to start where it cannot make them."""
    if fork_server is None:
        fork_server = FORK_SERVER
    body = json.dumps({
        "pid_namespace": pid_namespace, "scratch": list(scratch), "nproc": nproc, "python": python,
        "runner": runner_source(), "forkserver": forkserver_source() if fork_server else None,
        "idle_exit_s": idle_exit_s, "namespaces": namespaces, "jobs": [job.sandbox_view() for job in jobs],
    }).encode("utf-8")
    return b"%d\n" % len(body) + body


def run_batch(channel: Channel, jobs: Sequence[Job], request: bytes) -> BatchOutcome:
    """Send `request` (from request_bytes) and collect the driver's events for `jobs`, in order.

    Never raises for a misbehaving driver or program: a silence longer than the current deadline, an
    early end of stream or an event out of order ends the batch as `broken`."""
    outcome = BatchOutcome(results=[None] * len(jobs))
    try:
        channel.send(request)
        hello = _event(channel.read_line(HELLO_S))
        if "hello" not in hello:
            raise _Broken(f"driver did not start: {hello.get('fatal', hello)}")
        for i, job in enumerate(jobs):
            outcome.partial = {i: []}
            limit_s = 2 * job.limits.time_s + 10.0
            while len(outcome.partial[i]) < job.n_tests:
                first = 0.0
                if not outcome.partial[i]:  # no compile allowance where there is no compile step
                    first = SYNTAX_CHECK_S if job.language == "python" else COMPILE_S + job.limits.compile_time_s
                event = _event(channel.read_line(limit_s + first))
                if event.get("job") != i or event.get("test") != len(outcome.partial[i]):
                    raise _Broken(f"driver event out of order: {str(event)[:200]}")
                outcome.partial[i].append(_exec_result(event))
            done = _event(channel.read_line(DONE_S))
            if done.get("job") != i or not done.get("done"):
                raise _Broken(f"driver did not finish job {i}: {str(done)[:200]}")
            outcome.results[i] = outcome.partial.pop(i)
            outcome.partial = {}
            if not done.get("clean"):
                outcome.broken = "the sandbox could not be cleaned after a job"
                return outcome
        outcome.reusable = True
    except TimeoutError:
        outcome.broken = "the sandbox driver went silent past its deadline"
    except (_Broken, OSError, ValueError, RecursionError) as e:
        outcome.broken = f"{e}; driver stderr: {channel.diagnostics()[-500:]}"
    return outcome


class _Broken(Exception):
    pass


def _event(line: bytes | None) -> dict:
    if line is None:
        raise _Broken("the sandbox driver ended early")
    event = json.loads(line)
    if not isinstance(event, dict):
        raise _Broken(f"driver wrote a non-object: {line[:200]!r}")
    return event


def _exec_result(event: dict) -> ExecResult:
    return ExecResult(
        status=ExecStatus(event["status"]), elapsed_s=float(event.get("elapsed_s", 0.0)),
        exit_code=event.get("exit_code"), signal=event.get("signal"), stdout=event.get("stdout", ""),
        stderr=event.get("stderr", ""), value=event.get("value"), detail=event.get("detail", ""),
    )
