"""Moving the trainer's weights into a colocated inference engine: full (gathered) tensors by name, and a watchdog
that turns a hung sync into an error naming what hung.

Two things can hang a weight sync, and neither times out on its own soon enough to be useful:

- a ZeRO-3 gather (``deepspeed.zero.GatheredParameters``) is a collective: when one rank crashed or is in another
  stage, the others wait for it until the process group's own timeout (30 min by default);
- the engine's reload (vLLM ``reload_weights``) runs arbitrary kernels and, on GPU, allocations after a wake-up.

:class:`SyncWatchdog` bounds both. It needs no cooperation from the code it guards: on expiry a helper thread dumps
every thread's stack to stderr and raises :class:`WeightSyncTimeout` in the main thread through a signal (which also
interrupts sleeping system calls). Code stuck inside a C call that never returns to Python cannot be interrupted; for
that case the watchdog ends the process after ``hard_exit_after_s`` more seconds with the same message and exit code
:data:`HARD_EXIT_CODE`, so a launcher (``torchrun``) tears the job down instead of leaving it hanging silently.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType

import torch

HARD_EXIT_CODE = 75
"""Exit status of a process the watchdog had to end (EX_TEMPFAIL)."""


class WeightSyncTimeout(RuntimeError):
    """A weight sync did not finish within ``rollout.weight_sync_timeout_s``; the message names the stage that hung."""


def is_zero3_param(param: torch.nn.Parameter) -> bool:
    """True for a parameter partitioned by DeepSpeed ZeRO-3 (it carries ``ds_id``; its ``.data`` is a stub)."""
    return hasattr(param, "ds_id")


def iter_full_weights(model: torch.nn.Module, dtype: torch.dtype | None = None, chunk_bytes: int = 1 << 30,
                      on_chunk: Callable[[str], None] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` for every parameter of ``model`` with its full value, in HF checkpoint names.

    ZeRO-3 partitioned parameters are gathered a chunk at a time (about ``chunk_bytes`` of full tensors in the
    parameters' own dtype), so peak extra memory is one chunk, not the model. Every rank must run this generator to
    the end in the same order: the gathers are collectives.

    Args:
        model: the unwrapped HF model the DeepSpeed engine trains (``engine.module``).
        dtype: cast to this dtype (e.g. the inference engine's bf16); ``None`` keeps each parameter's dtype.
        chunk_bytes: gather budget per ZeRO-3 collective, in bytes of full parameters.
        on_chunk: called with a description (``"gathering ZeRO-3 parameters 3/40 (model.layers.2.mlp...)"``) before
            each gather, so a watchdog can say what hung.
    Yields:
        name and a tensor the caller may keep: ZeRO-3 values are copied out of the gather buffer, which is freed when
        the chunk ends; other parameters are detached views (or dtype-cast copies) of the live weights.
    """
    chunks: list[tuple[bool, list[tuple[str, torch.nn.Parameter]]]] = []  # (partitioned?, parameters)
    size = 0
    for name, param in model.named_parameters():
        if not is_zero3_param(param):
            chunks.append((False, [(name, param)]))
            continue
        nbytes = int(param.ds_numel) * param.element_size()
        if not chunks or not chunks[-1][0] or size + nbytes > chunk_bytes:
            chunks.append((True, []))
            size = 0
        chunks[-1][1].append((name, param))
        size += nbytes
    total = sum(1 for partitioned, _ in chunks if partitioned)
    done = 0
    for partitioned, members in chunks:
        if not partitioned:
            name, param = members[0]
            value = param.detach()
            yield name, value if dtype is None or value.dtype == dtype else value.to(dtype)
            continue
        import deepspeed

        done += 1
        if on_chunk is not None:
            on_chunk(f"gathering ZeRO-3 parameters, chunk {done}/{total} ({members[0][0]} .. {members[-1][0]})")
        with deepspeed.zero.GatheredParameters([p for _, p in members], modifier_rank=None):
            for name, param in members:
                yield name, param.detach().to(dtype or param.dtype, copy=True)


class SyncWatchdog:
    """Bound a block's wall-clock time; on expiry raise :class:`WeightSyncTimeout` naming the current stage.

    Usage::

        with SyncWatchdog(timeout_s=300, what="weight sync to vLLM", rank=rank) as wd:
            wd.stage("gathering ZeRO-3 parameters")
            ...
            wd.stage("vLLM reload_weights")
            ...

    Args:
        timeout_s: seconds before the block is interrupted.
        what: what the block does, for the message.
        rank: the process's rank, for the message.
        hard_exit_after_s: if the main thread has not left the block this long after the interrupt (stuck in C code),
            print the message and ``os._exit(HARD_EXIT_CODE)``; ``None`` never ends the process.
        hint: a sentence on likely causes, appended to the message.
    Raises:
        WeightSyncTimeout: from the ``with`` block, when it overran (only in the main thread; elsewhere the watchdog
        can only report and, with ``hard_exit_after_s``, end the process).
    """

    def __init__(self, timeout_s: float, what: str, rank: int = 0, hard_exit_after_s: float | None = 60.0,
                 hint: str = "") -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = timeout_s
        self.what = what
        self.rank = rank
        self.hard_exit_after_s = hard_exit_after_s
        self.hint = hint
        self.current = "starting"
        self.started = 0.0
        self.message: str | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._main = threading.current_thread() is threading.main_thread()
        self._old_handler: object = None

    def stage(self, description: str) -> None:
        """Record what the guarded block is doing now (named in the timeout message)."""
        self.current = description

    def _compose(self) -> str:
        msg = (f"{self.what} timed out after {time.monotonic() - self.started:.0f} s (limit {self.timeout_s:g} s, "
               f"rollout.weight_sync_timeout_s) on rank {self.rank} while {self.current}")
        return f"{msg}. {self.hint}" if self.hint else msg

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        raise WeightSyncTimeout(self.message or self._compose())

    def _watch(self) -> None:
        if self._done.wait(self.timeout_s):
            return
        self.message = self._compose()
        print(f"[rlvr] {self.message}; stacks of every thread follow", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        if self._main:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
        if self.hard_exit_after_s is not None and not self._done.wait(self.hard_exit_after_s):
            print(f"[rlvr] {self.message}; the stuck call did not return {self.hard_exit_after_s:g} s after the "
                  f"interrupt: ending the process (exit code {HARD_EXIT_CODE})", file=sys.stderr, flush=True)
            os._exit(HARD_EXIT_CODE)

    def __enter__(self) -> "SyncWatchdog":
        self.started = time.monotonic()
        if self._main:
            self._old_handler = signal.signal(signal.SIGALRM, self._on_signal)
        self._thread = threading.Thread(target=self._watch, name="rlvr-sync-watchdog", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._done.set()
        try:
            if self._thread is not None:
                self._thread.join()  # a late SIGALRM raises here, with the handler still ours
        finally:
            if self._main:
                signal.signal(signal.SIGALRM, self._old_handler)  # type: ignore[arg-type]
        if exc_type is not None and self.message is not None and not isinstance(exc, WeightSyncTimeout):
            # the interrupt surfaced as another exception type (e.g. raised inside a C extension's error path)
            raise WeightSyncTimeout(self.message) from exc
