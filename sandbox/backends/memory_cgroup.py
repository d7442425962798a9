"""Memory cgroups for bubblewrap sandboxes: one per batch, so that memory_mb bounds what no per-process limit
sees (a memfd's pages, System V shared memory, tmpfs files), as a Docker container's cgroup does.

Needs root and a writable memory controller (cgroup v1 `/sys/fs/cgroup/memory`, or v2 with `memory` delegable
at `/sys/fs/cgroup`). Where none can be had, `MemoryCgroups.available()` says why, and the bubblewrap backend
says that it does not enforce memory_mb. RLVR_SANDBOX_CGROUP=0 turns them off.
"""
from __future__ import annotations

import atexit
import itertools
import os
import threading
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PREFIX = "rlvr-sandbox-"
OVERHEAD_MB = 256  # beyond the program's memory_mb and scratch: the driver and fork server (as Docker's)


class MemoryCgroups:
    """Creates `Cgroup`s under /sys/fs/cgroup/[memory/]rlvr-sandbox-<our pid>/. Thread-safe."""

    def __init__(self) -> None:
        self.version, self.problem = _find()
        self.parent: Path | None = None
        self._count = itertools.count()
        self._lock = threading.Lock()
        if self.problem is None:
            try:
                self._make_parent()
            except OSError as e:
                self.problem = f"cannot create a memory cgroup: {e}"
            atexit.register(self.close)  # (a later process sweeps it when we die without atexit)

    def available(self) -> bool:
        return self.problem is None

    def _make_parent(self) -> None:
        base = ROOT / "memory" if self.version == 1 else ROOT
        for stale in base.glob(PREFIX + "*"):  # of processes that are gone
            pid = stale.name[len(PREFIX):]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                for child in stale.iterdir():
                    if child.is_dir():
                        _rmdir(child)
                _rmdir(stale)
        self.parent = base / f"{PREFIX}{os.getpid()}"
        self.parent.mkdir(exist_ok=True)
        if self.version == 2:
            (self.parent / "cgroup.subtree_control").write_text("+memory")

    def create(self, limit_mb: int) -> Cgroup:
        """A new cgroup whose processes may hold limit_mb MiB together (no swap). Raises OSError."""
        with self._lock:
            if self.parent is not None and self.parent.name != f"{PREFIX}{os.getpid()}":  # we were forked
                self._make_parent()
            path = self.parent / f"b{next(self._count)}"
        path.mkdir()
        limit = str(int(limit_mb) << 20)
        if self.version == 1:
            (path / "memory.limit_in_bytes").write_text(limit)
            if (path / "memory.memsw.limit_in_bytes").exists():
                (path / "memory.memsw.limit_in_bytes").write_text(limit)
            (path / "memory.swappiness").write_text("0")
        else:
            (path / "memory.max").write_text(limit)
            if (path / "memory.swap.max").exists():
                (path / "memory.swap.max").write_text("0")
        return Cgroup(path)

    def close(self) -> None:
        """Remove our folder (it is empty once every batch's cgroup is gone); of this process only."""
        if self.parent is not None and self.parent.name == f"{PREFIX}{os.getpid()}":
            _rmdir(self.parent)


class Cgroup:
    """One memory cgroup. `join_fd` (opened here, by us) lets a child move itself in before it execs: write b"0"."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.join_fd = os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def join(self) -> None:
        """Move the calling process into this cgroup (for subprocess's preexec_fn: a system call, nothing more)."""
        os.write(self.join_fd, b"0")

    def remove(self) -> None:
        """Close and remove it, waiting up to 2 s for its processes to be gone."""
        os.close(self.join_fd)
        end = time.monotonic() + 2.0
        while not _rmdir(self.path) and time.monotonic() < end:
            time.sleep(0.01)


def _find() -> tuple[int, str | None]:
    if os.environ.get("RLVR_SANDBOX_CGROUP", "1") == "0":
        return 0, "turned off (RLVR_SANDBOX_CGROUP=0)"
    if os.geteuid() != 0:
        return 0, "not root: no memory cgroup can be created"
    if (ROOT / "memory" / "memory.limit_in_bytes").exists():
        return (1, None) if os.access(ROOT / "memory", os.W_OK) else (1, "/sys/fs/cgroup/memory is read-only")
    controllers = ROOT / "cgroup.controllers"
    if controllers.exists() and "memory" in controllers.read_text().split():
        if not os.access(ROOT, os.W_OK):
            return 2, "/sys/fs/cgroup is read-only"
        try:
            if "memory" not in (ROOT / "cgroup.subtree_control").read_text().split():
                (ROOT / "cgroup.subtree_control").write_text("+memory")
        except OSError as e:
            return 2, f"the memory controller cannot be delegated: {e}"
        return 2, None
    return 0, "no memory cgroup controller is mounted"


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


__all__ = ["Cgroup", "MemoryCgroups", "OVERHEAD_MB"]
