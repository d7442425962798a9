"""Worker processes that run verifier calls with a hard per-call wall-clock kill.

Why processes: sympy and user verifiers can hang for minutes on one input, and signal-based timeouts
(``signal.alarm``, which math-verify uses) only work on the main thread of the main interpreter. A worker
process can always be killed. Each worker runs in its own process group and is a child subreaper
(``PR_SET_CHILD_SUBREAPER``): whatever a verifier starts stays a descendant of its worker, even a daemon that
double-forks and ``setsid`` s away from the group. When a call ends (returned, raised or killed on timeout) and at
:meth:`VerifierPool.close`, the worker's descendants are listed (psutil) and killed with its process group, so
subprocesses never pile up over a run and none outlives the pool. Workers ask the kernel to signal them when the
parent dies (``PR_SET_PDEATHSIG``): a worker then kills its descendants and itself, so nothing outlives a trainer
killed with ``kill -9``.

Memory: a call may allocate at most ``memory_mb`` MiB beyond what its worker held when it started (a soft
``RLIMIT_AS`` set for the call, so a verifier that allocates 20 GB gets a ``MemoryError``, a failure of that call),
and every worker has ``oom_score_adj`` 1000, so if memory still runs out the kernel kills a worker, not the trainer.

Output: a worker's file descriptors 1 and 2 (its own and those its subprocesses inherit) go to a private temporary
file, emptied after every call. Only the last :data:`OUTPUT_TAIL_BYTES` of a call's output come back, in
:attr:`Outcome.output`, with the call's byte count in :attr:`Outcome.output_bytes`; a verifier that prints 100 MB
does not reach the parent's log.

Cost model: the parent sends a *chunk* of calls per message (one IPC round trip per chunk, not per call)
and the worker streams back one small result per call. The parent takes the arrival of a result as the
start of the next call, which gives every call its own deadline while the chunk is in flight. When a call
runs past its ``timeout_s``, the parent kills the worker, records a timeout for that call, starts a fresh
worker and re-sends the rest of the chunk.

This is not a security sandbox: a verifier runs with the parent's user, files and network. Untrusted
*programs* (code rewards) go through :mod:`sandbox`.
"""

from __future__ import annotations

import ctypes
import fcntl
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import psutil

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
OUTPUT_TAIL_BYTES = 2048
"""Most bytes of a call's stdout/stderr (the end of it) that a worker sends back."""
_MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class Call:
    """One verifier call to run in a worker.

    Attributes:
        target: registry name (``"math"``) or import path (``"package.module:function"``).
        completion: the model's completion text (batch: a list of them).
        sample: the dataset row plus ``prompt``, ``completion_tokens``, ``max_new_tokens``, ``finish_reason``
            (batch: a list of them, one per completion).
        kwargs: keyword arguments passed to the verifier.
        timeout_s: wall-clock limit for this call in seconds; past it the worker is killed.
        batch: call the verifier's ``batch`` function (see :func:`rlvr.verifiers.registry.verifier`) on the lists;
            the outcome's value is then the list of per-sample results.
        memory_mb: MiB the call may allocate beyond what its worker held at start (``None``: the pool's
            ``memory_limit_mb``).
    """

    target: str
    completion: str | list[str]
    sample: dict | list[dict]
    kwargs: dict = field(default_factory=dict)
    timeout_s: float = 10.0
    batch: bool = False
    memory_mb: int | None = None


class Status(str, Enum):
    """How a call ended: returned a value, raised (or its worker died), or ran past its deadline."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class Outcome:
    """Result of one :class:`Call`: ``value`` is the verifier's raw return when ``status`` is ``OK``.

    ``output`` is the end (at most :data:`OUTPUT_TAIL_BYTES`, decoded as UTF-8) of what the call wrote to stdout and
    stderr, its subprocesses included; ``output_bytes`` is how many bytes it wrote in all (0 for a call whose worker
    was killed)."""

    status: Status
    value: Any = None
    error: str | None = None
    seconds: float = 0.0
    output: str = ""
    output_bytes: int = 0


class VerifierPool:
    """A fixed number of worker processes running :class:`Call` s with a hard per-call deadline.

    Example::

        with VerifierPool(num_workers=2) as pool:
            outcomes = pool.run([Call("math", r"so \\boxed{0.5}", {"answer": r"\\frac12"})])

    Args:
        num_workers: worker processes (>= 1). Started lazily on the first :meth:`run`, so verifiers
            registered before that are visible to forked workers.
        start_method: ``"fork"`` (default on Linux; workers inherit everything registered in the parent) or
            ``"forkserver"``/``"spawn"`` (workers import rlvr.verifiers afresh: a verifier must then be
            importable by name or ``module:function``).
        memory_limit_mb: MiB a call may allocate beyond what its worker held at start (a soft ``RLIMIT_AS`` over the
            worker's own address space at start, so the parent's large mappings, which forked workers inherit, do
            not count against it); a call's ``memory_mb`` overrides it; ``None`` = no limit.
        max_chunk: most calls sent to a worker in one message.

    Not thread-safe: use one pool per thread. Raises ``ValueError`` for bad arguments.
    """

    def __init__(
        self,
        num_workers: int = 2,
        *,
        start_method: str = "fork",
        memory_limit_mb: int | None = None,
        max_chunk: int = 32,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if max_chunk < 1:
            raise ValueError(f"max_chunk must be >= 1, got {max_chunk}")
        if memory_limit_mb is not None and memory_limit_mb < 64:
            raise ValueError(f"memory_limit_mb must be None or >= 64 (MiB), got {memory_limit_mb}")
        self._ctx = multiprocessing.get_context(start_method)
        self._num_workers = num_workers
        self._memory_limit_mb = memory_limit_mb
        self._max_chunk = max_chunk
        self._workers: list[_Worker] = []
        self.restarts = 0
        """Workers killed and replaced so far (timeouts and crashes)."""
        self._finalizer = weakref.finalize(self, _shutdown_all, self._workers)

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop all workers (idempotent). Workers that do not stop within 1 s are killed."""
        _shutdown_all(self._workers)

    def run(self, calls: Sequence[Call], on_result: Callable[[int, Outcome], None] | None = None) -> list[Outcome]:
        """Run ``calls`` on the workers and return one :class:`Outcome` per call, in input order.

        Args:
            calls: the calls; each carries its own ``timeout_s``.
            on_result: optional callback ``(index, outcome)`` invoked in the parent as each call finishes
                (progress bars).

        Never raises for a verifier's failure: exceptions, dead workers and timeouts become outcomes.
        """
        results: list[Outcome | None] = [None] * len(calls)
        pending: deque[int] = deque(range(len(calls)))
        self._ensure_workers()
        done = 0

        def finish(index: int, outcome: Outcome) -> None:
            nonlocal done
            if results[index] is not None:  # defensive: a call is judged once, by its first outcome
                return
            results[index] = outcome
            done += 1
            if on_result is not None:
                on_result(index, outcome)

        while done < len(calls):
            for worker in self._workers:
                if not worker.queue and pending:
                    worker.assign(self._take_chunk(pending), calls)
            busy = [w for w in self._workers if w.queue]
            if not busy:  # unreachable while calls remain; guards against an endless loop
                raise RuntimeError("verifier pool has calls left but no busy worker")
            now = time.monotonic()
            deadline = min(w.started + calls[w.queue[0]].timeout_s for w in busy)
            ready = multiprocessing.connection.wait([w.conn for w in busy], timeout=max(0.0, deadline - now))
            for worker in busy:
                if worker.conn not in ready:
                    continue
                index = worker.queue[0]
                try:
                    while worker.conn.poll():
                        got, outcome = worker.receive()
                        if got != worker.queue[0]:
                            raise RuntimeError(f"worker answered call {got}, expected {worker.queue[0]}")
                        worker.queue.popleft()
                        finish(got, outcome)
                        worker.started = time.monotonic()
                        if not worker.queue:
                            break
                        index = worker.queue[0]
                except (EOFError, OSError):
                    code = worker.process.exitcode
                    finish(index, Outcome(Status.ERROR, error=f"worker died (exit code {code})"))
                    self._replace(worker, pending)
            now = time.monotonic()
            for worker in self._workers:
                if worker.queue and now >= worker.started + calls[worker.queue[0]].timeout_s:
                    index = worker.queue[0]
                    seconds = now - worker.started
                    finish(index, Outcome(Status.TIMEOUT, error=f"timeout after {seconds:.2f} s", seconds=seconds))
                    self._replace(worker, pending)
        return [r if r is not None else Outcome(Status.ERROR, error="lost by the pool") for r in results]

    def _take_chunk(self, pending: deque[int]) -> list[int]:
        # Smaller chunks near the end keep both workers busy until the batch is done.
        size = max(1, min(self._max_chunk, math.ceil(len(pending) / (2 * self._num_workers))))
        return [pending.popleft() for _ in range(min(size, len(pending)))]

    def _ensure_workers(self) -> None:
        for i, worker in enumerate(self._workers):
            if not worker.process.is_alive():
                self._workers[i] = self._start_worker()
        while len(self._workers) < self._num_workers:
            self._workers.append(self._start_worker())

    def _start_worker(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main,
            args=(child_conn, os.getpid(), self._memory_limit_mb),
            name="rlvr-verifier",
            daemon=True,
        )
        process.start()
        child_conn.close()
        return _Worker(process, parent_conn)

    def _replace(self, worker: _Worker, pending: deque[int]) -> None:
        """Kill ``worker``, put the rest of its chunk back at the front of ``pending``, start a new one."""
        worker.queue.popleft()
        pending.extendleft(reversed(worker.queue))
        worker.queue.clear()
        worker.kill()
        self.restarts += 1
        self._workers[self._workers.index(worker)] = self._start_worker()


class _Worker:
    def __init__(self, process: multiprocessing.process.BaseProcess, conn: multiprocessing.connection.Connection):
        self.process = process
        self.conn = conn
        self.queue: deque[int] = deque()
        self.started = 0.0

    def assign(self, chunk: list[int], calls: Sequence[Call]) -> None:
        self.queue.extend(chunk)
        self.started = time.monotonic()
        self.conn.send(("run", [(i, calls[i]) for i in chunk]))

    def receive(self) -> tuple[int, Outcome]:
        _, index, status, value, error, seconds, output, output_bytes = self.conn.recv()
        return index, Outcome(Status(status), value, error, seconds, output, output_bytes)

    def kill(self) -> None:
        """Kill the worker, its process group and every descendant (those that left the group too)."""
        pid = self.process.pid
        if pid is not None:
            _signal_group(pid, signal.SIGSTOP)  # no new children while the tree is listed
            # Listed before the kill: once the worker is gone its orphans are re-parented out of reach.
            descendants = _descendants(pid)
            _signal_group(pid, signal.SIGKILL)  # the worker leads its own process group
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            _kill_processes(descendants)
        self.process.join(timeout=5)
        self.conn.close()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _kill_processes(processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            process.kill()  # psutil refuses a pid that now names another process
        except psutil.Error:
            pass


def _shutdown_all(workers: list[_Worker]) -> None:
    # An idle worker's descendants are what its verifiers left running: kill them while they are still the
    # worker's (once it exits they are re-parented out of reach), then let the worker stop.
    leftovers: list[psutil.Process] = []
    for worker in workers:
        if worker.process.pid is not None and worker.process.is_alive():
            leftovers.extend(_descendants(worker.process.pid))
    _kill_processes(leftovers)
    for worker in workers:
        try:
            worker.conn.send(("stop",))
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 1.0
    for worker in workers:
        worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
        if worker.process.is_alive():
            worker.kill()
        else:
            worker.conn.close()
    workers.clear()


# ----------------------------------------------------------------------------------------------------
# Worker side


def _worker_main(conn: multiprocessing.connection.Connection, parent_pid: int, memory_limit_mb: int | None) -> None:
    os.setpgrp()  # own process group: the parent's kill also reaches grandchildren
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    signal.signal(signal.SIGTERM, _kill_tree_and_exit)  # the parent-death signal, and close()'s stop
    _die_with_parent(parent_pid)
    _first_for_the_oom_killer()
    output = _capture_output()
    base_vm = _address_space_bytes()
    resolved: dict[str, Callable[..., Any]] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        for index, call in message[1]:
            memory_mb = call.memory_mb if call.memory_mb is not None else memory_limit_mb
            with _memory_limit(base_vm, memory_mb):
                status, value, error, seconds = _run_one(call, resolved)
            if status != Status.OK.value and error and error.startswith("MemoryError"):
                error = f"{error} (memory limit: {memory_mb} MiB a call)"[:_MAX_ERROR_CHARS]
            _kill_own_descendants()  # what the call started ends with it
            tail, written = _take_output(output)
            try:
                conn.send(("done", index, status, value, error, seconds, tail, written))
            except (EOFError, OSError):
                return
            except Exception as exc:  # the return value did not pickle
                error = _describe(exc, "unpicklable result")
                conn.send(("done", index, Status.ERROR.value, None, error, seconds, tail, written))
        _reap_orphans()


def _kill_tree_and_exit(signum: int, frame: Any) -> None:
    """SIGTERM (the parent died, ``PR_SET_PDEATHSIG``): kill every descendant and the process group, then exit."""
    _kill_own_descendants()
    _signal_group(os.getpgrp(), signal.SIGKILL)  # the worker leads the group: this ends it too
    os._exit(1)


def _has_children() -> bool:
    """Whether this process has a child, from ``/proc`` without listing every process (psutil would)."""
    try:
        return any(open(f"/proc/self/task/{tid}/children").read().strip() for tid in os.listdir("/proc/self/task"))
    except OSError:
        return True  # no such file (an old kernel): let psutil look


def _kill_own_descendants() -> None:
    """Kill what the last call started (the worker is a subreaper: double-forked daemons are its descendants too)."""
    if _has_children():
        _kill_processes(_descendants(os.getpid()))
        _reap_orphans()


def _first_for_the_oom_killer() -> None:
    """``oom_score_adj`` 1000: when memory runs out, the kernel kills a verifier worker before the trainer."""
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass  # not Linux: nothing to say to the OOM killer


def _address_space_bytes() -> int:
    """This process's virtual memory size in bytes (what ``RLIMIT_AS`` counts)."""
    return psutil.Process().memory_info().vms


class _memory_limit:  # noqa: N801 - used as a context manager, named like one
    """A soft ``RLIMIT_AS`` of ``base + memory_mb`` MiB for the duration of a call (no-op for ``None``), lifted after
    it so the next call gets its own."""

    def __init__(self, base: int, memory_mb: int | None) -> None:
        self.limit = None if memory_mb is None else base + memory_mb * 1024 * 1024

    def __enter__(self) -> None:
        if self.limit is not None:
            import resource

            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            soft = self.limit if hard == resource.RLIM_INFINITY else min(self.limit, hard)
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

    def __exit__(self, *exc: object) -> None:
        if self.limit is not None:
            import resource

            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


def _capture_output() -> int:
    """Point fds 1 and 2 (and ``sys.stdout``/``sys.stderr``) at an unlinked temporary file; return its fd."""
    fd, path = tempfile.mkstemp(prefix="rlvr-verifier-output-")
    os.unlink(path)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)  # writes land at the end
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # what the parent buffered before the fork stays the parent's
        except Exception:  # noqa: BLE001 - a closed or odd stream: nothing to keep
            pass
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    # New streams on fds 1 and 2: the inherited ones may write elsewhere (a test runner's capture file).
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)  # noqa: SIM115
    return fd


def _take_output(fd: int) -> tuple[str, int]:
    """The end of what was written since the last call and its size in bytes; empties the file."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a verifier closed or replaced the stream
            pass
    size = os.fstat(fd).st_size
    if size == 0:
        return "", 0
    tail = os.pread(fd, OUTPUT_TAIL_BYTES, max(0, size - OUTPUT_TAIL_BYTES))
    os.ftruncate(fd, 0)
    return tail.decode("utf-8", errors="replace"), size


def _reap_orphans() -> None:
    """Collect exited children: as a subreaper the worker inherits the orphans of what its verifiers started."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _run_one(call: Call, resolved: dict[str, Callable[..., Any]]) -> tuple[str, Any, str | None, float]:
    start = time.perf_counter()
    try:
        fn = resolved.get(call.target)
        if fn is None:
            from rlvr.verifiers.registry import get_verifier

            fn = resolved[call.target] = get_verifier(call.target)
        if call.batch:
            value = fn.batch(call.completion, call.sample, **call.kwargs)  # type: ignore[attr-defined]
        else:
            value = fn(call.completion, call.sample, **call.kwargs)
        return Status.OK.value, value, None, time.perf_counter() - start
    except BaseException as exc:  # noqa: BLE001 - SystemExit/KeyboardInterrupt from user code cost one call
        return Status.ERROR.value, None, _describe(exc), time.perf_counter() - start


def _describe(exc: BaseException, prefix: str = "") -> str:
    text = f"{type(exc).__name__}: {exc}"
    if prefix:
        text = f"{prefix}: {text}"
    return text[:_MAX_ERROR_CHARS]


def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)  # the handler kills the worker's descendants too
        # Orphans of what the verifiers start (daemons that fork and setsid) become the worker's, so the pool
        # can find and kill them.
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, AttributeError):
        pass  # not Linux/glibc: rely on EOF from the closed pipe
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)
