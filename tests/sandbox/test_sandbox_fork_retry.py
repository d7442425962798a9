"""A fork the sandbox's process limit refuses for a moment (EAGAIN: the processes of a program just killed still
count until their exits are collected) is tried again instead of taking the driver down (sandbox/harness/processes.py)."""
import pytest

from rlvr.sandbox.harness import processes


def _refusing_fork(monkeypatch, refusals: int) -> list[str]:
    calls = []

    def fork():
        calls.append("fork")
        if calls.count("fork") <= refusals:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return 4242  # the parent's side of a fork, without forking

    monkeypatch.setattr(processes.os, "fork", fork)
    monkeypatch.setattr(processes.time, "sleep", lambda s: calls.append("sleep"))
    return calls


def test_a_fork_refused_for_a_moment_is_tried_again_with_the_exits_collected_between(monkeypatch):
    calls = _refusing_fork(monkeypatch, refusals=2)
    assert processes.fork_retrying(reap=lambda: calls.append("reap")) == 4242
    assert calls == ["fork", "reap", "sleep", "fork", "reap", "sleep", "fork"]


def test_a_limit_that_stays_full_raises_after_about_a_second(monkeypatch):
    calls = _refusing_fork(monkeypatch, refusals=processes.FORK_TRIES)
    with pytest.raises(BlockingIOError):
        processes.fork_retrying()
    assert calls.count("fork") == processes.FORK_TRIES == 20
    assert calls.count("sleep") == processes.FORK_TRIES - 1  # 50 ms each
