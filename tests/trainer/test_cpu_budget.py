"""``trainer.max_cpu_seconds``: the CPU seconds of the process tree (``rlvr.runtime.cpu_time``) and the run that stops on them."""

import json
import os
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

import rlvr.runtime.cpu_time as cpu_time
import rlvr.trainer.run as run
from rlvr.config import resolve
from rlvr.runs.metrics import read_metrics
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset


class FakeProcess:
    """A psutil.Process stand-in: fixed cpu_times, fixed descendants; ``gone`` raises like an exited process."""

    def __init__(self, user: float, system: float, children_user: float = 0.0, children_system: float = 0.0,
                 descendants: tuple["FakeProcess", ...] = (), gone: bool = False) -> None:
        self.times = SimpleNamespace(user=user, system=system, children_user=children_user,
                                     children_system=children_system)
        self.descendants, self.gone = list(descendants), gone

    def cpu_times(self):
        if self.gone:
            raise psutil.NoSuchProcess(pid=4242)
        return self.times

    def children(self, recursive: bool = False):
        assert recursive, "grandchildren (a pool worker's helpers) must be counted too"
        return self.descendants


def test_cpu_seconds_sum_the_process_its_reaped_children_and_live_descendants(monkeypatch):
    worker = FakeProcess(user=3.0, system=0.5, children_user=0.25)          # 3.75
    helper = FakeProcess(user=1.0, system=0.0)                              # a grandchild: 1.0
    exited = FakeProcess(user=100.0, system=100.0, gone=True)               # exited after listing: skipped
    root = FakeProcess(user=10.0, system=2.0, children_user=4.0, children_system=1.0,  # 17.0
                       descendants=(worker, helper, exited))
    monkeypatch.setattr(cpu_time.psutil, "Process", lambda pid=None: root)
    assert cpu_time.process_tree_cpu_seconds() == pytest.approx(17.0 + 3.75 + 1.0)


def test_cpu_seconds_of_this_process_match_psutil_and_a_missing_pid_is_an_error():
    me = psutil.Process(os.getpid()).cpu_times()
    now = cpu_time.process_tree_cpu_seconds()
    assert now >= me.user + me.system  # same clock, read later; no children in this test process
    with pytest.raises(psutil.NoSuchProcess):
        cpu_time.process_tree_cpu_seconds(2 ** 22 + 12345)  # above Linux's pid_max


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def test_cpu_budget_ends_the_run_after_the_step_that_spends_it(tiny, tmp_path, monkeypatch):
    # A clock that advances 10 CPU s per read: read once when the loop starts, then once after every step.
    reads = iter(range(1000, 10_000, 10))
    monkeypatch.setattr(run, "process_tree_cpu_seconds", lambda: float(next(reads)))
    from rlvr.trainer.trainer import RLTrainer

    raw = tiny_recipe(*tiny, trainer={"steps": 10, "max_cpu_seconds": 25})
    summary = RLTrainer(resolve(raw), tmp_path / "run").train()
    steps = [m for m in read_metrics(tmp_path / "run") if "cpu/seconds_total" in m]
    assert [m["cpu/seconds_total"] for m in steps] == [10.0, 20.0, 30.0]  # 30 >= 25 > 20: stop after step 3
    assert summary["steps"] == 3 and summary["cpu_seconds"] == 30.0
    assert json.loads((tmp_path / "run/summary.json").read_text())["cpu_seconds"] == 30.0
    state = Path(summary["final_checkpoint"])
    assert state.name == "step-3"


def test_without_a_budget_the_cpu_seconds_are_counted_but_do_not_stop_the_run(tiny, tmp_path, monkeypatch):
    reads = iter(range(0, 10_000, 500))
    monkeypatch.setattr(run, "process_tree_cpu_seconds", lambda: float(next(reads)))
    from rlvr.trainer.trainer import RLTrainer

    summary = RLTrainer(resolve(tiny_recipe(*tiny, trainer={"steps": 2})), tmp_path / "run").train()
    assert summary["steps"] == 2 and summary["cpu_seconds"] == 1000.0


def test_max_cpu_seconds_must_be_positive(tiny):
    with pytest.raises(ValueError, match="max_cpu_seconds"):
        resolve(tiny_recipe(*tiny, trainer={"max_cpu_seconds": 0}))
