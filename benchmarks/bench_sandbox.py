"""Sandbox throughput: programs judged per second, per design and per language, in one run.

    .venv/bin/python benchmarks/bench_sandbox.py                # everything (~5 min on 2 idle cores)
    .venv/bin/python benchmarks/bench_sandbox.py --python-only  # Python designs only (~1-2 min)
    .venv/bin/python benchmarks/bench_sandbox.py --programs 40 --designs pooled-fork,reward-batch   # quicker
    .venv/bin/python benchmarks/bench_sandbox.py --isolation    # a SIGSTOP program in a batch of 64; hostile programs

Designs (all run the same in-sandbox driver, with the same limits and as many parallel sandboxes):
  fresh        one new container per program (started, one `docker exec`, removed): the naive Docker
               design (the same driver, so Python runs fork from a fork server started per program);
  pooled-exec  warm pooled containers with warm drivers, every test a new interpreter (no fork server);
  pooled-fork-cold   pooled containers, fork server, but one `docker exec` (a new driver and fork
               server) per batch of up to 16 programs: this project before warm drivers;
  pooled-fork  pooled containers, each with a warm driver serving batch after batch on one `docker exec`,
               Python runs forked from its warm fork server (this project);
  bwrap-exec / bwrap-fork   one bubblewrap sandbox per batch of up to 16 programs, without / with it;
  reward-per-sample / reward-batch   the `code` verifier inside a `RewardFunction` (2 worker processes), one
               pool call per sample (as before the batch hook) or the whole set in one batch call (the
               batch hook: one `rlvr.sandbox.run_many`, the path training uses); on Docker, with the fork server.
The slow baselines (fresh, reward-per-sample) judge the first 30 programs of a workload; rates are per
program either way.
Workloads: small stdio programs (3 tests each, every other one wrong) in Python, C, C++, Java and
JavaScript (compile time included), and the labelled cases of tests/data/code_cases.jsonl without the
ones whose tests run into the time limit (those only measure waiting). `pass/fail = label` counts
programs whose pass/fail matches the label. The machine is shared: its load average goes with the results,
and CPU ms per program (see `CpuMeter`), which load changes far less, with them.
`--isolation` measures instead, per backend, the wall time of a batch of 64 a+b programs whose first calls
os.kill(-1, SIGSTOP), and how many of the hostile programs of tests/test_sandbox_isolation.py are contained
(appended to --out, with the date and commit).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    import docker as docker_sdk
except ImportError:  # no Docker SDK: the Docker designs cannot run anyway
    docker_sdk = None

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rlvr.sandbox.batch  # noqa: E402
import rlvr.sandbox.scheduler  # noqa: E402
from benchmarks.machine import cpu_name  # noqa: E402
from rlvr.sandbox import Job, Limits  # noqa: E402
from rlvr.sandbox.backends import get_backend  # noqa: E402
from rlvr.sandbox.backends.base import Backend  # noqa: E402
from rlvr.sandbox.backends.docker_backend import DockerBackend, ExecChannel, image_name  # noqa: E402
from rlvr.sandbox.backends.docker_pool import OWNER_LABEL, ContainerPool, ContainerSpec  # noqa: E402
from rlvr.sandbox.batch import BatchOutcome, request_bytes, run_batch  # noqa: E402
from rlvr.sandbox.judge import judge  # noqa: E402
from rlvr.sandbox.scheduler import execute  # noqa: E402
from rlvr.verifiers import verifier  # noqa: E402
from rlvr.verifiers.code import code_reward  # noqa: E402
from rlvr.verifiers.reward import RewardFunction, VerifierSpec  # noqa: E402

CASES = ROOT / "tests" / "data" / "code_cases.jsonl"
OUT = ROOT / "benchmarks" / "results" / "sandbox.md"
LABELS = {
    "fresh": "(a) fresh container per program (fork server inside)",
    "pooled-exec": "(b) pooled containers, warm drivers, new interpreter per test",
    "pooled-fork-cold": "(c0) pooled containers, fork server, a docker exec and driver start per batch",
    "pooled-fork": "(c) pooled containers, warm drivers, fork server (this project)",
    "bwrap-exec": "(d) bubblewrap, batched, new interpreter per test",
    "bwrap-fork": "(e) bubblewrap, batched, fork server",
    "reward-per-sample": "(f) RewardFunction, one pool call per sample (before)",
    "reward-batch": "(g) RewardFunction, batch hook: one run_many per step (this project)",
}
SLOW_DESIGNS_PROGRAMS = 30  # fresh and reward-per-sample judge only this many programs of a workload
ENGINE_COMMANDS = ("dockerd", "containerd")  # and containerd-shim*: the Docker engine's processes
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


class CpuMeter:
    """CPU seconds spent on judging, read before and after a design runs: this process, the given worker
    processes (a RewardFunction's), and the cgroups of the live sandbox containers that this process or
    those workers own (driver, fork server, programs). `engine` is the Docker engine's processes (dockerd,
    containerd, its shims) on this machine: they relay every exec and its stream, but another user's
    containers would count too, so it is reported apart.

    Fresh containers are gone before the second reading and bubblewrap's processes are not all reaped by
    us, so for those designs `sandbox` is None."""

    def __init__(self, worker_pids: Sequence[int] = ()) -> None:
        self.worker_pids = list(worker_pids)
        self.client = docker_sdk.from_env(timeout=30) if docker_sdk is not None else None

    def read(self) -> tuple[float, dict[int, float]]:
        """(sandbox CPU s so far, engine CPU s so far per engine process id); `spent` turns two readings
        into what was spent between them."""
        own = resource.getrusage(resource.RUSAGE_SELF)
        total = own.ru_utime + own.ru_stime + sum(_process_cpu(pid) for pid in self.worker_pids)
        if self.client is not None:
            host = socket.gethostname()
            for pid in [os.getpid(), *self.worker_pids]:
                owned = {"label": f"{OWNER_LABEL}={host}:{pid}"}
                for container in self.client.containers.list(sparse=True, filters=owned):
                    usage = Path(f"/sys/fs/cgroup/cpuacct/docker/{container.id}/cpuacct.usage")
                    try:
                        total += int(usage.read_text()) / 1e9
                    except (OSError, ValueError):
                        pass  # removed while we looked
        engine = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    comm = Path(f"/proc/{entry}/comm").read_text().strip()
                except OSError:
                    continue
                if comm in ENGINE_COMMANDS or comm.startswith("containerd-shim"):
                    engine[int(entry)] = _process_cpu(int(entry))
        return total, engine

    @staticmethod
    def spent(before: tuple[float, dict[int, float]], after: tuple[float, dict[int, float]]) -> tuple[float, float]:
        """(sandbox, engine) CPU seconds between two readings. An engine process that ended in between (the
        shim of a removed container) is left out rather than counted negative."""
        engine = sum(cpu - before[1].get(pid, 0.0) for pid, cpu in after[1].items())
        return after[0] - before[0], engine


def _process_cpu(pid: int) -> float:
    """utime + stime of a live process in seconds (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def judge_with_backend(backend: Backend, jobs: list[Job], max_batch: int
                       ) -> tuple[list[bool], float, tuple[float, float] | None]:
    """Pass/fail of every job, the wall-clock seconds it took and the CPU seconds (sandbox, engine; None
    where they cannot be counted, see CpuMeter)."""
    meter = CpuMeter()
    cpu0, started = meter.read(), time.monotonic()
    results = execute(backend, jobs, max_batch=max_batch)
    wall, cpu1 = time.monotonic() - started, meter.read()
    passed = [judge(j, r, backend.name, 0.0).passed for j, r in zip(jobs, results)]
    cpu = CpuMeter.spent(cpu0, cpu1) if backend.name == "docker" else None
    return passed, wall, cpu


def judge_with_reward_fn(name: str, jobs: list[Job]) -> tuple[list[bool], float, tuple[float, float]]:
    """Pass/fail through a RewardFunction running verifier `name` on completions that fence the programs,
    the wall-clock seconds and the CPU seconds (sandbox, engine: see CpuMeter)."""
    completions = [f"```{job.language}\n{job.program}```" for job in jobs]
    samples = [{"test_type": job.test_type, "tests": job.tests, "checker": job.checker, "language": job.language,
                "limits": {"time_s": job.limits.time_s}} for job in jobs]
    with RewardFunction([VerifierSpec(name, timeout_s=120)], num_workers=2) as reward_fn:
        warm = [f"```python\nprint(input()){' ' * k}\n```" for k in range(4)]  # not in the set: no cache hit
        reward_fn.score(warm, [{"tests": [{"input": "1\n", "output": "1\n"}]}] * 4)  # workers, containers up
        meter = CpuMeter([w.process.pid for w in reward_fn._pool._workers])
        cpu0, started = meter.read(), time.monotonic()
        results = reward_fn.score(completions, samples)
        wall, cpu1 = time.monotonic() - started, meter.read()
    return [r.scores[name] == 1.0 for r in results], wall, CpuMeter.spent(cpu0, cpu1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--designs", default=",".join(LABELS))
    parser.add_argument("--programs", type=int, default=120,
                        help="small Python programs (other languages: a tenth, at least 6)")
    parser.add_argument("--languages", default="python,c,cpp,java,javascript")
    parser.add_argument("--python-only", action="store_true", help="same as --languages python")
    parser.add_argument("--no-cases", action="store_true", help="skip the labelled cases")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--isolation", action="store_true",
                        help="instead of throughput: the worst case of a batch of 64 holding one program that "
                             "SIGSTOPs every process it can, and the hostile programs of "
                             "tests/test_sandbox_isolation.py tried and contained, per backend (appended to --out)")
    parser.add_argument("--backends", default="docker,bwrap", help="for --isolation")
    parser.add_argument("--no-sigstop", action="store_true", help="for --isolation: hostile programs only")
    args = parser.parse_args()
    if args.isolation:
        return isolation_report(args.backends.split(","), Path(args.out), sigstop=not args.no_sigstop)
    designs = args.designs.split(",")
    for name in designs:
        if name not in LABELS:
            parser.error(f"unknown design {name!r}; valid: {', '.join(LABELS)}")
    languages = ["python"] if args.python_only else args.languages.split(",")

    workloads: list[tuple[str, str, list[tuple[Job, bool]]]] = []
    for language in languages:
        n = args.programs if language == "python" else max(6, args.programs // 10)
        workloads.append((language, f"{language}: a+b, 3 tests each", add_jobs(language, n)))
    if CASES.exists() and not args.no_cases:
        fast = labelled_fast()
        workloads.append(("python", f"labelled cases without time-limit ones ({len(fast)})", fast))

    docker = get_backend("docker") if any(d == "fresh" or d.startswith("pooled") for d in designs) else None
    bwrap = get_backend("bwrap") if any(d.startswith("bwrap") for d in designs) else None
    fresh = FreshContainerBackend(docker) if "fresh" in designs else None
    load = os.getloadavg()[0]
    cpu = cpu_name()
    bench_started = time.monotonic()
    lines = ["# Sandbox throughput", "",
             f"Machine: {cpu}, {os.cpu_count()} cores, load average {load:.1f} at the start (shared with other "
             f"work: compare designs within a row group, and read the CPU columns, which load changes far less). "
             f"{(docker or bwrap).workers() if (docker or bwrap) else 2} parallel sandboxes per design. "
             "Produced by `benchmarks/bench_sandbox.py` in one run.", "",
             "`CPU ms/program` (Docker designs but the fresh one) counts this process, the RewardFunction's worker "
             "processes and the pooled containers' cgroups (driver, fork server, programs); `engine ms/program` is "
             "the Docker engine's own processes (dockerd, containerd, shims), which relay every exec and its "
             "stream. `programs/s on 2 idle cores` is 2 / (CPU s + engine s per program): what the design "
             "reaches with both cores to itself if nothing else limits it.", "",
             "| workload | design | programs | tests | wall s | programs/s | tests/s | CPU ms/program "
             "| engine ms/program | programs/s on 2 idle cores | pass/fail = label |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for language, workload, all_items in workloads:
        for name in designs:
            if language != "python" and (name.endswith("-exec") or name == "pooled-fork-cold"):
                continue  # the fork server serves Python only: these are the same design here
            if name.startswith("reward") and not workload.startswith("python"):
                continue
            items = all_items[:SLOW_DESIGNS_PROGRAMS] if name in ("fresh", "reward-per-sample") else all_items
            jobs = [job for job, _ in items]
            n_tests = sum(job.n_tests for job in jobs)
            rlvr.sandbox.batch.FORK_SERVER = not name.endswith("-exec")
            if docker is not None:
                docker.warm_drivers = name != "pooled-fork-cold"
            if name.startswith("reward"):
                target = "code" if name == "reward-batch" else "bench_code_per_sample"
                passed, wall, cpu = judge_with_reward_fn(target, jobs)
            else:
                backend = {"fresh": fresh, "pooled-exec": docker, "pooled-fork": docker,
                           "pooled-fork-cold": docker}.get(name, bwrap)
                max_batch = 1 if name == "fresh" else rlvr.sandbox.scheduler.MAX_BATCH
                execute(backend, jobs[:2], max_batch=max_batch)  # warm: containers started, caches filled
                passed, wall, cpu = judge_with_backend(backend, jobs, max_batch)
            agree = sum(p == ok for p, (_, ok) in zip(passed, items))
            label = LABELS[name]
            if language != "python":  # the fork server serves Python only
                label = label.replace(" (fork server inside)", "").replace(", fork server", "")
            if cpu:
                sandbox_ms, engine_ms = 1000 * cpu[0] / len(jobs), 1000 * cpu[1] / len(jobs)
                cpu_cols = f"{sandbox_ms:.1f} | {engine_ms:.1f} | {2000 / (sandbox_ms + engine_ms):.0f}"
            else:
                cpu_cols = "n/a | n/a | n/a"
            row = (f"| {workload} | {label} | {len(jobs)} | {n_tests} | {wall:.1f} | {len(jobs) / wall:.2f} | "
                   f"{n_tests / wall:.1f} | {cpu_cols} | {agree}/{len(jobs)} |")
            print(row, flush=True)
            lines.append(row)
    rlvr.sandbox.batch.FORK_SERVER = True
    if docker is not None:
        docker.warm_drivers = True
    lines += ["", f"Load average at the end: {os.getloadavg()[0]:.1f}; the whole run took "
              f"{time.monotonic() - bench_started:.0f} s. Compiled languages include compiling "
              "each program once (g++ with iostream ~1 s, javac ~1.5 s on this machine); Java also pays a JVM start "
              "per test (~0.5 s). The fork server serves Python only, so other languages have one row per "
              "backend. `pass/fail = label` counts programs whose overall pass/fail matches the label; the "
              "nondeterministic labelled case (right on each test with probability 2/3) can go either way."]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


def sigstop_batch(backend: Backend, n: int = 64, time_s: float = 2.0) -> tuple[float, list[str], int]:
    """One run_many-sized batch of n a+b programs, the first of which calls os.kill(-1, SIGSTOP) and then answers:
    (wall seconds, the stopper's verdicts, neighbours accepted)."""
    tests = [{"input": "3 4\n", "output": "7\n"}]
    stopper = Job("import os, signal\ntry:\n    os.kill(-1, signal.SIGSTOP)\nexcept OSError:\n    pass\nprint(7)\n",
                  tests, limits=Limits(time_s=time_s))
    ok = Job("print(sum(map(int, input().split())))\n", tests, limits=Limits(time_s=time_s))
    execute(backend, [ok, ok])  # warm
    jobs = [stopper] + [ok] * (n - 1)
    started = time.monotonic()
    results = execute(backend, jobs)
    wall = time.monotonic() - started
    judged = [judge(j, r, backend.name, 0.0) for j, r in zip(jobs, results)]
    return wall, judged[0].codes, sum(r.passed for r in judged[1:])


def hostile_checks(name: str) -> list[tuple[str, bool, str]]:
    """Every hostile program of tests/test_sandbox_isolation.py on backend `name`, with one sandbox at a time (so
    that job 2 runs where job 1 ran, as in the tests): (check, contained, detail)."""
    import pytest

    from tests import test_sandbox_isolation as iso

    backend = iso._backend(name)

    checks: list[tuple[str, Any]] = []
    for attack in sorted(iso.ATTACKS):
        checks.append((f"leak: {attack}", lambda attack=attack: [iso.test_nothing_of_a_job_reaches_the_next(
            backend, attack, same) for same in (True, False)]))
    checks += [
        ("System V memory left behind fails the next program",
         lambda: [iso.test_ipc_memory_left_behind_does_not_fail_the_next_program(backend, s) for s in (True, False)]),
        ("write pid 1's memory, or its stdout (the engine's log)",
         lambda: iso.test_first_process_cannot_be_written_or_used_as_a_log(backend)),
        ("SIGSTOP to every process it can signal", lambda: iso.test_a_program_that_stops_everyone_delays_nobody(backend)),
        ("SIGSTOP to itself", lambda: iso.test_a_program_that_stops_itself_is_a_timeout_within_its_limit(backend)),
        ("memfd past memory_mb (or the limit not claimed)",
         lambda: iso.test_memory_outside_the_address_space_is_bounded_or_the_limit_is_not_claimed(backend)),
        ("fill /dev past scratch_mb", lambda: iso.test_dev_is_not_a_way_around_the_scratch_cap(backend)),
    ]
    found = []
    for check_name, check in checks:
        try:
            check()
            found.append((check_name, True, ""))
        except pytest.skip.Exception as e:
            found.append((check_name, True, f"skipped: {e}"))
        except BaseException as e:  # noqa: BLE001 - an assertion, or an attribute the code under test lacks
            found.append((check_name, False, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"))
        print(f"  {name}: {check_name}: {'contained' if found[-1][1] else 'NOT contained'} {found[-1][2]}",
              flush=True)
    return found


def isolation_report(backend_names: list[str], out: Path, sigstop: bool = True) -> int:
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "sandbox"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    lines = ["", f"## Isolation between jobs ({time.strftime('%Y-%m-%d')}, commit {commit}"
                 f"{' with uncommitted sandbox/ changes' if dirty else ''})", "",
             f"Machine: {cpu_name()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start. "
             "`benchmarks/bench_sandbox.py --isolation`.", "",
             "| backend | batch of 64 with one SIGSTOP-everyone program (2 s limit): wall s | the stopper's verdict "
             "| neighbours AC | hostile programs contained |", "| --- | ---: | --- | ---: | ---: |"]
    details = []
    for name in backend_names:
        backend = get_backend(name)
        wall, codes, ok = sigstop_batch(backend) if sigstop else (float("nan"), ["not run"], 0)
        print(f"{name}: SIGSTOP batch of 64: {wall:.1f} s, stopper {codes}, neighbours AC {ok}/63", flush=True)
        found = hostile_checks(name)
        contained = sum(c for _, c, _ in found)
        lines.append(f"| {name} | {wall:.1f} | {' '.join(codes)} | {ok}/63 | {contained} of {len(found)} |")
        details += [f"- {name}: {check}: {'contained' if c else 'NOT contained'}{' (' + d + ')' if d else ''}"
                    for check, c, d in found]
    lines += ["", "Per hostile program (each leak runs as job 1 with a reader as job 2, in one batch and across two "
              "`run_many` calls; contained = both readers saw nothing):", "", *details]
    with out.open("a") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0



if __name__ == "__main__":
    sys.exit(main())
