"""The `remote` backend: programs run in sandboxes on other machines, behind `rlvr sandbox serve` or a SandboxFusion
server, and are judged here with the same checkers as local runs.

Where the servers are: `RLVR_SANDBOX_URL` (one URL, or several separated by commas), the token in
`RLVR_SANDBOX_TOKEN` (sent as `Authorization: Bearer <token>`; a SandboxFusion deployment without one needs none), and
`RLVR_SANDBOX_PROTOCOL` (`auto`, `rlvr` or `sandboxfusion`); or the same as arguments (`remote_backend`).

Two protocols, one result:
- `rlvr` (a `rlvr sandbox serve`): a batch of jobs goes to `POST /rlvr/v1/jobs`; the server runs them in its own Docker
  or bubblewrap sandbox (per-run namespaces and all) and answers each test's run (`rlvr.sandbox.wire`).
- `sandboxfusion`: each job goes to `POST /run_code` as rlvr's own driver program with the job on its stdin
  (`rlvr.sandbox.fusion`); the driver's events come back as its stdout and are read as a local driver's are. The
  driver gives each run its own namespaces where the server's sandbox allows it, else runs without them.
`auto` asks each server's `GET /rlvr/v1/info` once: an answer means `rlvr`, a 404 `sandboxfusion`.
Either way the runs are judged here (`rlvr.sandbox.judge`), so a program gets the verdicts a local backend gives it.

Failures of the machinery: requests go round-robin over the servers; a connection error, a timeout, a 408/429/5xx or
an answer that is not what the protocol says is retried (`retries` times, on the next server, with doubling backoff);
a refused token or a request the server rejects is not. When no try succeeds, every program of the batch gets a
`sandbox_error` run (verdict IE, `JudgeResult.error` set), so the `code` verifier reports a machinery failure for
them, never a 0. The client waits at most the batch's worst case (`rlvr.sandbox.fusion.worst_case_s`) plus
`MARGIN_S` for an answer, over whatever the server enforces itself.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from rlvr.sandbox.backends.base import Backend
from rlvr.sandbox.batch import BatchOutcome, run_batch
from rlvr.sandbox.errors import SandboxUnavailable
from rlvr.sandbox.fusion import NO_NAMESPACES, RUN_CODE_PATH, driver_output, driver_request, worst_case_s
from rlvr.sandbox.jobs import Job
from rlvr.sandbox.languages import Language
from rlvr.sandbox.results import ExecResult, ExecStatus
from rlvr.sandbox.wire import PROTOCOL, job_to_wire, results_from_wire

ENV_URL = "RLVR_SANDBOX_URL"
ENV_TOKEN = "RLVR_SANDBOX_TOKEN"
ENV_PROTOCOL = "RLVR_SANDBOX_PROTOCOL"
ENV_REQUESTS = "RLVR_SANDBOX_REMOTE_REQUESTS"
PROTOCOLS = ("auto", "rlvr", "sandboxfusion")
TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
MARGIN_S = 30.0
"""Seconds a client waits beyond a batch's worst case (network, queueing at the server)."""
INFO_PATH = "/rlvr/v1/info"
JOBS_PATH = "/rlvr/v1/jobs"
T = TypeVar("T")


class _Transient(Exception):
    """A failure worth trying again, on another server."""


class _Permanent(Exception):
    """A failure that another try would repeat (a refused token, a rejected request)."""


def parse_urls(urls: str | Sequence[str] | None) -> list[str]:
    """Server base URLs from a comma-separated string or a list: trailing `/` and `/run_code` dropped (a SandboxFusion
    URL is often given with its endpoint). Raises ValueError for one that is not http(s)."""
    items = urls.split(",") if isinstance(urls, str) else list(urls or [])
    out = []
    for raw in items:
        url = str(raw).strip().rstrip("/")
        if not url:
            continue
        if url.endswith(RUN_CODE_PATH):
            url = url[: -len(RUN_CODE_PATH)]
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"sandbox server URL {raw!r} must start with http:// or https://")
        out.append(url)
    return out


class RemoteBackend(Backend):
    """Programs run on sandbox servers (module docstring).

    Args:
        urls: server base URLs (a list or a comma-separated string); default `RLVR_SANDBOX_URL`.
        token: the servers' token; default `RLVR_SANDBOX_TOKEN` (None: no Authorization header).
        protocol: auto, rlvr or sandboxfusion; default `RLVR_SANDBOX_PROTOCOL`, else auto.
        requests_per_server: requests in flight per server (default `RLVR_SANDBOX_REMOTE_REQUESTS`, else 4).
        retries: further tries of a failed request (each on the next server). backoff_s: wait before the first retry,
            doubled for each next one. connect_timeout_s: how long a connection may take.

    Raises SandboxUnavailable when no URL is given, ValueError for a bad URL or protocol.
    """

    name = "remote"

    def __init__(self, urls: str | Sequence[str] | None = None, token: str | None = None, *,
                 protocol: str | None = None, requests_per_server: int | None = None, retries: int = 2,
                 backoff_s: float = 0.5, connect_timeout_s: float = 5.0) -> None:
        import httpx

        self.urls = parse_urls(urls if urls is not None else os.environ.get(ENV_URL, ""))
        if not self.urls:
            raise SandboxUnavailable(f"the remote sandbox backend needs its server(s): set {ENV_URL}=http://host:port "
                                     "(several separated by commas), and the token in " + ENV_TOKEN)
        self.token = token if token is not None else (os.environ.get(ENV_TOKEN) or None)
        self.protocol = protocol or os.environ.get(ENV_PROTOCOL) or "auto"
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown sandbox protocol {self.protocol!r}; valid: {', '.join(PROTOCOLS)}")
        per_server = requests_per_server or int(os.environ.get(ENV_REQUESTS, 0)) or 4
        if per_server < 1 or retries < 0 or backoff_s < 0 or connect_timeout_s <= 0:
            raise ValueError("requests_per_server must be >= 1, retries and backoff_s >= 0, connect_timeout_s > 0")
        self._workers = per_server * len(self.urls)
        self.retries, self.backoff_s, self.connect_timeout_s = retries, backoff_s, connect_timeout_s
        self._client = httpx.Client(limits=httpx.Limits(max_connections=self._workers + 4),
                                    headers={"Authorization": f"Bearer {self.token}"} if self.token else {})
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._protocols: dict[str, str] = {}
        self._namespaces: dict[str, bool] = {}  # False: that server's sandbox cannot make per-run namespaces
        self._down_until: dict[str, float] = {}

    def workers(self) -> int:
        return self._workers

    def description(self) -> str:
        return (f"remote: {len(self.urls)} server(s) ({', '.join(self.urls)}), protocol {self.protocol}; programs run "
                "in the servers' sandboxes and memory_mb is bounded as each server bounds it")

    def language_problem(self, language: Language) -> str | None:
        return None  # the server knows its toolchains: it refuses a job it cannot run, a failure of the machinery

    # -- one batch ------------------------------------------------------------------------------------------------
    def run_batch(self, jobs: Sequence[Job]) -> BatchOutcome:
        """Run jobs on a server; never raises: a batch no server would run comes back as `sandbox_error` runs."""
        jobs = list(jobs)
        try:
            protocol = self.protocol if self.protocol != "auto" else None
            if protocol is None:
                protocol = self._with_retries(self._detect)
            if protocol == "rlvr":
                runs = self._with_retries(lambda url: self._post_jobs(url, jobs))
                return BatchOutcome(results=list(runs), reusable=True)
        except (_Transient, _Permanent) as e:
            return _failed(jobs, str(e))
        return self._fusion_batch(jobs)

    def _fusion_batch(self, jobs: list[Job]) -> BatchOutcome:
        """One `/run_code` request per job; a driver whose output breaks off hands the batch back to the scheduler
        as a broken one (the job it ran is retried alone, the rest re-queued), as a local sandbox's does."""
        outcome = BatchOutcome(results=[None] * len(jobs))
        for k, job in enumerate(jobs):
            try:
                stdout, stderr = self._with_retries(lambda url, job=job: self._post_run_code(url, job))
            except (_Transient, _Permanent) as e:
                failed = _failed(jobs[k:], str(e))
                outcome.results[k:] = failed.results
                return outcome
            one = run_batch(_Replay(stdout, stderr), [job], b"")
            if one.broken is not None:
                outcome.partial = {k: one.partial.get(0, [])}
                outcome.broken = one.broken
                return outcome
            outcome.results[k] = one.results[0]
        outcome.reusable = True
        return outcome

    # -- requests -------------------------------------------------------------------------------------------------
    def _with_retries(self, attempt: Callable[[str], T]) -> T:
        """`attempt(url)` on the next server, again on the next after a transient failure (backoff between tries).
        Raises _Permanent at once, or _Transient naming every try's failure when none succeeded."""
        errors = []
        for n in range(self.retries + 1):
            url = self._pick()
            try:
                return attempt(url)
            except _Transient as e:
                errors.append(f"{url}: {e}")
                with self._lock:
                    self._down_until[url] = time.monotonic() + max(self.backoff_s, 1.0) * 4
            if n < self.retries:
                time.sleep(self.backoff_s * (2 ** n))
        raise _Transient(f"no sandbox server answered ({len(errors)} tries): {'; '.join(errors)}"[:1500])

    def _pick(self) -> str:
        """The next server in turn, skipping those that failed a moment ago while another is up."""
        with self._lock:
            now = time.monotonic()
            start = next(self._turn)
            order = [self.urls[(start + i) % len(self.urls)] for i in range(len(self.urls))]
            up = [u for u in order if self._down_until.get(u, 0.0) <= now]
            return (up or order)[0]

    def _detect(self, url: str) -> str:
        """The protocol `url` speaks (cached): `rlvr` when it answers `/rlvr/v1/info`, `sandboxfusion` on a 404."""
        if url in self._protocols:
            return self._protocols[url]
        answer = self._request("GET", url + INFO_PATH, None, self.connect_timeout_s + 10.0, allow_404=True)
        if answer is None:
            protocol = "sandboxfusion"
        elif isinstance(answer, dict) and answer.get("protocol") == PROTOCOL:
            protocol = "rlvr"
        else:
            raise _Permanent(f"{url}{INFO_PATH} answered {str(answer)[:200]}, not rlvr protocol {PROTOCOL}")
        self._protocols[url] = protocol
        return protocol

    def _post_jobs(self, url: str, jobs: list[Job]) -> list[list[ExecResult]]:
        if self.protocol == "auto" and self._detect(url) != "rlvr":
            raise _Permanent(f"{url} is a SandboxFusion server while another is an rlvr one: give servers of one kind")
        answer = self._request("POST", url + JOBS_PATH, {"jobs": [job_to_wire(j) for j in jobs]},
                               worst_case_s(jobs) + MARGIN_S)
        try:
            return results_from_wire(answer, jobs)
        except ValueError as e:
            raise _Transient(f"an answer that does not fit the request: {e}") from None

    def _post_run_code(self, url: str, job: Job) -> tuple[str, str]:
        """The driver's output for `job` from `url`: with per-run namespaces unless the server's sandbox cannot make
        them (learnt from the driver's refusal, once per server)."""
        namespaces = self._namespaces.get(url, True)
        request = driver_request([job], namespaces=namespaces)
        answer = self._request("POST", url + RUN_CODE_PATH, request,
                               request["run_timeout"] + request["compile_timeout"] + MARGIN_S)
        try:
            stdout, stderr = driver_output(answer)
        except ValueError as e:
            raise _Transient(str(e)) from None
        if namespaces and NO_NAMESPACES in stdout.split("\n", 1)[0]:
            self._namespaces[url] = False
            return self._post_run_code(url, job)
        return stdout, stderr

    def _request(self, method: str, url: str, payload: Any, read_timeout_s: float, allow_404: bool = False) -> Any:
        """The JSON answer of one request (None for an allowed 404). Raises _Transient or _Permanent."""
        import httpx

        timeout = httpx.Timeout(read_timeout_s, connect=self.connect_timeout_s)
        try:
            response = self._client.request(method, url, json=payload, timeout=timeout)
        except httpx.TimeoutException:
            raise _Transient(f"no answer within {read_timeout_s:.0f} s") from None
        except httpx.HTTPError as e:  # refused, reset, closed mid-answer, ...
            raise _Transient(f"{type(e).__name__}: {e}") from None
        if response.status_code == 404 and allow_404:
            return None
        if response.status_code in (401, 403):
            raise _Permanent(f"{url} refused the token (HTTP {response.status_code}): set {ENV_TOKEN} to the "
                             "server's token")
        if response.status_code in TRANSIENT_STATUS:
            raise _Transient(f"HTTP {response.status_code}: {response.text[:200]}")
        if response.status_code != 200:
            raise _Permanent(f"{url} rejected the request (HTTP {response.status_code}): {response.text[:300]}")
        try:
            return response.json()
        except ValueError:
            raise _Transient(f"an answer that is not JSON: {response.text[:200]!r}") from None

    def probe(self) -> list[str]:
        """Ask every server which protocol it speaks (`rlvr check`); returns one line per server that does not answer
        or refuses the token (empty: all are up)."""
        problems = []
        for url in self.urls:
            try:
                self._protocols.pop(url, None)
                self._detect(url)
            except (_Transient, _Permanent) as e:
                problems.append(f"{url}: {e}")
        return problems

    def close(self) -> None:
        """Close the HTTP connections (idempotent)."""
        self._client.close()


class _Replay:
    """A Channel over a driver's finished output (what a `/run_code` answer carries)."""

    def __init__(self, stdout: str, stderr: str) -> None:
        self._lines = stdout.encode("utf-8").split(b"\n")
        if self._lines and self._lines[-1] == b"":
            self._lines.pop()
        self._stderr = stderr

    def send(self, data: bytes) -> None:
        """The request went with the HTTP call already."""

    def read_line(self, timeout_s: float) -> bytes | None:
        return self._lines.pop(0) if self._lines else None

    def diagnostics(self) -> str:
        return self._stderr


def _failed(jobs: Sequence[Job], why: str) -> BatchOutcome:
    """Every job of a batch that no server ran: a `sandbox_error` run per test (judged IE, a machinery failure)."""
    def runs(job: Job) -> list[ExecResult]:
        return [ExecResult(ExecStatus.SANDBOX_ERROR, detail=f"the remote sandbox failed: {why}")] * job.n_tests

    return BatchOutcome(results=[runs(job) for job in jobs], reusable=False)
