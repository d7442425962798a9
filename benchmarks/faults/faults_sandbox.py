"""Hostile programs judged by ``rlvr verify code --file`` on each sandbox backend (Docker, bubblewrap), and the test
suite's time limits. The programs run as one batch per backend; each is a fault of its own, judged by its verdict
and by what the host shows afterwards (no process left, no file written outside, no container left)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from pathlib import Path

import psutil
from bench import Bench, fault
from harness import REPO, Check, Result, exit_code, no_traceback, nothing_left, output_has

ADD = [{"input": "3 4\n", "output": "7\n"}]
LIMITS = {"time_s": 1, "memory_mb": 256, "output_kb": 1024}
MARKER = "/tmp/rlvr-faults-escaped"

# name -> (program, verdicts it may get, what it tries)
PROGRAMS: dict[str, tuple[str, set[str], str]] = {
    "fork bomb": ("import os\nwhile True:\n    os.fork()\n", {"RE", "TLE"}, "forks without end"),
    "spawn bomb": ("import subprocess, sys\nprint(7, flush=True)\nwhile True:\n"
                   "    subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n", {"TLE", "RE"},
                   "starts busy interpreters without end"),
    "infinite loop": ("while True:\n    pass\n", {"TLE"}, "loops"),
    "memory bomb": ("xs = []\nwhile True:\n    xs.append(' ' * 10 ** 6)\n", {"MLE"}, "grows without end"),
    "output flood": ("print(7)\nwhile True:\n    print('x' * 4096)\n", {"OLE"}, "prints without end"),
    "kill every process it can see": ("import os, signal\nos.kill(-1, signal.SIGKILL)\nprint(7)\n", {"RE", "WA"},
                                      "sends SIGKILL to -1"),
    "network": ("import socket\nfor host in HOSTS:\n    try:\n        socket.create_connection((host, PORT), "
                "timeout=0.2)\n        print('connected')\n        break\n    except OSError:\n        pass\n"
                "else:\n    print(7)\n", {"AC"}, "connects to a port the host listens on (its loopback and "
                "outward addresses)"),
    "write a host file": (f"try:\n    open({MARKER!r}, 'w').write('x')\nexcept OSError:\n    pass\nprint(7)\n",
                          {"AC", "RE"}, f"writes {MARKER}"),
    "read a host file": ("try:\n    print(open('SECRET').read())\nexcept OSError:\n    print(7)\n", {"AC"},
                         "reads a file of the fault run's work folder"),
}


def _batch(b: Bench, backend: str) -> tuple[Result, dict[str, dict], list[Check]]:
    """Judge every program once per backend; returns the command, each program's output line, and the checks of the
    host afterwards (shared by every program of the batch)."""
    key = f"sandbox-{backend}"
    if key not in b.made:
        listener = _Listener()
        secret = b.work / "secret.txt"
        secret.write_text("the host's secret\n")
        Path(MARKER).unlink(missing_ok=True)
        rows = []
        for name, (program, _, _) in PROGRAMS.items():
            program = program.replace("SECRET", str(secret)).replace("HOSTS", repr(listener.hosts)) \
                .replace("PORT", str(listener.port))
            rows.append({"id": name, "solution": program, "test_type": "stdio",
                         "tests": ADD, "checker": "lines", "limits": LIMITS})
        path = b.work / f"hostile-{backend}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        before, strangers = _containers(), _unprivileged()
        r = b.cli.rlvr("verify", "code", "--file", str(path), "--backend", backend, timeout=300)
        lines = {}
        for line in r.out.splitlines():
            if line.startswith("{"):
                try:
                    row = json.loads(line)
                    lines[row["id"]] = row
                except (ValueError, KeyError):
                    pass
        after = _containers()
        left = _wait_unprivileged_gone(strangers)
        listener.close()
        host = [exit_code(r, 0), no_traceback(r), nothing_left(r.tag),
                Check("no sandboxed process left (uid 65534)", not left, f"{len(left)} left" if left else ""),
                Check("no connection reached the host's listener", not listener.accepted,
                      f"{listener.accepted} connection(s)" if listener.accepted else ""),
                Check(f"no file written at {MARKER}", not Path(MARKER).exists()),
                Check("no container left", backend != "docker" or after <= before,
                      f"{len(after - before)} new" if after - before else "")]
        b.made[key] = r
        b.made[key + "-lines"] = lines  # type: ignore[assignment]
        b.made[key + "-host"] = host  # type: ignore[assignment]
    return b.made[key], b.made[key + "-lines"], b.made[key + "-host"]  # type: ignore[return-value]


class _Listener:
    """A TCP port the host listens on at every address, counting the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.hosts = ["127.0.0.1"] + _outward_addresses()
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def _outward_addresses() -> list[str]:
    """The host's IPv4 addresses other than loopback (a Docker bridge's gateway among them)."""
    found = []
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                found.append(a.address)
    return found[:4]


def _unprivileged() -> set[int]:
    """Processes of uid 65534 (``nobody``: the sandboxes' user) now."""
    found = set()
    for proc in psutil.process_iter(["uids"]):
        try:
            if proc.info["uids"] and proc.info["uids"].real == 65534:
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


def _wait_unprivileged_gone(before: set[int], wait_s: float = 15.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        left = sorted(_unprivileged() - before)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.25)


def _containers() -> set[str]:
    try:
        out = subprocess.run(["docker", "ps", "-aq"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return set(out.split())


def _program_fault(name: str, backend: str) -> None:
    _, verdicts, tries = PROGRAMS[name]

    @fault(f"{backend}: a program that {tries} ({name})", "sandbox",
           f"judged {' or '.join(sorted(verdicts))}; the host keeps its processes and files; no process or container "
           "left", needs=(backend,))
    def run(b: Bench) -> list[Check]:
        r, lines, host = _batch(b, backend)
        row = lines.get(name)
        got = set(row.get("verdicts") or []) if row else set()
        return [Check(f"verdict {' or '.join(sorted(verdicts))}", bool(got) and got <= verdicts,
                      f"verdicts {sorted(got)}" if row else "no output line")] + host


for _backend in ("docker", "bwrap"):
    for _name in PROGRAMS:
        _program_fault(_name, _backend)


# ================================================================================================= the test suite
@fault("a subprocess test of the suite past its time limit (RLVR_TEST_TIME_SCALE=0.001)", "suite",
       "the test fails with one line naming the limit and RLVR_TEST_TIME_SCALE, no hang")
def suite_limit(b: Bench) -> list[Check]:
    test = "tests/trainer/test_trainer.py::test_resume_after_kill_9_gives_the_same_metrics"
    r = b.cli.run([b.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "0", test],
                  env={"RLVR_TEST_TIME_SCALE": "0.001"}, timeout=300, cwd=REPO)
    return [exit_code(r, 1), output_has(r, r"time limit: .* ran past .*RLVR_TEST_TIME_SCALE",
                                        "a line naming the limit and RLVR_TEST_TIME_SCALE")]
