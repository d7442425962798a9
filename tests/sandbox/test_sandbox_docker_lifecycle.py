"""Docker container lifecycle: no container is left behind, whatever happens to the caller, and a program
that kills its sandbox harms only itself."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlvr import sandbox
from rlvr.sandbox import Job, Limits
from rlvr.sandbox.backends.docker_backend import docker_problem
from rlvr.sandbox.backends.docker_pool import OWNER_LABEL, remove_stale_containers

pytestmark = [pytest.mark.docker, pytest.mark.security]
REPO = Path(__file__).resolve().parents[2]
CALLER = textwrap.dedent("""
    import signal, sys
    from rlvr import sandbox
    # a shell that starts jobs in the background (nohup, `&` in a script) hands them SIGINT ignored; the test needs
    # the ordinary KeyboardInterrupt whoever launched pytest
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sandbox.run("import time\\ntime.sleep(60)", [{"input": "", "output": "x"}], limits={"time_s": float(sys.argv[1])},
                backend="docker")
    print("done", flush=True)
""")


@pytest.fixture(scope="module")
def client():
    if docker_problem():
        pytest.skip(docker_problem())
    import docker

    c = docker.from_env()
    yield c
    c.close()


def owned_by(client, pid):
    """Ids of the sandbox containers started by process pid (sparse: no inspect that races removal)."""
    owner = f"{socket.gethostname()}:{pid}"
    return [c.id for c in client.containers.list(all=True, sparse=True, filters={"label": f"{OWNER_LABEL}={owner}"})]


def start_caller(client, time_s, idle_s=600):
    env = dict(os.environ, PYTHONPATH=str(REPO), RLVR_SANDBOX_IDLE_S=str(idle_s))
    proc = subprocess.Popen([sys.executable, "-c", CALLER, str(time_s)], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    end = time.monotonic() + 30
    while not owned_by(client, proc.pid):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < end, "the caller never started a container"
        time.sleep(0.2)
    time.sleep(0.5)  # the program is running now
    return proc


def wait_gone(client, pid, within_s):
    end = time.monotonic() + within_s
    while owned_by(client, pid) and time.monotonic() < end:
        time.sleep(0.5)
    return owned_by(client, pid)


def test_normal_exit_leaves_no_container(client):
    proc = start_caller(client, time_s=1.0)
    out, err = proc.communicate(timeout=60)
    assert b"done" in out, err.decode()[-2000:]
    assert owned_by(client, proc.pid) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_caller_leaves_no_container(client, sig):
    proc = start_caller(client, time_s=30.0)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode != 0  # it really was interrupted mid-run
    assert owned_by(client, proc.pid) == []


def test_killed_caller_containers_remove_themselves_when_idle(client):
    proc = start_caller(client, time_s=1.0, idle_s=1)
    proc.kill()
    proc.wait()
    assert wait_gone(client, proc.pid, within_s=20) == []


def test_containers_of_dead_callers_are_swept(client):
    proc = start_caller(client, time_s=1.0, idle_s=600)
    proc.kill()
    proc.wait()
    assert owned_by(client, proc.pid), "the killed caller's container should still be there"
    assert remove_stale_containers(client) >= 1
    assert owned_by(client, proc.pid) == []


def test_a_program_that_kills_everyone_it_can_harms_only_itself(client):
    # Its kill(-1) reaches only its own pid namespace, where nobody else lives: ESRCH, so it fails on its own
    # ProcessLookupError. The sandbox does not break, nothing is rerun, and its neighbours pass.
    good = "print(sum(map(int, input().split())))\n"
    killer = "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint(7)\n"
    tests = [{"input": "3 4\n", "output": "7\n"}, {"input": "1 1\n", "output": "2\n"}]
    jobs = [Job(p, tests, limits=Limits(time_s=2.0)) for p in (good, killer, good, good)]
    results = sandbox.run_many(jobs, backend="docker")
    assert [r.passed for r in results] == [True, False, True, True]
    assert results[1].codes == ["RE", "RE"] and results[1].error is None
    assert "ProcessLookupError" in results[1].verdicts[0].result.stderr


def test_a_verifier_pool_workers_containers_go_when_it_stops(client):
    # RewardFunction's workers are multiprocessing children that start their own pools; they end with
    # os._exit (no atexit), so multiprocessing's own exit hook must remove their containers.
    from rlvr.verifiers.pool import Call, VerifierPool

    sample = {"tests": [{"input": "2\n", "output": "2\n"}]}
    with VerifierPool(num_workers=1) as pool:
        outcome = pool.run([Call("code", "```python\nprint(input())\n```", sample, {"backend": "docker"}, 60.0)])[0]
        worker_pid = pool._workers[0].process.pid
        assert outcome.value["passed"] is True, outcome
        assert owned_by(client, worker_pid), "the worker should own a container while it runs"
    assert wait_gone(client, worker_pid, within_s=10) == []
