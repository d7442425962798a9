"""Throughput: spread jobs over a backend's parallel sandboxes, several jobs per sandbox exec.

Workers (threads, one per parallel sandbox) take batches of up to `max_batch` jobs that may share a
sandbox. When a batch breaks (its driver was killed, perhaps by the program it ran), the jobs that had not
started go back to the queue untouched; the job that was running is retried once alone in a fresh sandbox,
then its unfinished tests are marked SANDBOX_ERROR (verdict RE): a program that kills its sandbox gains
nothing, and its neighbours lose nothing.
"""
from __future__ import annotations

import math
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence

from rlvr.sandbox.backends.base import Backend
from rlvr.sandbox.batch import BatchOutcome
from rlvr.sandbox.errors import SandboxError
from rlvr.sandbox.jobs import Job
from rlvr.sandbox.results import ExecResult, ExecStatus

MAX_BATCH = int(os.environ.get("RLVR_SANDBOX_BATCH", 16))  # jobs per sandbox exec (fewer when few are pending)
MAX_ATTEMPTS = 2  # runs of a job whose sandbox broke under it
MAX_SILENT_BREAKS = 3  # batches broken before any job started, per job, before we give up


def execute(backend: Backend, jobs: Sequence[Job], max_batch: int = MAX_BATCH,
            on_done: Callable[[int], None] | None = None) -> list[list[ExecResult]]:
    """Run every job on `backend`; returns each job's ExecResults (one per test), in job order.

    on_done(i) is called (from a worker thread) as job i finishes, e.g. to move a progress bar.
    Raises SandboxError when the sandbox keeps failing before it runs anything (e.g. the engine is down)."""
    state = _State(jobs, on_done)
    n_workers = max(1, min(backend.workers(), len(jobs)))
    threads = [threading.Thread(target=_worker, args=(backend, state, max_batch, n_workers), daemon=True)
               for _ in range(n_workers)]
    for t in threads:
        t.start()
    with state.cond:
        while state.remaining and state.failure is None:
            state.cond.wait(0.5)
    if state.failure is not None:
        raise state.failure
    return [r for r in state.results if r is not None]


class _State:
    def __init__(self, jobs: Sequence[Job], on_done: Callable[[int], None] | None = None) -> None:
        self.jobs = jobs
        self.on_done = on_done
        self.pending: deque[int] = deque(range(len(jobs)))
        self.results: list[list[ExecResult] | None] = [None] * len(jobs)
        self.attempts = [0] * len(jobs)
        self.silent_breaks = [0] * len(jobs)
        self.remaining = len(jobs)
        self.failure: BaseException | None = None
        self.cond = threading.Condition()

    def take(self, backend: Backend, max_batch: int, n_workers: int) -> list[int] | None:
        """Next batch (job indices sharing a group key), None when all is done; waits while others run."""
        with self.cond:
            while True:
                if self.failure is not None or not self.remaining:
                    return None
                if self.pending:
                    break
                self.cond.wait(0.5)
            size = max(1, min(max_batch, math.ceil(len(self.pending) / n_workers)))
            first = self.pending.popleft()
            if self.attempts[first] > 0:
                return [first]  # a retry runs alone
            key = backend.group_key(self.jobs[first])
            batch = [first]
            for i in list(self.pending):
                if len(batch) >= size:
                    break
                if self.attempts[i] == 0 and backend.group_key(self.jobs[i]) == key:
                    self.pending.remove(i)
                    batch.append(i)
            return batch

    def finish(self, i: int, results: list[ExecResult]) -> None:
        self.results[i] = results
        self.remaining -= 1
        if self.on_done is not None:
            self.on_done(i)


def _worker(backend: Backend, state: _State, max_batch: int, n_workers: int) -> None:
    while True:
        batch = state.take(backend, max_batch, n_workers)
        if batch is None:
            return
        try:
            outcome = backend.run_batch([state.jobs[i] for i in batch])
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            with state.cond:
                state.failure = e if isinstance(e, SandboxError) else SandboxError(f"sandbox backend failed: {e!r}")
                state.cond.notify_all()
            return
        with state.cond:
            _record(state, batch, outcome)
            state.cond.notify_all()


def _record(state: _State, batch: list[int], outcome: BatchOutcome) -> None:
    for k, i in enumerate(batch):
        if outcome.results[k] is not None:
            state.finish(i, outcome.results[k])
    if outcome.broken is None:
        return
    running = outcome.running
    for k, i in enumerate(batch):
        if outcome.results[k] is not None:
            continue
        if k == running:
            state.attempts[i] += 1
            if state.attempts[i] >= MAX_ATTEMPTS:
                done = outcome.partial.get(k, [])
                missing = state.jobs[i].n_tests - len(done)
                failed = ExecResult(ExecStatus.SANDBOX_ERROR,
                                    detail=f"the sandbox broke while this program ran: {outcome.broken}")
                state.finish(i, done + [failed] * missing)
                continue
            state.pending.appendleft(i)
        else:
            if running is None:
                state.silent_breaks[i] += 1
                if state.silent_breaks[i] >= MAX_SILENT_BREAKS:
                    state.failure = SandboxError(f"the sandbox fails before running anything: {outcome.broken}")
                    return
            state.pending.append(i)
