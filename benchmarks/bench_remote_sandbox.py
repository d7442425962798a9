"""Programs judged per second through `rlvr sandbox serve` on this machine (loopback) against the same sandbox
backend called directly, in both remote protocols.

    .venv/bin/python benchmarks/bench_remote_sandbox.py                 # docker if it runs here, else bwrap
    .venv/bin/python benchmarks/bench_remote_sandbox.py --backend bwrap --programs 96 --repeats 3

Workload: `--programs` small stdio Python programs (3 tests each, every other one wrong), judged in one
`rlvr.sandbox.run_many` per repeat, as a training step's code rewards are. Paths: `local` (the backend itself),
`remote rlvr` (POST /rlvr/v1/jobs: batches of jobs, run by the server's own scheduler), `remote sandboxfusion`
(POST /run_code per program, rlvr's driver shipped as the program: one more interpreter and driver per program).
The server runs in this process's threads on the same cores, so the numbers show the protocol's overhead, not a
bigger machine's gain. Median of `--repeats`; verdicts are checked equal to the local ones. Writes
benchmarks/results/remote_sandbox.md (date, commit, CPU, load).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import stamp  # noqa: E402

TOKEN = "benchmark-token-0123456789"
RIGHT = "a, b = map(int, input().split())\nprint(a + b)\n"
WRONG = "a, b = map(int, input().split())\nprint(a - b)\n"


def jobs(n: int) -> list:
    from rlvr.sandbox import Job, Limits

    out = []
    for i in range(n):
        tests = [{"input": f"{i} {k}\n", "output": f"{i + k}\n"} for k in (1, 2, 3)]
        out.append(Job(RIGHT if i % 2 == 0 else WRONG, tests, limits=Limits(time_s=2)))
    return out


def timed(workload: list, backend) -> tuple[float, list[list[str]]]:
    from rlvr import sandbox

    start = time.perf_counter()
    results = sandbox.run_many(workload, backend=backend)
    return time.perf_counter() - start, [r.codes for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["docker", "bwrap"], default=None)
    parser.add_argument("--programs", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "remote_sandbox.md"))
    args = parser.parse_args()
    from rlvr import sandbox
    from rlvr.sandbox.backends.docker_backend import docker_problem
    from rlvr.sandbox.server import SandboxServer, ServerSettings

    name = args.backend or ("docker" if docker_problem() is None else "bwrap")
    line, load = stamp(), os.getloadavg()[0]
    server = SandboxServer("127.0.0.1", 0, ServerSettings(token=TOKEN, backend=name, max_concurrency=8))
    server.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    paths = {"local": name, "remote rlvr": sandbox.remote_backend(url, TOKEN, "rlvr"),
             "remote sandboxfusion": sandbox.remote_backend(url, TOKEN, "sandboxfusion")}
    workload = jobs(args.programs)
    timed(workload[:8], name)  # warm the pool / first driver
    seconds: dict[str, list[float]] = {p: [] for p in paths}
    verdicts: dict[str, list[list[str]]] = {}
    for _ in range(args.repeats):
        for path, backend in paths.items():  # interleaved, so background load hits every path
            s, codes = timed(workload, backend)
            seconds[path].append(s)
            verdicts[path] = codes
    same = all(v == verdicts["local"] for v in verdicts.values())
    local_rate = args.programs / statistics.median(seconds["local"])
    rows = ["| path | programs/s (median) | s per repeat (min-max) | relative to local |",
            "| --- | ---: | ---: | ---: |"]
    for path, values in seconds.items():
        rate = args.programs / statistics.median(values)
        rows.append(f"| {path} | {rate:.1f} | {min(values):.2f}-{max(values):.2f} | {rate / local_rate:.2f} |")
    text = "\n".join([
        "# Remote sandbox throughput: through `rlvr sandbox serve` against the local backend\n",
        f"Written by `python benchmarks/bench_remote_sandbox.py --programs {args.programs} --repeats {args.repeats}` on "
        f"{line}; 1-minute load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end. Backend: "
        f"{name} (the server's and the local one), server and client on the same machine (loopback). "
        f"{args.programs} Python stdio programs x 3 tests per repeat; verdicts through the server "
        f"{'equal' if same else 'DIFFER from'} the local ones.\n", *rows]) + "\n"
    Path(args.out).write_text(text)
    print(text)
    server.shutdown()


if __name__ == "__main__":
    main()
