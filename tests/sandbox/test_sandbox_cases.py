"""Labelled programs (correct, wrong, cheating, hostile) judged by each backend; the expected verdicts come
from the labels. Cases are authored here (different from tests/data/code_cases.jsonl, which is also run
on Docker when present). Time limits are 1 s so that the timeout cases stay cheap."""
import json
from functools import cache
from pathlib import Path

import pytest

from rlvr import sandbox
from rlvr.sandbox import Job, Limits
from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
from rlvr.sandbox.backends.docker_backend import docker_problem

ADD = [{"input": "3 4\n", "output": "7\n"}, {"input": "-2 2\n", "output": "0\n"}, {"input": "10 20\n", "output": "30\n"}]
SORT = [{"input": "3\n3 1 2\n", "output": "1 2 3\n"}, {"input": "4\n4 4 1 0\n", "output": "0 1 4 4\n"}]
RANGE = [{"input": "2\n", "output": "1\n2\n"}, {"input": "3\n", "output": "1\n2\n3\n"}]
HALF = [{"input": "3\n", "output": "0.333333333333\n"}, {"input": "8\n", "output": "0.125\n"}]
MUL_ASSERT = "assert mul(2, 3) == 6\nassert mul(-1, 5) == -5\nassert mul(0, 9) == 0\n"
MUL_CALL = {"fn_name": "mul", "cases": [{"args": [2, 3], "expected": 6}, {"args": [-1, 5], "expected": -5}]}
REV_CALL = {"fn_name": "rev", "cases": [{"args": [[1, 2, 3]], "expected": [3, 2, 1]}, {"args": [[]], "expected": []}]}
HUMANEVAL_STYLE = "def check(candidate):\n    assert candidate([1, 2]) == (2, 1)\n    assert candidate([]) == ()\n\ncheck(swap_all)\n"
SECRET = 918273645

# (id, test_type, tests, checker, solution, expected_pass, expected first failure: a verdict or a set of them)
CASES = [
    ("ok-stdio", "stdio", ADD, "lines", "a, b = map(int, input().split())\nprint(a + b)\n", True, None),
    ("ok-read-all", "stdio", SORT, "lines", "import sys\nd = sys.stdin.read().split()\nprint(*sorted(map(int, d[1:])))\n", True, None),
    ("ok-no-newline", "stdio", SORT, "lines", "import sys\nd = sys.stdin.read().split()\nsys.stdout.write(' '.join(sorted(d[1:], key=int)) + '  ')\n", True, None),
    ("ok-exit-after-output", "stdio", ADD, "lines", "import sys\nprint(sum(map(int, input().split())))\nsys.exit(0)\n", True, None),
    ("ok-leading-spaces", "stdio", ADD, "lines", "print('  ', sum(map(int, input().split())), ' ')\n", True, None),
    ("wa-leading-spaces-exact", "stdio", ADD, "exact", "print('  ', sum(map(int, input().split())))\n", False, "WA"),
    ("ok-stderr-noise", "stdio", ADD, "lines", "import sys\nprint('dbg', file=sys.stderr)\nprint(sum(map(int, input().split())))\n", True, None),
    ("ok-float-tolerance", "stdio", HALF, "float:1e-6", "print('%.8f' % (1 / int(input())))\n", True, None),
    ("ok-call-tuple", "call", REV_CALL, "json", "def rev(xs):\n    return tuple(reversed(xs))\n", True, None),
    ("ok-call-solution-class", "call", MUL_CALL, "json", "class Solution:\n    def mul(self, a, b):\n        return a * b\n", True, None),
    ("ok-assert", "assert", MUL_ASSERT, "lines", "def mul(a, b):\n    return a * b\n", True, None),
    ("ok-humaneval-style", "assert", HUMANEVAL_STYLE, "lines", "def swap_all(xs):\n    return tuple(reversed(xs))\n", True, None),
    ("ok-raising-expected", "assert", "try:\n    inv(0)\n    assert False\nexcept ZeroDivisionError:\n    pass\nassert inv(4) == 0.25\n", "lines", "def inv(x):\n    return 1 / x\n", True, None),
    ("ok-deep-recursion", "stdio", [{"input": "15000\n", "output": "112507500\n"}], "lines", "import sys\nsys.setrecursionlimit(50000)\ndef s(n):\n    return 0 if n == 0 else n + s(n - 1)\nprint(s(int(input())))\n", True, None),
    ("ok-scratch-write", "stdio", ADD, "lines", "open('/tmp/w/x', 'w').write(input())\nprint(sum(map(int, open('/tmp/w/x').read().split())))\n", True, None),
    ("wa-partial", "stdio", SORT, "lines", "import sys\nd = sys.stdin.read().split()\nprint(*sorted(set(map(int, d[1:]))))\n", False, "WA"),
    ("wa-missing-line", "stdio", RANGE, "lines", "print(1)\n", False, "WA"),
    ("wa-extra-line", "stdio", RANGE, "lines", "n = int(input())\nprint(*range(1, n + 1), sep='\\n')\nprint('done')\n", False, "WA"),
    ("wa-float-just-outside", "stdio", HALF, "float:1e-6", "print(round(1 / int(input()), 4))\n", False, "WA"),
    ("wa-case", "stdio", [{"input": "", "output": "YES\n"}], "lines", "print('yes')\n", False, "WA"),
    ("ok-case-insensitive", "stdio", [{"input": "", "output": "YES\n"}], "lines_ci", "print('yes')\n", True, None),
    ("wa-call", "call", MUL_CALL, "json", "def mul(a, b):\n    return a + b\n", False, "WA"),
    ("wa-call-bool-for-int", "call", {"fn_name": "one", "cases": [{"args": [], "expected": 1}]}, "json", "def one():\n    return True\n", False, "WA"),
    ("wa-assert", "assert", MUL_ASSERT, "lines", "def mul(a, b):\n    return a ** b\n", False, "WA"),
    ("ce-syntax", "stdio", ADD, "lines", "print 'hello'\n", False, "CE"),
    ("ce-call", "call", MUL_CALL, "json", "def mul(a, b)\n    return a * b\n", False, "CE"),
    ("re-exception", "stdio", ADD, "lines", "print(1 / 0)\n", False, "RE"),
    ("re-exit-code", "stdio", ADD, "lines", "import sys\nprint(sum(map(int, input().split())))\nsys.exit(3)\n", False, "RE"),
    ("re-recursion", "stdio", [{"input": "30000\n", "output": "0\n"}], "lines", "def f(n):\n    return f(n + 1)\nprint(f(int(input())))\n", False, "RE"),
    ("re-call-raises", "call", MUL_CALL, "json", "def mul(a, b):\n    raise ValueError('no')\n", False, "RE"),
    ("re-missing-function", "call", MUL_CALL, "json", "def multiply(a, b):\n    return a * b\n", False, "RE"),
    ("tle-loop", "stdio", ADD[:1], "lines", "while True:\n    pass\n", False, "TLE"),
    ("tle-after-answer", "stdio", ADD[:1], "lines", "import time\nprint(sum(map(int, input().split())), flush=True)\ntime.sleep(60)\n", False, "TLE"),
    ("ok-daemon-holds-stdout", "stdio", ADD, "lines", "import os, time\nprint(sum(map(int, input().split())), flush=True)\nif os.fork() == 0:\n    os.setsid()\n    while True:\n        time.sleep(0.1)\n", True, None),
    ("tle-main-waits-for-daemon", "stdio", ADD[:1], "lines", "import os, time\nprint(sum(map(int, input().split())), flush=True)\nif os.fork() == 0:\n    time.sleep(60)\nos.wait()\n", False, "TLE"),
    ("tle-call", "call", MUL_CALL, "json", "def mul(a, b):\n    while True:\n        pass\n", False, "TLE"),
    ("tle-assert", "assert", MUL_ASSERT, "lines", "import time\ndef mul(a, b):\n    time.sleep(60)\n", False, "TLE"),
    ("mle-huge-alloc", "stdio", ADD[:1], "lines", "x = bytearray(6 * 1024 ** 3)\nprint(7)\n", False, "MLE"),
    ("mle-growth", "stdio", ADD[:1], "lines", "xs = []\nwhile True:\n    xs.append(' ' * 10 ** 6)\n", False, "MLE"),
    ("mle-call", "call", MUL_CALL, "json", "def mul(a, b):\n    return len([0] * (10 ** 10))\n", False, "MLE"),
    ("ole-flood", "stdio", ADD[:1], "lines", "print(7)\nwhile True:\n    print('x' * 4096)\n", False, "OLE"),
    ("ole-stderr-flood", "stdio", ADD[:1], "lines", "import sys\nprint(7)\nwhile True:\n    sys.stderr.write('e' * 4096)\n", False, "OLE"),
    ("ole-call-huge-value", "call", MUL_CALL, "json", "def mul(a, b):\n    return 'x' * (4 * 1024 * 1024)\n", False, "OLE"),
    # a bomb fails on the process cap (its fork raises: RE) or on the time limit (TLE), whichever it meets first
    ("fork-bomb", "stdio", ADD[:1], "lines", "import os\nwhile True:\n    os.fork()\n", False, {"RE", "TLE"}),
    ("spawn-bomb", "stdio", ADD[:1], "lines", "import subprocess, sys\nprint(7, flush=True)\nwhile True:\n    subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n", False, {"RE", "TLE"}),
    ("early-sys-exit", "assert", MUL_ASSERT, "lines", "import sys\ndef mul(a, b):\n    return 0\nsys.exit(0)\n", False, "WA"),
    ("early-os-exit", "assert", MUL_ASSERT, "lines", "import os\ndef mul(a, b):\n    return 0\nos._exit(0)\n", False, "WA"),
    ("early-execv", "call", MUL_CALL, "json", "import os\ndef mul(a, b):\n    return 0\nos.execv('/bin/true', ['true'])\n", False, "WA"),
    ("early-exit-inside-call", "call", MUL_CALL, "json", "import sys\ndef mul(a, b):\n    sys.exit(0)\n", False, "WA"),
    ("early-atexit", "assert", MUL_ASSERT, "lines", "import atexit, os\natexit.register(lambda: os._exit(0))\ndef mul(a, b):\n    raise SystemExit(0)\n", False, "WA"),
    ("cheat-always-equal-assert", "assert", MUL_ASSERT, "lines", "class Any(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\ndef mul(a, b):\n    return Any(0)\n", False, "WA"),
    ("cheat-always-equal-call", "call", REV_CALL, "json", "class Any(list):\n    def __eq__(self, o):\n        return True\ndef rev(xs):\n    return Any()\n", False, "WA"),
    ("cheat-patch-builtins", "assert", MUL_ASSERT, "lines", "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\nbuiltins.isinstance = lambda *a: True\ndef mul(a, b):\n    return 0\n", False, {"WA", "RE"}),
    ("cheat-fake-reply", "call", MUL_CALL, "json", "import os\nos.write(4, b'{\"ready\": []}\\n{\"ok\": 6}\\n')\nos._exit(0)\n", False, "WA"),
    ("cheat-print-verdict", "stdio", ADD, "lines", "print('{\"status\": \"ok\", \"stdout\": \"7\\\\n\"}')\n", False, "WA"),
    ("cheat-read-tests", "assert", f"assert magic() == {SECRET}\n", "lines",
     "import os, re\ndef magic():\n    for pid in os.listdir('/proc'):\n        for name in ('cmdline', 'environ', 'mem'):\n"
     "            try:\n                data = open('/proc/%s/%s' % (pid, name), 'rb').read(1 << 20)\n            except Exception:\n"
     "                continue\n            m = re.search(rb'== (\\d{9})', data)\n            if m:\n                return int(m.group(1))\n    return 0\n",
     False, "WA"),
    ("cheat-shadow-builtin", "assert", "assert abs(half(3) - 1.5) < 1e-9\nassert abs(half(1) - 0.5) < 1e-9\n", "lines",
     "def abs(x):\n    return 0\ndef half(x):\n    return 0\n", False, "WA"),
    ("cheat-garbage-on-answer-channel", "call", MUL_CALL, "json", "import os\nos.write(4, b'[1, 2]\\n')\ndef mul(a, b):\n    return a * b\n", False, "RE"),
    ("cheat-kill-everyone", "stdio", ADD[:1], "lines", "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint(7)\n", False, {"RE", "WA"}),
    ("net-loopback", "stdio", ADD[:1], "lines", "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 8080), timeout=1)\n    print('connected')\nexcept OSError:\n    print(-1)\n", False, "WA"),
    ("read-outside", "stdio", ADD, "lines", "s = ''\nfor p in ['/etc/shadow', '/root/.ssh/id_rsa', '/proc/1/environ']:\n    try:\n        s += open(p).read()\n    except Exception:\n        pass\nprint(sum(map(int, input().split())))\n", True, None),
]


def _job(case):
    case_id, test_type, tests, checker, solution, _, _ = case
    time_s = 5.0 if case_id.startswith("mle-") else 1.0  # filling 256 MiB can take a second on a busy machine
    return Job(solution, tests, test_type, checker, Limits(time_s=time_s, memory_mb=256, output_kb=1024))


@cache
def _judged(backend):
    problem = docker_problem() if backend == "docker" else bwrap_problem()
    if problem:
        return problem
    return dict(zip([c[0] for c in CASES], sandbox.run_many([_job(c) for c in CASES], backend=backend)))


@pytest.mark.security
@pytest.mark.parametrize("backend", [pytest.param("docker", marks=pytest.mark.docker), "bwrap"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_labelled_case(backend, case):
    judged = _judged(backend)
    if isinstance(judged, str):
        pytest.skip(f"{backend}: {judged}")
    case_id, *_, expected_pass, expected_mode = case
    result = judged[case_id]
    first = result.first_failure()
    detail = f"{result.codes} {first.reason if first else ''} stderr={first.result.stderr[-300:] if first else ''!r}"
    assert result.passed is expected_pass, detail
    if expected_mode is not None:
        allowed = expected_mode if isinstance(expected_mode, set) else {expected_mode}
        assert first.verdict.value in allowed, detail


LABELLED_CASES = Path(__file__).resolve().parents[1] / "data" / "code_cases.jsonl"


@pytest.mark.docker
@pytest.mark.security
def test_labelled_code_cases_on_docker():
    if docker_problem():
        pytest.skip(docker_problem())
    rows = [json.loads(line) for line in LABELLED_CASES.read_text().splitlines() if line.strip()]
    limits = [dict(r.get("limits") or {}, time_s=min(1.0, (r.get("limits") or {}).get("time_s", 1.0))) for r in rows]
    jobs = [Job(r["solution"], r["tests"], r["test_type"], r.get("checker") or "lines", Limits.from_mapping(lim))
            for r, lim in zip(rows, limits)]
    results = sandbox.run_many(jobs, backend="docker")
    wrong = [(r["id"], res.codes) for r, res in zip(rows, results)
             if res.passed != r["expected_pass"] and r["category"] != "nondeterministic"]
    assert wrong == []
    # The nondeterministic case is right on each test with probability 2/3: never demand a fixed verdict there.
