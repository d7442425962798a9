"""NO ISOLATION: runs programs directly on this machine, as this user, with rlimits only.

Never chosen by "auto"; only `backend="none"` selects it. Use it for trusted code alone (reference
solutions, debugging the harness). A program run here can read and write your files, reach the network,
and leave processes behind if its driver is killed.
"""
from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence

from rlvr.sandbox.backends.base import Backend
from rlvr.sandbox.backends.process_channel import ProcessChannel
from rlvr.sandbox.batch import BatchOutcome, request_bytes, run_batch
from rlvr.sandbox.harness import driver_source
from rlvr.sandbox.jobs import Job


class UnsafeLocalBackend(Backend):
    """Runs the driver as a plain child process in a temporary folder (no namespaces, no cgroup)."""

    name = "none"

    def __init__(self, workers: int = 1) -> None:
        self._workers = workers

    def workers(self) -> int:
        return self._workers

    def run_batch(self, jobs: Sequence[Job]) -> BatchOutcome:
        with tempfile.TemporaryDirectory(prefix="rlvr-unsandboxed-") as tmp:
            channel = ProcessChannel([sys.executable, "-I", "-c", driver_source()], cwd=tmp)
            try:
                # pid_namespace=False: the driver must not kill(-1) here, it would hit all our processes.
                request = request_bytes(jobs, pid_namespace=False, scratch=[tmp], nproc=None, python=sys.executable,
                                        namespaces=False)
                return run_batch(channel, jobs, request)
            finally:
                channel.close()
