"""The bubblewrap backend, for machines without Docker: one fresh bwrap sandbox per batch (~20 ms).

The sandbox unshares every namespace (user, pid, net, ipc, uts, cgroup), dies with its parent, drops all
capabilities, sees /usr read-only (and, for the JDK, /etc/alternatives and /etc/java-*) and nothing else of
the host but a minimal read-only /dev and its own /proc, and writes only to size-capped tmpfs at /tmp and
/dev/shm (bwrap's own root tmpfs is remounted read-only). The driver is the sandbox's pid 1 (non-dumpable; no
bwrap init beside it), and every program run gets new user, IPC and pid namespaces of its own inside. When we
are root, bwrap itself runs as a private unprivileged uid per parallel slot (61000 + slot), so RLIMIT_NPROC
contains a fork bomb without touching other slots, and each batch runs in a memory cgroup of its own
(memory_mb + scratch + 256 MiB, as a Docker container) where one can be made (`memory_cgroup`). Without one,
memory is bounded per process by RLIMIT_AS only, and the backend says so (`description()`, `rlvr check`).
"""
from __future__ import annotations

import glob
import os
import queue
import shutil
import subprocess
from collections.abc import Hashable, Sequence
from functools import cache

from rlvr.sandbox.backends.base import Backend, default_workers
from rlvr.sandbox.backends.memory_cgroup import OVERHEAD_MB, MemoryCgroups
from rlvr.sandbox.backends.process_channel import ProcessChannel
from rlvr.sandbox.batch import BatchOutcome, request_bytes, run_batch
from rlvr.sandbox.errors import SandboxUnavailable
from rlvr.sandbox.harness import driver_source
from rlvr.sandbox.jobs import Job

# bwrap's own environment: its init (pid 1 inside) keeps it, and /proc/1/environ is readable there, so
# nothing of ours may be in it.
SANDBOX_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
FIRST_SLOT_UID = 61000  # host uids FIRST_SLOT_UID + slot run the sandboxes when we are root
INSIDE_ID = "65534"  # uid and gid seen inside the sandbox


def bwrap_argv(scratch_mb: int) -> list[str]:
    """bwrap's arguments (up to, not including, `--`) for a sandbox with a scratch_mb MiB tmpfs at /tmp."""
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", INSIDE_ID, "--gid", INSIDE_ID, "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    # Debian reaches java/javac through /etc/alternatives and reads the JVM's config from /etc/java-*/.
    for etc in ["/etc/alternatives", *sorted(glob.glob("/etc/java-*"))]:
        if os.path.isdir(etc):
            argv += ["--ro-bind", etc, etc]
    # /dev read-only (else an uncapped tmpfs), its shm a capped tmpfs like /tmp; the driver is pid 1 (--as-pid-1)
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
             "--size", str(scratch_mb << 20), "--perms", "1777", "--tmpfs", "/dev/shm",
             "--size", str(scratch_mb << 20), "--perms", "1777", "--tmpfs", "/tmp",
             "--remount-ro", "/", "--chdir", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
             "--setenv", "LANG", "C.UTF-8", "--hostname", "sandbox", "--as-pid-1"]
    return argv


@cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot run sandboxes here (missing, or user namespaces refused), else None."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap, or run `make sandbox`)"
    if shutil.which("python3") is None:
        return "python3 is not on PATH"
    uid = FIRST_SLOT_UID if os.geteuid() == 0 else None
    try:
        # the driver gives every program run new user, IPC and pid namespaces: nested ones must be allowed
        nested = "import ctypes, sys\nsys.exit(ctypes.CDLL(None).unshare(0x38000000) != 0)"
        probe = subprocess.run(bwrap_argv(8) + ["--", "python3", "-I", "-c", nested], capture_output=True,
                               timeout=30, user=uid, group=uid, extra_groups=[] if uid else None, env=SANDBOX_ENV)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap does not start: {e}"
    if probe.returncode != 0:
        return (f"bubblewrap refuses to start a sandbox here, or one that can make user, IPC and pid namespaces "
                f"inside: {probe.stderr.decode(errors='replace').strip() or f'exit code {probe.returncode}'}")
    return None


class BwrapBackend(Backend):
    """Runs each batch in a new bubblewrap sandbox. workers: parallel sandboxes (default the CPU count).

    Raises SandboxUnavailable when bubblewrap cannot run here."""

    name = "bwrap"

    def __init__(self, workers: int | None = None) -> None:
        problem = bwrap_problem()
        if problem:
            raise SandboxUnavailable(problem)
        self._workers = default_workers(workers)
        self._slots: queue.Queue[int] = queue.Queue()
        for slot in range(self._workers):
            self._slots.put(slot)
        self.cgroups = MemoryCgroups()
        self.memory_enforced = self.cgroups.available()

    def workers(self) -> int:
        return self._workers

    def description(self) -> str:
        how = ("a fresh bubblewrap sandbox per batch, every program run in user, IPC and pid namespaces apart from "
               "the sandbox's own processes")
        if self.memory_enforced:
            return (f"bwrap: {how}; memory_mb enforced by a memory cgroup per batch (memory_mb + 2 x scratch_mb + "
                    f"{OVERHEAD_MB} MiB, with RLIMIT_AS per process)")
        return (f"bwrap: {how}; memory_mb is not enforced: no memory cgroup ({self.cgroups.problem}), so only each "
                "process's address space is capped (RLIMIT_AS); memory outside it (a memfd, shared memory) is the "
                "host's")

    def group_key(self, job: Job) -> Hashable:
        return (job.limits.scratch_mb, job.limits.pids, job.limits.memory_mb if self.memory_enforced else None)

    def run_batch(self, jobs: Sequence[Job]) -> BatchOutcome:
        slot = self._slots.get()
        root = os.geteuid() == 0
        uid = FIRST_SLOT_UID + slot if root else None
        channel = cgroup = None
        try:
            limits = jobs[0].limits
            if self.memory_enforced:
                cgroup = self.cgroups.create(limits.memory_mb + 2 * limits.scratch_mb + OVERHEAD_MB)
            argv = bwrap_argv(limits.scratch_mb) + ["--", "python3", "-I", "-c", driver_source()]
            # bwrap enters the cgroup before it execs, so everything in the sandbox is counted from the start
            channel = ProcessChannel(argv, user=uid, group=uid, extra_groups=[] if root else None, env=SANDBOX_ENV,
                                     preexec_fn=cgroup.join if cgroup is not None else None)
            # RLIMIT_NPROC counts every process of the uid on the host: meaningful only for a private uid.
            nproc = limits.pids if root else None
            request = request_bytes(jobs, pid_namespace=True, scratch=["/tmp", "/dev/shm"], nproc=nproc)
            return run_batch(channel, jobs, request)
        except OSError as e:
            raise SandboxUnavailable(f"cannot start bubblewrap: {e}") from e
        finally:
            if channel is not None:
                channel.close()
            if cgroup is not None:
                cgroup.remove()
            self._slots.put(slot)
