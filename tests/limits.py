"""Time limits of the suite that follow the machine: a subprocess test's limit is its nominal seconds times
``RLVR_TEST_TIME_SCALE`` (default 1; raise it on a slow or shared machine) times the load per core above 1 when the
test starts (capped at 4x), and a test stopped by its limit says so, with the limit and what to set.

On 2 cores at load 11-18 (a shared CI neighbour) the fixed 300 s limits of the 2-rank and kill-and-resume tests were
what failed, not the code: this keeps such a run green or makes the cause plain.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

MAX_LOAD_FACTOR = 4.0


def scale() -> float:
    """``RLVR_TEST_TIME_SCALE`` times the current load factor (1 on an idle machine, at most :data:`MAX_LOAD_FACTOR`).
    Raises ValueError for a scale that is not a positive number."""
    raw = os.environ.get("RLVR_TEST_TIME_SCALE", "1")
    try:
        user = float(raw)
    except ValueError:
        user = -1.0
    if not user > 0:
        raise ValueError(f"RLVR_TEST_TIME_SCALE={raw!r}: expected a positive number, e.g. 2")
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        per_core = 1.0
    return user * min(MAX_LOAD_FACTOR, max(1.0, per_core))


def limit(seconds: float) -> float:
    """``seconds`` scaled for this machine (see the module docstring)."""
    return seconds * scale()


def _why(seconds: float, cmd: Any) -> str:
    shown = " ".join(map(str, cmd)) if isinstance(cmd, (list, tuple)) else str(cmd)
    return (f"time limit: {shown[:200]} ran past {limit(seconds):.0f} s ({seconds:.0f} s nominal, scaled "
            f"{scale():.2f}x for this machine's load and RLVR_TEST_TIME_SCALE); on a slow or busy machine raise "
            f"RLVR_TEST_TIME_SCALE")


def run(cmd: Any, seconds: float, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run`` with the scaled limit; a test stopped by it fails with a line naming the limit."""
    try:
        return subprocess.run(cmd, timeout=limit(seconds), **kwargs)
    except subprocess.TimeoutExpired:
        pytest.fail(_why(seconds, cmd), pytrace=False)


def communicate(proc: subprocess.Popen, seconds: float) -> tuple[Any, Any]:
    """``proc.communicate`` with the scaled limit; past it the process is killed and the test fails naming the
    limit."""
    try:
        return proc.communicate(timeout=limit(seconds))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(_why(seconds, proc.args), pytrace=False)
