"""Dynamic sampling (DAPO, 2503.14476) against plain GRPO on the CPU demo, at the same budget of generated tokens.

    python benchmarks/bench_dynamic_sampling.py                        # seeds 0-3, writes results/dynamic_sampling.md
    python benchmarks/bench_dynamic_sampling.py --seeds 0 1 --budget 8000

For each seed, runs of ``recipes/demo.yaml`` that differ only in ``algorithm.dynamic_sampling``: off (``plain``), on
(``dynamic``), on with ``scale_unfilled: false`` (``dynamic-unscaled``: a step that hit the round cap is normalised by
the tokens it kept) and on with ``max_rounds: 1`` (``dynamic-1-round``: no refill, so the zero-variance groups are only
left out of the update). Each of these ends when ``trainer.max_tokens_generated`` is spent (every generated token
counts, dropped groups included). A last arm, ``dynamic-same-steps``, runs dynamic sampling for the recipe's
``trainer.steps`` instead (as many optimizer steps as the plain run takes), spending more tokens. A seed fixes the
held-out split, the few-shot example, the initial eval and the first draws, so the arms of one seed are a paired
comparison. Runs go ``--parallel`` at a time with one torch thread each; a run whose ``summary.json`` exists is not
redone, so an interrupted benchmark continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlvr.runs.metrics import read_metrics

REPO = Path(__file__).resolve().parent.parent
ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **os.environ}  # caches: rlvr's defaults
# recipes/demo.yaml samples dynamically (filter_on: reward, the same as solved there): the plain arm turns it off
ARMS = {"plain": ["algorithm.dynamic_sampling.enabled=false"], "dynamic": ["algorithm.dynamic_sampling.enabled=true"],
        "dynamic-unscaled": ["algorithm.dynamic_sampling.enabled=true",
                             "algorithm.dynamic_sampling.scale_unfilled=false"],
        # no refill: plain GRPO minus the zero-variance groups in the update (the same steps and tokens)
        "dynamic-1-round": ["algorithm.dynamic_sampling.enabled=true", "algorithm.dynamic_sampling.max_rounds=1"],
        "dynamic-same-steps": ["algorithm.dynamic_sampling.enabled=true"]}
UNBUDGETED = {"dynamic-same-steps"}  # the recipe's trainer.steps (the plain arm's), whatever they generate


def _run(args: argparse.Namespace, arm: str, seed: int) -> Path:
    out = args.runs_dir / f"{arm}-seed{seed}"
    if (out / "summary.json").exists():
        return out
    budget = [] if arm in UNBUDGETED else [f"trainer.max_tokens_generated={args.budget}", "trainer.steps=1000"]
    sets = [f"seed={seed}", *budget, "trainer.save_every=0", f"trainer.num_threads={args.threads}",
            f"algorithm.dynamic_sampling.max_rounds={args.max_rounds}", *ARMS[arm]]
    cmd = [sys.executable, "-m", "rlvr.cli", "train", str(args.recipe), "-o", str(out), "--overwrite"]
    for s in sets:
        cmd += ["--set", s]
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{out}.log", "w") as log:
        print(f"start {arm} seed {seed}: {' '.join(cmd)}", flush=True)
        rc = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=ENV).returncode
    if rc:
        raise RuntimeError(f"{arm} seed {seed} failed (exit {rc}); see {out}.log")
    if not args.keep_checkpoints:  # ~2 GB a run (fp32 weights + Adam states); the summary and metrics stay
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    print(f"done {arm} seed {seed}", flush=True)
    return out


def _row(out: Path) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    steps = [m for m in read_metrics(out) if "rollout/groups_kept" in m]
    kept = sum(m["rollout/groups_kept"] for m in steps)
    zero_kept = sum(m["rollout/zero_var_groups_after_filter"] * m["rollout/groups_kept"] for m in steps)
    a, b = summary["eval_after"], summary["eval_before"]
    return {"steps": summary["steps"], "tokens": summary["tokens_generated"], "groups_kept": kept,
            "zero_var_kept": zero_kept, "generated": sum(m["rollout/groups_generated"] for m in steps),
            "capped": sum(m["rollout/max_rounds_hit"] for m in steps), "before": b["pass_at_1"],
            "before_se": b["pass_at_1_se"], "after": a["pass_at_1"], "after_se": a["pass_at_1_se"],
            "wall": summary["wall_time_s"]}


def _mean_se(xs: list[float]) -> str:
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else float("nan")
    return f"{statistics.mean(xs):.3f} ± {se:.3f}"


def report(args: argparse.Namespace, rows: dict[tuple[str, int], dict]) -> str:
    lines = ["# Dynamic sampling vs plain GRPO on the CPU demo, same generated-token budget", "",
             f"Recipe `{args.recipe.relative_to(REPO)}`, budget `trainer.max_tokens_generated={args.budget}` "
             f"(`dynamic-same-steps`: no budget, the recipe's `trainer.steps`), "
             f"dynamic sampling `max_rounds={args.max_rounds}`, seeds {', '.join(map(str, args.seeds))}, "
             f"{args.threads} torch thread(s) per run, {args.parallel} run(s) at a time. Machine: "
             f"{platform.machine()}, {os.cpu_count()} CPUs.", "",
             "| arm | seed | steps | tokens generated | groups generated | groups trained on | zero-variance trained on "
             "| steps at round cap | held-out pass@1 before | after | wall s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
    for (arm, seed), r in sorted(rows.items()):
        lines.append(f"| {arm} | {seed} | {r['steps']} | {r['tokens']:,} | {r['generated']:.0f} | {r['groups_kept']:.0f}"
                     f" | {r['zero_var_kept']:.0f} ({r['zero_var_kept'] / max(r['groups_kept'], 1):.0%}) "
                     f"| {r['capped']:.0f} | {r['before']:.3f} ± {r['before_se']:.3f} "
                     f"| {r['after']:.3f} ± {r['after_se']:.3f} | {r['wall']:.0f} |")
    lines += ["", "Means over seeds (± s.e. across seeds):", "",
              "| arm | held-out pass@1 after | tokens generated | steps | zero-variance groups trained on | wall s |",
              "| --- | --- | ---: | ---: | ---: | ---: |"]
    for arm in ARMS:
        rs = [rows[arm, s] for s in args.seeds]
        zero = sum(r["zero_var_kept"] for r in rs) / max(sum(r["groups_kept"] for r in rs), 1)
        lines.append(f"| {arm} | {_mean_se([r['after'] for r in rs])} | {statistics.mean(r['tokens'] for r in rs):,.0f}"
                     f" | {statistics.mean(r['steps'] for r in rs):.1f} | {zero:.0%} "
                     f"| {statistics.mean(r['wall'] for r in rs):.0f} |")
    lines.append("")
    for arm in list(ARMS)[1:]:
        diffs = [rows[arm, s]["after"] - rows["plain", s]["after"] for s in args.seeds]
        eval_se = math.sqrt(sum(rows[a, s]["after_se"] ** 2 for a in (arm, "plain") for s in args.seeds)) \
            / len(args.seeds)
        lines.append(f"Paired difference {arm} - plain, held-out pass@1 after: {_mean_se(diffs)} across seeds "
                     f"(per seed: {', '.join(f'{d:+.3f}' for d in diffs)}); the held-out sampling error alone of that "
                     f"mean is ± {eval_se:.3f}.")
    lines += ["", f"Command: `python benchmarks/bench_dynamic_sampling.py --seeds {' '.join(map(str, args.seeds))} "
              f"--budget {args.budget} --max-rounds {args.max_rounds} --threads {args.threads} "
              f"--parallel {args.parallel}`"]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", type=Path, default=REPO / "recipes/demo.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    p.add_argument("--budget", type=int, default=15400, help="generated tokens per run (the demo's 30 steps: ~15.4k)")
    p.add_argument("--max-rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--keep-checkpoints", action="store_true", help="keep each run's final checkpoint (~2 GB each)")
    p.add_argument("--runs-dir", type=Path, default=REPO / "runs/bench_dynamic_sampling")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks/results/dynamic_sampling.md")
    args = p.parse_args()
    args.recipe = args.recipe.resolve()
    jobs = [(arm, seed) for seed in args.seeds for arm in ARMS]
    with ThreadPoolExecutor(args.parallel) as pool:
        outs = dict(zip(jobs, pool.map(lambda j: _run(args, *j), jobs)))
    text = report(args, {j: _row(o) for j, o in outs.items()})
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
