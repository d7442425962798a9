"""SFT cold start, then GRPO with the tool, against GRPO with the tool from the base model, at the same training CPU
seconds (the tool task of recipes/tool_demo.yaml):

    python benchmarks/sft_cold_start.py            # make sft-cold-start-demo: 3 seeds, 400 CPU s an arm (~26 min a seed)
    python benchmarks/sft_cold_start.py --seeds 0  # one seed

For each seed S, three ``rlvr`` commands (each in its own process, as a user types them):

1. ``rlvr sft recipes/sft_tool_demo.yaml --set seed=S``: the embedded model on the tool transcripts of
   datasets/arith_tool_sft.jsonl (written by datasets/make_arith_tool.py, never by a model);
2. ``rlvr train recipes/tool_demo.yaml --set model.name=<that run> --set trainer.max_cpu_seconds=BUDGET-SFT``:
   GRPO with the python tool from the SFT run's model, for what is left of the budget after the SFT run's training;
3. ``rlvr train recipes/tool_demo.yaml --set trainer.max_cpu_seconds=BUDGET``: GRPO with the tool from the base model.

The budget counts training CPU seconds (user + system of the run's process tree over its steps, ``cpu_seconds`` in
each summary.json; a run ends after the step that reaches its budget, so it may overshoot by one step: the table gives
what each arm spent). Evaluations, model loading and the sandbox's start are outside it; each command's whole wall
and CPU time is reported beside. Held-out pass@1: ``data.eval_size`` prompts of datasets/arith_tool_train.jsonl held
out before training x ``eval.k`` samples at ``eval.temperature`` (the recipe's), before and after each GRPO run; the
SFT arm's "before" is the SFT model's. Writes OUT/cold_start.json, benchmarks/results/sft_cold_start.md and the plot.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import study_header  # noqa: E402
from rm_ppo_chain import run_stage  # noqa: E402


def summary(run_dir: Path) -> dict[str, Any]:
    """The run's summary.json."""
    return json.loads((run_dir / "summary.json").read_text())


def mean_se(values: list[float]) -> tuple[float, float | None]:
    """Mean and standard error over seeds (None with one seed: no spread to estimate)."""
    if len(values) < 2:
        return values[0], None
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def fmt(values: list[float], digits: int = 3) -> str:
    m, se = mean_se(values)
    return f"{m:.{digits}f}" if se is None else f"{m:.{digits}f} ± {se:.{digits}f}"


def run_seed(seed: int, out: Path, budget: float, threads: int, extra: list[str]) -> dict[str, Any]:
    """The three commands of one seed; returns their summaries and timings."""
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    sets = [f"seed={seed}", f"trainer.num_threads={threads}"]
    rl_sets = [*sets, "trainer.steps=1000", "trainer.save_every=0", *extra]

    def argv(kind: str, recipe: str, run: Path, more: list[str]) -> list[str]:
        return [kind, recipe, "-o", str(run), "--overwrite", *[a for s in more for a in ("--set", s)]]

    sft_dir, cold_dir, base_dir = out / f"sft-s{seed}", out / f"grpo_from_sft-s{seed}", out / f"grpo_base-s{seed}"
    sft_stage = run_stage(f"sft-s{seed}", argv("sft", "recipes/sft_tool_demo.yaml", sft_dir, sets), logs)
    sft_cpu = summary(sft_dir)["cpu_seconds"]
    left = max(budget - sft_cpu, 1.0)
    cold_stage = run_stage(f"grpo_from_sft-s{seed}", argv("train", "recipes/tool_demo.yaml", cold_dir, [
        *rl_sets, f"model.name={sft_dir}", f"trainer.max_cpu_seconds={left:.1f}"]), logs)
    base_stage = run_stage(f"grpo_base-s{seed}", argv("train", "recipes/tool_demo.yaml", base_dir, [
        *rl_sets, f"trainer.max_cpu_seconds={budget:.1f}"]), logs)
    return {"seed": seed, "sft": {**sft_stage, "summary": summary(sft_dir)},
            "grpo_from_sft": {**cold_stage, "summary": summary(cold_dir)},
            "grpo_base": {**base_stage, "summary": summary(base_dir)}}


def arms(seeds: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per arm, the per-seed numbers the report and the plot read."""
    out: dict[str, dict[str, list[float]]] = {"cold start": {}, "base": {}}
    for s in seeds:
        sft, cold, base = s["sft"]["summary"], s["grpo_from_sft"]["summary"], s["grpo_base"]["summary"]
        rows = {"cold start": {"start": base["eval_before"]["pass_at_1"],
                               "after_sft": cold["eval_before"]["pass_at_1"],
                               "sft_cpu_s": sft["cpu_seconds"], "rl_cpu_s": cold["cpu_seconds"],
                               "cpu_s": sft["cpu_seconds"] + cold["cpu_seconds"], "rl_steps": cold["steps"],
                               "after": cold["eval_after"]["pass_at_1"],
                               "wall_s": s["sft"]["wall_s"] + s["grpo_from_sft"]["wall_s"],
                               "process_cpu_s": s["sft"]["cpu_s"] + s["grpo_from_sft"]["cpu_s"]},
                "base": {"start": base["eval_before"]["pass_at_1"], "sft_cpu_s": 0.0,
                         "rl_cpu_s": base["cpu_seconds"], "cpu_s": base["cpu_seconds"], "rl_steps": base["steps"],
                         "after": base["eval_after"]["pass_at_1"], "wall_s": s["grpo_base"]["wall_s"],
                         "process_cpu_s": s["grpo_base"]["cpu_s"]}}
        for arm, row in rows.items():
            for k, v in row.items():
                out[arm].setdefault(k, []).append(float(v))
    return out


def plot(a: dict[str, dict[str, list[float]]], path: Path, title: str) -> None:
    """Held-out pass@1 against training CPU seconds, mean over seeds (error bars: s.e. where there are 2+ seeds)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for arm, colour in (("base", "tab:blue"), ("cold start", "tab:orange")):
        r = a[arm]
        keys = ["start", "after_sft", "after"] if arm == "cold start" else ["start", "after"]
        xs = {"start": [0.0] * len(r["start"]), "after_sft": r["sft_cpu_s"], "after": r["cpu_s"]}
        mx = [statistics.fmean(xs[k]) for k in keys]
        stats = [mean_se(r[k]) for k in keys]
        ax.errorbar(mx, [m for m, _ in stats], yerr=[se or 0.0 for _, se in stats], marker="o", color=colour,
                    capsize=3, label={"base": "GRPO + tool from the base model",
                                      "cold start": "SFT on tool transcripts, then GRPO + tool"}[arm])
    ax.set_xlabel("training CPU seconds (SFT + GRPO)")
    ax.set_ylabel("held-out pass@1")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(data: dict[str, Any], a: dict[str, dict[str, list[float]]]) -> str:
    """The markdown results file."""
    n = len(data["seeds"])
    seeds_note = ("" if n >= 3 else
                  f"\n**{n} seed{'s' if n > 1 else ''} only** (3 were planned; the time on the shared machine allowed "
                  f"{n}): {'no spread across seeds is estimated' if n == 1 else 'the s.e. rests on ' + str(n)}.\n")
    cpu = data["cpu"]
    lines = [
        "# SFT cold start, then GRPO with the tool, vs GRPO with the tool from the base model",
        "",
        f"Measured {data['date']}, commit {data['commit']}, {cpu['model']} ({', '.join(cpu['flags'])}), "
        f"{cpu['cores']} cores shared with other jobs, {data['threads']} torch thread(s) per process. "
        f"Command: `{data['command']}`. Total {data['total_wall_s']:.0f} s wall.",
        seeds_note,
        f"Budget: {data['budget']:.0f} training CPU seconds an arm (the SFT run's counted in the cold start's). "
        "Held-out pass@1: the tool recipe's held-out prompts x `eval.k` samples at its temperature "
        f"({data['eval']}), the `math` verifier on the last turn. Means over seeds"
        + (" ± standard error." if n > 1 else "."),
        "",
        "| arm | pass@1 start | after SFT | after GRPO | SFT CPU s | GRPO CPU s | GRPO steps | wall s (all commands) "
        "| process CPU s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for arm, name in (("base", "GRPO + tool from the base model"), ("cold start", "SFT, then GRPO + tool")):
        r = a[arm]
        lines.append(f"| {name} | {fmt(r['start'])} | {fmt(r['after_sft']) if 'after_sft' in r else '-'} | "
                     f"{fmt(r['after'])} | {fmt(r['sft_cpu_s'], 0)} | {fmt(r['rl_cpu_s'], 0)} | "
                     f"{fmt(r['rl_steps'], 1)} | {fmt(r['wall_s'], 0)} | {fmt(r['process_cpu_s'], 0)} |")
    lines += ["", "Per seed:", "",
              "| seed | run | pass@1 before -> after | training CPU s | steps | load 1m (mean / max) |",
              "| --- | --- | --- | ---: | ---: | --- |"]
    for s in data["seeds"]:
        for key in ("sft", "grpo_from_sft", "grpo_base"):
            st = s[key]
            sm = st["summary"]
            pa = ("held-out loss " + f"{sm['eval_before'].get('loss', float('nan')):.3f} -> "
                  f"{sm['eval_after'].get('loss', float('nan')):.3f}" if key == "sft" else
                  f"{sm['eval_before']['pass_at_1']:.3f} -> {sm['eval_after']['pass_at_1']:.3f}")
            lines.append(f"| {s['seed']} | {key} | {pa} | {sm['cpu_seconds']:.0f} | {sm['steps']} | "
                         f"{st['load_1m_mean']} / {st['load_1m_max']} |")
    lines += ["", f"Plot: `{data['plot']}`.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--budget", type=float, default=400.0, help="training CPU seconds an arm (default 400)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads per process (default 1)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "sft_cold_start")
    ap.add_argument("--set", action="append", default=None, metavar="KEY=VALUE",
                    help="an override for both GRPO runs (default eval.k=2: 64 held-out prompts x 2)")
    ap.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "results" / "sft_cold_start.md")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "demo_sft_cold_start.png")
    ap.add_argument("--from-json", type=Path, default=None, help="only rewrite the report and plot from this json")
    args = ap.parse_args()
    args.set = ["eval.k=2"] if args.set is None else args.set

    if args.from_json is not None:
        data = json.loads(args.from_json.read_text())
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        done: list[dict[str, Any]] = []
        data = study_header("sft_cold_start.py", sys.argv[1:], threads=args.threads, budget=args.budget,
                            overrides=args.set, seeds=done)
        for seed in args.seeds:
            done.append(run_seed(seed, args.out, args.budget, args.threads, args.set))
            data["total_wall_s"] = sum(s[k]["wall_s"] for s in done for k in ("sft", "grpo_from_sft", "grpo_base"))
            (args.out / "cold_start.json").write_text(json.dumps(data, indent=1))  # each seed kept as it ends
    recipe = summary(args.out / f"grpo_base-s{data['seeds'][0]['seed']}") if args.from_json is None else None
    data.setdefault("eval", "see the GRPO runs' recipe.resolved.yaml" if recipe is None else
                    f"{recipe['eval_after']['num_prompts']} prompts x {recipe['eval_after']['k']}")
    data["plot"] = str(args.plot.relative_to(ROOT)) if args.plot.is_relative_to(ROOT) else str(args.plot)
    a = arms(data["seeds"])
    n = len(data["seeds"])
    plot(a, args.plot, f"SmolLM2-135M, tool arithmetic: {data['budget']:.0f} training CPU s an arm, "
                       f"{n} seed{'s' if n > 1 else ''}")
    args.report.write_text(report(data, a))
    if args.from_json is None:
        (args.out / "cold_start.json").write_text(json.dumps(data, indent=1))
    print(args.report.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
