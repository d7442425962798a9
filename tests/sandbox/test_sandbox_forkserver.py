"""Python runs forked from a warm interpreter (sandbox/harness/forkserver.py) behave as `python3 -I -B
solution.py` does, keep their isolation, and a program that kills the fork server fails only itself."""
import pytest

import rlvr.sandbox.batch  # noqa: F401  (binds sandbox.batch)
from rlvr import sandbox
from rlvr.sandbox import Job, Limits, get_backend
from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
from rlvr.sandbox.backends.docker_backend import docker_problem
from rlvr.sandbox.judge import judge

BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "bwrap"]
ONE = [{"input": "", "output": "ok\n"}]
# (program, expected verdict): what the interpreter does after the main module, and how it exits
SEMANTICS = [
    ("import sys\nassert __name__ == '__main__' and sys.argv[0].endswith('solution.py'), (__name__, sys.argv)\n"
     "assert __file__ == sys.argv[0]\nprint('ok')\n", "AC"),
    ("import atexit\natexit.register(print, 'ok')\n", "AC"),  # atexit handlers run, their output counts
    ("import threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), print('ok'))).start()\n", "AC"),
    ("import sys\nsys.stdout.write('ok\\n')\nsys.exit(3)\n", "RE"),  # exit code 3
    ("print('ok')\nraise SystemExit('bye')\n", "RE"),  # a message: exit code 1
    ("print('ok', flush=True)\n1 / 0\n", "RE"),
    ("import os\nprint('ok', flush=True)\nos._exit(0)\n", "AC"),
    ("print(input())\n", "RE"),  # EOFError: stdin is the test's (empty) input, not the server's
    ("import os\nprint('ok' if os.getcwd() == '/tmp/w' and os.listdir('.') == ['solution.py'] else os.listdir('.'))\n",
     "AC"),
    # if memory runs out, the program goes first, not the driver
    ("print('ok' if open('/proc/self/oom_score_adj').read().strip() == '1000' else 'not first to go')\n", "AC"),
]


def _backend(name):
    problem = docker_problem() if name == "docker" else bwrap_problem()
    if problem:
        pytest.skip(f"{name}: {problem}")
    return get_backend(name)


@pytest.mark.parametrize("fork_server", [True, False], ids=["fork-server", "exec"])
@pytest.mark.parametrize("name", BACKENDS)
def test_a_forked_run_behaves_like_a_fresh_interpreter(name, fork_server, monkeypatch):
    backend = _backend(name)
    monkeypatch.setattr(sandbox.batch, "FORK_SERVER", fork_server)
    jobs = [Job(program, ONE, limits=Limits(time_s=5)) for program, _ in SEMANTICS]
    outcome = backend.run_batch(jobs)
    assert outcome.broken is None
    got = [judge(job, runs, name, 0.0).codes[0] for job, runs in zip(jobs, outcome.results)]
    assert got == [verdict for _, verdict in SEMANTICS], [r[0].stderr[-300:] for r in outcome.results]


@pytest.mark.security
@pytest.mark.parametrize("name", BACKENDS)
def test_a_program_cannot_kill_the_fork_server(name):
    # The program lives in a pid namespace the fork server (and the driver, and the sandbox's pid 1) are not in: they
    # have no pid there, so each kill below misses (ESRCH, or that namespace's pid 1, which ignores it).
    backend = _backend(name)
    # (os.getppid() is 0 there, and kill(0) would be its own process group: itself)
    kill_all = ("import os, signal\nfor target in [-1] + [int(p) for p in os.listdir('/proc') "
                "if p.isdigit() and int(p) != os.getpid()]:\n    try:\n        os.kill(target, signal.SIGKILL)\n"
                "    except OSError:\n        pass\nprint(input())\n")
    echo = "print(input())\n"
    tests = [{"input": "a\n", "output": "a\n"}, {"input": "b\n", "output": "b\n"}]
    jobs = [Job(echo, tests), Job(kill_all, tests), Job(echo, tests)]
    outcome = backend.run_batch(jobs)
    assert outcome.broken is None
    codes = [judge(job, runs, name, 0.0).codes for job, runs in zip(jobs, outcome.results)]
    assert codes == [["AC", "AC"]] * 3


@pytest.mark.security
@pytest.mark.parametrize("name", BACKENDS)
def test_a_forked_program_cannot_read_the_servers_memory(name):
    backend = _backend(name)
    spy = ("import os\nppid = os.getppid()\nfound = []\nfor what in ('mem', 'environ', 'fd'):\n    try:\n"
           "        os.listdir('/proc/%d/fd' % ppid) if what == 'fd' else open('/proc/%d/%s' % (ppid, what), 'rb').read(1)\n"
           "        found.append(what)\n    except OSError:\n        pass\nprint('ok' if not found else found)\n")
    jobs = [Job(spy, ONE)]
    outcome = backend.run_batch(jobs)
    assert judge(jobs[0], outcome.results[0], name, 0.0).codes == ["AC"], outcome.results[0][0].stdout


@pytest.mark.parametrize("fork_server, how", [(True, "forked"), (False, "exec")], ids=["fork-server", "exec"])
@pytest.mark.parametrize("name", BACKENDS)
def test_python_runs_come_from_the_fork_server_when_asked(name, fork_server, how, monkeypatch):
    # A fork server that cannot start falls back to an interpreter per run, correct but ~10x dearer: this
    # catches it (a forked run's command line is the server's, `python3 ... -c SOURCE`; an exec'd run's names
    # solution.py).
    backend = _backend(name)
    monkeypatch.setattr(sandbox.batch, "FORK_SERVER", fork_server)
    job = Job("argv = open('/proc/self/cmdline').read().split('\\0')\nprint('forked' if '-c' in argv else 'exec')\n",
              [{"input": "", "output": how + "\n"}])
    outcome = backend.run_batch([job])
    assert judge(job, outcome.results[0], name, 0.0).codes == ["AC"], outcome.results[0][0].stdout
