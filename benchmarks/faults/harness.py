"""Starting the rlvr CLI under a fault and judging what it did.

A fault is a function that starts ``python -m rlvr.cli ...`` (or :mod:`inject`) in subprocesses through :class:`Cli`
and returns :class:`Check` s: each one criterion a reader can re-check (an exit code, the one ``error:`` line and what
it names, no Python traceback, nothing left running, ``scripts/compare_runs.py`` against an unbroken run, ...). The
fault held when every check holds.

Every process a fault starts carries ``FAULTS_TAG=<tag>`` in its environment, inherited by whatever it starts, so
:func:`tagged_processes` finds what outlived it (a double-forked daemon included) by reading ``/proc/PID/environ``.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
TRACEBACK = "Traceback (most recent call last)"
MODEL_LOAD = "loading the policy"  # the trainer's line as the model starts loading
NEW_RECORD = re.compile(r"(\s+File \"|Traceback|Exception|\[rlvr\]|\[rank|warn |info |ok |skip |step \d|interrupted|run: |"
                        r"model: |plots: |[A-Za-z_.]+Error\b)")
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class Check:
    """One criterion of a fault: ``what`` must hold; ``seen`` says what was observed."""

    what: str
    ok: bool
    seen: str = ""


@dataclass
class Result:
    """A finished (or killed) CLI process: its argv, exit code (negative: the signal that ended it), merged
    stdout + stderr, wall seconds, and whether the harness stopped it at its time limit."""

    argv: list[str]
    code: int
    out: str
    seconds: float
    timed_out: bool = False
    tag: str = ""

    def error_lines(self) -> list[str]:
        """Each ``error:`` message of the output: its line joined with the lines that continue it up to a blank line
        or another kind of line (a pre-flight error lists one problem a line under its ``error:`` line; a changed
        recipe's error ends with what to do)."""
        found: list[str] = []
        continuing = False
        for line in self.out.splitlines():
            if line.startswith("error:"):
                found.append(line)
                continuing = True
            elif continuing and line.strip() and not NEW_RECORD.match(line):
                found[-1] += " / " + line.strip()
            else:
                continuing = False
        return found


@dataclass
class Cli:
    """Starts rlvr commands in subprocesses with this checkout first on the import path.

    Args:
        python: the interpreter (one with rlvr's dependencies installed).
        cwd: the folder commands run in (the fault run's work folder).
        env: extra environment for every command.
    """

    python: str
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def environment(self, tag: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
        path = [str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        env.update(PYTHONPATH=os.pathsep.join(path), PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false",
                   FAULTS_TAG=tag)
        env.update(self.env)
        env.update(extra or {})
        return env

    def rlvr(self, *args: str, **kw) -> Result:
        """``python -m rlvr.cli ARGS`` (see :meth:`run` for the keywords)."""
        return self.run([self.python, "-m", "rlvr.cli", *args], **kw)

    def injected(self, fault: list[str], *args: str, **kw) -> Result:
        """``python benchmarks/faults/inject.py FAULT -- ARGS``: the CLI with a fault at an exact point."""
        return self.run([self.python, str(Path(__file__).with_name("inject.py")), *fault, "--", *args], **kw)

    def run(self, argv: list[str], *, timeout: float = 300, env: dict[str, str] | None = None,
            kill_on: str | None = None, kill_signal: int = signal.SIGKILL, kill_group: bool = False,
            tag: str | None = None, on_start: Callable[[subprocess.Popen], None] | None = None,
            cwd: Path | None = None) -> Result:
        """Run ``argv`` to its end, or until ``timeout`` seconds (then its process group is killed and the result
        says ``timed_out``).

        Args:
            kill_on: a regex: when a line of the output matches it, send ``kill_signal`` to the process (to its
                process group with ``kill_group``, as a terminal's Ctrl-C does), then wait for its end.
            tag: the ``FAULTS_TAG`` value (default a fresh one), for :func:`tagged_processes`.
            on_start: called with the process once it started (e.g. to watch it from a thread).
            cwd: the folder it runs in (default the runner's).
        """
        tag = tag or new_tag()
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd or self.cwd, env=self.environment(tag, env), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        if on_start:
            on_start(proc)
        lines: queue.Queue[bytes | None] = queue.Queue()

        def pump() -> None:
            for raw in iter(proc.stdout.readline, b""):
                lines.put(raw)
            lines.put(None)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        out: list[str] = []
        pattern = re.compile(kill_on) if kill_on else None
        timed_out = False
        while True:
            left = started + timeout - time.monotonic()
            if left <= 0:
                timed_out = True
                _kill_group(proc.pid, signal.SIGKILL)
                break
            try:
                raw = lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                if proc.poll() is not None:  # ended, and a second without output: what still holds the pipe is
                    break                    # something it left behind (a check of the fault looks for those)
                continue
            if raw is None:
                break
            line = raw.decode("utf-8", "replace")
            out.append(line)
            if pattern is not None and pattern.search(line):
                pattern = None
                if kill_group:
                    _kill_group(proc.pid, kill_signal)
                else:
                    os.kill(proc.pid, kill_signal)
        code = proc.wait()
        reader.join(timeout=1)
        while not lines.empty():
            raw = lines.get()
            if raw is not None:
                out.append(raw.decode("utf-8", "replace"))
        result = Result(list(argv), code, "".join(out), time.monotonic() - started, timed_out, tag)
        self.log.append(f"$ {' '.join(argv)}\n# exit {code} in {result.seconds:.1f} s\n{result.out}")
        return result


def new_tag() -> str:
    return uuid.uuid4().hex[:12]


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def tagged_processes(tag: str) -> list[int]:
    """Live (not zombie) processes whose environment holds ``FAULTS_TAG=tag``."""
    needle = f"FAULTS_TAG={tag}".encode()
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            with open(f"/proc/{proc.pid}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    return found


def alive(pids: Iterable[int]) -> list[int]:
    """The pids of ``pids`` that name a live (not zombie) process."""
    live = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                live.append(pid)
        except psutil.NoSuchProcess:
            pass
    return live


def kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ----------------------------------------------------------------------------------------------------------- checks
def exit_code(r: Result, *codes: int) -> Check:
    want = " or ".join(map(str, codes))
    seen = "stopped at the harness's time limit" if r.timed_out else f"exit {r.code}"
    return Check(f"exit {want}", r.code in codes and not r.timed_out, seen)


def no_traceback(r: Result) -> Check:
    return Check("no Python traceback", TRACEBACK not in r.out, "a traceback" if TRACEBACK in r.out else "")


def one_error_line(r: Result, *needles: str) -> Check:
    """Exactly one ``error:`` message (its line and indented continuation lines), holding every one of ``needles``
    (each a regex)."""
    lines = r.error_lines()
    missing = [n for n in needles if not (lines and re.search(n, lines[0]))]
    ok = len(lines) == 1 and not missing
    shown = lines[0] if len(lines) == 1 else f"{len(lines)} error lines" + (f" (first: {lines[0]})" if lines else "")
    what = "one error line" + (f" naming {', '.join(needles)}" if needles else "")
    return Check(what, ok, f"`{_short(shown)}`" + (f" (lacks {', '.join(missing)})" if lines and missing else ""))


def output_has(r: Result, pattern: str, what: str | None = None) -> Check:
    m = re.search(pattern, r.out, re.MULTILINE)
    return Check(what or f"output says /{pattern}/", m is not None, f"`{_short(_line_at(r.out, m))}`" if m else "")


def output_lacks(r: Result, pattern: str, what: str | None = None) -> Check:
    m = re.search(pattern, r.out, re.MULTILINE)
    return Check(what or f"output never says /{pattern}/", m is None, f"`{_short(_line_at(r.out, m))}`" if m else "")


def before_model_load(r: Result) -> Check:
    return output_lacks(r, re.escape(MODEL_LOAD), "stopped before the model loads")


def within(r: Result, seconds: float) -> Check:
    return Check(f"done within {seconds:.0f} s", r.seconds <= seconds and not r.timed_out, f"{r.seconds:.0f} s")


def nothing_left(tag: str, wait_s: float = 15.0, pids: Iterable[int] = ()) -> Check:
    """No process carries ``tag`` (nor is one of ``pids``) once ``wait_s`` seconds have passed; what is left is killed
    so that it cannot disturb the next fault."""
    pids = list(pids)
    deadline = time.monotonic() + wait_s
    while True:
        left = sorted(set(tagged_processes(tag)) | set(alive(pids)))
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    names = []
    for pid in left[:5]:
        try:
            names.append(" ".join(psutil.Process(pid).cmdline())[:60])
        except psutil.Error:
            pass
    kill_all(left)
    return Check("no process left behind", not left, f"{len(left)} left: {names}" if left else "")


def same_run(python: str, a: Path, b: Path) -> Check:
    """``scripts/compare_runs.py A B`` says the runs are the same (metrics step for step, samples, final weights)."""
    done = subprocess.run([python, str(REPO / "scripts" / "compare_runs.py"), str(a), str(b)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    lines = (done.stdout + done.stderr).strip().splitlines()
    seen = "compare_runs: same" if done.returncode == 0 else f"compare_runs: {len(lines)} difference(s), " \
                                                               f"first `{_short(lines[0] if lines else '')}`"
    return Check(f"metrics, samples and weights equal to {b.name}'s", done.returncode == 0, seen)


def file_check(what: str, ok: bool, seen: str = "") -> Check:
    return Check(what, bool(ok), seen)


def _line_at(text: str, m: re.Match | None) -> str:
    if m is None:
        return ""
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    return text[start:end if end >= 0 else len(text)]


NAMED_PATHS: dict[str, str] = {}
"""Folders of the machine the run is made on, by the name a report shows instead (the work folder joins at start)."""


def hide_paths(text: str) -> str:
    """``text`` with the interpreter, its prefix, the work folder, the checkout and the home folder by name: a report
    names no path of the machine it was made on."""
    text = re.sub(r"\S*/bin/python[0-9.]*", "python", text)
    for path, name in sorted({**NAMED_PATHS, sys.prefix: "$PYTHON_PREFIX", str(REPO): "$REPO",
                              str(Path.home()): "~"}.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(path, name)
    return text


def _short(text: str, n: int = 220) -> str:
    text = hide_paths(text).strip().replace("|", "\\|").replace("`", "'")
    return text if len(text) <= n else text[: n - 3] + "..."


def copy_run(src: Path, dst: Path) -> Path:
    """A copy of run folder ``src`` at ``dst`` (replaced), so one fault's damage never reaches another's input."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
    return dst


def python_version() -> str:
    return sys.version.split()[0]


# ----------------------------------------------------------------------------------------------- run folder state
def metrics_steps(run: Path) -> list[int]:
    """The ``step`` of each readable line of ``run/metrics.jsonl`` (a line that is not JSON is skipped)."""
    import json

    steps = []
    path = run / "metrics.jsonl"
    for line in path.read_text(errors="replace").splitlines() if path.is_file() else []:
        try:
            steps.append(int(json.loads(line)["step"]))
        except (ValueError, KeyError, TypeError):
            continue
    return steps


def checkpoint_state(ckpt: Path) -> str:
    """``"whole"`` when every file of ``ckpt/manifest.json`` is there at its size, else what is wrong."""
    import json

    try:
        files = json.loads((ckpt / "manifest.json").read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"no readable manifest ({type(exc).__name__})"
    bad = [name for name, size in files.items() if not (ckpt / name).is_file() or (ckpt / name).stat().st_size != size]
    return "whole" if not bad else f"{len(bad)} file(s) missing or resized: {bad[:3]}"


def leftovers(run: Path) -> list[str]:
    """Temporary files and folders of interrupted writes under ``run`` (``.NAME.tmp-PID``, ``.tmp-step-N``)."""
    return sorted(str(p.relative_to(run)) for p in run.rglob(".*tmp*"))
