"""The asynchronous collector alone (no model): admission control keeps the producer at most K steps ahead of the
weights, a scripted slow trainer never takes a batch staler than K, the producer's exception reaches the trainer's
thread, and close(), pause() and the end of the run never leave a thread waiting."""

from __future__ import annotations

import threading
import time
import traceback

import pytest

from rlvr.trainer.async_collector import AsyncCollector


def _run(k: int, steps: int, produce_s: float, train_s: float) -> tuple[list[int], AsyncCollector]:
    """A scripted trainer: takes each step's batch, "trains" ``train_s`` seconds, syncs. Returns the staleness of each
    batch at train time (trainer version minus the version the batch was started at)."""
    def produce(step: int, version: int) -> tuple[int, int]:
        time.sleep(produce_s)
        return step, version

    collector = AsyncCollector(produce, first_step=0, version=0, max_off_policy_steps=k, last_step=steps - 1)
    collector.start()
    staleness = []
    for step in range(steps):
        made_for, version = collector.take(step)
        assert made_for == step
        staleness.append(step - version)
        time.sleep(train_s)
        collector.synced(step + 1)
    assert collector.close(timeout_s=5)
    return staleness, collector


@pytest.mark.parametrize("k", [1, 2])
def test_a_slow_trainer_gets_batches_exactly_k_stale_and_never_staler(k):
    """The producer (10 ms a batch) waits on admission while the trainer (150 ms a step) works: the batch of step j
    starts as soon as the version reaches j - K, so from step K on every batch is exactly K steps stale."""
    staleness, collector = _run(k, steps=6, produce_s=0.01, train_s=0.15)
    assert max(staleness) <= k
    assert collector.max_lead == k
    assert all(step - version <= k for step, version in collector.started)
    assert staleness == [min(step, k) for step in range(6)]


@pytest.mark.parametrize("k", [1, 2])
def test_a_slow_producer_keeps_the_trainer_waiting_and_the_bound_holds(k):
    """Batches take longer than updates (100 ms vs 10 ms): the trainer waits for each, the lead stays within K."""
    staleness, collector = _run(k, steps=5, produce_s=0.1, train_s=0.01)
    assert max(staleness) <= k and collector.max_lead <= k
    assert [s for s, _ in collector.started] == list(range(5))


def test_the_producers_exception_reaches_the_trainer_with_its_traceback():
    def produce(step: int, version: int) -> int:
        if step == 2:
            raise ValueError("prompt 17 has no answer field")
        return step

    collector = AsyncCollector(produce, first_step=0, version=0, max_off_policy_steps=2)
    collector.start()
    assert collector.take(0) == 0  # batches made before the failure are still handed over
    collector.synced(1)
    assert collector.take(1) == 1
    collector.synced(2)
    with pytest.raises(ValueError, match="prompt 17 has no answer field") as info:
        collector.take(2)
    assert "producing the batch of step 3" in "".join(info.value.__notes__)
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "produce" in frames and "_run" in frames  # raised in the producer's thread, traceback kept
    collector._thread.join(5)
    assert not collector.alive
    with pytest.raises(ValueError, match="prompt 17"):  # and again on every later take, never a hang
        collector.take(2)


def test_close_stops_a_waiting_producer_at_once_and_later_takes_fail():
    collector = AsyncCollector(lambda step, version: step, first_step=0, version=0, max_off_policy_steps=1)
    collector.start()
    assert collector.take(0) == 0
    time.sleep(0.05)  # the producer has made step 1 and waits for version 1 to start step 2
    start = time.perf_counter()
    assert collector.close(timeout_s=5)
    assert time.perf_counter() - start < 1.0
    with pytest.raises(RuntimeError, match="closed"):
        collector.take(1)


def test_a_take_that_could_never_be_served_raises_instead_of_hanging():
    collector = AsyncCollector(lambda step, version: step, first_step=0, version=0, max_off_policy_steps=1,
                               last_step=2)
    collector.start()
    assert collector.take(0) == 0 and collector.take(1) == 1
    with pytest.raises(RuntimeError, match=r"waits for weights of version 1 and the engine holds 0"):
        collector.take(2)  # synced() was never called
    with pytest.raises(RuntimeError, match="taken already"):
        collector.take(1)
    collector.synced(1)
    assert collector.take(2) == 2
    collector.synced(2)
    with pytest.raises(RuntimeError, match="the last batch was made"):
        collector.take(3)
    assert collector.close(timeout_s=5)


def test_is_last_ends_production_after_its_item():
    collector = AsyncCollector(lambda step, version: step, first_step=3, version=3, max_off_policy_steps=2,
                               is_last=lambda item: item == 4)
    collector.start()
    assert collector.take(3) == 3 and collector.take(4) == 4
    collector.synced(4)
    collector.synced(5)
    with pytest.raises(RuntimeError, match="the last batch was made"):
        collector.take(5)
    assert collector.started == [(3, 3), (4, 3)]
    assert collector.close(timeout_s=5)


def test_paused_waits_for_the_batch_under_way_and_starts_none():
    running = threading.Event()
    release = threading.Event()
    calls = []

    def produce(step: int, version: int) -> int:
        calls.append(step)
        if step == 0:
            running.set()
            release.wait(5)
        return step

    collector = AsyncCollector(produce, first_step=0, version=0, max_off_policy_steps=3)
    collector.start()
    assert running.wait(5)
    threading.Timer(0.1, release.set).start()
    start = time.perf_counter()
    with collector.paused():
        assert time.perf_counter() - start >= 0.05  # waited for step 0 to finish
        time.sleep(0.1)
        assert calls == [0]  # and nothing started inside the block
    assert collector.take(1) == 1  # production goes on after it
    assert collector.close(timeout_s=5)


def test_k_0_is_refused():
    with pytest.raises(ValueError, match="K >= 1"):
        AsyncCollector(lambda step, version: step, first_step=0, version=0, max_off_policy_steps=0)


def test_versions_never_go_back():
    collector = AsyncCollector(lambda step, version: step, first_step=0, version=4, max_off_policy_steps=1)
    with pytest.raises(ValueError, match="from 4 to 3"):
        collector.synced(3)
