"""`rlvr sandbox serve`: this machine's sandbox (Docker or bubblewrap, never unsandboxed) behind HTTP, so that code
rewards of trainers on other machines run here.

Endpoints (every one but the ping needs `Authorization: Bearer <token>`):
  GET  /v1/ping          "pong" (SandboxFusion's liveness probe; runs nothing)
  GET  /rlvr/v1/info     {"protocol", "backend", "workers"}: what a `remote` backend asks first
  POST /rlvr/v1/jobs     {"jobs": [job, ...]} -> {"results": [[run, ...], ...]} (`rlvr.sandbox.wire` forms): the runs
                         of each job's tests, which the client judges itself (the same verdicts as a local backend)
  POST /run_code         SandboxFusion's API (`rlvr.sandbox.fusion`): one program, its stdin, its output

What keeps it from being an open door: a request without the token is refused (401) before its body is read; a body
over `max_request_mb` is refused (413) unread; at most `max_concurrency` requests run at once, others wait up to
`queue_s` for a turn and are then turned away (503, `Retry-After`); at most `max_connections` connections are served at
once (the rest get 503 at once); a client that stalls mid-request is dropped after `io_timeout_s`; limits above
`max_time_s` / `max_memory_mb` are refused (400). Programs run only in the backend named at start (`auto`, `docker` or
`bwrap`); `none` (no isolation) cannot be served.
"""
from __future__ import annotations

import hmac
import json
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rlvr.sandbox.backends import get_backend
from rlvr.sandbox.backends.base import Backend
from rlvr.sandbox.errors import SandboxError
from rlvr.sandbox.fusion import RUN_CODE_PATH, RunCodeRequest, run_code_response
from rlvr.sandbox.jobs import Job
from rlvr.sandbox.languages import parse_language
from rlvr.sandbox.scheduler import execute
from rlvr.sandbox.wire import PROTOCOL, job_from_wire, result_to_wire

SERVED_BACKENDS = ("auto", "docker", "bwrap")
MIN_TOKEN_CHARS = 16
JOBS_PATH = "/rlvr/v1/jobs"
INFO_PATH = "/rlvr/v1/info"


@dataclass(frozen=True)
class ServerSettings:
    """How `rlvr sandbox serve` guards its port (see the module docstring).

    token: the shared secret clients send as `Authorization: Bearer <token>` (at least 16 characters).
    backend: auto, docker or bwrap. max_concurrency: requests run at once. max_connections: connections served at
    once. queue_s: how long a request waits for a turn. max_request_mb: largest request body. max_jobs: most jobs in
    one request. max_time_s, max_memory_mb: largest per-test time and memory a job may ask for. run_code_output_kb:
    the output cap of a `/run_code` program (the driver a `remote` client sends prints every test's output).
    io_timeout_s: a connection silent this long mid-request is closed.
    """

    token: str
    backend: str = "auto"
    max_concurrency: int = 4
    max_connections: int = 64
    queue_s: float = 30.0
    max_request_mb: float = 16.0
    max_jobs: int = 256
    max_time_s: float = 600.0
    max_memory_mb: int = 8192
    run_code_output_kb: int = 16384
    io_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token) < MIN_TOKEN_CHARS:
            raise ValueError(f"the server's token must be a string of at least {MIN_TOKEN_CHARS} characters")
        if self.backend not in SERVED_BACKENDS:
            raise ValueError(f"cannot serve backend {self.backend!r}: programs run only in {', '.join(SERVED_BACKENDS)} "
                             "(never without isolation)")
        for name in ("max_concurrency", "max_connections", "max_jobs", "max_memory_mb", "run_code_output_kb"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("queue_s", "max_request_mb", "max_time_s", "io_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")


class SandboxServer(ThreadingHTTPServer):
    """The HTTP server: `serve_forever()` in a thread or the main one, `shutdown()` to stop, `server_address` for
    the port it got (port 0 picks a free one).

    Raises ValueError for bad settings, SandboxUnavailable when the backend cannot run here (checked at start, not at
    the first request), OSError when the address cannot be bound."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, host: str, port: int, settings: ServerSettings, backend: Backend | None = None) -> None:
        self.settings = settings
        self.backend = backend if backend is not None else get_backend(settings.backend)
        if self.backend.name not in ("docker", "bwrap"):
            raise ValueError(f"cannot serve backend {self.backend.name!r}: programs run only in docker or bwrap")
        self.running = threading.BoundedSemaphore(settings.max_concurrency)
        self.connections = threading.BoundedSemaphore(settings.max_connections)
        super().__init__((host, port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.connections.acquire(blocking=False):  # too many at once: answer without a thread
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n"
                                b"Connection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()


class _Handler(BaseHTTPRequestHandler):
    server: SandboxServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.timeout = self.server.settings.io_timeout_s  # a stalled client cannot hold a thread
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        sys.stderr.write(f"rlvr sandbox serve: {self.address_string()} {format % args}\n")

    # -- plumbing --------------------------------------------------------------------------------------------------
    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _refuse(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self.close_connection = True  # the body (if any) was not read
        self._send(status, {"error": message}, {"Connection": "close", **(headers or {})})

    def _authorized(self) -> bool:
        given = self.headers.get("Authorization", "")
        expected = f"Bearer {self.server.settings.token}"
        if hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8")):
            return True
        self._refuse(HTTPStatus.UNAUTHORIZED, "a token is required: send 'Authorization: Bearer <token>'",
                     {"WWW-Authenticate": "Bearer"})
        return False

    def _body(self) -> Any:
        """The JSON body, or None after refusing the request (no length, too large, not JSON)."""
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._refuse(HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required")
            return None
        limit = int(self.server.settings.max_request_mb * (1 << 20))
        if int(length) > limit:
            self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the request has {length} bytes; at most {limit}")
            return None
        try:
            return json.loads(self.rfile.read(int(length)))
        except (ValueError, UnicodeDecodeError) as e:
            self._refuse(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {e}")
            return None

    def _turn(self) -> bool:
        """Wait for a running slot; False (after answering 503) when none came within queue_s."""
        if self.server.running.acquire(timeout=self.server.settings.queue_s):
            return True
        self._send(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "busy: every slot is running a request"},
                   {"Retry-After": "1"})
        return False

    # -- endpoints -------------------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        if self.path == "/v1/ping":
            self._send(HTTPStatus.OK, "pong")
        elif self.path == INFO_PATH:
            if self._authorized():
                self._send(HTTPStatus.OK, {"protocol": PROTOCOL, "backend": self.server.backend.name,
                                           "workers": self.server.backend.workers()})
        else:
            self._refuse(HTTPStatus.NOT_FOUND, f"no such endpoint: GET {self.path}")

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        if self.path not in (JOBS_PATH, RUN_CODE_PATH):
            self._refuse(HTTPStatus.NOT_FOUND, f"no such endpoint: POST {self.path}")
            return
        if not self._authorized():
            return
        body = self._body()
        if body is None:
            return
        if self.path == JOBS_PATH:
            self._jobs(body)
        else:
            self._run_code(body)

    def _jobs(self, body: Any) -> None:
        try:
            jobs = self._read_jobs(body)
        except ValueError as e:
            self._send(HTTPStatus.BAD_REQUEST, {"error": str(e)[:1000]})
            return
        if not jobs:
            self._send(HTTPStatus.OK, {"results": []})
            return
        if not self._turn():
            return
        try:
            runs = execute(self.server.backend, jobs)
        except SandboxError as e:
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"the sandbox failed: {e}"[:1000]})
            return
        finally:
            self.server.running.release()
        self._send(HTTPStatus.OK, {"results": [[result_to_wire(r) for r in job_runs] for job_runs in runs]})

    def _read_jobs(self, body: Any) -> list[Job]:
        raw = body.get("jobs") if isinstance(body, dict) else None
        if not isinstance(raw, list):
            raise ValueError('the body must be {"jobs": [job, ...]}')
        if len(raw) > self.server.settings.max_jobs:
            raise ValueError(f"{len(raw)} jobs in one request; at most {self.server.settings.max_jobs}")
        jobs = []
        for i, data in enumerate(raw):
            try:
                jobs.append(job_from_wire(data))
            except ValueError as e:
                raise ValueError(f"job {i}: {e}") from None
        self._check_limits(jobs)
        return jobs

    def _check_limits(self, jobs: Sequence[Job]) -> None:
        s = self.server.settings
        for i, job in enumerate(jobs):
            if job.limits.time_s > s.max_time_s or job.limits.memory_mb > s.max_memory_mb:
                raise ValueError(f"job {i} asks for {job.limits.time_s:g} s and {job.limits.memory_mb} MiB per test; "
                                 f"this server allows at most {s.max_time_s:g} s and {s.max_memory_mb} MiB")
        for language in sorted({job.language for job in jobs}):
            problem = self.server.backend.language_problem(parse_language(language))
            if problem:
                raise ValueError(problem)

    def _run_code(self, body: Any) -> None:
        try:
            request = RunCodeRequest(body, output_kb=self.server.settings.run_code_output_kb)
            self._check_limits([request.job])
        except ValueError as e:
            self._send(HTTPStatus.UNPROCESSABLE_ENTITY, {"detail": str(e)[:1000]})
            return
        if not self._turn():
            return
        try:
            run = execute(self.server.backend, [request.job])[0][0]
        except SandboxError as e:
            self._send(HTTPStatus.OK, {"status": "SandboxError", "message": f"the sandbox failed: {e}"[:1000],
                                       "compile_result": None, "run_result": None, "files": {}})
            return
        finally:
            self.server.running.release()
        self._send(HTTPStatus.OK, run_code_response(run, request.language))
