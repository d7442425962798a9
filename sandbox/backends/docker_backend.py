"""The Docker backend: batches run in warm pooled containers, each through a warm driver.

A container's driver is started once with `docker exec` and then serves batch after batch on the same
exec (its fork server stays warm too), so a batch costs no exec and no interpreter start; it exits after
the pool's idle time without a batch, or when the host closes the exec. The driver's stdin and stdout
travel over the exec's attached socket (the docker SDK's `exec_start(socket=True)`), so test inputs never
touch argv or a file the program could list. When the driver falls silent past its deadline, or its batch
ends broken, the container is killed and removed.
"""
from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import docker
import docker.errors

from rlvr.sandbox import batch as sandbox_batch
from rlvr.sandbox.backends.base import Backend, default_workers
from rlvr.sandbox.backends.docker_pool import SANDBOX_UID, ContainerPool, ContainerSpec
from rlvr.sandbox.batch import BatchOutcome, request_bytes, run_batch
from rlvr.sandbox.errors import SandboxUnavailable
from rlvr.sandbox.harness import driver_source
from rlvr.sandbox.jobs import Job
from rlvr.sandbox.languages import Language

IMAGE_ENV = Path(__file__).resolve().parent.parent / "image.env"
STDERR_TAIL = 8192


def image_name() -> str:
    """The sandbox image tag, from sandbox/image.env (RLVR_SANDBOX_IMAGE overrides it)."""
    if os.environ.get("RLVR_SANDBOX_IMAGE"):
        return os.environ["RLVR_SANDBOX_IMAGE"]
    for line in IMAGE_ENV.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "RLVR_SANDBOX_IMAGE":
            return value.strip()
    raise SandboxUnavailable(f"{IMAGE_ENV} does not set RLVR_SANDBOX_IMAGE")


def docker_problem() -> str | None:
    """Why the Docker backend cannot run here (no engine answers, or the image is missing), else None."""
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as e:  # noqa: BLE001 - any failure means "no engine"
        return f"no Docker engine answers ({type(e).__name__}: {e}); run `make sandbox`"
    try:
        client.images.get(image_name())
    except docker.errors.ImageNotFound:
        return f"the sandbox image {image_name()} is missing; run `make sandbox`"
    except docker.errors.DockerException as e:
        return f"cannot inspect the sandbox image: {e}"
    finally:
        client.close()
    return None


class DockerBackend(Backend):
    """Runs batches in pooled containers. workers: parallel batches (RLVR_SANDBOX_WORKERS, default the CPU
    count); idle_exit_s: an unused container removes itself after this long (RLVR_SANDBOX_IDLE_S, 600);
    warm_drivers: keep each container's driver for its next batch (RLVR_SANDBOX_WARM_DRIVERS, default on;
    off: one `docker exec` and one driver start per batch, as before).

    Raises SandboxUnavailable when no engine answers or the image is missing."""

    name = "docker"
    memory_enforced = True

    def description(self) -> str:
        return ("docker: warm containers, every program run in user, IPC and pid namespaces apart from the sandbox's "
                "own processes; memory_mb enforced by a memory cgroup (the container's: memory_mb + 2 x scratch_mb + "
                "256 MiB for the sandbox's own processes, with RLIMIT_AS per process)")

    def __init__(self, workers: int | None = None, idle_exit_s: float | None = None,
                 warm_drivers: bool | None = None) -> None:
        problem = docker_problem()
        if problem:
            raise SandboxUnavailable(problem)
        self._workers = default_workers(workers)
        # every worker holds one connection (its exec socket) plus short API calls: size the pool for them
        self.client = docker.from_env(timeout=60, max_pool_size=2 * self._workers + 4)
        idle = idle_exit_s if idle_exit_s is not None else float(os.environ.get("RLVR_SANDBOX_IDLE_S", 600))
        self.pool = ContainerPool(self.client, image_name(), idle_exit_s=idle)
        # container id -> its driver, waiting for the next batch (the pool hands a container to one worker
        # at a time, so a driver is never shared)
        self._warm: dict[str, ExecChannel] = {}
        self._lock = threading.Lock()
        if warm_drivers is None:
            warm_drivers = os.environ.get("RLVR_SANDBOX_WARM_DRIVERS", "1") != "0"
        self.warm_drivers = warm_drivers

    def workers(self) -> int:
        return self._workers

    def language_problem(self, language: Language) -> str | None:
        return None  # the image carries every toolchain; an old image's driver reports what is missing

    def group_key(self, job: Job) -> Hashable:
        return ContainerSpec.for_limits(job.limits)

    def run_batch(self, jobs: Sequence[Job]) -> BatchOutcome:
        spec = ContainerSpec.for_limits(jobs[0].limits)
        container = self.pool.acquire(spec)
        outcome = BatchOutcome(results=[None] * len(jobs), broken="the driver could not be started")
        channel: ExecChannel | None = None
        try:
            fork_server = sandbox_batch.FORK_SERVER
            request = request_bytes(jobs, pid_namespace=True, scratch=["/tmp", "/dev/shm"], nproc=None,
                                    fork_server=fork_server, idle_exit_s=self.pool.idle_exit_s)
            channel = self._driver(container, fork_server)
            outcome = run_batch(channel, jobs, request)
        except docker.errors.DockerException as e:
            outcome.broken = f"docker exec failed: {e}"
        finally:
            if channel is not None and outcome.reusable and self.warm_drivers:
                with self._lock:
                    self._warm[container.id] = channel
            elif channel is not None:
                channel.close()
            self.pool.release(container, spec, reusable=outcome.reusable)
        return outcome

    def _driver(self, container: Any, fork_server: bool) -> ExecChannel:
        """The container's warm driver (left waiting by its last batch) when it runs with the same fork
        server setting, else a new one (one `docker exec`)."""
        with self._lock:
            channel = self._warm.pop(container.id, None)
            live = set(self.pool.container_ids())
            for gone in [cid for cid in self._warm if cid not in live]:  # removed by the pool (idle too long)
                self._warm.pop(gone).close()
        if channel is not None and channel.fork_server == fork_server:
            return channel
        if channel is not None:
            channel.close()
        return ExecChannel(self.client, container, fork_server=fork_server)

    def close(self) -> None:
        """Remove every container this backend started."""
        with self._lock:
            warm, self._warm = list(self._warm.values()), {}
        for channel in warm:
            channel.close()
        self.pool.close()


class ExecChannel:
    """A Channel to `python3 -I -c DRIVER` started with `docker exec` (stdin attached) in a container.
    fork_server: whether the batches sent through it ask for the fork server (a warm driver keeps the
    setting of its first batch)."""

    def __init__(self, client: docker.DockerClient, container: Any, fork_server: bool = True) -> None:
        self.fork_server = fork_server
        api = client.api
        exec_id = api.exec_create(container.id, ["python3", "-I", "-c", driver_source()], stdin=True,
                                  stdout=True, stderr=True, user=SANDBOX_UID, workdir="/tmp")["Id"]
        self._io = api.exec_start(exec_id, socket=True)
        self._sock: socket.socket = getattr(self._io, "_sock", self._io)
        self._raw = bytearray()  # multiplexed frames not parsed yet
        self._out = bytearray()
        self._err = bytearray()
        self._eof = False

    def send(self, data: bytes) -> None:
        self._sock.settimeout(60)
        self._sock.sendall(data)

    def read_line(self, timeout_s: float) -> bytes | None:
        end = time.monotonic() + timeout_s
        while b"\n" not in self._out:
            if self._eof:
                return None
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no line from the driver within {timeout_s:.1f} s")
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(1 << 20)
            except socket.timeout:
                continue
            if not chunk:
                self._eof = True
            self._raw += chunk
            self._parse_frames()
        line, _, rest = bytes(self._out).partition(b"\n")
        self._out = bytearray(rest)
        return line

    def _parse_frames(self) -> None:
        # Docker's stream format: 8-byte header (stream id, 3 zero bytes, big-endian length), then data.
        while len(self._raw) >= 8:
            stream, size = struct.unpack(">BxxxL", self._raw[:8])
            if len(self._raw) < 8 + size:
                return
            data = bytes(self._raw[8:8 + size])
            del self._raw[:8 + size]
            if stream == 2:
                self._err += data
                del self._err[:-STDERR_TAIL]
            else:
                self._out += data

    def diagnostics(self) -> str:
        return bytes(self._err).decode("utf-8", "replace")

    def close(self) -> None:
        try:
            self._io.close()
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass
