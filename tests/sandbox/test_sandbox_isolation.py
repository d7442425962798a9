"""Isolation between jobs: every leak a program could leave for the next one, run as job 1 with a reader as job 2,
in one batch and across `run_many` calls (so across training steps), on both backends; a program that stops
every process it can signal; memory that no per-process limit sees. `ATTACKS` is also counted by
`benchmarks/bench_sandbox.py --hostile`."""
import os
import time
import uuid
from pathlib import Path

import pytest

from rlvr import sandbox
from rlvr.sandbox import Job, Limits
from rlvr.sandbox.backends.bwrap_backend import BwrapBackend, bwrap_problem
from rlvr.sandbox.backends.docker_backend import DockerBackend, docker_problem
from rlvr.sandbox.judge import judge
from rlvr.sandbox.scheduler import execute

pytestmark = pytest.mark.security
BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "bwrap"]
ANY = [{"input": "", "output": "unused\n"}]

_LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
_IDS = ("def ids(kind):\n    try:\n        rows = open('/proc/sysvipc/' + kind).read().splitlines()[1:]\n"
        "    except OSError:\n        return []\n    return [int(r.split()[1]) for r in rows]\n")

# name -> (job 1: leaves SECRET somewhere, job 2: prints whatever of it it finds). SECRET is replaced by a fresh
# token per run; job 2 leaks when its output holds the token.
ATTACKS = {
    "sysv-shm": (
        _LIBC + "libc.shmat.restype = ctypes.c_void_p\nlibc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]\n"
        "sid = libc.shmget(0x5eed, 4096, 0o1666)\naddr = libc.shmat(sid, None, 0)\n"
        "s = b'SECRET'\nctypes.memmove(addr, s, len(s))\nprint('left', sid)\n",
        _LIBC + _IDS + "libc.shmat.restype = ctypes.c_void_p\nlibc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]\n"
        "for sid in ids('shm') + [libc.shmget(0x5eed, 0, 0)]:\n    addr = libc.shmat(sid, None, 0o10000)\n"
        "    if addr not in (None, ctypes.c_void_p(-1).value):\n        print(ctypes.string_at(addr, 64))\nprint('read')\n"),
    "sysv-msg": (
        _LIBC + "qid = libc.msgget(0x5eed, 0o1666)\nbuf = ctypes.create_string_buffer(8 + 64)\n"
        "s = b'SECRET'\nctypes.memmove(buf, (1).to_bytes(8, 'little') + s, 8 + len(s))\nprint('left', libc.msgsnd(qid, buf, len(s), 0o4000))\n",
        _LIBC + _IDS + "for qid in ids('msg') + [libc.msgget(0x5eed, 0)]:\n    buf = ctypes.create_string_buffer(8 + 64)\n"
        "    if libc.msgrcv(qid, buf, 64, 0, 0o4000) > 0:\n        print(buf.raw[8:])\nprint('read')\n"),
    "sysv-sem": (
        _LIBC + "sem = libc.semget(0x5eed, 1, 0o1666)\nprint('left', libc.semctl(sem, 0, 16, ctypes.c_int(SECRETNUM)))\n",
        _LIBC + _IDS + "for sem in ids('sem') + [libc.semget(0x5eed, 0, 0)]:\n    v = libc.semctl(sem, 0, 12)\n"
        "    if v > 0:\n        print('value', v)\nprint('read')\n"),
    "posix-mqueue": (
        _LIBC + "q = libc.mq_open(b'/rlvr-leak', os.O_CREAT | os.O_RDWR, 0o666, None)\n"
        "s = b'SECRET'\nprint('left', libc.mq_send(q, s, len(s), 0))\n",
        _LIBC + "q = libc.mq_open(b'/rlvr-leak', os.O_RDONLY | os.O_NONBLOCK)\nbuf = ctypes.create_string_buffer(1 << 16)\n"
        "if q >= 0 and libc.mq_receive(q, buf, 1 << 16, None) > 0:\n    print(buf.value)\nprint('read')\n"),
    "mqueue-file-name": (
        "import os\ntry:\n    os.close(os.open('/dev/mqueue/SECRET', os.O_CREAT | os.O_RDWR, 0o666))\n    print('left')\n"
        "except OSError as e:\n    print('refused', e)\n",
        "import os\ntry:\n    print(os.listdir('/dev/mqueue'))\nexcept OSError:\n    pass\nprint('read')\n"),
    "dev-shm-file": (
        "import os\nfor d in ('/dev/shm', '/dev'):\n    try:\n        open(d + '/leak', 'w').write('SECRET')\n        print('left', d)\n"
        "    except OSError as e:\n        print('refused', d, e)\n",
        "import os\nfor d in ('/dev/shm', '/dev'):\n    try:\n        print(open(d + '/leak').read())\n    except OSError:\n        pass\nprint('read')\n"),
    "scratch-files": (
        "import os\nopen('/tmp/w/leak', 'w').write('SECRET')\nos.makedirs('/tmp/w/d', exist_ok=True)\n"
        "open('/tmp/w/d/leak', 'w').write('SECRET')\nos.chmod('/tmp/w/d', 0)\nprint('left')\n",
        "import os\nfor root, _, files in os.walk('/tmp'):\n    for f in files:\n        try:\n"
        "            print(open(os.path.join(root, f)).read())\n        except OSError:\n            pass\nprint('read')\n"),
    "process-memory": (  # into the writable memory of every other process it can see (pid 1, driver, fork server)
        "import os, re\nfor pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n    try:\n"
        "        maps = open('/proc/%s/maps' % pid).read()\n        with open('/proc/%s/mem' % pid, 'r+b', 0) as mem:\n"
        "            for m in re.finditer(r'^([0-9a-f]+)-([0-9a-f]+) rw-p 00000000 00:00 0 *$', maps, re.M):\n"
        "                mem.seek(int(m.group(1), 16) + 64)\n                mem.write(b'RLVRLEAK:SECRET;' * 4)\n"
        "        print('wrote into', pid)\n    except OSError as e:\n        print('refused', pid, type(e).__name__)\n",
        "import os, re\nfor pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n    try:\n"
        "        maps = open('/proc/%s/maps' % pid).read()\n        with open('/proc/%s/mem' % pid, 'rb', 0) as mem:\n"
        "            for m in re.finditer(r'^([0-9a-f]+)-([0-9a-f]+) rw-p', maps, re.M):\n"
        "                mem.seek(int(m.group(1), 16))\n                data = mem.read(min(int(m.group(2), 16) - int(m.group(1), 16), 1 << 22))\n"
        "                for hit in re.findall(rb'RLVRLEAK:([^;]*);', data):\n                    print(pid, hit)\n"
        "    except OSError:\n        pass\nprint('read')\n"),
    "user-keyring": (
        _LIBC + "s = b'SECRET'\nkey = libc.syscall(248, b'user', b'rlvr-leak', s, len(s), -4)\nprint('left', key)\n",
        _LIBC + "key = libc.syscall(250, 10, -4, b'user', b'rlvr-leak', 0)\nbuf = ctypes.create_string_buffer(64)\n"
        "if key > 0 and libc.syscall(250, 11, key, buf, 64) > 0:\n    print(buf.value)\nprint('read')\n"),
    "daemon": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        while True:\n"
        "            try:\n                open('/tmp/w/leak', 'w').write('SECRET')\n            except OSError:\n"
        "                pass\n            time.sleep(0.05)\n    os._exit(0)\nprint('left')\n",
        "import time\ntime.sleep(0.3)\ntry:\n    print(open('/tmp/w/leak').read())\nexcept OSError:\n    pass\nprint('read')\n"),
}
# One program's fault must not fail the next one: job 1 as above, job 2 an ordinary program with its verdict.
STARVE = {
    "sysv-shm-hog": (  # 9 x 64 MiB of System V shared memory, touched, detached, left behind
        _LIBC + "libc.shmat.restype = ctypes.c_void_p\nlibc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]\n"
        "for k in range(9):\n    sid = libc.shmget(0x5e00 + k, 64 << 20, 0o1666)\n    addr = libc.shmat(sid, None, 0)\n"
        "    ctypes.memset(addr, 1, 64 << 20)\n    libc.shmdt(ctypes.c_void_p(addr))\nprint('left')\n",
        "x = bytearray(150 * 1000 * 1000)\nprint(len(x))\n"),
}


def _backend(name):
    problem = docker_problem() if name == "docker" else bwrap_problem()
    if problem:
        pytest.skip(f"{name}: {problem}")
    return DockerBackend(workers=1) if name == "docker" else BwrapBackend(workers=1)


@pytest.fixture(params=BACKENDS, scope="module")
def backend(request):
    # One sandbox at a time, so that job 2 runs where job 1 ran. Its containers go at exit with every pool's
    # (closing the pool here would also remove the containers of other pools of this process: same owner label).
    return _backend(request.param)


def _job(program, time_s=5.0, memory_mb=256):
    return Job(program, ANY, limits=Limits(time_s=time_s, memory_mb=memory_mb))


def _stdout(backend, jobs):
    return [judge(j, r, backend.name, 0.0).verdicts[0].result.stdout for j, r in zip(jobs, execute(backend, jobs))]


def _programs(name, token):
    writer, reader = ATTACKS[name]
    num = str(1000 + int(token[:4], 16) % 30000)
    return writer.replace("SECRETNUM", num).replace("SECRET", token), reader, num


def leaks(backend, name, same_batch=True):
    """(job 1's output, job 2's output, whether job 2 saw job 1's token)."""
    token = uuid.uuid4().hex[:12]
    writer, reader, num = _programs(name, token)
    if same_batch:
        first, second = _stdout(backend, [_job(writer), _job(reader)])
    else:
        first, = _stdout(backend, [_job(writer)])
        second, = _stdout(backend, [_job(reader)])
    seen = token in second or (name == "sysv-sem" and f"value {num}" in second)
    return first, second, seen


@pytest.mark.parametrize("same_batch", [True, False], ids=["one-batch", "next-run_many"])
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_nothing_of_a_job_reaches_the_next(backend, name, same_batch):
    first, second, seen = leaks(backend, name, same_batch)
    assert "read" in second, (first, second)  # the reader ran to its end
    assert not seen, f"job 2 read what job 1 left ({name}): job 1 said {first!r}, job 2 said {second!r}"


@pytest.mark.parametrize("same_batch", [True, False], ids=["one-batch", "next-run_many"])
def test_ipc_memory_left_behind_does_not_fail_the_next_program(backend, same_batch):
    writer, victim = STARVE["sysv-shm-hog"]
    jobs = [_job(writer, time_s=10.0), Job(victim, [{"input": "", "output": "150000000\n"}],
                                          limits=Limits(time_s=10.0, memory_mb=256))]
    if same_batch:
        results = execute(backend, jobs)
    else:
        results = execute(backend, jobs[:1]) + execute(backend, jobs[1:])
    verdicts = [judge(j, r, backend.name, 0.0) for j, r in zip(jobs, results)]
    assert verdicts[1].codes == ["AC"], verdicts[1].verdicts[0].reason


def test_first_process_cannot_be_written_or_used_as_a_log(backend):
    program = ("import os\nfor path in ('/proc/1/mem', '/proc/1/fd/1', '/proc/1/fd/2'):\n    try:\n"
               "        with open(path, 'r+b' if path.endswith('mem') else 'wb', 0) as f:\n"
               "            f.write(b'x' * 65536)\n        print('wrote', path)\n"
               "    except OSError as e:\n        print('refused', path, type(e).__name__)\n")
    out, = _stdout(backend, [_job(program)])
    assert out.count("refused") == 3, out


def test_a_program_that_stops_everyone_delays_nobody(backend):
    """os.kill(-1, SIGSTOP) reaches only the program's own processes: its batch ends in about its time limit,
    every neighbour passes, and the stopper is judged on its own output, never retried."""
    stopper = "import os, signal\ntry:\n    os.kill(-1, signal.SIGSTOP)\nexcept OSError:\n    pass\nprint(7)\n"
    ok = "print(sum(map(int, input().split())))\n"
    tests = [{"input": "3 4\n", "output": "7\n"}]
    jobs = [Job(stopper, tests, limits=Limits(time_s=2.0))] + [Job(ok, tests, limits=Limits(time_s=2.0))] * 7
    execute(backend, [Job(ok, tests)])  # warm up: a pooled container, a warm driver
    started = time.monotonic()
    results = [judge(j, r, backend.name, 0.0) for j, r in zip(jobs, execute(backend, jobs))]
    wall_s = time.monotonic() - started
    assert [r.codes for r in results] == [["AC"]] * 8, [(r.codes, r.error) for r in results]
    assert wall_s < 2.0 + 3.0, f"a batch holding a SIGSTOP program took {wall_s:.1f} s under a 2 s limit"


def test_a_program_that_stops_itself_is_a_timeout_within_its_limit(backend):
    program = "import os, signal\nprint(7, flush=True)\nos.kill(os.getpid(), signal.SIGSTOP)\nimport time\ntime.sleep(60)\n"
    job = Job(program, [{"input": "", "output": "7\n"}], limits=Limits(time_s=1.0))
    started = time.monotonic()
    result = judge(job, execute(backend, [job])[0], backend.name, 0.0)
    assert result.codes == ["TLE"]
    assert time.monotonic() - started < 1.0 + 3.0


def test_memory_outside_the_address_space_is_bounded_or_the_limit_is_not_claimed(backend):
    """A memfd's pages are in no process's address space (RLIMIT_AS does not see them): a cgroup must bound
    them, and a backend without one must say that it does not enforce memory_mb."""
    program = ("import os\nchunk, fds = b'x' * (1 << 20), []\nfor _ in range(16):  # 48 MiB each: under scratch_mb\n"
               "    fds.append(os.memfd_create('hog'))\n    for _ in range(48):\n        os.write(fds[-1], chunk)\n"
               "print('held 768 MiB')\n")
    job = Job(program, ANY, limits=Limits(time_s=20.0, memory_mb=256))
    result = judge(job, execute(backend, [job])[0], backend.name, 0.0)
    if backend.memory_enforced:
        assert result.codes == ["MLE"], (result.codes, result.verdicts[0].result.stdout)
    else:
        assert "not enforced" in backend.description()
        assert "held 768 MiB" in result.verdicts[0].result.stdout


def test_dev_is_not_a_way_around_the_scratch_cap(backend):
    # files of 50 MiB (each under the largest file, scratch_mb), 300 MiB in all per folder
    program = ("import os\nfor d in ('/dev', '/dev/shm', '/dev/mqueue'):\n    n = 0\n    try:\n"
               "        for k in range(6):\n            with open('%s/fill%d' % (d, k), 'wb') as f:\n"
               "                for _ in range(50):\n                    f.write(b'x' * (1 << 20))\n"
               "                    n += 1\n    except OSError:\n        pass\n    print(d, n)\n")
    job = Job(program, ANY, limits=Limits(time_s=20.0, scratch_mb=64))
    out = judge(job, execute(backend, [job])[0], backend.name, 0.0).verdicts[0].result.stdout
    written = {line.split()[0]: int(line.split()[1]) for line in out.splitlines()}
    assert written and all(n <= 64 for n in written.values()), out


@pytest.mark.docker
def test_docker_first_process_is_another_user_and_logs_nothing():
    if docker_problem():
        pytest.skip(docker_problem())
    from rlvr.sandbox.backends.docker_pool import PID1_UID, SANDBOX_UID, ContainerSpec

    impl = sandbox.get_backend("docker")
    spec = ContainerSpec.for_limits(Limits())
    container = impl.pool.acquire(spec)
    try:
        container.reload()
        assert container.attrs["HostConfig"]["LogConfig"]["Type"] == "none"
        assert container.attrs["Config"]["User"] == PID1_UID != SANDBOX_UID
        # the host's view (a program's user namespace shows any unmapped uid as 65534)
        status = Path(f"/proc/{container.attrs['State']['Pid']}/status").read_text()
        uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
        assert uids == [PID1_UID.split(":")[0]] * 4, status
    finally:
        impl.pool.release(container, spec, reusable=False)


def test_bwrap_says_whether_it_enforces_memory():
    if bwrap_problem():
        pytest.skip(bwrap_problem())
    impl = BwrapBackend(workers=1)
    text = impl.description()
    assert ("memory_mb enforced by a memory cgroup" in text) is impl.memory_enforced
    if not impl.memory_enforced:
        assert "not enforced" in text
    os.environ["RLVR_SANDBOX_CGROUP"] = "0"
    try:
        plain = BwrapBackend(workers=1)
    finally:
        del os.environ["RLVR_SANDBOX_CGROUP"]
    assert not plain.memory_enforced and "memory_mb is not enforced" in plain.description()


@pytest.mark.parametrize("name", BACKENDS)
def test_a_stopper_in_a_group_costs_its_neighbours_nothing_through_the_reward_path(name, monkeypatch):
    """The training path: a group of 8 completions scored by the code verifier (10 s timeout per call) in one
    RewardFunction batch, one of them stopping every process it can signal: the other 7 score 1.0, in time."""
    if (docker_problem() if name == "docker" else bwrap_problem()):
        pytest.skip(f"{name} unavailable")
    from rlvr.verifiers.reward import RewardFunction, VerifierSpec

    stopper = "```python\nimport os, signal\ntry:\n    os.kill(-1, signal.SIGSTOP)\nexcept OSError:\n    pass\nprint(7)\n```"
    right = "```python\nprint(sum(map(int, input().split())))\n```"
    sample = {"tests": [{"input": "3 4\n", "output": "7\n"}], "limits": {"time_s": 2}}
    with RewardFunction([VerifierSpec("code", kwargs={"backend": name}, timeout_s=10)], num_workers=1) as reward_fn:
        reward_fn.score([right], [sample])  # warm: the worker, its sandbox
        started = time.monotonic()
        results = reward_fn.score([stopper] + [right] * 7, [sample] * 8)
        wall_s = time.monotonic() - started
    assert [r.scores["code"] for r in results] == [1.0] * 8
    assert wall_s < 10.0, f"the group took {wall_s:.1f} s"
