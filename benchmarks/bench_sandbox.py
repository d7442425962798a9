"""Sandbox throughput: programs judged per second, three designs, same judging code.

    .venv/bin/python benchmarks/bench_sandbox.py               # writes benchmarks/results/sandbox.md
    .venv/bin/python benchmarks/bench_sandbox.py --synthetic 60 --designs pooled,bwrap   # quicker

Designs (all run the same in-sandbox driver, with the same limits and as many parallel sandboxes):
  fresh   one new container per test (started, one `docker exec`, removed), the naive Docker design;
  pooled  this project's design: warm pooled containers, all tests of a program and up to 8 programs per
          `docker exec`;
  bwrap   one bubblewrap sandbox per batch of up to 8 programs.
Workloads: the labelled cases of shared/cases/code_dev.jsonl (all of them, then without the cases whose
tests run into the time limit, which only measure waiting), and `--synthetic` small programs (three stdio
tests each, every other one wrong). Also reported: how many verdicts agree with the labels.
The machine is shared: its load average is printed with the results.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandbox import Job, Limits  # noqa: E402
from sandbox.backends import get_backend  # noqa: E402
from sandbox.backends.base import Backend  # noqa: E402
from sandbox.backends.docker_backend import DockerBackend, ExecChannel, image_name  # noqa: E402
from sandbox.backends.docker_pool import ContainerPool, ContainerSpec  # noqa: E402
from sandbox.batch import BatchOutcome, request_bytes, run_batch  # noqa: E402
from sandbox.jobs import split_assert_code  # noqa: E402
from sandbox.judge import judge  # noqa: E402
from sandbox.scheduler import execute  # noqa: E402

CASES = Path("/work/shared/cases/code_dev.jsonl")
OUT = ROOT / "benchmarks" / "results" / "sandbox.md"


class FreshContainerBackend(Backend):
    """The naive design: every batch gets a new container (same flags as the pool's), removed right after."""

    name = "docker-fresh"

    def __init__(self, docker: DockerBackend) -> None:
        self.docker = docker
        self.pool = ContainerPool(docker.client, image_name())  # its own: nothing is ever given back to it

    def workers(self) -> int:
        return self.docker.workers()

    def group_key(self, job: Job):
        return self.docker.group_key(job)

    def run_batch(self, jobs: Sequence[Job]) -> BatchOutcome:
        container = self.pool.acquire(ContainerSpec.for_limits(jobs[0].limits))
        channel = None
        try:
            channel = ExecChannel(self.docker.client, container)
            request = request_bytes(jobs, pid_namespace=True, scratch=["/tmp", "/dev/shm"], nproc=None)
            return run_batch(channel, jobs, request)
        finally:
            if channel is not None:
                channel.close()
            self.pool.discard(container)


def one_test_jobs(job: Job) -> list[Job]:
    """The job cut into one job per test (assert code keeps its setup statements)."""
    if job.test_type == "stdio":
        return [Job(job.program, [t], "stdio", job.checker, job.limits) for t in job.tests]
    if job.test_type == "call":
        return [Job(job.program, {"fn_name": job.tests["fn_name"], "cases": [c]}, "call", job.checker, job.limits)
                for c in job.tests["cases"]]
    units = split_assert_code(job.tests)
    tests = [i for i, (_, is_test) in enumerate(units) if is_test]
    return [Job(job.program, "\n".join(code for i, (code, is_test) in enumerate(units) if not is_test or i == k),
                "assert", job.checker, job.limits) for k in tests]


def judge_all(backend: Backend, jobs: list[Job], per_test: bool) -> tuple[list[bool], float]:
    """Pass/fail of every job and the wall-clock seconds it took."""
    started = time.monotonic()
    if not per_test:
        results = execute(backend, jobs)
        passed = [judge(j, r, backend.name, 0.0).passed for j, r in zip(jobs, results)]
        return passed, time.monotonic() - started
    pieces = [one_test_jobs(j) for j in jobs]
    flat = [p for ps in pieces for p in ps]
    results = iter(execute(backend, flat, max_batch=1))
    verdicts = [[judge(p, next(results), backend.name, 0.0).passed for p in ps] for ps in pieces]
    passed = [all(v) for v in verdicts]
    return passed, time.monotonic() - started


def load_cases() -> list[dict]:
    return [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]


def synthetic(n: int) -> list[tuple[Job, bool]]:
    tests = [{"input": f"{a} {b}\n", "output": f"{a + b}\n"} for a, b in ((1, 2), (-5, 5), (10**12, 7))]
    return [(Job(f"a, b = map(int, input().split())\nprint(a + b + {i % 2})\n", tests, limits=Limits(time_s=2)),
             i % 2 == 0) for i in range(n)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--designs", default="fresh,pooled,bwrap")
    parser.add_argument("--synthetic", type=int, default=120, help="number of synthetic programs")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()

    workloads: list[tuple[str, list[tuple[Job, bool]]]] = []
    if CASES.exists():
        rows = load_cases()
        labelled = [(Job(r["solution"], r["tests"], r["test_type"], r.get("checker") or "lines",
                         Limits.from_mapping(r.get("limits"))), bool(r["expected_pass"])) for r in rows]
        workloads.append((f"labelled cases, all ({len(rows)})", labelled))
        fast = [(job, ok) for (job, ok), r in zip(labelled, rows) if r.get("expected_failure_mode") != "TLE"
                and r["category"] not in ("fork_bomb",)]
        workloads.append((f"labelled cases without time-limit ones ({len(fast)})", fast))
    workloads.append((f"synthetic: small programs, 3 tests each ({args.synthetic})", synthetic(args.synthetic)))

    designs = {}
    for name in args.designs.split(","):
        if name == "pooled":
            designs[name] = (get_backend("docker"), False)
        elif name == "fresh":
            designs[name] = (FreshContainerBackend(get_backend("docker")), True)
        elif name == "bwrap":
            designs[name] = (get_backend("bwrap"), False)
        else:
            parser.error(f"unknown design {name!r}; valid: fresh, pooled, bwrap")

    labels = {"fresh": "(a) fresh container per test", "pooled": "(b) pooled containers, batched (this project)",
              "bwrap": "(c) bubblewrap, batched"}
    lines = ["# Sandbox throughput", "",
             f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start "
             "(shared with other work); "
             f"{designs[next(iter(designs))][0].workers()} parallel sandboxes per design. Produced by "
             "`benchmarks/bench_sandbox.py`.", "",
             "| workload | design | programs | tests | wall s | programs/s | tests/s | pass/fail = label |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for workload, items in workloads:
        jobs = [job for job, _ in items]
        n_tests = sum(job.n_tests for job in jobs)
        for name, (backend, per_test) in designs.items():
            execute(backend, jobs[:2])  # warm: containers started, caches filled
            passed, wall = judge_all(backend, jobs, per_test)
            agree = sum(p == ok for p, (_, ok) in zip(passed, items))
            row = (f"| {workload} | {labels[name]} | {len(jobs)} | {n_tests} | {wall:.1f} | {len(jobs) / wall:.2f} | "
                   f"{n_tests / wall:.1f} | {agree}/{len(jobs)} |")
            print(row, flush=True)
            lines.append(row)
    lines += ["", "The labelled set is dominated by programs that run into the 2 s time limit (each such test waits "
              "the full limit whatever the design), hence the second workload. `pass/fail = label` counts programs "
              "whose overall pass/fail matches `expected_pass`; the nondeterministic case (right on each test with "
              "probability 2/3) can go either way."]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
