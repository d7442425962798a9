"""A tester's fault run: start rlvr's CLI under each fault of the list, from scratch, and write what held.

    python benchmarks/faults/run_faults.py                         # every fault; report in benchmarks/results/faults.md
    python benchmarks/faults/run_faults.py --list                  # the faults, their groups and what must happen
    python benchmarks/faults/run_faults.py --only 'kill|disk'      # the faults whose name or group matches
    python benchmarks/faults/run_faults.py --docs docs/runs.md     # also rewrite its "What a run survives" section

Everything is made in a fresh work folder (a tiny Qwen2 model with a character-level tokenizer, an addition dataset,
recipes, verifier modules): nothing is read from outside the repository. Each fault returns checks (exit code, the one
error line and what it names, no traceback, no process left behind, a continued run equal to the unbroken one by
``scripts/compare_runs.py``, ...); it held when all of them hold. One training process runs at a time. A fault the
machine cannot stage (no user namespaces to mount a small filesystem, no Docker, no bubblewrap) is listed as not tried.
``README.md`` beside this file says more.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import faults_inputs  # noqa: E402, F401 - registers its faults
import faults_runs  # noqa: E402, F401
import faults_sandbox  # noqa: E402, F401
import faults_verifiers  # noqa: E402, F401
from bench import FAULTS, GROUPS, Bench, Fault, StateError  # noqa: E402
from harness import NAMED_PATHS, REPO, Check, hide_paths  # noqa: E402

ORDER = ["recipe", "data", "import", "verifier", "same-run", "kill", "checkpoint", "disk", "sandbox", "suite"]
LIGHT = {"recipe", "data", "import"}
# What every fault of a group must show, said once above its table in docs/runs.md; its rows then give the message.
SHOWN = {
    "recipe": "`rlvr train` stops with exit 2 and one error naming the key (or the file), before the model loads, with "
              "no traceback. The error each gives:",
    "data": "`rlvr train` stops with exit 2 and one error naming the file and line, before the model loads, with no "
            "traceback (two rows say otherwise). The error each gives:",
    "import": "A user's verifier module is imported first in a child process with a 60 s limit: `rlvr train` stops "
              "with exit 2 and one error naming the module (and FILE:LINE where there is one), before the model "
              "loads; `rlvr check` reports a hang the same way. The error each gives:",
}  # faults whose commands stop before a model loads (or only run `rlvr check`)


@dataclass
class Outcome:
    fault: Fault
    held: bool | None  # None: not tried
    observed: str
    seconds: float
    message: str = ""  # the error message the user saw, where a check read one



def ordered(faults: list[Fault]) -> list[Fault]:
    """The faults by group (in :data:`ORDER`), each group in the order its module lists them."""
    return sorted(faults, key=lambda f: ORDER.index(f.group))


def run_one(b: Bench, f: Fault) -> Outcome:
    missing = [n for n in f.needs if not b.can(n)]
    if missing:
        return Outcome(f, None, f"not tried: this machine has no {', '.join(missing)}", 0.0)
    started = time.monotonic()
    try:
        checks = f.run(b)
    except StateError as exc:
        checks = [Check("its starting run folder could be made", False, str(exc)[:300])]
    except Exception as exc:  # a fault the harness did not foresee: recorded as failed, with where it happened
        where = traceback.extract_tb(exc.__traceback__)[-1]
        checks = [Check("the fault ran to its checks", False, f"{type(exc).__name__}: {exc} "
                                                              f"({Path(where.filename).name}:{where.lineno})"[:300])]
    held = all(c.ok for c in checks)
    message = next((c.seen for c in checks if c.what.startswith(("one error line", "an error naming"))), "")
    return Outcome(f, held, observed(checks), time.monotonic() - started, message)


def observed(checks: list[Check]) -> str:
    """What a fault's checks saw: the failed ones first (``NOT <criterion>``), then what the others saw."""
    failed = [f"NOT {c.what}" + (f" ({c.seen})" if c.seen else "") for c in checks if not c.ok]
    seen = [c.seen for c in checks if c.ok and c.seen]
    return "; ".join(failed + seen)


# ---------------------------------------------------------------------------------------------------------- report
def machine() -> dict[str, str]:
    model = ""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags |= {f for f in ("avx2", "avx512_bf16", "amx_bf16") if f in line.split()}
    except OSError:
        model = platform.processor()
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    if _git("status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
            "cpu": f"{model or 'unknown CPU'} ({', '.join(sorted(flags)) or 'no AVX2'}), {os.cpu_count()} cores",
            "python": platform.python_version()}


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _cell(text: str, work: Path) -> str:
    """``text`` as one table cell: no path of the machine the run was made on (:func:`harness.hide_paths`), one line,
    pipes escaped."""
    text = hide_paths(text.replace(str(work), "$WORK"))
    return re.sub(r"\s+", " ", text).replace("|", "\\|").replace("\\\\|", "\\|").strip()


def counts(outcomes: list[Outcome]) -> str:
    tried = [o for o in outcomes if o.held is not None]
    held = sum(1 for o in tried if o.held)
    line = f"Faults tried: {len(tried)}; held: {held}; failed: {len(tried) - held}"
    skipped = [o for o in outcomes if o.held is None]
    if skipped:
        line += f"; not tried: {len(skipped)} ({sorted({o.observed for o in skipped})[0]})"
    return line + "."


def report(outcomes: list[Outcome], info: dict[str, str], work: Path, wall_s: float, loads: tuple[str, str]) -> str:
    """The tester's report: every fault with what must happen, what happened and whether it held."""
    lines = ["# Fault run", "",
             f"`python benchmarks/faults/run_faults.py` on {info['date']} at commit {info['commit']}; {info['cpu']}; "
             f"Python {info['python']}. Wall time {wall_s / 60:.1f} min; load average {loads[0]} at the start, "
             f"{loads[1]} at the end.", "", counts(outcomes), "",
             "| # | group | fault | expected | observed | s | held? |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for i, o in enumerate(outcomes, 1):
        verdict = "not tried" if o.held is None else ("yes" if o.held else "**NO**")
        lines.append(f"| {i} | {o.fault.group} | {_cell(o.fault.name, work)} | {_cell(o.fault.expected, work)} | "
                     f"{_cell(o.observed, work)} | {o.seconds:.0f} | {verdict} |")
    return "\n".join(lines) + "\n"


def docs_section(outcomes: list[Outcome], info: dict[str, str], work: Path, wall_s: float) -> str:
    """The "What a run survives" section of docs/runs.md: per group, fault | what happens | data lost."""
    out = ["## What a run survives", "",
           "`python benchmarks/faults/run_faults.py` starts `rlvr` under each fault below, from scratch, with a tiny "
           "model and dataset it makes itself, and checks what must happen: the exit code, one error line naming the "
           "right thing, no Python traceback, no process left behind, and, where nothing finished may be lost, the "
           "run continued to its end and compared with an unbroken run by `scripts/compare_runs.py` (metrics step for "
           "step, samples and final weights). `benchmarks/faults/README.md` says how to run it; its report lists "
           "each check.", "",
           f"Last run: {info['date']}, commit {info['commit']}, {info['cpu']}; {wall_s / 60:.0f} minutes.", "",
           counts(outcomes) + _failing(outcomes), ""]
    for group in ORDER:
        rows = [o for o in outcomes if o.fault.group == group]
        if not rows:
            continue
        out += [f"### {GROUPS[group]}", ""] + ([SHOWN[group], ""] if group in SHOWN else [])
        out += ["| fault | what happens | data lost |", "| --- | --- | --- |"]
        for o in rows:
            if o.held is None:
                what = f"not tried here ({o.observed.removeprefix('not tried: ')}): {o.fault.expected}"
            elif not o.held:
                what = f"**Fails:** {o.observed}"
            elif group in SHOWN and o.message and ONE_LINE_DEFAULT.search(o.fault.expected):
                what = o.message
            else:
                what = o.fault.expected
            name = o.fault.name.removeprefix(f"{group}: ")
            out.append(f"| {_cell(name, work)} | {_cell(what, work)} | {_cell(o.fault.data_lost, work)} |")
        out.append("")
    return "\n".join(out)


def _failing(outcomes: list[Outcome]) -> str:
    names = [o.fault.name for o in outcomes if o.held is False]
    return f" It fails on: {'; '.join(names)} (rows marked **Fails** below)." if names else ""


ONE_LINE_DEFAULT = re.compile(r"exits 2 with one (error|line)")


def update_docs(path: Path, section: str) -> None:
    """Replace ``path``'s "## What a run survives" section (up to the next ``## `` heading) with ``section``."""
    text = path.read_text()
    m = re.search(r"^## What a run survives\n.*?(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    if m is None:
        raise SystemExit(f"{path}: no '## What a run survives' section to replace")
    path.write_text(text[:m.start()] + section.rstrip() + "\n" + ("\n" + text[m.end():] if text[m.end():] else ""))


# ------------------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", metavar="REGEX", help="only the faults whose name or group matches")
    parser.add_argument("--list", action="store_true", help="list the faults and exit")
    parser.add_argument("--work", type=Path, help="work folder (default: a new temporary folder, removed at the end "
                                                  "unless --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (its commands.log holds every "
                                                            "command and its output)")
    parser.add_argument("--report", type=Path, default=REPO / "benchmarks" / "results" / "faults.md")
    parser.add_argument("--docs", type=Path, help="rewrite this file's '## What a run survives' section")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs rlvr")
    parser.add_argument("--jobs", type=int, default=2, help="faults of the recipe, data and import groups run this many "
                                                            "at a time (their commands load no model; default 2)")
    args = parser.parse_args(argv)

    faults = ordered([f for f in FAULTS if not args.only or re.search(args.only, f"{f.group} {f.name}")])
    if args.list:
        for f in faults:
            print(f"{f.group:<11} {f.name}\n{'':<11} -> {f.expected}")
        print(f"{len(faults)} faults")
        return 0
    if not faults:
        print(f"no fault matches {args.only!r}", file=sys.stderr)
        return 2
    # a run started in the background by a shell ignores SIGINT, and its children would inherit that: the Ctrl-C
    # faults need the CLI to meet SIGINT as a terminal's user does
    signal.signal(signal.SIGINT, signal.default_int_handler)
    work = args.work or Path(tempfile.mkdtemp(prefix="rlvr-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    NAMED_PATHS[str(work.resolve())] = NAMED_PATHS[str(work)] = "$WORK"
    info = machine()
    load_start = " ".join(f"{x:.1f}" for x in os.getloadavg())
    started = time.monotonic()
    print(f"{len(faults)} faults; work folder {work}; {info['cpu']}; load {load_start}", flush=True)
    b = Bench(work, args.python)
    outcomes: list[Outcome] = []
    done = 0

    def record(o: Outcome) -> None:
        nonlocal done
        done += 1
        verdict = "not tried" if o.held is None else ("held" if o.held else "FAILED")
        print(f"[{done}/{len(faults)}] {verdict:<9} {o.seconds:5.0f} s  {o.fault.group}: {o.fault.name}" +
              ("" if o.held is not False else f"\n      {_cell(o.observed, work)}"), flush=True)

    try:
        light = [f for f in faults if f.group in LIGHT]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:  # processes that load no model: side by side
            for o in pool.map(lambda f: run_one(b, f), light):
                record(o)
                outcomes.append(o)
        for f in faults:  # the rest one at a time: one training process at a time
            if f.group not in LIGHT:
                outcomes.append(run_one(b, f))
                record(outcomes[-1])
    finally:
        (work / "commands.log").write_text("\n".join(b.cli.log))
    wall = time.monotonic() - started
    load_end = " ".join(f"{x:.1f}" for x in os.getloadavg())
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(report(outcomes, info, work, wall, (load_start, load_end)))
    if args.docs:
        update_docs(args.docs, docs_section(outcomes, info, work, wall))
    print(f"{counts(outcomes)} Wall time {wall / 60:.1f} min. Report: {args.report}", flush=True)
    if not args.keep and not args.work:
        shutil.rmtree(work, ignore_errors=True)
    elif args.keep or args.work:
        print(f"work folder kept: {work} (commands.log: every command and its output)")
    return 0 if all(o.held is not False for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
