"""What a verifier starts does not outlive the pool, and what it prints does not flood the parent's output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil

from rlvr.verifiers import verifier
from rlvr.verifiers.reward import RewardFunction, VerifierSpec


def _start_daemon() -> int:
    """fork, setsid, fork again and exec `sleep 300`: a daemon outside the caller's process group and session."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        try:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                os.execvp("sleep", ["sleep", "300"])
            os.write(write_end, str(grandchild).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        pid = int(f.read())
    os.waitpid(child, 0)
    return pid


def _start_sleepers() -> list[int]:
    sleeper = subprocess.Popen(["sleep", "300"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [sleeper.pid, _start_daemon()]


@verifier("test_leaves_processes")
def leaves_processes(completion: str, sample: dict) -> dict:
    """Starts `sleep 300` in a child and in a setsid'd daemon, writes their pids to the sample's file; "hang"
    then sleeps past its deadline."""
    pids = _start_sleepers()
    with open(sample["pid_file"], "a") as f:
        f.write(json.dumps(pids) + "\n")
    if completion == "hang":
        time.sleep(120)
    return {"score": 1.0}


@verifier("test_prints_a_lot")
def prints_a_lot(completion: str, sample: dict) -> float:
    line = "x" * 1023 + "\n"
    for _ in range(50 * 1024):  # 50 MiB on each stream
        sys.stdout.write(line)
        sys.stderr.write(line)
    subprocess.run(["echo", "from a subprocess"], check=True)
    print("the last line")
    return 0.75


def _pids(path) -> list[int]:
    return [pid for line in path.read_text().splitlines() for pid in json.loads(line)]


def _running(pids: list[int], wait_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def test_what_a_call_started_ends_with_the_call(tmp_path) -> None:
    """Subprocesses never pile up over a run: each call's child and setsid'd daemon are killed when it returns."""
    pid_file = tmp_path / "pids.jsonl"
    with RewardFunction([VerifierSpec("test_leaves_processes")], num_workers=2) as reward_fn:
        results = reward_fn.score(["a", "b", "c"], [{"pid_file": str(pid_file)}] * 3)
        assert [r.scores["test_leaves_processes"] for r in results] == [1.0, 1.0, 1.0]
        pids = _pids(pid_file)
        assert len(pids) == 6  # a child and a daemon per call
        assert _running(pids) == []  # gone before the pool closes


def test_a_timed_out_call_takes_what_it_started_with_it(tmp_path) -> None:
    pid_file = tmp_path / "pids.jsonl"
    with RewardFunction([VerifierSpec("test_leaves_processes", timeout_s=1.0)], num_workers=1) as reward_fn:
        (result,) = reward_fn.score(["hang"], [{"pid_file": str(pid_file)}])
        assert result.failures == {"test_leaves_processes": "timeout"}
        pids = _pids(pid_file)
        assert len(pids) == 2
        assert _running(pids) == []  # before close: the kill on timeout took them


def test_a_verifier_that_prints_100_mb_leaves_a_bounded_excerpt(capfd) -> None:
    with RewardFunction([VerifierSpec("test_prints_a_lot", timeout_s=60)], num_workers=1) as reward_fn:
        (result,) = reward_fn.score(["x"], [{}])
    assert result.scores == {"test_prints_a_lot": 0.75} and result.failures == {}
    out, err = capfd.readouterr()
    assert len(out) + len(err) < 10_000
    assert "the last line" in err and "dropped" in err


@verifier("test_allocates")
def allocates(completion: str, sample: dict) -> float:
    """Allocates (and touches) ``completion`` MiB."""
    block = bytearray(int(completion) * 1024 * 1024)
    return float(len(block) > 0)


def test_a_call_past_its_memory_limit_fails_alone_and_the_worker_goes_on() -> None:
    spec = VerifierSpec("test_allocates", memory_mb=128, timeout_s=30)
    with RewardFunction([spec], num_workers=1) as reward_fn:
        big, small = reward_fn.score(["4096", "8"], [{}, {}])
        assert big.scores == {"test_allocates": None}
        assert big.failures["test_allocates"].startswith("error: MemoryError")
        assert big.failures["test_allocates"].endswith("(memory limit: 128 MiB a call)")
        assert small.scores == {"test_allocates": 1.0} and small.failures == {}
        assert reward_fn.counters()["worker_restarts"] == 0  # the same worker scored the next call


@verifier("test_reports_oom_score_adj")
def reports_oom_score_adj(completion: str, sample: dict) -> float:
    with open("/proc/self/oom_score_adj") as fh:
        return float(fh.read())


def test_workers_are_the_oom_killers_first_choice() -> None:
    with RewardFunction([VerifierSpec("test_reports_oom_score_adj", memory_mb=None)], num_workers=1) as reward_fn:
        (result,) = reward_fn.score(["x"], [{}])
    assert result.scores == {"test_reports_oom_score_adj": 1000.0}


_KILLED_PARENT = """
import json, sys, time
sys.path.insert(0, {tests!r})
from rlvr.verifiers.reward import RewardFunction, VerifierSpec
import tests.verifiers.test_verifier_processes  # registers test_leaves_processes
reward_fn = RewardFunction([VerifierSpec("test_leaves_processes", timeout_s=300)], num_workers=1)
reward_fn.score(["hang"], [{{"pid_file": {pid_file!r}}}])
"""


def test_nothing_outlives_a_trainer_killed_with_kill_9(tmp_path) -> None:
    """The parent dies mid-call: its worker, the call's child and its setsid'd daemon all end."""
    from pathlib import Path

    pid_file = tmp_path / "pids.jsonl"
    script = _KILLED_PARENT.format(tests=str(Path(__file__).parents[2]), pid_file=str(pid_file))
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = _pids(pid_file)
        workers = [p.pid for p in psutil.Process(parent.pid).children()]
        assert len(pids) == 2 and workers and _running(pids + workers, wait_s=0) == pids + workers
    finally:
        parent.kill()
        parent.wait()
    assert _running(pids + workers, wait_s=10) == []
