"""A correct program that leaves a daemon holding its stdout (fork + setsid, then loop) is judged on its
main process: AC as soon as that exits, and the daemon is killed before the next test or program runs."""
import json
from pathlib import Path

import pytest

from rlvr.sandbox import Job, Limits, get_backend
from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
from rlvr.sandbox.backends.docker_backend import docker_problem
from rlvr.sandbox.judge import judge

LANGUAGE_CASES = Path(__file__).resolve().parents[1] / "data" / "code_cases_languages.jsonl"
ADD = [{"input": "3 4\n", "output": "7\n"}, {"input": "-1 1\n", "output": "0\n"}]
# tests/data/code_cases_languages.jsonl cr2-10: the labelled orphaned-daemon case.
DAEMON = ("import os\na,b=map(int,input().split())\nprint(a+b,flush=True)\nif os.fork()==0:\n    os.setsid()\n"
          "    import time\n    while True: time.sleep(0.1)\n")
# Prints how many processes in the sandbox, other than itself and its ancestors, are a program's: dumpable (their
# environment readable), as the sandbox's own processes (pid 1, the driver, the fork server and its reaper, a
# run's stand-in) are not. Pids as the sandbox's /proc names them (a program's own pid namespace renumbers it).
OTHERS = """import os
def ppid(pid):
    with open('/proc/%d/stat' % pid) as f:
        return int(f.read().rpartition(')')[2].split()[1])
def a_program(pid):
    try:
        open('/proc/%d/environ' % pid, 'rb').close()
        return True
    except OSError:
        return False
mine, pid = {1}, int(os.readlink('/proc/self'))
while pid > 0:
    mine.add(pid)
    pid = ppid(pid)
print(len([p for p in os.listdir('/proc') if p.isdigit() and int(p) not in mine and a_program(int(p))]))
"""


def _backend(name):
    problem = docker_problem() if name == "docker" else bwrap_problem()
    if problem:
        pytest.skip(f"{name}: {problem}")
    return get_backend(name)


@pytest.mark.security
@pytest.mark.parametrize("name", [pytest.param("docker", marks=pytest.mark.docker), "bwrap"])
def test_orphaned_daemon_is_ac_and_nothing_is_left_running(name):
    backend = _backend(name)
    limits = Limits(time_s=2)
    jobs = [Job(DAEMON, ADD, limits=limits), Job(OTHERS, [{"input": "", "output": "0\n"}], limits=limits)]
    outcome = backend.run_batch(jobs)  # one sandbox: the second program runs where the daemons ran
    assert outcome.broken is None
    daemon, census = (judge(job, runs, name, 0.0) for job, runs in zip(jobs, outcome.results))
    assert daemon.codes == ["AC", "AC"], [v.reason for v in daemon.verdicts]
    assert census.codes == ["AC"], census.verdicts[0].result.stdout  # "0": no daemon survived


def test_the_labelled_case_is_the_one_tested_here():
    row = next(json.loads(line) for line in LANGUAGE_CASES.read_text().splitlines() if '"cr2-10"' in line)
    assert row["solution"] == DAEMON and row["expected_failure_mode"] == "AC"
