"""Python tool calls per second through the sandbox, on the path tool-use rollouts take.

    .venv/bin/python benchmarks/bench_tool_calls.py                 # writes benchmarks/results/tool_calls.md
    .venv/bin/python benchmarks/bench_tool_calls.py --reps 3 --backends bwrap

What runs: the built-in ``python`` tool (:class:`rlvr.tools.python_tool.PythonTool`, the recipe's limits of
``recipes/tool_demo.yaml``: 5 s per call) answering a batch of calls with ``run_batch``, as a rollout does for the calls
of one turn: one ``rlvr.sandbox.run_many`` over the sandbox's warm pool. The calls are the code the demo's model
writes (``print(64 + 780 - 33 - 436)``, or the same sum put in a variable and printed), each with other numbers, and
every answer is checked against the sum.

Per backend (Docker needs a running engine and the sandbox image, `make sandbox`; bubblewrap needs `bwrap`; a
backend that cannot run is skipped with the reason): one batch of 64 to warm the pool (not counted), then
``--reps`` repetitions, each timing one batch of every size of ``--sizes`` on every backend in turn (alternated, so
a change in the machine's load falls on all of them). Reported: calls per second (batch size / batch wall time;
median over repetitions), the batch's wall time (what each call of the batch waits) and ms per call (wall time /
batch size), and the median in-sandbox run time of one call (``ToolResult.seconds``, what ``samples/step-N.jsonl``
logs as a call's ``seconds``).

Hostile batch: 64 calls of which one is ``while True: pass``. The tool's time limit stops that one (status
``timeout``); the batch's wall time stays near the limit and the 63 others are answered as usual.

The machine may be shared: the 1-minute load average before and after goes with the results.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import stamp  # noqa: E402
from rlvr.sandbox.backends import get_backend  # noqa: E402
from rlvr.sandbox.errors import SandboxUnavailable  # noqa: E402
from rlvr.tools.python_tool import PythonTool  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "tool_calls.md"
TIME_S = 5.0  # recipes/tool_demo.yaml: rollout.tools: [{name: python, kwargs: {time_s: 5.0}}]
HOSTILE = "while True:\n    pass"


def demo_calls(n: int, seed: int) -> tuple[list[dict[str, str]], list[str]]:
    """``n`` tool-call argument dicts like the demo model's (a sum of 3-4 numbers of 2-3 digits, printed directly
    or through a variable), different numbers for each ``seed``, and the output each must print (with newline)."""
    arguments, expected = [], []
    for i in range(n):
        k = seed * 1000 + i
        terms = [100 + (37 * k) % 900, 10 + (53 * k) % 90, 100 + (71 * k) % 900] + ([10 + k % 90] if k % 2 else [])
        signs = [1, -1, 1][: len(terms) - 1]
        expr = " ".join([str(terms[0])] + [f"{'+' if s > 0 else '-'} {t}" for s, t in zip(signs, terms[1:])])
        code = f"print({expr})" if k % 3 else f"result = {expr}\nprint(result)"
        arguments.append({"code": code})
        expected.append(f"{terms[0] + sum(s * t for s, t in zip(signs, terms[1:]))}\n")
    return arguments, expected


def time_batch(tool: PythonTool, arguments: list[dict[str, str]], expected: list[str | None]) -> dict:
    """Run one batch through ``tool.run_batch`` (fresh sessions, as a rollout's first tool turn) and time it.

    Returns ``wall_s`` (seconds, the batch), ``in_sandbox_s`` (median of the calls' own run times, seconds),
    ``statuses`` (status -> count), ``wrong`` (ok calls whose output differs from ``expected``; None entries are
    not checked), ``errors`` (the first two ``error`` answers). Raises nothing: a failing sandbox shows as
    ``error`` statuses."""
    sessions: list[dict] = [{} for _ in arguments]
    start = time.perf_counter()
    results = tool.run_batch(arguments, sessions)
    wall = time.perf_counter() - start
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    wrong = sum(1 for r, want in zip(results, expected, strict=True)
                if want is not None and r.status == "ok" and r.output != want)
    return {"wall_s": wall, "in_sandbox_s": statistics.median(r.seconds for r in results),
            "statuses": statuses, "wrong": wrong,
            "errors": [r.output[:200] for r in results if r.status == "error"][:2]}


def available_backends(names: list[str]) -> tuple[list[str], dict[str, str]]:
    """The backends of ``names`` that can run here, and for the others the reason (``SandboxUnavailable``'s text)."""
    ok, skipped = [], {}
    for name in names:
        try:
            get_backend(name)
        except SandboxUnavailable as e:
            skipped[name] = str(e)
        else:
            ok.append(name)
    return ok, skipped


def _load() -> float:
    return os.getloadavg()[0]


def _fmt_statuses(statuses: dict[str, int]) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))


def report(args: argparse.Namespace, backends: list[str], skipped: dict[str, str], warm: dict, timed: dict,
           hostile: dict, load_start: float, load_end: float, seconds: float) -> str:
    """The markdown report of one invocation."""
    command = " ".join(["python benchmarks/bench_tool_calls.py", *sys.argv[1:]])
    lines = ["# Python tool calls through the sandbox", "",
             f"Written by `{command}`: {stamp()}; "
             f"{os.cpu_count()} cores, shared with other jobs (1-minute load average {load_start:.1f} before, "
             f"{load_end:.1f} after); {seconds:.0f} s in all.", "",
             f"The built-in `python` tool's `run_batch` (one `run_many` over the warm pool, as a rollout runs the calls "
             f"of a turn) on the demo model's kind of code (`print(64 + 780 - 33 - 436)`), time limit {TIME_S:g} s. "
             f"{args.reps} repetitions, batch sizes and backends alternated; medians over repetitions (min-max of the "
             "calls/s in brackets). A batch's wall time is what each of its calls waits. First batch of 64 of the "
             "process (starts the pool, not counted): "
             + ", ".join(f"{name} {warm[name]['wall_s']:.2f} s" for name in backends) + ".", ""]
    for name, why in skipped.items():
        lines.append(f"- {name}: skipped, {why}")
    if skipped:
        lines.append("")
    lines += ["| backend | calls per batch | calls/s | batch wall ms | ms per call | in-sandbox ms per call | "
              "answers |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name in backends:
        for size in args.sizes:
            runs = timed[(name, size)]
            rates = [size / r["wall_s"] for r in runs]
            wall = statistics.median(r["wall_s"] for r in runs)
            inside = statistics.median(r["in_sandbox_s"] for r in runs)
            statuses: dict[str, int] = {}
            for r in runs:
                for s, n in r["statuses"].items():
                    statuses[s] = statuses.get(s, 0) + n
            wrong = sum(r["wrong"] for r in runs)
            answers = _fmt_statuses(statuses) + (f", {wrong} wrong" if wrong else ", all right")
            lines.append(f"| {name} | {size} | {statistics.median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f}) | "
                         f"{1000 * wall:.0f} | {1000 * wall / size:.1f} | {1000 * inside:.1f} | {answers} |")
    lines += ["", f"Hostile batch: 64 calls, one of them `{HOSTILE.splitlines()[0]} pass` (time limit {TIME_S:g} s), "
              "against the same 64 calls without it (the last repetition above).", "",
              "| backend | batch | wall s | statuses |", "| --- | --- | ---: | --- |"]
    for name in backends:
        plain = timed[(name, 64)][-1] if 64 in args.sizes else None
        if plain is not None:
            lines.append(f"| {name} | 64 plain calls | {plain['wall_s']:.2f} | {_fmt_statuses(plain['statuses'])} |")
        for r in hostile[name]:
            lines.append(f"| {name} | 63 plain + 1 infinite loop | {r['wall_s']:.2f} | {_fmt_statuses(r['statuses'])}"
                         f"{', ' + str(r['wrong']) + ' wrong' if r['wrong'] else ''} |")
    errors = [e for runs in list(timed.values()) + list(hostile.values()) for r in runs for e in r["errors"]]
    if errors:
        lines += ["", "First error answers: " + "; ".join(f"`{e.strip()[:160]}`" for e in errors[:2])]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Measure and write ``--out`` (markdown); prints it too."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default="docker,bwrap", help="comma-separated: docker, bwrap")
    p.add_argument("--sizes", default="1,8,64", help="calls per batch, comma-separated")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions of every (backend, size)")
    p.add_argument("--hostile-reps", type=int, default=2, help="hostile batches per backend")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    t0, load_start = time.perf_counter(), _load()
    backends, skipped = available_backends([b.strip() for b in args.backends.split(",") if b.strip()])
    for name, why in skipped.items():
        print(f"{name}: skipped ({why})", flush=True)
    tools = {name: PythonTool(time_s=TIME_S, backend=name) for name in backends}
    warm = {}
    for name in backends:  # warm the pool: containers / drivers started once, as in a training run
        warm[name] = time_batch(tools[name], *demo_calls(64, seed=999))
        print(f"{name}: warm-up batch of 64 in {warm[name]['wall_s']:.2f} s "
              f"({_fmt_statuses(warm[name]['statuses'])})", flush=True)
    timed: dict[tuple[str, int], list[dict]] = {(b, s): [] for b in backends for s in args.sizes}
    for rep in range(args.reps):
        for name in backends if rep % 2 == 0 else backends[::-1]:
            for size in args.sizes if rep % 2 == 0 else args.sizes[::-1]:
                r = time_batch(tools[name], *demo_calls(size, seed=rep * 10 + size))
                timed[(name, size)].append(r)
                print(f"rep {rep + 1} {name} {size:>2} calls: {r['wall_s'] * 1000:7.1f} ms "
                      f"({size / r['wall_s']:.0f} calls/s; {_fmt_statuses(r['statuses'])})", flush=True)
    hostile: dict[str, list[dict]] = {b: [] for b in backends}
    for rep in range(args.hostile_reps):
        for name in backends:
            arguments, expected = demo_calls(64, seed=500 + rep)
            arguments[17], expected[17] = {"code": HOSTILE}, None
            r = time_batch(tools[name], arguments, expected)
            hostile[name].append(r)
            print(f"hostile {name}: {r['wall_s']:.2f} s ({_fmt_statuses(r['statuses'])})", flush=True)
    text = report(args, backends, skipped, warm, timed, hostile, load_start, _load(), time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
