"""The interface every backend implements: run one batch of jobs in one sandbox."""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence

from rlvr.sandbox.batch import BatchOutcome
from rlvr.sandbox.jobs import Job
from rlvr.sandbox.languages import Language, missing_tools


class Backend(ABC):
    """A way to run the in-sandbox driver. Implementations: docker, bwrap, none (unsandboxed)."""

    name: str = ""
    memory_enforced: bool = False  # memory_mb bounds all of a program's memory (a cgroup), not only its address space

    def description(self) -> str:
        """One line on how this backend isolates programs and bounds their memory (for `rlvr check`)."""
        return f"{self.name}: memory_mb is not enforced beyond each process's address space (RLIMIT_AS)"

    @abstractmethod
    def workers(self) -> int:
        """How many batches may run at the same time."""

    def group_key(self, job: Job) -> Hashable:
        """Jobs with equal keys may share one sandbox (e.g. a container made for their limits)."""
        return None

    def language_problem(self, language: Language) -> str | None:
        """Why this backend cannot run `language` programs (its toolchain is missing), else None. The
        default looks on this machine's PATH (bwrap and none run the host's /usr)."""
        missing = missing_tools(language)
        if missing:
            return (f"the {self.name} sandbox runs this machine's /usr, which has no {', '.join(missing)} for "
                    f"{language.name} programs (run `make sandbox`, or apt-get install the toolchain)")
        return None

    @abstractmethod
    def run_batch(self, jobs: Sequence[Job]) -> BatchOutcome:
        """Run jobs (all with one group_key) in one sandbox, in order. A misbehaving program or driver gives
        a broken outcome; raises SandboxError only when the sandbox cannot be started at all."""


def default_workers(workers: int | None = None) -> int:
    """Parallel sandboxes: `workers` when given, else RLVR_SANDBOX_WORKERS, else the CPU count."""
    return workers or int(os.environ.get("RLVR_SANDBOX_WORKERS", 0)) or (os.cpu_count() or 1)
