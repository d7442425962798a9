"""Sandbox throughput: programs judged per second, per design and per language, in one run.

    .venv/bin/python benchmarks/bench_sandbox.py               # writes benchmarks/results/sandbox.md
    .venv/bin/python benchmarks/bench_sandbox.py --programs 40 --designs pooled-fork,bwrap-fork   # quicker

Designs (all run the same in-sandbox driver, with the same limits and as many parallel sandboxes):
  fresh        one new container per program (started, one `docker exec`, removed): the naive Docker
               design (the same driver, so Python runs fork from a fork server started per program);
  pooled-exec  warm pooled containers, up to 16 programs per `docker exec`, every test a new interpreter
               (this project before the fork server);
  pooled-fork  the same, Python runs forked from a warm interpreter in the container (this project);
  bwrap-exec / bwrap-fork   one bubblewrap sandbox per batch of up to 16 programs, without / with it;
  reward-per-sample / reward-batch   the `code` verifier inside a `RewardFunction` (2 worker processes), one
               pool call per sample (as before the batch hook) or the whole set in one batch call (the
               batch hook: one `rlvr.sandbox.run_many`); on Docker, with the fork server.
Workloads: small stdio programs (3 tests each, every other one wrong) in Python, C, C++, Java and
JavaScript (compile time included), and the labelled cases of shared/cases/code_dev.jsonl without the
ones whose tests run into the time limit (those only measure waiting). `pass/fail = label` counts
programs whose pass/fail matches the label. The machine is shared: its load average goes with the results.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rlvr.sandbox.batch  # noqa: E402
import rlvr.sandbox.scheduler  # noqa: E402
from rlvr import sandbox  # noqa: E402
from rlvr.sandbox import Job, Limits  # noqa: E402
from rlvr.sandbox.backends import get_backend  # noqa: E402
from rlvr.sandbox.backends.base import Backend  # noqa: E402
from rlvr.sandbox.backends.docker_backend import DockerBackend, ExecChannel, image_name  # noqa: E402
from rlvr.sandbox.backends.docker_pool import ContainerPool, ContainerSpec  # noqa: E402
from rlvr.sandbox.batch import BatchOutcome, request_bytes, run_batch  # noqa: E402
from rlvr.sandbox.judge import judge  # noqa: E402
from rlvr.sandbox.scheduler import execute  # noqa: E402
from rlvr.verifiers import verifier  # noqa: E402
from rlvr.verifiers.code import code_reward  # noqa: E402
from rlvr.verifiers.reward import RewardFunction, VerifierSpec  # noqa: E402

CASES = Path("/work/shared/cases/code_dev.jsonl")
OUT = ROOT / "benchmarks" / "results" / "sandbox.md"
LABELS = {
    "fresh": "(a) fresh container per program (fork server inside)",
    "pooled-exec": "(b) pooled containers, batched, new interpreter per test",
    "pooled-fork": "(c) pooled containers, batched, fork server (this project)",
    "bwrap-exec": "(d) bubblewrap, batched, new interpreter per test",
    "bwrap-fork": "(e) bubblewrap, batched, fork server",
    "reward-per-sample": "(f) RewardFunction, one pool call per sample (before)",
    "reward-batch": "(g) RewardFunction, batch hook: one run_many per step (this project)",
}
# Small correct and wrong a+b programs per language; {k} makes every other one wrong.
ADD_PROGRAMS = {
    "python": "a, b = map(int, input().split())\nprint(a + b + {k})\n",
    "c": "#include <stdio.h>\nint main(void){{long long a,b;scanf(\"%lld %lld\",&a,&b);printf(\"%lld\\n\",a+b+{k});return 0;}}\n",
    "cpp": "#include <iostream>\nint main(){{long long a,b;std::cin>>a>>b;std::cout<<a+b+{k}<<\"\\n\";}}\n",
    "java": "import java.util.*;\npublic class Main{{public static void main(String[] x){{Scanner s=new Scanner(System.in);"
            "System.out.println(s.nextLong()+s.nextLong()+{k});}}}}\n",
    "javascript": "const [a,b]=require('fs').readFileSync(0,'utf8').trim().split(/\\s+/).map(BigInt);"
                  "console.log(String(a+b+{k}n));\n",
}


class FreshContainerBackend(Backend):
    """The naive design: every batch (one program) gets a new container with the pool's flags, removed right
    after."""

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


@verifier("bench_code_per_sample")
def code_per_sample(completion: str, sample: dict) -> Any:
    """The code verifier without its batch hook: a RewardFunction sends it one sample per call."""
    return code_reward(completion, sample)


def add_jobs(language: str, n: int) -> list[tuple[Job, bool]]:
    tests = [{"input": f"{a} {b}\n", "output": f"{a + b}\n"} for a, b in ((1, 2), (-5, 5), (10**12, 7))]
    return [(Job(ADD_PROGRAMS[language].format(k=i % 2), tests, limits=Limits(time_s=5), language=language),
             i % 2 == 0) for i in range(n)]


def labelled_fast() -> list[tuple[Job, bool]]:
    rows = [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]
    return [(Job(r["solution"], r["tests"], r["test_type"], r.get("checker") or "lines",
                 Limits.from_mapping(r.get("limits")), r.get("language") or "python"), bool(r["expected_pass"]))
            for r in rows if r.get("expected_failure_mode") != "TLE" and r["category"] != "fork_bomb"]


def cpu_seconds(backend: Backend | None) -> float | None:
    """CPU seconds used so far by this process and the Docker pool's live containers (their cgroups: the
    driver, fork server and programs; the engine's own work per `docker exec` is not counted). None for
    designs whose sandboxes cannot be counted: fresh containers are gone when we look, and bubblewrap's
    processes are not all reaped by us (their CPU time never reaches RUSAGE_CHILDREN)."""
    if backend is None or backend.name != "docker":
        return None
    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    for container_id in backend.pool.container_ids():
        try:
            total += int(Path(f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None
    return total


def judge_with_backend(backend: Backend, jobs: list[Job], max_batch: int) -> tuple[list[bool], float, float | None]:
    """Pass/fail of every job, the wall-clock seconds it took and the CPU seconds (see cpu_seconds)."""
    cpu0, started = cpu_seconds(backend), time.monotonic()
    results = execute(backend, jobs, max_batch=max_batch)
    wall, cpu1 = time.monotonic() - started, cpu_seconds(backend)
    passed = [judge(j, r, backend.name, 0.0).passed for j, r in zip(jobs, results)]
    return passed, wall, (cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None)


def judge_with_reward_fn(name: str, jobs: list[Job]) -> tuple[list[bool], float]:
    """Pass/fail through a RewardFunction running verifier `name` on completions that fence the programs."""
    completions = [f"```{job.language}\n{job.program}```" for job in jobs]
    samples = [{"test_type": job.test_type, "tests": job.tests, "checker": job.checker, "language": job.language,
                "limits": {"time_s": job.limits.time_s}} for job in jobs]
    with RewardFunction([VerifierSpec(name, timeout_s=120)], num_workers=2) as reward_fn:
        reward_fn.score(completions[:2], samples[:2])  # warm: workers and their containers started
        started = time.monotonic()
        results = reward_fn.score(completions, samples)
        wall = time.monotonic() - started
    return [r.scores[name] == 1.0 for r in results], wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--designs", default=",".join(LABELS))
    parser.add_argument("--programs", type=int, default=120, help="small Python programs (other languages: a fifth)")
    parser.add_argument("--languages", default="python,c,cpp,java,javascript")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    designs = args.designs.split(",")
    for name in designs:
        if name not in LABELS:
            parser.error(f"unknown design {name!r}; valid: {', '.join(LABELS)}")

    workloads: list[tuple[str, str, list[tuple[Job, bool]]]] = []
    for language in args.languages.split(","):
        n = args.programs if language == "python" else max(4, args.programs // 5)
        workloads.append((language, f"{language}: a+b, 3 tests each", add_jobs(language, n)))
    if CASES.exists():
        fast = labelled_fast()
        workloads.append(("python", f"labelled cases without time-limit ones ({len(fast)})", fast))

    docker = get_backend("docker") if any(d in designs for d in ("fresh", "pooled-exec", "pooled-fork")) else None
    bwrap = get_backend("bwrap") if any(d.startswith("bwrap") for d in designs) else None
    fresh = FreshContainerBackend(docker) if "fresh" in designs else None
    load = os.getloadavg()[0]
    cpu = _cpu_name()
    lines = ["# Sandbox throughput", "",
             f"Machine: {cpu}, {os.cpu_count()} cores, load average {load:.1f} at the start (shared with other "
             f"work, so absolute numbers are pessimistic; compare designs within a row group). "
             f"{(docker or bwrap).workers() if (docker or bwrap) else 2} parallel sandboxes per design. "
             "Produced by `benchmarks/bench_sandbox.py` in one run.", "",
             "`CPU ms/program` (pooled Docker designs only) counts this process and the pooled containers' "
             "cgroups (driver, fork server, programs), not the Docker engine's work per `docker exec`; "
             "`programs/s on 2 idle cores` is 2 / (CPU s per program): an upper bound on what the design reaches "
             "with both cores to itself.", "",
             "| workload | design | programs | tests | wall s | programs/s | tests/s | CPU ms/program "
             "| programs/s on 2 idle cores | pass/fail = label |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for language, workload, items in workloads:
        jobs = [job for job, _ in items]
        n_tests = sum(job.n_tests for job in jobs)
        for name in designs:
            if language != "python" and name.endswith("-exec"):
                continue  # the fork server serves Python only: -exec and -fork are the same design here
            if name.startswith("reward") and not workload.startswith("python"):
                continue
            sandbox.batch.FORK_SERVER = not name.endswith("-exec")
            if name.startswith("reward"):
                target = "code" if name == "reward-batch" else "bench_code_per_sample"
                passed, wall = judge_with_reward_fn(target, jobs)
                cpu = None
            else:
                backend = {"fresh": fresh, "pooled-exec": docker, "pooled-fork": docker}.get(name, bwrap)
                max_batch = 1 if name == "fresh" else sandbox.scheduler.MAX_BATCH
                execute(backend, jobs[:2], max_batch=max_batch)  # warm: containers started, caches filled
                passed, wall, cpu = judge_with_backend(backend, jobs, max_batch)
            agree = sum(p == ok for p, (_, ok) in zip(passed, items))
            label = LABELS[name]
            if language != "python":  # the fork server serves Python only
                label = label.replace(" (fork server inside)", "").replace(", fork server", "")
            cpu_cols = (f"{1000 * cpu / len(jobs):.0f} | {2 * len(jobs) / cpu:.1f}" if cpu else "n/a | n/a")
            row = (f"| {workload} | {label} | {len(jobs)} | {n_tests} | {wall:.1f} | {len(jobs) / wall:.2f} | "
                   f"{n_tests / wall:.1f} | {cpu_cols} | {agree}/{len(jobs)} |")
            print(row, flush=True)
            lines.append(row)
    sandbox.batch.FORK_SERVER = True
    lines += ["", f"Load average at the end: {os.getloadavg()[0]:.1f}. Compiled languages include compiling "
              "each program once (g++ with iostream ~1 s, javac ~1.5 s on this machine); Java also pays a JVM start "
              "per test (~0.5 s). The fork server serves Python only, so other languages have one row per "
              "backend. `pass/fail = label` counts programs whose overall pass/fail matches the label; the "
              "nondeterministic labelled case (right on each test with probability 2/3) can go either way."]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


def _cpu_name() -> str:
    """The CPU model with the vector extensions that matter here (AVX-512, AMX), from /proc/cpuinfo."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU"
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    extras = [name for flag, name in (("avx512f", "AVX-512"), ("amx_bf16", "AMX-bf16"), ("avx2", "AVX2")) if flag in flags]
    if "AVX-512" in extras:
        extras.remove("AVX2")
    return f"{model} ({', '.join(extras) or 'no AVX2'})"


if __name__ == "__main__":
    sys.exit(main())
