"""Isolation: what a hostile program must not be able to do, on each backend. Run alone with
`pytest -m security` (Docker ones also carry the `docker` marker and skip when no engine answers)."""
import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from rlvr import sandbox
from rlvr.sandbox import Limits
from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
from rlvr.sandbox.backends.docker_backend import docker_problem

pytestmark = pytest.mark.security
BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "bwrap"]
ANSWER = [{"input": "3 4\n", "output": "7\n"}]


@pytest.fixture(params=BACKENDS)
def backend(request):
    problem = docker_problem() if request.param == "docker" else bwrap_problem()
    if problem:
        pytest.skip(f"{request.param}: {problem}")
    return request.param


def run_stdio(backend, program, tests=None, **limits):
    return sandbox.run(program, tests or [{"input": "", "output": "unused\n"}], "stdio", "lines",
                       Limits(**{"time_s": 5.0, **limits}), backend=backend)


def stdout_of(result, i=0):
    return result.verdicts[i].result.stdout


def test_runs_unprivileged_with_no_capabilities(backend):
    out = stdout_of(run_stdio(backend, "import os\nprint(os.getuid(), os.getgid())\n"
                              "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])\n"))
    uid, gid, caps = out.split()
    assert (uid, gid) == ("65534", "65534")
    assert int(caps, 16) == 0


def test_network_to_a_host_listener_is_refused(backend):
    loopback = socket.socket()
    loopback.bind(("127.0.0.1", 0))
    loopback.listen(8)
    anywhere = socket.socket()
    anywhere.bind(("0.0.0.0", 0))
    anywhere.listen(8)
    host_ips = {"172.17.0.1", socket.gethostbyname(socket.gethostname())}
    targets = [("127.0.0.1", loopback.getsockname()[1])] + [(ip, anywhere.getsockname()[1]) for ip in host_ips]
    program = ("import socket\n"
               f"for host, port in {targets!r}:\n"
               "    try:\n        socket.create_connection((host, port), timeout=2)\n        print('connected', host)\n"
               "    except OSError as e:\n        print('refused', host, type(e).__name__)\n")
    out = stdout_of(run_stdio(backend, program))
    loopback.setblocking(False)
    anywhere.setblocking(False)
    for listener in (loopback, anywhere):
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody ever connected
        listener.close()
    assert out.count("refused") == len(targets) and "connected" not in out, out


def test_writes_outside_scratch_are_refused(backend, tmp_path):
    tmp_path.chmod(0o777)
    targets = ["/x", "/etc/x", "/usr/x", "/root/x", "/home/x", "/var/tmp/x", "/opt/x", str(tmp_path / "x")]
    program = ("import os\n"
               f"for p in {targets!r} + ['/tmp/w/x']:\n"
               "    try:\n        open(p, 'w').write('pwned')\n        print('wrote', p)\n"
               "    except OSError as e:\n        print('refused', p)\n")
    out = stdout_of(run_stdio(backend, program))
    assert out.count("refused") == len(targets), out
    assert out.strip().endswith("wrote /tmp/w/x")  # the scratch folder is writable
    assert not (tmp_path / "x").exists()


def test_host_secrets_are_unreadable(backend, tmp_path, monkeypatch):
    secret = f"rlvr-secret-{uuid.uuid4().hex}"
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(secret)
    secret_file.chmod(0o644)
    home_file = Path("/root/.rlvr-test-secret") if os.geteuid() == 0 else Path.home() / ".rlvr-test-secret"
    home_file.write_text(secret)
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    try:
        paths = [str(secret_file), str(home_file), "/etc/shadow", "/proc/1/environ", "/proc/self/environ"]
        program = ("import os\nseen = repr(dict(os.environ))\n"
                   f"for p in {paths!r}:\n"
                   "    try:\n        seen += open(p, errors='replace').read()\n    except OSError:\n        pass\n"
                   "for pid in os.listdir('/proc'):\n"
                   "    try:\n        seen += open('/proc/%s/environ' % pid, errors='replace').read()\n"
                   "    except OSError:\n        pass\nprint(len(seen))\nprint(seen)\n")
        result = run_stdio(backend, program)
    finally:
        home_file.unlink()
    assert int(stdout_of(result).split()[0]) > 0  # it ran and read something
    assert secret not in stdout_of(result)


def test_fork_bomb_is_contained_and_the_next_program_runs(backend):
    marker = f"rlvr-bomb-{uuid.uuid4().hex[:8]}"  # re-exec with a marker in argv, to find any survivor
    bomb = ("import os, sys\nif len(sys.argv) == 1:\n    os.execv(sys.executable, [sys.executable, __file__, "
            f"'{marker}'])\nwhile True:\n    os.fork()\n")
    started = time.monotonic()
    result = run_stdio(backend, bomb, ANSWER, time_s=2.0)
    assert result.codes[0] in ("RE", "TLE"), result.codes
    assert time.monotonic() - started < 15
    assert _marked_host_processes(marker) == []  # no bomb process is left anywhere
    after = run_stdio(backend, "print(sum(map(int, input().split())))\n", ANSWER)
    assert after.codes == ["AC"]


@pytest.mark.parametrize("program", ["x = bytearray(8 * 1024 ** 3)\nprint(7)\n",
                                     "xs = []\nwhile True:\n    xs.append(bytearray(10 ** 7))\n"])
def test_memory_bomb_is_killed_as_mle(backend, program):
    result = run_stdio(backend, program, ANSWER, time_s=10.0, memory_mb=128)
    assert result.codes == ["MLE"], result.verdicts[0]
    assert result.verdicts[0].result.elapsed_s < 10.0  # stopped by memory, not by time


def test_infinite_loop_is_tle_within_limit_plus_one_second(backend):
    run_stdio(backend, "print(7)\n", ANSWER)  # warm up (a pooled container for Docker)
    started = time.monotonic()
    result = run_stdio(backend, "while True:\n    pass\n", ANSWER, time_s=1.0)
    wall_s = time.monotonic() - started
    assert result.codes == ["TLE"]
    assert 1.0 <= result.verdicts[0].result.elapsed_s < 2.0
    assert wall_s < 2.0, f"judging took {wall_s:.2f} s for a 1 s limit"


# A program that speaks the runner's protocol itself (fd 3 requests, fd 4 answers) and answers every call with
# 30,000 integers that all hash to 0 (k * (2 ** 61 - 1)), about 0.8 MB, under the 1 MiB answer cap. Rebuilding
# that dict or set takes seconds of quadratic work; the value must be judged without it.
COLLIDING = ("import json, os\n"
             "items = [[k * (2 ** 61 - 1), 0] for k in range(30000)]\n"
             "value = {0}\n"
             "os.write(4, (json.dumps({{'ready': ['f']}}) + '\\n').encode())\n"
             "for _ in os.fdopen(3, 'rb'):\n"
             "    os.write(4, (json.dumps({{'ok': value}}) + '\\n').encode())\n")
HONEST = "def f():\n    return {0: 0}\n"


@pytest.mark.parametrize("kind, value", [("call", "{'~': 'dict', 'v': items}"),
                                         ("call", "{'~': 'set', 'v': [k for k, _ in items]}"),
                                         ("assert", "{'~': 'dict', 'v': items}")], ids=["call-dict", "call-set", "assert"])
def test_colliding_keys_in_an_answer_are_judged_within_the_time_limit(backend, kind, value):
    limits = Limits(time_s=1.0, output_kb=1024)
    if kind == "call":
        tests = {"fn_name": "f", "cases": [{"args": [], "expected": {"0": 0}}, {"args": [], "expected": {"0": 0}}]}
    else:
        tests = "assert f() == {0: 0}\nassert f() == {0: 0}\n"
    jobs = [sandbox.Job(p, tests, kind, "json", limits) for p in (HONEST, COLLIDING.format(value), HONEST)]
    sandbox.run_many(jobs[:1], backend=backend)  # warm up (a pooled container for Docker)
    started = time.monotonic()
    honest, attack, honest_after = sandbox.run_many(jobs, backend=backend)
    wall_s = time.monotonic() - started
    assert honest.codes == honest_after.codes == ["AC", "AC"]
    if kind == "call":  # the value is judged as sent, in its JSON form: a 30,000-key dict is not {"0": 0}
        assert attack.codes == ["WA", "WA"], [v.reason for v in attack.verdicts]
        assert wall_s < limits.time_s + 3.0, f"judging took {wall_s:.2f} s for a 1 s limit"
    else:  # the assert's code needs the real dict: decoding it counts against the test's time, like the run
        assert attack.codes == ["TLE", "TLE"], [v.reason for v in attack.verdicts]
        assert all(v.result.elapsed_s < limits.time_s + 1.0 for v in attack.verdicts)
        assert wall_s < 2 * limits.time_s + 3.0, f"judging took {wall_s:.2f} s for two tests of 1 s"


def test_output_flood_is_capped_as_ole(backend):
    result = run_stdio(backend, "print(7)\nwhile True:\n    print('9' * 65536)\n", ANSWER, output_kb=64)
    assert result.codes == ["OLE"]
    assert len(stdout_of(result)) <= 64 * 1024


def test_orphaned_background_processes_are_gone_afterwards(backend):
    marker = f"rlvr-orphan-{uuid.uuid4().hex[:8]}"
    program = ("import os, subprocess, sys\nif input() == 'spawn':\n"
               "    if os.fork() == 0:\n        os.setsid()\n"
               f"        subprocess.Popen([sys.executable, '-c', 'import time  # {marker}\\nwhile True: time.sleep(1)'],\n"
               "                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
               "        os._exit(0)\n    print('spawned')\nelse:\n"
               "    import time; time.sleep(0.5)\n"
               f"    print(sum('{marker}' in open('/proc/%s/cmdline' % p, errors='replace').read()\n"
               "              for p in os.listdir('/proc') if p.isdigit() and os.path.exists('/proc/%s/cmdline' % p)))\n")
    tests = [{"input": "spawn\n", "output": "spawned\n"}, {"input": "check\n", "output": "0\n"}]
    result = run_stdio(backend, program, tests)
    assert result.codes == ["AC", "AC"], [v.reason for v in result.verdicts]  # the daemon did not survive test 1
    assert _marked_host_processes(marker) == []  # nor the job


@pytest.mark.docker
def test_containers_are_created_locked_down():
    if docker_problem():
        pytest.skip(docker_problem())
    backend = sandbox.get_backend("docker")
    spec_limits = Limits(memory_mb=200, pids=40, cpus=0.5, scratch_mb=16)
    from rlvr.sandbox.backends.docker_pool import ContainerSpec

    spec = ContainerSpec.for_limits(spec_limits)
    container = backend.pool.acquire(spec)
    try:
        container.reload()
        host, config = container.attrs["HostConfig"], container.attrs["Config"]
        assert host["NetworkMode"] == "none"
        assert host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"]
        assert "no-new-privileges" in host["SecurityOpt"]
        assert host["PidsLimit"] == 40
        assert host["Memory"] == host["MemorySwap"] == (200 + 2 * 16 + 256) << 20
        assert host["NanoCpus"] == 500_000_000
        assert "size=16m" in host["Tmpfs"]["/tmp"]
        assert config["User"] == "65533:65533"  # pid 1; the driver and programs run as 65534 (docker exec)
        assert host["LogConfig"]["Type"] == "none"
        assert any(opt.startswith("seccomp=") for opt in host["SecurityOpt"])
    finally:
        backend.pool.release(container, spec, reusable=False)


def _marked_host_processes(marker):
    """Host processes whose command line holds marker (sandboxed processes are visible from the host)."""
    time.sleep(0.3)
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and "pytest" not in cmdline:
            found.append((pid, cmdline[:100]))
    return found
