"""Remote sandboxes on loopback: `rlvr sandbox serve` in front of this machine's sandbox, the `remote` backend in
both protocols (rlvr's own endpoint and SandboxFusion's `/run_code`), and every way the service can fail.

The verdicts through a server must be those of the local backend (labelled code cases, code rewards, the python
tool, hostile programs); a server that is down, refuses the token, answers garbage or is killed mid-batch costs the
programs it held as failures of the machinery (IE, `SandboxError`), never a 0.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from rlvr import sandbox
from rlvr.sandbox import ExecResult, ExecStatus, Job, Limits
from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
from rlvr.sandbox.backends.docker_backend import docker_problem
from rlvr.sandbox.backends.remote_backend import RemoteBackend, parse_urls
from rlvr.sandbox.fusion import RunCodeRequest, driver_request, run_code_response, worst_case_s
from rlvr.sandbox.server import SandboxServer, ServerSettings
from rlvr.sandbox.wire import job_from_wire, job_to_wire, result_from_wire, result_to_wire
from rlvr.verifiers.code import code_rewards_batch

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-0123456789abcdef"
CASES = ROOT / "tests" / "data" / "code_cases.jsonl"
ADD = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}]
needs_bwrap = pytest.mark.skipif(bwrap_problem() is not None, reason=f"bubblewrap: {bwrap_problem()}")


def _local_backend() -> str:
    return "docker" if docker_problem() is None else "bwrap"


class _Serving:
    """A SandboxServer in a thread of this process."""

    def __init__(self, **settings) -> None:
        self.server = SandboxServer("127.0.0.1", 0, ServerSettings(token=TOKEN, **settings))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@cache
def _server() -> _Serving:
    return _Serving(backend=_local_backend(), max_concurrency=4)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- what crosses the network (no sandbox needed) ------------------------------------------------------------------
def test_jobs_and_runs_cross_the_wire_unchanged():
    job = Job("def f(x):\n    return x\n", {"fn_name": "f", "cases": [{"args": [1], "expected": 1}]}, "call", "json",
              Limits(time_s=1.5, memory_mb=128), "python")
    assert job_from_wire(json.loads(json.dumps(job_to_wire(job)))) == job
    run = ExecResult(ExecStatus.TIMEOUT, 1.25, None, 9, "out", "err", {"~": "tuple", "v": [1]}, "no result")
    assert result_from_wire(json.loads(json.dumps(result_to_wire(run)))) == run
    with pytest.raises(ValueError, match="unknown field"):
        job_from_wire({**job_to_wire(job), "secret": 1})
    with pytest.raises(ValueError, match="unknown run status"):
        result_from_wire({"status": "fine"})


def test_server_urls_are_normalised():
    assert parse_urls("http://a:1/, https://b:2/run_code ,") == ["http://a:1", "https://b:2"]
    with pytest.raises(ValueError, match="http"):
        parse_urls("a:1")


def test_the_sandboxfusion_request_carries_the_driver_and_a_budget():
    job = Job("print(1)", ADD, limits=Limits(time_s=2))
    request = driver_request([job])
    assert request["language"] == "python" and "def _main" in request["code"]
    assert request["run_timeout"] == worst_case_s([job]) == pytest.approx(30 + 10 + 2 * (2 * 2 + 10) + 15)
    assert request["memory_limit_MB"] == 256 + 512 and request["files"] == {} and request["fetch_files"] == []
    body = json.loads(request["stdin"].split("\n", 1)[1])
    assert body["namespaces"] is True and body["pid_namespace"] is False and body["scratch"][0].startswith("/tmp/")
    assert json.loads(driver_request([job], namespaces=False)["stdin"].split("\n", 1)[1])["namespaces"] is False


def test_run_code_answers_in_sandboxfusion_form():
    ok = run_code_response(ExecResult(ExecStatus.OK, 0.5, 0, None, "3\n", ""), "python")
    assert ok["status"] == "Success" and ok["run_result"] == {"status": "Finished", "execution_time": 0.5,
                                                              "return_code": 0, "stdout": "3\n", "stderr": ""}
    crashed = run_code_response(ExecResult(ExecStatus.ERROR, 0.1, 1, None, "", "ZeroDivisionError"), "python")
    assert crashed["status"] == "Failed" and crashed["run_result"]["return_code"] == 1
    slow = run_code_response(ExecResult(ExecStatus.TIMEOUT, 2.0, None, 9), "python")
    assert slow["status"] == "Failed" and slow["run_result"]["status"] == "TimeLimitExceeded"
    killed = run_code_response(ExecResult(ExecStatus.MEMORY, 0.3, None, 9), "cpp")
    assert killed["run_result"]["return_code"] == -9
    ce = run_code_response(ExecResult(ExecStatus.COMPILE_ERROR, stderr="error: x"), "cpp")
    assert ce["compile_result"]["return_code"] == 1 and ce["run_result"] is None
    assert run_code_response(ExecResult(ExecStatus.SANDBOX_ERROR, detail="gone"), "python")["status"] == "SandboxError"
    request = RunCodeRequest({"code": "print(1)", "language": "nodejs", "stdin": "x", "run_timeout": 3,
                              "memory_limit_MB": -1, "files": {}, "fetch_files": [], "extra": 1}, output_kb=64)
    assert request.job.language == "javascript" and request.limits.time_s == 3 and request.limits.memory_mb == 1024
    for bad, message in [({"code": "x", "language": "cobol"}, "not run here"),
                         ({"code": "x", "language": "python", "run_timeout": 0}, "run_timeout"),
                         ({"code": "x", "language": "python", "files": {"a": "eA=="}}, "not supported")]:
        with pytest.raises(ValueError, match=message):
            RunCodeRequest(bad, output_kb=64)


def test_the_server_never_runs_code_unsandboxed_and_wants_a_real_token():
    with pytest.raises(ValueError, match="never without isolation"):
        ServerSettings(token=TOKEN, backend="none")
    with pytest.raises(ValueError, match="at least 16"):
        ServerSettings(token="short")


# -- the server's door -------------------------------------------------------------------------------------------
@needs_bwrap
def test_a_request_without_the_token_is_refused():
    url = _server().url
    job = {"jobs": [job_to_wire(Job("print(3)", ADD))]}
    assert httpx.post(url + "/rlvr/v1/jobs", json=job).status_code == 401
    wrong = httpx.post(url + "/rlvr/v1/jobs", json=job, headers={"Authorization": "Bearer " + "x" * 26})
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"] == "Bearer"
    assert httpx.post(url + "/run_code", json={"code": "print(1)", "language": "python"}).status_code == 401
    assert httpx.get(url + "/rlvr/v1/info").status_code == 401
    assert httpx.get(url + "/v1/ping").json() == "pong"  # runs nothing
    auth = {"Authorization": f"Bearer {TOKEN}"}
    info = httpx.get(url + "/rlvr/v1/info", headers=auth).json()
    assert info["protocol"] == 1 and info["backend"] == _local_backend()
    answer = httpx.post(url + "/run_code", headers=auth,
                        json={"code": "print(int(input()) * 2)", "language": "python", "stdin": "21\n"}).json()
    assert answer["status"] == "Success" and answer["run_result"]["stdout"] == "42\n"


@needs_bwrap
def test_requests_are_bounded():
    url, auth = _server().url, {"Authorization": f"Bearer {TOKEN}"}
    big = httpx.post(url + "/rlvr/v1/jobs", headers={**auth, "Content-Type": "application/json"},
                     content=b"{" + b" " * (17 << 20) + b"}")
    assert big.status_code == 413
    assert httpx.post(url + "/rlvr/v1/jobs", headers=auth, content=b"{not json").status_code == 400
    slow = job_to_wire(Job("print(1)", ADD, limits=Limits(time_s=600)))
    too_long = httpx.post(url + "/rlvr/v1/jobs", headers=auth, json={"jobs": [{**slow, "limits": {
        **slow["limits"], "memory_mb": 100_000}}]})
    assert too_long.status_code == 400 and "at most" in too_long.json()["error"]
    assert httpx.post(url + "/nowhere", headers=auth, json={}).status_code == 404


class _SlowBackend(sandbox.backends.Backend):
    """Stands in for a sandbox whose batches take a while (the server's queueing, not isolation, is under test)."""

    name = "bwrap"

    def workers(self) -> int:
        return 1

    def run_batch(self, jobs):
        time.sleep(1.0)
        from rlvr.sandbox.batch import BatchOutcome
        return BatchOutcome([[ExecResult(ExecStatus.OK, stdout="3\n")] * j.n_tests for j in jobs], reusable=True)


def test_a_busy_server_turns_requests_away_with_503():
    server = SandboxServer("127.0.0.1", 0, ServerSettings(token=TOKEN, max_concurrency=1, queue_s=0.2),
                           backend=_SlowBackend())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url, auth = f"http://127.0.0.1:{server.server_address[1]}", {"Authorization": f"Bearer {TOKEN}"}
    body = {"jobs": [job_to_wire(Job("print(3)", ADD))]}
    try:
        codes = []
        threads = [threading.Thread(target=lambda: codes.append(
            httpx.post(url + "/rlvr/v1/jobs", headers=auth, json=body, timeout=10).status_code)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(codes) == [200, 503]
    finally:
        server.shutdown()
        server.server_close()


# -- same verdicts as the local backend ----------------------------------------------------------------------------
def _labelled_jobs() -> tuple[list[dict], list[Job]]:
    rows = [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]
    jobs = [Job(r["solution"], r["tests"], r["test_type"], r.get("checker") or "lines",
                Limits.from_mapping(r.get("limits"))) for r in rows]
    return rows, jobs


@needs_bwrap
@pytest.mark.security
@pytest.mark.parametrize("protocol", ["rlvr", "sandboxfusion"])
def test_labelled_code_cases_get_the_local_verdicts_through_the_server(protocol):
    rows, jobs = _labelled_jobs()
    local = sandbox.run_many(jobs, backend=_local_backend())
    remote = sandbox.run_many(jobs, backend=sandbox.remote_backend(_server().url, TOKEN, protocol))
    # a nondeterministic program may differ; a fork bomb ends RE or TLE depending on when its fork fails
    nondeterministic = {i for i, r in enumerate(rows) if r["category"] == "nondeterministic"}
    bombs = {i for i, r in enumerate(rows) if r["category"] == "fork_bomb"}
    differ = [(rows[i]["id"], a.codes, b.codes) for i, (a, b) in enumerate(zip(local, remote))
              if i not in nondeterministic | bombs and a.codes != b.codes]
    assert differ == []
    bomb_codes = [(remote[i].codes, local[i].codes, remote[i].error) for i in bombs]
    assert all(set(r) <= {"RE", "TLE"} and set(loc) <= {"RE", "TLE"} for r, loc, _ in bomb_codes), bomb_codes
    assert all(r.error is None for r in remote)
    wrong = [(r["id"], res.codes) for r, res in zip(rows, remote)
             if res.passed != r["expected_pass"] and r["category"] != "nondeterministic"]
    assert wrong == []


@needs_bwrap
@pytest.mark.security
@pytest.mark.parametrize("protocol", ["rlvr", "sandboxfusion"])
def test_hostile_programs_are_contained_through_the_server(protocol):
    limits = Limits(time_s=1.0)
    jobs = [Job("import os\nwhile True:\n    os.fork()\n", ADD[:1], limits=limits),
            Job("while True:\n    pass\n", ADD[:1], limits=limits),
            Job("print(3)\nwhile True:\n    print('x' * 65536)\n", ADD[:1], limits=limits),
            Job("import os, signal\nos.kill(-1, signal.SIGKILL)\n", ADD[:1], limits=limits),
            Job("a, b = map(int, input().split())\nprint(a + b)\n", ADD, limits=limits)]
    remote = sandbox.run_many(jobs, backend=sandbox.remote_backend(_server().url, TOKEN, protocol))
    local = sandbox.run_many(jobs, backend=_local_backend())
    assert remote[0].codes[0] in {"RE", "TLE"} and local[0].codes[0] in {"RE", "TLE"}
    assert remote[1].codes == local[1].codes == ["TLE"] and remote[2].codes == local[2].codes == ["OLE"]
    assert remote[4].codes == local[4].codes == ["AC", "AC"]
    assert local[3].codes == ["RE"]  # kill(-1) reaches only the program's own pid namespace
    if protocol == "rlvr":
        assert remote[3].codes == ["RE"] and all(r.error is None for r in remote)
    else:
        # a /run_code sandbox here cannot nest per-run namespaces, so the driver runs without them and kill(-1)
        # takes it down too: a failure of the machinery (IE, left out of training), never a score
        assert remote[3].codes == ["IE"] and remote[3].error is not None
        assert all(r.error is None for i, r in enumerate(remote) if i != 3)
    # and the server still serves
    assert sandbox.run_many(jobs[4:], backend=sandbox.remote_backend(_server().url, TOKEN, protocol))[0].passed


@needs_bwrap
def test_code_rewards_and_the_python_tool_through_the_server(monkeypatch):
    from rlvr.tools.python_tool import PythonTool

    completions = ["```python\na, b = map(int, input().split())\nprint(a + b)\n```", "```python\nprint(3)\n```",
                   "```python\nprint(1/0)\n```"]
    samples = [{"test_type": "stdio", "tests": ADD}] * 3
    local = code_rewards_batch(completions, samples, backend=_local_backend())
    monkeypatch.setenv("JUDGE_SANDBOX_TOKEN", TOKEN)
    remote = code_rewards_batch(completions, samples, sandbox_urls=[_server().url],
                                sandbox_token_env="JUDGE_SANDBOX_TOKEN")
    assert remote == local and [r["score"] for r in remote] == [1.0, 0.5, 0.0]

    monkeypatch.setenv("RLVR_SANDBOX_URL", _server().url)
    monkeypatch.setenv("RLVR_SANDBOX_TOKEN", TOKEN)
    monkeypatch.setattr(sandbox.backends, "_instances", {})  # a fresh env-configured remote backend
    calls = [{"code": "print(6 * 7)"}, {"code": "import time\ntime.sleep(5)"}, {"code": "raise KeyError('k')"}]
    tool = PythonTool(time_s=1.0, backend="remote")
    local_tool = PythonTool(time_s=1.0, backend=_local_backend())
    got = tool.run_batch(calls, [{}, {}, {}])
    want = local_tool.run_batch(calls, [{}, {}, {}])
    assert [(r.output, r.status) for r in got] == [(r.output, r.status) for r in want]
    assert got[0].output == "42\n" and got[1].status == "timeout" and "KeyError" in got[2].output


# -- failures of the service are failures of the machinery ---------------------------------------------------------
def test_a_server_that_is_down_fails_the_batch_as_machinery():
    dead = f"http://127.0.0.1:{_free_port()}"
    backend = RemoteBackend(dead, TOKEN, protocol="rlvr", retries=1, backoff_s=0.01)
    results = sandbox.run_many([Job("print(3)", ADD)] * 2, backend=backend)
    assert [r.codes for r in results] == [["IE", "IE"]] * 2
    assert all("no sandbox server answered" in r.error and "ConnectError" in r.error for r in results)


@needs_bwrap
def test_requests_spread_over_servers_and_skip_a_dead_one():
    other = _Serving(backend="bwrap")
    try:
        dead = f"http://127.0.0.1:{_free_port()}"
        backend = RemoteBackend([dead, _server().url, other.url], TOKEN, protocol="rlvr", retries=2, backoff_s=0.01,
                                requests_per_server=1)
        jobs = [Job(f"print({i} + 3 - {i})", ADD[:1]) for i in range(12)]
        results = sandbox.run_many(jobs, backend=backend)
        assert [r.codes for r in results] == [["AC"]] * 12
    finally:
        other.stop()


class _GarbageHandler(BaseHTTPRequestHandler):
    """An rlvr-looking server whose job answers do not fit the request."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _answer(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self._answer({"protocol": 1, "backend": "bwrap", "workers": 1})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self._answer({"results": [[{"status": "ok", "stdout": "3\n"}]]})  # one run, whatever was asked


def test_a_server_answering_garbage_is_a_machinery_failure_not_a_score():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GarbageHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        backend = RemoteBackend(f"http://127.0.0.1:{server.server_address[1]}", TOKEN, retries=1, backoff_s=0.01)
        out = sandbox.run_many([Job("print(3)", ADD), Job("print(4)", ADD)], backend=backend)
        assert [r.codes for r in out] == [["IE", "IE"], ["IE", "IE"]]
        assert "does not fit the request" in out[0].error
    finally:
        server.shutdown()
        server.server_close()


@needs_bwrap
def test_a_server_killed_mid_batch_costs_that_batch_as_machinery_failures(tmp_path):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RLVR_SANDBOX_TOKEN": TOKEN}
    server = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "sandbox", "serve", "--port", str(port),
                               "--backend", "bwrap"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, start_new_session=True)
    try:
        assert "http://127.0.0.1" in server.stdout.readline()
        url = f"http://127.0.0.1:{port}"
        completions = ["```python\nimport time\ntime.sleep(3)\nprint(3)\n```"] * 4
        samples = [{"tests": ADD[:1], "limits": {"time_s": 5}}] * 4
        done = []
        worker = threading.Thread(target=lambda: done.append(code_rewards_batch(
            completions, samples, sandbox_urls=url, sandbox_token_env="RLVR_SANDBOX_TOKEN_OF_TEST")))
        os.environ["RLVR_SANDBOX_TOKEN_OF_TEST"] = TOKEN
        worker.start()
        time.sleep(1.5)
        os.killpg(server.pid, signal.SIGKILL)
        worker.join(timeout=120)
    finally:
        os.environ.pop("RLVR_SANDBOX_TOKEN_OF_TEST", None)
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    (results,) = done
    assert all(isinstance(r, sandbox.SandboxError) for r in results), results
    assert "remote sandbox failed" in str(results[0])


@needs_bwrap
def test_rlvr_check_asks_the_servers(monkeypatch):
    from types import SimpleNamespace

    from rlvr.preflight.report import Report
    from rlvr.preflight.sandbox_check import check_sandbox

    monkeypatch.setenv("SANDBOX_TOKEN_OF_CHECK", TOKEN)
    dead = f"http://127.0.0.1:{_free_port()}"
    findings = {}
    for name, urls in (("up", _server().url), ("down", dead)):
        report = Report()
        check_sandbox(report, [SimpleNamespace(name="code", kwargs={
            "backend": "remote", "sandbox_urls": urls, "sandbox_token_env": "SANDBOX_TOKEN_OF_CHECK"})])
        findings[name] = [(f.level, f.message) for f in report.findings if f.message.startswith("remote: 1 server")]
    (level, message), = findings["up"]
    assert level == "ok" and _server().url in message
    (level, message), = findings["down"]
    assert level == "warn" and f"{dead}: ConnectError" in message and "refused" in message
