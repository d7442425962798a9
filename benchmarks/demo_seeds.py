"""The CPU demo over many seeds, beside its random-reward control: does every seed learn, and by more than a policy
trained on rewards that say nothing about correctness (arXiv 2506.10947)?

    python benchmarks/demo_seeds.py                                # 10 seeds of recipes/demo.yaml, then the control
    python benchmarks/demo_seeds.py --seeds 0 1 2 --arms demo      # a few seeds, no control
    python benchmarks/demo_seeds.py --seeds 5 6 7 8 9 --out runs/demo_seeds_b --control-seeds 0 &  # a second stream
    python benchmarks/demo_seeds.py --from-json runs/demo_seeds/demo_seeds.json runs/demo_seeds_b/demo_seeds.json
    python benchmarks/demo_seeds.py --seeds 1 --arms demo --set optim.lr=2.5e-6 --out runs/demo_lr  # a variant

Each run is ``rlvr train recipes/demo.yaml --set seed=S`` in its own process, as a user types it (the control adds
``--set reward.control=random``: the demo's verifiers stay as the gold that scores the evaluations). Per run: the
held-out pass@1 before and after training (the recipe's ``eval``: 128 prompts x 4 samples), its standard error over
prompts, and the lift ``after - before`` in units of its s.e. (both evaluations' s.e. combined, as ``summary.json``'s
``improvement``). A seed "learns" when its lift exceeds 3 s.e. Also the last step's entropy and zero-variance fraction
(the signs of a collapsed run). Runs of a seed alternate the arms' order so a drift of the machine splits evenly.

Writes OUT/demo_seeds.json after every run (an interrupted study keeps what ended), benchmarks/results/demo_seeds.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import study_header  # noqa: E402
from rm_ppo_chain import run_stage  # noqa: E402
from sft_cold_start import fmt, summary  # noqa: E402

ARMS = {"demo": [], "random": ["reward.control=random"]}
"""Each arm's overrides of recipes/demo.yaml."""


def last_metrics(run_dir: Path) -> dict[str, float]:
    """The last training step's line of the run's metrics.jsonl (not the evaluation's line after it)."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [m for m in lines if "train/loss" in m][-1]


def final_state(run_dir: Path) -> dict[str, float | None]:
    """The last training step's entropy and fraction of zero-variance groups (the signs of a collapsed run)."""
    last = last_metrics(run_dir)
    return {"final_entropy": last.get("train/entropy"), "final_zero_variance": last.get("reward/zero_var_groups")}


def run_one(arm: str, seed: int, out: Path, threads: int, extra: list[str]) -> dict[str, Any]:
    """One training run of ``arm`` at ``seed``; its timings and the numbers the report reads."""
    run = out / f"{arm}-s{seed}"
    # no checkpoints but the last: a 30-step run would keep ~1.8 GiB of them, and a study makes dozens of runs
    sets = [f"seed={seed}", f"trainer.num_threads={threads}", "trainer.save_every=0", *ARMS[arm], *extra]
    stage = run_stage(f"{arm}-s{seed}", ["train", "recipes/demo.yaml", "-o", str(run), "--overwrite",
                                         *[a for s in sets for a in ("--set", s)]], out / "logs")
    s = summary(run)
    before, after = s["eval_before"], s["eval_after"]
    se = math.sqrt(before["pass_at_1_se"] ** 2 + after["pass_at_1_se"] ** 2)
    label = f"{arm} + {', '.join(extra)}" if extra else arm  # a variant of the recipe is an arm of its own
    return {**stage, "arm": label, "seed": seed, "before": before["pass_at_1"], "after": after["pass_at_1"],
            "se": se, "lift_in_se": (after["pass_at_1"] - before["pass_at_1"]) / se if se > 0 else math.inf,
            "steps": s["steps"], "run_dir": str(run), **final_state(run)}


def report(data: dict[str, Any]) -> str:
    runs = data["runs"]
    lines = [
        "# The CPU demo over seeds, beside its random-reward control", "",
        f"Measured {data['date']}, commit {data['commit']}, {data['cpu']['model']} "
        f"({', '.join(data['cpu']['flags'])}), {data['cpu']['cores']} cores, {data['threads']} torch thread(s) a run. "
        f"Command(s), side by side: `{data['command']}`.", "",
        "Held-out pass@1 of `recipes/demo.yaml` (128 prompts x 4 samples at temperature 1) before and after its 30 "
        "steps; lift = (after - before) / s.e., the s.e. of both evaluations combined. A seed learns when its lift "
        "exceeds 3. The random arm trains on `reward.control: random` (1 with probability 0.5, whatever the answer) and "
        "is scored by the demo's own verifiers.", "",
        "| arm | seed | pass@1 before | after | lift (s.e.) | final entropy | final zero-variance fraction | wall s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in runs:
        ent = "-" if r["final_entropy"] is None else f"{r['final_entropy']:.3f}"
        zv = "-" if r["final_zero_variance"] is None else f"{r['final_zero_variance']:.2f}"
        lines.append(f"| {r['arm']} | {r['seed']} | {r['before']:.3f} | {r['after']:.3f} | {r['lift_in_se']:.1f} | "
                     f"{ent} | {zv} | {r['wall_s']:.0f} |")
    lines += ["", "| arm | seeds | pass@1 before | after (mean ± s.e. over seeds) | seeds with lift > 3 s.e. |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for arm in dict.fromkeys(r["arm"] for r in runs):
        rs = [r for r in runs if r["arm"] == arm]
        if rs:
            lines.append(f"| {arm} | {len(rs)} | {fmt([r['before'] for r in rs])} | {fmt([r['after'] for r in rs])} "
                         f"| {sum(r['lift_in_se'] > 3 for r in rs)} of {len(rs)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=["demo", "random"])
    ap.add_argument("--control-seeds", type=int, default=3, help="seeds of the control arms (the first N; default 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads a run (default 1)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "demo_seeds")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recipe override for every run")
    ap.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "results" / "demo_seeds.md")
    ap.add_argument("--from-json", type=Path, nargs="+", default=None,
                    help="only rewrite the report from these jsons (several: the runs of studies run side by side)")
    args = ap.parse_args()

    if args.from_json is not None:
        parts = [json.loads(path.read_text()) for path in args.from_json]
        runs = sorted((r for d in parts for r in d["runs"]), key=lambda r: (r["arm"], r["seed"]))
        for r in runs:  # read the final state again where the run folder is still here
            folder = Path(r.get("run_dir") or r["command"].split(" -o ")[1].split()[0])
            if (folder / "metrics.jsonl").exists():
                r.update(final_state(folder))
        data = {**parts[0], "runs": runs,
                "command": "; ".join(d["command"] for d in parts),
                "commit": ", ".join(dict.fromkeys(d["commit"] for d in parts))}
    else:
        (args.out / "logs").mkdir(parents=True, exist_ok=True)
        data = study_header("demo_seeds.py", sys.argv[1:], threads=args.threads, runs=[])
        for i, seed in enumerate(args.seeds):
            arms = [a for a in args.arms if a == "demo" or i < args.control_seeds]
            for arm in (arms if i % 2 == 0 else arms[::-1]):
                data["runs"].append(run_one(arm, seed, args.out, args.threads, args.set))
                (args.out / "demo_seeds.json").write_text(json.dumps(data, indent=1))
                args.report.write_text(report(data))
    args.report.write_text(report(data))
    print(args.report.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
