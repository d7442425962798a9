"""Servers rlvr starts itself for ``rollout.engine: server`` (``rollout.servers.launch``): ``rlvr serve``
subprocesses on this machine.

They are started before the policy loads (:meth:`ServerFleet.start` returns at once) and waited for when the rollout
engine is built (:meth:`ServerFleet.wait_ready`: each must answer ``/health`` within ``launch.startup_timeout_s``; one
that exits or stays silent is an error quoting the end of its log). Server i listens on 127.0.0.1 at
``launch.port + i`` and logs to ``LOG_DIR/server-i.log``. Each runs in its own process group, is asked to stop
(SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`) by :meth:`ServerFleet.close`, and is ended by the kernel when the
process that started it dies (``PR_SET_PDEATHSIG``, so a killed trainer leaves no server behind). A server that dies
during the run is restarted once (:meth:`ServerFleet.restart`; the engine then gives it the current weights); a second
death is an error naming it.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from rlvr.config.schema import ServerLaunchConfig

STOP_GRACE_S = 20.0
"""Seconds a server has to stop after SIGTERM before it is killed."""
LOG_TAIL_LINES = 25
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""A launcher's variables, not passed on: vLLM would take the server for a rank of the trainer's job."""


class ServerLaunchError(RuntimeError):
    """A server rlvr started did not come up, or died twice; the message names it and quotes its log."""


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of the log at ``path`` (indented), or a note that it is empty or missing."""
    try:
        text = path.read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return f"    (no log at {path})"
    return "\n".join(f"    {line}" for line in text[-lines:]) if text else f"    ({path} is empty)"


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        pass


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something already listens on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0


@dataclass
class LaunchedServer:
    """One ``rlvr serve`` subprocess."""

    index: int
    port: int
    devices: str | None
    log_path: Path
    process: subprocess.Popen | None = None
    restarts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def name(self) -> str:
        """How errors name it: ``server 1 (http://127.0.0.1:8101, started by rlvr, log /tmp/.../server-1.log)``."""
        return f"server {self.index} ({self.url}, started by rlvr, log {self.log_path})"


class ServerFleet:
    """The servers of ``rollout.servers.launch`` (see the module).

    Args:
        model: what ``rlvr serve`` loads (a folder or hub name; the policy's checkpoint).
        launch: ``rollout.servers.launch``.
        served_model_name: the name requests send (the recipe's ``model.name``).
        dtype: ``--dtype`` (vLLM's name, e.g. ``bfloat16``; ``auto``: the trainer's precision choice).
        weight_transfer: ``--weight-transfer`` (``nccl``, ``ipc``, ``file`` or ``auto``).
        max_model_len: ``--max-model-len`` (``None``: the model's own).
        seed: ``--seed``.
        log_dir: where the logs go; ``None``: a new temporary folder.
    """

    def __init__(self, model: str, launch: "ServerLaunchConfig", *, served_model_name: str, dtype: str = "auto",
                 weight_transfer: str = "auto", max_model_len: int | None = None, seed: int = 0,
                 log_dir: str | Path | None = None) -> None:
        self.model = model
        self.launch = launch
        self.served_model_name = served_model_name
        self.dtype = dtype
        self.weight_transfer = weight_transfer
        self.max_model_len = max_model_len
        self.seed = seed
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="rlvr-servers-"))
        devices = launch.devices or [None] * launch.count
        self.servers = [LaunchedServer(i, launch.port + i, devices[i], self.log_dir / f"server-{i}.log")
                        for i in range(launch.count)]

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def command(self, server: LaunchedServer) -> list[str]:
        """The ``rlvr serve`` command line of ``server``."""
        cmd = [sys.executable, "-m", "rlvr.cli", "serve", self.model, "--host", "127.0.0.1", "--port", str(server.port),
               "--served-model-name", self.served_model_name, "--dtype", self.dtype, "--weight-transfer",
               self.weight_transfer, "--seed", str(self.seed)]
        if server.devices is not None:
            cmd += ["--devices", server.devices]
        if self.launch.threads is not None:
            cmd += ["--threads", str(self.launch.threads)]
        if self.max_model_len is not None:
            cmd += ["--max-model-len", str(self.max_model_len)]
        if self.launch.extra_args:
            cmd += ["--vllm-args", shlex.join(self.launch.extra_args)]
        return cmd

    def _spawn(self, server: LaunchedServer) -> None:
        if port_in_use(server.port):
            raise ServerLaunchError(f"cannot start {server.name()}: port {server.port} is in use (another server, or "
                                    f"one left from an earlier run): stop it, or set rollout.servers.launch.port")
        env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(server.log_path, "ab") as log:
            server.process = subprocess.Popen(self.command(server), stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                              preexec_fn=_die_with_parent)

    def start(self) -> None:
        """Start every server (returns at once; :meth:`wait_ready` waits).

        Raises:
            ServerLaunchError: a server's port is taken.
        """
        atexit.register(self.close)  # a run that ends without closing the engine still stops its servers
        for server in self.servers:
            self._spawn(server)

    def _wait(self, servers: list[LaunchedServer]) -> None:
        deadline = time.monotonic() + self.launch.startup_timeout_s
        pending = list(servers)
        with httpx.Client() as http:
            while pending:
                for server in list(pending):
                    code = server.process.poll() if server.process is not None else -1
                    if code is not None:
                        raise ServerLaunchError(f"{server.name()} exited with code {code} before it was ready; the "
                                                f"end of its log:\n{log_tail(server.log_path)}")
                    try:
                        if http.get(f"{server.url}/health", timeout=5.0).status_code == 200:
                            pending.remove(server)
                    except httpx.HTTPError:
                        pass
                if pending and time.monotonic() > deadline:
                    names = ", ".join(s.name() for s in pending)
                    raise ServerLaunchError(
                        f"{names} did not answer /health within {self.launch.startup_timeout_s:g} s "
                        f"(rollout.servers.launch.startup_timeout_s); the end of the log of server "
                        f"{pending[0].index}:\n{log_tail(pending[0].log_path)}")
                if pending:
                    time.sleep(1.0)

    def wait_ready(self) -> None:
        """Wait until every server answers ``/health``.

        Raises:
            ServerLaunchError: one exited, or did not answer within ``launch.startup_timeout_s`` (its log's end
                quoted); the servers are stopped first.
        """
        try:
            self._wait(self.servers)
        except BaseException:
            self.close()
            raise

    def find(self, url: str) -> LaunchedServer | None:
        """The launched server at ``url``, or None (a server given by URL)."""
        return next((s for s in self.servers if s.url == url.rstrip("/")), None)

    def alive(self, server: LaunchedServer) -> bool:
        return server.process is not None and server.process.poll() is None

    def restart(self, server: LaunchedServer, why: str) -> None:
        """Stop ``server`` (if it still runs), start it again and wait for it; only once per server.

        Raises:
            ServerLaunchError: it was restarted before, or does not come back (its log's end quoted).
        """
        if server.restarts >= 1:
            raise ServerLaunchError(f"{server.name()} failed again after its restart ({why}); the end of its log:\n"
                                    f"{log_tail(server.log_path)}")
        server.restarts += 1
        print(f"[rlvr] {server.name()} failed ({why}); restarting it once", file=sys.stderr, flush=True)
        self._stop(server)
        self._spawn(server)
        self._wait([server])

    def _stop(self, server: LaunchedServer) -> None:
        process = server.process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)  # its own group: the server and the vLLM engine it started
        except ProcessLookupError:
            return
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()

    def close(self) -> None:
        """Stop every server (idempotent)."""
        for server in self.servers:
            self._stop(server)


def server_dtype(precision: str) -> str:
    """``rlvr serve --dtype`` for ``trainer.precision``: ``auto`` lets the server make the trainer's choice for its own
    device; a forced precision is the servers' too."""
    return {"auto": "auto", "fp32": "float32", "bf16": "bfloat16"}[precision]


def on_trainer_gpu(devices: list[str] | None, count: int) -> tuple[str, list[bool]]:
    """The trainer's GPU id (``LOCAL_RANK`` through ``CUDA_VISIBLE_DEVICES``) and, per launched server, whether it
    runs on that GPU (a server without ``devices`` takes GPU 0)."""
    local = int(os.environ.get("LOCAL_RANK", 0))
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    mine = visible[local] if local < len(visible) else str(local)
    return mine, [mine in (d or "0").split(",") for d in (devices or [None] * count)]


def launch_transfer(requested: str, devices: list[str] | None, count: int) -> str:
    """The weight transfer the servers rlvr starts run: ``requested``, or for ``auto`` ``file`` without a GPU, ``ipc``
    when every server is on the trainer's GPU, ``nccl`` when none is.

    Raises:
        ValueError: ``auto`` with some servers on the trainer's GPU and some elsewhere (one transfer serves them all).
    """
    if requested != "auto":
        return requested
    import torch

    if not torch.cuda.is_available():
        return "file"
    mine, shared = on_trainer_gpu(devices, count)
    if all(shared):
        return "ipc"
    if not any(shared):
        return "nccl"
    raise ValueError(f"rollout.servers.launch.devices={devices}: some servers are on the trainer's GPU {mine} (ipc) "
                     f"and some are not (nccl); one weight transfer serves them all: put them all on other GPUs, or "
                     f"set rollout.servers.weight_transfer")


def start_fleet(recipe: Any, model_path: str, log_dir: str | Path | None = None) -> ServerFleet | None:
    """Start the servers of ``rollout.servers.launch`` (rank 0 of a run only; the others use their addresses) and
    return at once, or ``None`` where there are none to start. ``model_path``: the policy's checkpoint folder.

    Raises:
        ServerLaunchError: a port is taken. ValueError: :func:`launch_transfer`.
    """
    rollout = recipe.rollout
    launch = rollout.servers.launch
    if rollout.engine != "server" or launch.count == 0 or int(os.environ.get("RANK", 0)) != 0:
        return None
    fleet = ServerFleet(model_path, launch, served_model_name=recipe.model.name,
                        dtype=server_dtype(recipe.trainer.precision),
                        weight_transfer=launch_transfer(rollout.servers.weight_transfer, launch.devices, launch.count),
                        max_model_len=rollout.vllm_max_model_len, seed=recipe.seed, log_dir=log_dir)
    fleet.start()
    print(f"[rlvr] starting {launch.count} rollout server(s) at {', '.join(fleet.urls)} (logs in {fleet.log_dir})",
          flush=True)
    return fleet
