"""HTTP to one ``rlvr serve`` server: every failure becomes a :class:`ServerError` that names the server's URL, the
call that failed and what to do about it.

A server that does not answer at all (connection refused or reset, no reply within the timeout) raises
:class:`ServerUnreachable`, the one failure a restart can cure; an answer with an HTTP error status raises
:class:`ServerError` with the server's own message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

VLLM_BACKENDS = {"nccl": "nccl", "ipc": "ipc", "file": "rlvr_file"}
"""rlvr's name of a weight transfer -> the backend's name in vLLM's registry (``file`` is rlvr's own engine,
:mod:`rlvr.serving.file_weight_transfer`)."""

DEV_ROUTES_HINT = ("a server started with `rlvr serve` has it; a plain `vllm serve` needs VLLM_SERVER_DEV_MODE=1, "
                   "--enable-scale-out and --weight-transfer-config")


def transfer_name(vllm_backend: str | None) -> str | None:
    """rlvr's name (``nccl``, ``ipc``, ``file``) of a server's vLLM backend; ``None`` for none or an unknown one."""
    return next((name for name, backend in VLLM_BACKENDS.items() if backend == vllm_backend), None)


class ServerError(RuntimeError):
    """A rollout server failed a call; the message names the server and the call.

    Attributes:
        url: the server (``http://host:port``).
    """

    def __init__(self, url: str, message: str) -> None:
        super().__init__(message)
        self.url = url


class ServerUnreachable(ServerError):
    """The server did not answer (refused, reset, or silent past the timeout)."""


@dataclass(frozen=True)
class ServerInfo:
    """What a server serves, read once when the engine connects (``/v1/models`` and ``/server_info``)."""

    model: str
    """The served model name (requests must send it)."""
    max_model_len: int
    """Prompt + response tokens a request may hold."""
    dtype: str
    """The weights' dtype, e.g. ``torch.bfloat16``."""
    weight_transfer: str | None
    """vLLM's weight-transfer backend (``nccl``, ``ipc``, ``rlvr_file``), ``None`` where the server has none."""
    world_size: int
    """The server's workers (tensor x pipeline parallel): its ranks in an NCCL weight broadcast."""
    vllm_version: str


class ServerClient:
    """Calls to the server at ``url`` over a shared ``httpx.Client``.

    Args:
        url: ``http://host:port`` (a trailing slash is dropped).
        http: the client (thread-safe; one for all servers of an engine).
        timeout_s: default wall-clock limit of one call (``rollout.servers.request_timeout_s``).
        hint: appended to the message of a server that does not answer (e.g. where its log is).
    """

    def __init__(self, url: str, http: httpx.Client, timeout_s: float, hint: str = "") -> None:
        self.url = url.rstrip("/")
        self.http = http
        self.timeout_s = timeout_s
        self.hint = hint

    def _unreachable(self, what: str, exc: Exception, timeout_s: float) -> ServerUnreachable:
        if isinstance(exc, httpx.TimeoutException):
            why = (f"did not answer {what} within {timeout_s:g} s (rollout.servers.request_timeout_s / "
                   f"rollout.weight_sync_timeout_s): it is overloaded or hung; check its log, or raise the limit")
        else:
            why = (f"does not answer ({type(exc).__name__}: {exc}) {what}: check that `rlvr serve` runs there and "
                   f"listens on this address (its log says why it stopped), or take it out of rollout.servers.urls")
        return ServerUnreachable(self.url, f"rollout server {self.url} {why}{self.hint}")

    def call(self, method: str, path: str, what: str, *, json: Any = None, params: dict[str, Any] | None = None,
             timeout_s: float | None = None) -> Any:
        """``method`` ``path`` and the decoded JSON answer (``None`` for an empty body).

        Args:
            what: the call in words, for errors (``"to generate (prompt 3)"``).
        Raises:
            ServerUnreachable: no answer. ServerError: an HTTP error status (the server's message quoted) or an
                answer that is not JSON.
        """
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            response = self.http.request(method, f"{self.url}{path}", json=json, params=params,
                                         timeout=httpx.Timeout(limit, connect=min(limit, 30.0)))
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise self._unreachable(what, exc, limit) from exc
        if response.status_code >= 400:
            detail = response.text.strip().replace("\n", " ")[:600]
            hint = f" ({path} is missing: {DEV_ROUTES_HINT})" if response.status_code == 404 else ""
            raise ServerError(self.url, f"rollout server {self.url} answered HTTP {response.status_code} {what} "
                                        f"({method} {path}): {detail}{hint}")
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise ServerError(self.url, f"rollout server {self.url} answered {what} with something that is not JSON "
                                        f"({response.text[:200]!r})") from exc

    def post(self, path: str, what: str, **kwargs: Any) -> Any:
        """``POST`` (see :meth:`call`)."""
        return self.call("POST", path, what, **kwargs)

    def get(self, path: str, what: str, **kwargs: Any) -> Any:
        """``GET`` (see :meth:`call`)."""
        return self.call("GET", path, what, **kwargs)

    def info(self) -> ServerInfo:
        """What the server serves (:class:`ServerInfo`).

        Raises:
            ServerUnreachable, ServerError: as :meth:`call`; ServerError also when the server lists no model.
        """
        models = self.get("/v1/models", "to list its model").get("data") or []
        if not models:
            raise ServerError(self.url, f"rollout server {self.url} serves no model (/v1/models is empty)")
        config = self.get("/server_info", "to describe itself", params={"config_format": "json"})
        vllm_config = config.get("vllm_config") or {}
        transfer = (vllm_config.get("weight_transfer_config") or {}).get("backend")
        parallel = vllm_config.get("parallel_config") or {}
        return ServerInfo(model=str(models[0]["id"]), max_model_len=int(models[0].get("max_model_len") or 0),
                          dtype=str((vllm_config.get("model_config") or {}).get("dtype", "")),
                          weight_transfer=transfer, world_size=int(parallel.get("world_size") or 1),
                          vllm_version=str((config.get("system_env") or {}).get("vllm_version", "")))
