"""Where sandbox containers are started, kept warm, and removed.

Each container is started once (~300-600 ms) and then runs many batches, through one warm driver started
with one `docker exec` (see docker_backend). It is created with: no network, a read-only root, size-capped tmpfs scratch (/tmp and
/dev/shm), a pids limit, a memory limit (no swap), a CPU quota, every capability dropped, no-new-privileges,
the seccomp profile of `docker_seccomp` (the per-run namespaces) and no log. The driver and programs run as
uid 65534; pid 1 runs as 65533 and is non-dumpable. Its pid 1 is a small reaper that exits (and `auto_remove` removes the container) after
`idle_exit_s` seconds without any other process: a caller killed with SIGKILL leaves nothing behind for
long. Containers are labelled with their owner (`host:pid`); at exit (atexit, a multiprocessing child's
own exit, and SIGTERM when nobody else handles it) the pool removes its own, and a new pool removes
containers of owners that are gone. A forked child never removes its parent's.
"""
from __future__ import annotations

import atexit
import multiprocessing.util
import os
import signal
import socket
import threading
import time
import uuid
import weakref
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors

from rlvr.sandbox.backends.docker_seccomp import profile_json
from rlvr.sandbox.errors import SandboxError, SandboxUnavailable
from rlvr.sandbox.limits import Limits

LABEL = "rlvr.sandbox"
OWNER_LABEL = "rlvr.sandbox.owner"
SANDBOX_UID = "65534:65534"  # nobody:nogroup: the driver and the programs
PID1_UID = "65533:65533"  # pid 1, another user: programs can neither signal it, trace it, nor open its fds
OVERHEAD_MB = 256  # container memory beyond the program's own limit: driver, pid 1, runner baseline

# pid 1 of every container: reap orphans; exit after argv[1] idle seconds (no process but us). Non-dumpable and
# of another user than the programs: nothing of a job can be written into its memory to outlive the job.
PID1_SOURCE = """
import ctypes, os, sys, time
if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0
    sys.exit("pid 1: prctl(PR_SET_DUMPABLE) failed")
os.dup2(os.open(os.devnull, os.O_RDWR), 1)  # nothing of ours reaches the engine's log either
os.dup2(1, 2)
idle_s, last = float(sys.argv[1]), time.monotonic()
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    if any(p.isdigit() and p != "1" for p in os.listdir("/proc")):
        last = time.monotonic()
    elif time.monotonic() - last > idle_s:
        sys.exit(0)
    time.sleep(0.5)
"""


@dataclass(frozen=True)
class ContainerSpec:
    """The container-level limits a batch needs (jobs with equal specs share containers).

    memory_mb: cgroup memory (= memory + swap) limit in MiB; pids: pids limit; cpus: CPU quota in cores;
    scratch_mb: size of each tmpfs (/tmp, /dev/shm) in MiB."""

    memory_mb: int
    pids: int
    cpus: float
    scratch_mb: int

    @classmethod
    def for_limits(cls, limits: Limits) -> ContainerSpec:
        """The spec for a program's Limits: its memory plus both scratch tmpfs plus OVERHEAD_MB."""
        memory = int(limits.memory_mb) + 2 * int(limits.scratch_mb) + OVERHEAD_MB
        return cls(memory_mb=memory, pids=int(limits.pids), cpus=float(limits.cpus), scratch_mb=int(limits.scratch_mb))

    def run_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `client.containers.run` that enforce this spec and the isolation."""
        # exec (Docker defaults to noexec): C and C++ programs run the binary they compiled here, and noexec
        # stops no Python program from running any code it likes
        tmpfs = f"rw,exec,nosuid,nodev,size={self.scratch_mb}m,mode=1777"
        return {
            # /dev/mqueue shows the container's message queues, whose names a program could leave for the next
            # one: an empty read-only folder instead (each run's own queues live in its own IPC namespace)
            "network_mode": "none", "read_only": True,
            "tmpfs": {"/tmp": tmpfs, "/dev/mqueue": "ro,nosuid,nodev,noexec,size=4k,mode=0555"},
            "shm_size": f"{self.scratch_mb}m", "pids_limit": self.pids,
            "mem_limit": f"{self.memory_mb}m", "memswap_limit": f"{self.memory_mb}m",
            "nano_cpus": int(self.cpus * 1e9), "user": PID1_UID, "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges", f"seccomp={profile_json()}"], "ipc_mode": "private",
            "working_dir": "/tmp", "hostname": "sandbox", "environment": {"LANG": "C.UTF-8"},
            "log_config": {"Type": "none", "Config": {}},  # a program's bytes never land in a file on the host
        }


class ContainerPool:
    """Warm containers, by spec. Thread-safe. `acquire` hands out an idle one or starts one;
    `release(c, reusable=False)` removes it. Raises SandboxUnavailable when a container cannot start."""

    def __init__(self, client: docker.DockerClient, image: str, idle_exit_s: float = 600.0) -> None:
        self.client, self.image, self.idle_exit_s = client, image, idle_exit_s
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self._idle: dict[ContainerSpec, list[tuple[Any, float]]] = defaultdict(list)  # (container, idle since)
        self._live: dict[str, Any] = {}
        self._lock = threading.Condition()
        self._starting = 0  # containers being created right now
        self._closed = False
        remove_stale_containers(client)
        _POOLS.add(self)
        _install_exit_cleanup()

    def acquire(self, spec: ContainerSpec) -> Any:
        """An idle container made for spec, else a new one (started here, ~0.3-0.6 s).

        Raises SandboxError once the pool is closed, SandboxUnavailable when a container cannot start."""
        return self._take_idle(spec) or self._start(spec)

    def _take_idle(self, spec: ContainerSpec) -> Any | None:
        stale = []
        with self._lock:
            if self._closed:
                raise SandboxError("the container pool is closed (the process is exiting)")
            fresh = None
            while self._idle[spec] and fresh is None:
                container, since = self._idle[spec].pop()
                if time.monotonic() - since < 0.8 * self.idle_exit_s:
                    fresh = container
                else:  # its pid 1 may have exited (idle too long): never hand it out
                    stale.append(container)
                    self._live.pop(container.id, None)
        for container in stale:
            _remove(container)
        return fresh

    def _start(self, spec: ContainerSpec) -> Any:
        with self._lock:
            if self._closed:
                raise SandboxError("the container pool is closed (the process is exiting)")
            self._starting += 1
        container = None
        try:
            container = self.client.containers.run(
                self.image, ["python3", "-I", "-c", PID1_SOURCE, str(self.idle_exit_s)], detach=True,
                auto_remove=True, name=f"rlvr-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}",
                labels={LABEL: "1", OWNER_LABEL: self.owner}, **spec.run_kwargs())
        except docker.errors.DockerException as e:
            raise SandboxUnavailable(f"cannot start a sandbox container from {self.image}: {e}") from e
        finally:
            with self._lock:
                self._starting -= 1
                closed = self._closed
                if container is not None and not closed:
                    self._live[container.id] = container
                self._lock.notify_all()
        if closed:  # close() ran while we were starting it
            _remove(container)
            raise SandboxError("the container pool is closed (the process is exiting)")
        return container

    def release(self, container: Any, spec: ContainerSpec, reusable: bool) -> None:
        """Give a container back: kept warm when reusable, else killed and removed."""
        if reusable:
            with self._lock:
                if container.id in self._live and not self._closed:
                    self._idle[spec].append((container, time.monotonic()))
                    return
        self.discard(container)

    def discard(self, container: Any) -> None:
        """Kill and remove one container (no error if it is already gone)."""
        with self._lock:
            self._live.pop(container.id, None)
            for spec, idle in self._idle.items():
                self._idle[spec] = [(c, t) for c, t in idle if c.id != container.id]
        _remove(container)

    def close(self, wait_s: float = 10.0) -> None:
        """Remove every container of this pool, including any still being created (waits up to wait_s
        seconds for those), and refuse to start more."""
        with self._lock:
            self._closed = True
            self._lock.wait_for(lambda: self._starting == 0, timeout=wait_s)
            containers = list(self._live.values())
            self._live.clear()
            self._idle.clear()
        try:  # also whatever carries our label but escaped the bookkeeping (a creation cut short)
            containers += self.client.containers.list(all=True, sparse=True,
                                                      filters={"label": f"{OWNER_LABEL}={self.owner}"})
        except docker.errors.DockerException:
            pass
        threads = [threading.Thread(target=_remove, args=(c,), daemon=True) for c in containers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)

    def container_ids(self) -> list[str]:
        """Ids of the containers this pool holds (idle or in use)."""
        with self._lock:
            return list(self._live)

    def size(self) -> int:
        """Number of containers this pool holds (idle or in use)."""
        with self._lock:
            return len(self._live)


def remove_stale_containers(client: docker.DockerClient) -> int:
    """Remove sandbox containers whose owner process (on this host) is gone; returns how many."""
    host = socket.gethostname()
    removed = 0
    # sparse: no per-container inspect, which would race with containers removing themselves
    for container in client.containers.list(all=True, sparse=True, filters={"label": LABEL}):
        owner_host, _, pid = (container.attrs.get("Labels") or {}).get(OWNER_LABEL, "").rpartition(":")
        if owner_host == host and pid.isdigit() and not _alive(int(pid)):
            _remove(container)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(container: Any) -> None:
    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as e:
        if "already in progress" not in str(e) and e.status_code != 404:
            raise


_POOLS: "weakref.WeakSet[ContainerPool]" = weakref.WeakSet()
_cleanup_installed = 0  # the pid that installed the exit clean-up


def close_all_pools() -> None:
    """Remove the containers of every pool in this process (run at exit)."""
    for pool in list(_POOLS):
        pool.close()


def _forget_parent_pools() -> None:
    # a forked child's exit must never remove its parent's containers (sandbox.backends forgets the
    # parent's backends too, so the child starts its own pool)
    _POOLS.clear()


os.register_at_fork(after_in_child=_forget_parent_pools)


def _install_exit_cleanup() -> None:
    global _cleanup_installed
    if _cleanup_installed == os.getpid():  # a forked child inherits the flag, not the need
        return
    _cleanup_installed = os.getpid()
    atexit.register(close_all_pools)
    # A multiprocessing child (a verifier pool's worker, which starts its own pool) ends with os._exit,
    # skipping atexit; multiprocessing runs its own finalizers first.
    multiprocessing.util.Finalize(None, close_all_pools, exitpriority=0)
    # SIGTERM normally ends Python without atexit; clean up first, then die of it as before.
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def on_sigterm(signum: int, _frame: Any) -> None:
            close_all_pools()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, on_sigterm)
