"""kill -9 of a training run once a step is logged, and the check that its ``--resume`` equals an unbroken run."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from rlvr.runs.metrics import read_metrics
from tests import limits


def kill_once_logged(victim: subprocess.Popen, run_dir: Path, step: int, timeout_s: float = 300) -> None:
    """SIGKILL ``victim`` as soon as ``run_dir/metrics.jsonl`` logs ``step`` (or after ``timeout_s``, scaled by
    :func:`tests.limits.limit`), and reap it."""
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + limits.limit(timeout_s)
    while time.time() < deadline:
        if metrics.exists() and any(json.loads(line)["step"] == step for line in metrics.read_text().splitlines()):
            break
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()


def assert_resume_equals_straight(resumed: subprocess.Popen, straight: Path, killed: Path,
                                  comparable: Callable[[list[dict]], list[dict]], steps: list[int]) -> None:
    """``resumed`` (the ``--resume`` of the killed run) ends well, says it resumed, and its run's metrics, through
    ``comparable``, are those of the unbroken run ``straight``, logged at ``steps``."""
    out, _ = limits.communicate(resumed, 300)
    assert resumed.returncode == 0, out
    assert "resumed from" in out
    a, b = comparable(read_metrics(straight)), comparable(read_metrics(killed))
    assert [r["step"] for r in b] == steps
    assert a == b
