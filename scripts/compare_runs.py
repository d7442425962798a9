"""Compare two run directories of the same recipe and seed: a change that should not change behaviour must leave
every logged value and every weight identical.

    python scripts/compare_runs.py RUN_A RUN_B

Checks, step for step, that ``metrics.jsonl`` holds the same steps with equal values for every key except wall-clock
and CPU-time ones (``time/``, ``cpu/``, ``*_per_s``); that ``samples/step-N.jsonl`` are equal; and that the newest
checkpoint's ``model/*.safetensors`` hold the same tensor names with equal values. A NaN equals a NaN at the same place
(a metric that is NaN in both runs, e.g. a length of correct samples on a step with none, is the same value). Exit code
0 when all of it holds, 1 otherwise, with one line per difference.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

CLOCK_PREFIXES = ("time/", "cpu/")
CLOCK_SUFFIXES = ("_per_s",)


def _is_clock(key: str) -> bool:
    return key.startswith(CLOCK_PREFIXES) or key.endswith(CLOCK_SUFFIXES)


def same(x: object, y: object) -> bool:
    """Equal JSON values, NaN equal to NaN (at any depth)."""
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
    return x == y


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and values, NaN equal to NaN at the same place."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not (a.is_floating_point() or a.is_complex()):
        return torch.equal(a, b)
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def compare_metrics(a: Path, b: Path) -> list[str]:
    ra, rb = _records(a), _records(b)
    problems = [] if len(ra) == len(rb) else [f"metrics.jsonl: {len(ra)} lines vs {len(rb)}"]
    for x, y in zip(ra, rb):
        step = x.get("step")
        keys = {k for k in x.keys() | y.keys() if not _is_clock(k)}
        for k in sorted(keys):
            if not same(x.get(k, "<missing>"), y.get(k, "<missing>")):
                problems.append(f"step {step} {k}: {x.get(k, '<missing>')!r} vs {y.get(k, '<missing>')!r}")
    return problems


def _jsonl(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def compare_samples(a: Path, b: Path) -> list[str]:
    names = sorted({p.name for run in (a, b) for p in (run / "samples").glob("*.jsonl")})
    problems = []
    for name in names:
        pa, pb = a / "samples" / name, b / "samples" / name
        if not (pa.is_file() and pb.is_file()):
            problems.append(f"samples/{name}: present in one run only")
        elif not same(_jsonl(pa), _jsonl(pb)):
            problems.append(f"samples/{name}: differs")
    return problems


def _last_checkpoint(run: Path) -> Path | None:
    steps = sorted((run / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    return steps[-1] if steps else None


def compare_weights(a: Path, b: Path) -> tuple[list[str], int]:
    ca, cb = _last_checkpoint(a), _last_checkpoint(b)
    if ca is None or cb is None or ca.name != cb.name:
        return [f"last checkpoints differ: {ca} vs {cb}"], 0
    ta, tb = {}, {}
    for f in sorted((ca / "model").glob("*.safetensors")):
        ta.update(load_file(f))
    for f in sorted((cb / "model").glob("*.safetensors")):
        tb.update(load_file(f))
    problems = [f"{ca.name}: tensor {n} in one run only" for n in sorted(ta.keys() ^ tb.keys())]
    for name in sorted(ta.keys() & tb.keys()):
        if not same_tensor(ta[name], tb[name]):
            problems.append(f"{ca.name}: tensor {name} differs")
    return problems, len(ta)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    args = ap.parse_args(argv)
    problems = compare_metrics(args.run_a, args.run_b) + compare_samples(args.run_a, args.run_b)
    weight_problems, tensors = compare_weights(args.run_a, args.run_b)
    problems += weight_problems
    for line in problems:
        print(line)
    steps = len(_records(args.run_a))
    print(f"{'DIFFERENT' if problems else 'IDENTICAL'}: {steps} steps of metrics (clock keys skipped), samples, "
          f"{tensors} tensors of the last checkpoint")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
