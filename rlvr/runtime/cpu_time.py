"""CPU seconds of a process tree: the compute a run spent, whatever else shares the cores.

On a machine shared with other jobs wall-clock time measures who got the cores; the CPU time (user + system) of the
training process and its workers does not (up to cache and memory-bandwidth contention). ``trainer.max_cpu_seconds``
stops a run on it, and ``benchmarks/bench_learning_vs_trl.py`` gives TRL's trainer the same budget with this very
function: that script loads this file by path in TRL's venv, so it imports nothing but ``psutil``.
"""

from __future__ import annotations

import psutil


def process_tree_cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of process ``pid`` (default: this one), all its threads, its children that have
    exited and been waited for, and its live descendants (e.g. a verifier pool's workers) with theirs.

    A descendant that exits between being listed and being read is skipped: its time is counted once its parent
    reaps it. Work done outside the tree (a Docker container run by ``dockerd``) is not counted.

    Raises:
        psutil.NoSuchProcess: ``pid`` names no running process.
    """
    root = psutil.Process(pid)

    def seconds(proc: psutil.Process) -> float:
        t = proc.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    total = seconds(root)
    for child in root.children(recursive=True):
        try:
            total += seconds(child)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return total
