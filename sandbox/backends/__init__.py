"""Sandbox backends, chosen by name. Dangerous code (running without isolation) lives only here, in
`unsafe_local.py`, and only `get_backend("none")` reaches it."""
from __future__ import annotations

import threading
import time

from rlvr.sandbox.backends.base import Backend
from rlvr.sandbox.errors import SandboxUnavailable

BACKENDS = ("auto", "docker", "bwrap", "none")
_RETRY_DOCKER_S = 30.0  # after "no engine", ask again only this much later

_lock = threading.Lock()
_instances: dict[str, Backend] = {}
_docker_refused_at = -1e9


def get_backend(name: str = "auto") -> Backend:
    """The backend for `name` (one instance per process).

    auto: docker when an engine answers and the image exists, else bwrap. none: no isolation, only when
    named. Raises ValueError for an unknown name, SandboxUnavailable when the backend cannot run here."""
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


def _get(name: str) -> Backend:
    if name not in _instances:
        if name == "docker":
            from rlvr.sandbox.backends.docker_backend import DockerBackend

            _instances[name] = DockerBackend()
        elif name == "bwrap":
            from rlvr.sandbox.backends.bwrap_backend import BwrapBackend

            _instances[name] = BwrapBackend()
        else:
            from rlvr.sandbox.backends.unsafe_local import UnsafeLocalBackend

            _instances[name] = UnsafeLocalBackend()
    return _instances[name]


__all__ = ["BACKENDS", "Backend", "get_backend"]
