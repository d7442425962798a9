"""Rollouts of the next steps produced in a background thread while the trainer updates, with a staleness bound
(``rollout.max_off_policy_steps``, K >= 1).

The producer thread calls ``produce(step, version)`` for steps ``first_step``, ``first_step + 1``, ... in order, and the
trainer takes the batches in the same order. Versions count optimizer steps: the trainer is at version ``s`` while it
trains step ``s`` (0-based), and tells the collector ``synced(s + 1)`` once the rollout engine holds the weights after
that step. Admission control: the batch of step ``j`` is started only when ``j - version <= K``, so at most K + 1
batches are ever made or held ahead of the trainer, and a batch started at version ``v`` is at most ``j - v <= K``
steps stale when step ``j`` trains on it. The producer waits on a condition variable (no polling, nothing produced and
thrown away).

Failures: an exception raised by ``produce`` stops the producer and is raised again, the same object with its
traceback from the producer's thread and a note naming the step, by the trainer's next :meth:`AsyncCollector.take`.
:meth:`AsyncCollector.close` stops the producer at its next wait (a ``produce`` call under way is finished first, or
left to the daemon thread after ``timeout_s``).

This module knows no RL: :class:`rlvr.trainer.trainer.RLTrainer` gives it a ``produce`` that runs
:func:`rlvr.trainer.dynamic_sampling.collect` and owns what that touches (see ``RLTrainer._produce``); the staleness of
the samples at train time is :mod:`rlvr.trainer.staleness`.

Usage (a trainer's loop)::

    collector = AsyncCollector(produce, first_step=step, version=step, max_off_policy_steps=1, last_step=steps - 1)
    collector.start()
    while step < steps:
        batch = collector.take(step)      # blocks until produced; raises the producer's exception
        ... update ...
        step += 1
        collector.synced(step)            # the engine now holds the weights after ``step`` updates
    collector.close()
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class AsyncCollector(Generic[T]):
    """A producer thread making the batches of the next steps, at most ``max_off_policy_steps`` ahead of the weights.

    Args:
        produce: ``produce(step, version) -> item``: the batch of 0-based ``step``, started when the engine held the
            weights after ``version`` optimizer steps. Called from the producer thread only, one call at a time.
        first_step: the first step to produce (the trainer's steps done: 0, or the resumed step).
        version: the engine's version at the start (the same as ``first_step`` for a fresh or a resumed run).
        max_off_policy_steps: K >= 1.
        last_step: the last step to produce (``trainer.steps - 1``); ``None``: no end.
        is_last: ``is_last(item)``: nothing is produced after this item (e.g. the token budget is spent).
        name: the thread's name.
    Raises:
        ValueError: ``max_off_policy_steps < 1`` (K = 0 is the synchronous loop, which needs no thread).
    """

    def __init__(self, produce: Callable[[int, int], T], *, first_step: int, version: int, max_off_policy_steps: int,
                 last_step: int | None = None, is_last: Callable[[T], bool] | None = None,
                 name: str = "rollout-collector") -> None:
        if max_off_policy_steps < 1:
            raise ValueError(f"max_off_policy_steps={max_off_policy_steps}: the asynchronous collector needs K >= 1 "
                             "(K = 0 is the synchronous loop)")
        self._produce = produce
        self._is_last = is_last
        self.max_off_policy_steps = max_off_policy_steps
        self.last_step = last_step
        self.version = version
        """The version the engine holds (optimizer steps applied to its weights)."""
        self.next_step = first_step
        """The step the producer makes next."""
        self.max_lead = 0
        """The largest ``step - version`` at which a batch was started (never more than K)."""
        self.started: list[tuple[int, int]] = []
        """``(step, version)`` of every batch started, in order."""
        self._ready: dict[int, T] = {}
        self._error: BaseException | None = None
        self._busy = False
        self._pauses = 0
        self._stop = False
        self._done = False  # is_last said so, or last_step was produced
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # ------------------------------------------------------------------------------------------------ the producer
    def start(self) -> None:
        """Start the producer thread."""
        self._thread.start()

    def _admitted(self) -> bool:
        """Whether the batch of ``next_step`` may start now (called under the lock)."""
        return (self._pauses == 0 and not self._done
                and self.next_step - self.version <= self.max_off_policy_steps)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and not self._admitted():
                    self._cond.wait()
                if self._stop:
                    return
                step, version = self.next_step, self.version
                self.max_lead = max(self.max_lead, step - version)
                self.started.append((step, version))
                self._busy = True
            try:
                item = self._produce(step, version)
            except BaseException as exc:  # noqa: BLE001 - every failure must reach the trainer's thread
                exc.add_note(f"(raised in the rollout collector's thread while producing the batch of step {step + 1})")
                with self._cond:
                    self._error, self._busy = exc, False
                    self._cond.notify_all()
                return
            with self._cond:
                self._ready[step] = item
                self._busy = False
                self.next_step = step + 1
                if (self.last_step is not None and step >= self.last_step) or \
                        (self._is_last is not None and self._is_last(item)):
                    self._done = True
                self._cond.notify_all()

    # ------------------------------------------------------------------------------------------------ the trainer
    def take(self, step: int) -> T:
        """The batch of ``step``, waiting for it; steps are taken in order.

        Raises:
            the producer's exception (its traceback from the producer's thread, a note naming the step), once the
            batches made before it are taken. RuntimeError: the batch of ``step`` will never come (taken already,
            past the last one, the collector closed, or not admitted at the current version: a missing
            :meth:`synced`), instead of waiting forever.
        """
        with self._cond:
            while step not in self._ready:
                if self._error is not None:
                    raise self._error
                never = self._never_reason(step)
                if never is not None:
                    raise RuntimeError(f"the rollout collector will not produce the batch of step {step + 1}: {never}")
                self._cond.wait()
            return self._ready.pop(step)

    def _never_reason(self, step: int) -> str | None:
        """Why the batch of ``step`` (not ready) can never come, or None while it may (called under the lock)."""
        if self._stop:
            return "the collector is closed"
        if step < self.next_step:
            return "it was taken already"
        if self._done:
            return "the last batch was made"
        if step - self.version > self.max_off_policy_steps:
            return (f"it waits for weights of version {step - self.max_off_policy_steps} and the engine holds "
                    f"{self.version} (synced() is called after each update)")
        return None

    def synced(self, version: int) -> None:
        """The rollout engine now holds the weights after ``version`` optimizer steps: admit the batches this allows."""
        with self._cond:
            if version < self.version:
                raise ValueError(f"policy version went back from {self.version} to {version}")
            self.version = version
            self._cond.notify_all()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No batch is being made inside this block (the batch under way is finished first, none starts): for work
        that shares the engine, the reward source or the RNG with the producer (a held-out evaluation)."""
        with self._cond:
            self._pauses += 1
            while self._busy:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._pauses -= 1
                self._cond.notify_all()

    def close(self, timeout_s: float = 30.0) -> bool:
        """Stop the producer at its next wait and join it for up to ``timeout_s`` (a ``produce`` call under way
        finishes first); the batches not taken are dropped. Returns whether the thread has ended (idempotent)."""
        with self._cond:
            self._stop = True
            self._ready.clear()
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def alive(self) -> bool:
        """Whether the producer thread runs."""
        return self._thread.is_alive()
