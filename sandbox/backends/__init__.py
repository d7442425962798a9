"""Sandbox backends, chosen by name. Dangerous code (running without isolation) lives only here, in
`unsafe_local.py`, and only `get_backend("none")` reaches it. `remote` runs programs in sandboxes on other machines
(`remote_backend.py`); like `none`, it is never chosen by `auto`."""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence

from rlvr.sandbox.backends.base import Backend
from rlvr.sandbox.errors import SandboxUnavailable

BACKENDS = ("auto", "docker", "bwrap", "none", "remote")
_RETRY_DOCKER_S = 30.0  # after "no engine", ask again only this much later

_lock = threading.Lock()
_instances: dict[str, Backend] = {}
_docker_refused_at = -1e9


def get_backend(name: str = "auto") -> Backend:
    """The backend for `name` (one instance per process).

    auto: docker when an engine answers and the image exists, else bwrap. none: no isolation, only when
    named. remote: the servers named by the environment (`RLVR_SANDBOX_URL`, `RLVR_SANDBOX_TOKEN`; see
    `remote_backend`). Raises ValueError for an unknown name, SandboxUnavailable when the backend cannot run here."""
    global _docker_refused_at
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r}; valid: {', '.join(BACKENDS)}")
    with _lock:
        if name == "auto":
            if "docker" in _instances or time.monotonic() - _docker_refused_at > _RETRY_DOCKER_S:
                try:
                    return _get("docker")
                except SandboxUnavailable as docker_problem:
                    _docker_refused_at = time.monotonic()
                    reason = str(docker_problem)
            else:
                reason = "no Docker engine answered recently"
            try:
                return _get("bwrap")
            except SandboxUnavailable as bwrap_problem:
                raise SandboxUnavailable(
                    f"no isolation backend can run here. docker: {reason}. bwrap: {bwrap_problem}. "
                    "(backend='none' runs code without isolation and must be asked for by name.)") from None
        return _get(name)


def remote_backend(urls: str | Sequence[str], token: str | None = None, protocol: str | None = None) -> Backend:
    """The `remote` backend for these servers (one instance per process and settings): `urls` a comma-separated
    string or a list, `token` the servers' token (None: none sent), `protocol` auto, rlvr or sandboxfusion (None: the
    environment's, else auto). Raises ValueError for a bad URL or protocol, SandboxUnavailable for no URL."""
    from rlvr.sandbox.backends.remote_backend import RemoteBackend, parse_urls

    key = f"remote|{','.join(parse_urls(urls))}|{token}|{protocol}"
    with _lock:
        if key not in _instances:
            _instances[key] = RemoteBackend(urls, token, protocol=protocol)
        return _instances[key]


def _forget_parent_backends() -> None:
    """In a forked child (a verifier pool's worker, say): start from no backend. The parent's instances
    hold its warm drivers' exec sockets and its containers, which two processes must never share (their
    requests would interleave on one driver, their programs meet in one scratch folder)."""
    global _lock
    _lock = threading.Lock()  # it may have been held by another thread of the parent at the fork
    _instances.clear()


os.register_at_fork(after_in_child=_forget_parent_backends)


def _get(name: str) -> Backend:
    if name not in _instances:
        if name == "docker":
            from rlvr.sandbox.backends.docker_backend import DockerBackend

            _instances[name] = DockerBackend()
        elif name == "bwrap":
            from rlvr.sandbox.backends.bwrap_backend import BwrapBackend

            _instances[name] = BwrapBackend()
        elif name == "remote":
            from rlvr.sandbox.backends.remote_backend import RemoteBackend

            _instances[name] = RemoteBackend()
        else:
            from rlvr.sandbox.backends.unsafe_local import UnsafeLocalBackend

            _instances[name] = UnsafeLocalBackend()
    return _instances[name]


__all__ = ["BACKENDS", "Backend", "get_backend", "remote_backend"]
