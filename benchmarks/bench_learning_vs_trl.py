"""Learning per unit of compute: held-out pass@1 of rlvr and of TRL's ``RLTrainer`` after the same budget of CPU
seconds on the CPU demo task, several seeds each, every model scored by the same evaluator.

    python benchmarks/bench_learning_vs_trl.py --trl-venv .venv-trl                # 3 seeds x 2 sides, 200 CPU s each
    python benchmarks/bench_learning_vs_trl.py --seeds 0 1 2 3 4 --cpu-budget 600 --jobs 2   # 5 seeds at 600 CPU s
    python benchmarks/bench_learning_vs_trl.py --seeds 0 --cpu-budget 40 --no-base-eval   # a quick check
    python benchmarks/bench_learning_vs_trl.py --cpu-budget 600 --render-only   # rewrite from its raw data

The task is ``recipes/demo.yaml`` (larger of two 2-digit numbers, the embedded SmolLM2-135M-Instruct, the ``boxed``
template with one few-shot turn, 8 prompts x 8 samples a step, 16 new tokens, lr 5e-6, no KL, token-mean, the
precision ``auto`` picks). rlvr runs it through ``rlvr train`` with ``trainer.max_cpu_seconds``; TRL runs the same
rows (rlvr's training split of that seed, rendered into the same chat turns and checked token for token) in
``trl_learn_worker.py`` with the same budget. Why CPU seconds and not wall time: this machine's 2 cores are shared,
and a wall-clock budget would measure who got the cores; CPU seconds (user + system of the training process and its
live workers, from the first step, at 1 torch thread) do not depend on the neighbours (up to cache and memory
contention). Wall time is reported beside them. A seed fixes the held-out split, the few-shot example and each
trainer's own sampling; the two sides alternate run by run (the first side swaps every seed). Every final model, and
the base model per seed, is scored by ``rlvr eval`` (128 held-out prompts x k=4 at temperature 1, the eval seed of the
recipe), so the metric is the same code on both sides.

Each budget has its own files: ``benchmarks/results/learning_vs_trl-<budget>[-dynamic].json`` (every run, step and
eval; rewritten after each stage, so ``--reuse`` continues an interrupted invocation; ``-dynamic``: rlvr's side with
the recipe's dynamic sampling, the default) and the ``.md`` of the same name, and its own work folder. The section between the ``learning-vs-trl`` markers of ``benchmarks/RESULTS.md`` (the rest
of that file is left as it is) holds a summary over every budget measured, then each budget's tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from bench_vs_trl import ENV, cpu_info  # noqa: E402
from machine import commit  # noqa: E402

RECIPE = REPO / "recipes" / "demo.yaml"
RESULTS_DIR = HERE / "results"


def raw_path(budget: float, dynamic_sampling: bool) -> Path:
    """The raw data of one CPU-second budget, with or without rlvr's dynamic sampling."""
    return RESULTS_DIR / f"learning_vs_trl-{budget:g}{'-dynamic' if dynamic_sampling else ''}.json"


def raw_file(raw: dict) -> Path:
    return raw_path(raw["cpu_budget_s"], raw.get("rlvr_dynamic_sampling", False))


def paired_differences(raw: dict) -> list[tuple[int, float]]:
    """(seed, pass@1 rlvr - TRL) for every seed where both sides were scored."""
    runs = [r for r in raw["runs"] if "eval" in r]
    return sorted((a["seed"], a["eval"]["pass_at_1"] - b["eval"]["pass_at_1"]) for a in runs for b in runs
                  if a["side"] == "rlvr" and b["side"] == "trl" and a["seed"] == b["seed"])
MARK_START, MARK_END = "<!-- learning-vs-trl:start -->", "<!-- learning-vs-trl:end -->"
SIDES = ("rlvr", "trl")


def export_train_prompts(seed: int, path: Path) -> dict:
    """rlvr's training split of ``recipes/demo.yaml`` at ``seed`` as JSONL rows ``messages`` (the chat turns rlvr
    renders, few-shot turn included), ``answer`` and ``prompt_ids`` (rlvr's token ids, for TRL's side to check);
    returns the model folder, the number of rows and the few-shot example."""
    from rlvr.config import load_recipe
    from rlvr.data.prompts import build_prompt_set
    from rlvr.data.sources import load_rows
    from rlvr.data.templates import prompt_messages
    from rlvr.models.loading import load_tokenizer, resolve_model_path

    recipe = load_recipe(RECIPE, [f"seed={seed}"])
    model_path = resolve_model_path(recipe.model.name)
    tokenizer = load_tokenizer(model_path, recipe.model)
    prompt_set = build_prompt_set(load_rows(recipe.data), tokenizer, recipe.data, seed=recipe.seed)
    with path.open("w") as fh:
        for p in prompt_set.train:
            fh.write(json.dumps({"messages": prompt_messages(p.row, recipe.data, prompt_set.shots),
                                 "answer": str(p.row[recipe.data.answer_field]), "prompt_ids": p.token_ids}) + "\n")
    return {"model_dir": model_path, "train_prompts": len(prompt_set.train), "eval_prompts": len(prompt_set.eval),
            "shot": prompt_set.shots[0] if prompt_set.shots else None}


def run_measured(cmd: list[str], log_path: Path, env: dict, reuse: bool = False) -> tuple[float, float]:
    """Run ``cmd`` (stdout+stderr to ``log_path``); returns its (wall s, CPU s of it and its waited-for children,
    model loading included), read with ``wait4`` so that runs in parallel threads do not mix, and kept beside the
    log (``*.process.json``). With ``reuse``, a finished run of the same command is read back instead.
    Raises RuntimeError with the log's tail on a non-zero exit."""
    record = log_path.with_suffix(".process.json")
    if reuse and record.exists() and json.loads(record.read_text())["command"] == cmd:
        saved = json.loads(record.read_text())
        print(f"reusing the finished run of {log_path.stem} ({record})", flush=True)
        return saved["wall_s"], saved["cpu_s"]
    record.unlink(missing_ok=True)
    t0 = time.perf_counter()
    print(f"[{time.strftime('%H:%M:%S')}] {' '.join(cmd)}", flush=True)
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode:
        tail = "\n".join(log_path.read_text().splitlines()[-30:])
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}; log {log_path}:\n{tail}")
    cpu = usage.ru_utime + usage.ru_stime
    record.write_text(json.dumps({"command": cmd, "wall_s": wall, "cpu_s": cpu}))
    return wall, cpu


def common_sets(args: argparse.Namespace, seed: int) -> list[str]:
    return ["--set", f"seed={seed}", "--set", f"trainer.num_threads={args.threads}"]


def train_rlvr(args: argparse.Namespace, seed: int, work: Path) -> dict:
    """``rlvr train recipes/demo.yaml`` to the CPU budget (no evals inside; the common evaluator runs after)."""
    run_dir = work / f"rlvr-seed{seed}"
    sets = ["--set", f"trainer.max_cpu_seconds={args.cpu_budget}", "--set", f"trainer.steps={args.max_steps}",
            "--set", "eval.enabled=false", "--set", "trainer.save_every=0"]
    if not args.rlvr_dynamic_sampling:  # the recipe turns it on; TRL's GRPOTrainer has none
        sets += ["--set", "algorithm.dynamic_sampling.enabled=false"]
    cmd = [sys.executable, "-m", "rlvr.cli", "train", str(RECIPE), "-o", str(run_dir), "--overwrite",
           *common_sets(args, seed), *sets]
    wall, cpu = run_measured(cmd, work / f"rlvr-seed{seed}.log", {**ENV, "PYTHONPATH": str(REPO)}, args.reuse)
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [{"step": m["step"], "cpu_s": m["cpu/seconds_total"], "reward_mean": m.get("reward/mean")}
             for m in steps if "cpu/seconds_total" in m]
    return {"side": "rlvr", "seed": seed, "model": summary["model"], "steps_done": summary["steps"],
            "train_cpu_s": summary["cpu_seconds"], "train_wall_s": summary["wall_time_s"], "steps": steps,
            "process_wall_s": wall, "process_cpu_s": cpu, "command": " ".join(cmd)}


def train_trl(args: argparse.Namespace, seed: int, work: Path, prompts: Path, model_dir: str) -> dict:
    """``trl_learn_worker.py`` in TRL's venv on the same prompts, to the same CPU budget."""
    spec = {"model_dir": model_dir, "prompts": str(prompts), "seed": seed, "threads": args.threads,
            "precision": args.precision, "prompts_per_step": 8, "group_size": 8, "max_new_tokens": 16, "lr": 5e-6,
            "micro_batch_size": 16, "max_cpu_seconds": args.cpu_budget, "max_steps": args.max_steps,
            "model_out": str(work / f"trl-seed{seed}" / "model"), "scratch_dir": str(work / f"trl-seed{seed}"),
            "cpu_time_py": str(REPO / "rlvr" / "runtime" / "cpu_time.py")}
    spec_path, out_path = work / f"trl-seed{seed}.spec.json", work / f"trl-seed{seed}.json"
    same_spec = spec_path.exists() and json.loads(spec_path.read_text()) == spec
    spec_path.write_text(json.dumps(spec, indent=1))
    cmd = [str(args.trl_venv / "bin" / "python"), str(HERE / "trl_learn_worker.py"), str(spec_path), str(out_path)]
    env = {k: v for k, v in ENV.items() if k != "PYTHONPATH"}
    wall, cpu = run_measured(cmd, work / f"trl-seed{seed}.log", env, args.reuse and same_spec and out_path.exists())
    out = json.loads(out_path.read_text())
    return {**out, "seed": seed, "steps_done": len(out["steps"]), "process_wall_s": wall, "process_cpu_s": cpu,
            "command": " ".join(cmd)}


def evaluate(args: argparse.Namespace, model: str, seed: int, log_path: Path) -> dict:
    """``rlvr eval MODEL --recipe recipes/demo.yaml`` at ``seed`` (its held-out split): pass@1 ± s.e. and the rest."""
    cmd = [sys.executable, "-m", "rlvr.cli", "eval", model, "--recipe", str(RECIPE), *common_sets(args, seed)]
    saved = log_path.with_suffix(".json")
    if args.reuse and saved.exists() and json.loads(saved.read_text())["command"] == cmd:
        print(f"reusing the eval in {saved}", flush=True)
        return json.loads(saved.read_text())["result"]
    t0 = time.perf_counter()
    print(f"[{time.strftime('%H:%M:%S')}] {' '.join(cmd)}", flush=True)
    proc = subprocess.run(cmd, cwd=REPO, env={**ENV, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    log_path.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    if proc.returncode:
        raise RuntimeError(f"eval of {model} failed (exit {proc.returncode}); log {log_path}")
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    print(f"    {model}: pass@1 {result['pass_at_1']:.3f} ± {result['pass_at_1_se']:.3f}", flush=True)
    result = {**result, "wall_s": time.perf_counter() - t0}
    saved.write_text(json.dumps({"command": cmd, "result": result}))
    return result


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean over seeds (sample std / sqrt(n); 0 for one value)."""
    m = statistics.fmean(values)
    return m, (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0)


def ds_words(raw: dict) -> str:
    """How the rlvr side sampled (files written before the setting existed ran it off)."""
    if raw.get("rlvr_dynamic_sampling", False):
        return ("rlvr with the recipe's dynamic sampling, which TRL's GRPOTrainer lacks: groups whose samples all "
                "scored the same are replaced by new ones, and their generation is inside the budget")
    return "rlvr without its dynamic sampling, as TRL's GRPOTrainer has none"


def render(raw: dict) -> str:
    """The markdown section: per-side means over seeds, the paired difference, and one row per run."""
    runs = [r for r in raw["runs"] if "eval" in r]
    dynamic = raw.get("rlvr_dynamic_sampling", False)
    lines = [f"### {raw['cpu_budget_s']:g} CPU seconds{', rlvr with dynamic sampling' if dynamic else ''}", ""]
    m = raw["machine"]
    lines += [f"Held-out pass@1 after the same budget of **{raw['cpu_budget_s']:.0f} CPU seconds** of training "
              f"(user + system of the training process and its live workers, from the first step; model loading and "
              f"evals not counted), `recipes/demo.yaml` settings on both sides ({ds_words(raw)}), "
              f"{raw['threads']} torch thread, "
              f"precision {raw['precision']}. CPU: {m['cpu']['model']}, flags {', '.join(m['cpu']['flags'])}, "
              f"{m['cpu']['cores']} cores shared with other jobs (1-min load {raw['load_1m_range'][0]:.1f}-"
              f"{raw['load_1m_range'][1]:.1f} during the runs). Each model is scored by `rlvr eval` on its seed's "
              f"128 held-out prompts x k=4 at temperature 1. Mean ± standard error over seeds."
              + (f" Measured {raw['date']}, commit {raw['commit']}." if "commit" in raw else ""), ""]
    lines += ["| side | seeds | held-out pass@1 | steps in budget | train CPU s | train wall s | samples |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    base = [r["base_eval"]["pass_at_1"] for r in raw.get("seeds", {}).values() if "base_eval" in r]
    if base:
        bm, bs = mean_se(base)
        lines.append(f"| base model (untrained) | {len(base)} | {bm:.3f} ± {bs:.3f} | 0 | - | - | - |")
    for side in SIDES:
        rs = [r for r in runs if r["side"] == side]
        if not rs:
            continue
        p, ps = mean_se([r["eval"]["pass_at_1"] for r in rs])
        st = statistics.fmean(r["steps_done"] for r in rs)
        lines.append(f"| {side} | {len(rs)} | **{p:.3f} ± {ps:.3f}** | {st:.1f} | "
                     f"{statistics.fmean(r['train_cpu_s'] for r in rs):.0f} | "
                     f"{statistics.fmean(r['train_wall_s'] for r in rs):.0f} | {st * 64:.0f} |")
    pairs = paired_differences(raw)
    if pairs:
        d, ds = mean_se([x for _, x in pairs])
        lines += ["", f"Paired by seed (same split, same few-shot example), pass@1 rlvr - TRL: **{d:+.3f} ± {ds:.3f}** "
                      f"over {len(pairs)} seed(s) ({', '.join(f'seed {s}: {x:+.3f}' for s, x in pairs)})."]
    lines += ["", "| seed | side | pass@1 | pass@4 | steps | train CPU s | train wall s | CPU s/step | "
                  "whole process CPU s / wall s |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(runs, key=lambda r: (r["seed"], r["order"])):
        e = r["eval"]
        lines.append(f"| {r['seed']} | {r['side']} | {e['pass_at_1']:.3f} ± {e['pass_at_1_se']:.3f} | "
                     f"{e.get('pass_at_k', float('nan')):.3f} | {r['steps_done']} | {r['train_cpu_s']:.0f} | "
                     f"{r['train_wall_s']:.0f} | {r['train_cpu_s'] / max(r['steps_done'], 1):.1f} | "
                     f"{r['process_cpu_s']:.0f} / {r['process_wall_s']:.0f} |")
    lines += ["", "Both sides: 8 prompts x 8 samples a step, one optimizer step each, 16 new tokens, temperature 1, "
                  "lr 5e-6 constant, no KL, token-mean loss (TRL `loss_type=\"dapo\"`), clip 0.2, grad clip 1.0, "
                  "advantages divided by the group std, HF `generate`. Rewards: rlvr's `math` verifier, TRL's "
                  "`accuracy_reward` (math-verify on the boxed answer). The run stops after the step that reaches "
                  "the budget, so a side can overshoot by up to one step (see train CPU s).",
              *[f"\nNote: {note}" for note in raw.get("notes", [])],
              "", f"Versions: {json.dumps(raw.get('versions', {}))}.", "",
              "Commands (`--reuse` continues with the finished runs of the same settings): " + "; ".join(
                  f"`python benchmarks/bench_learning_vs_trl.py {' '.join(a)}`" for a in raw.get("invocations",
                                                                                               [raw["argv"]])) +
              f". Raw data: `benchmarks/results/{raw_file(raw).name}`."]
    return "\n".join(lines) + "\n"


def render_summary(raws: list[dict]) -> str:
    """The RESULTS.md section: one line per budget (each side's mean pass@1 and steps, the paired difference in
    standard errors), then each budget's own tables (:func:`render`)."""
    lines = [MARK_START, "## Learning per unit of compute: rlvr vs TRL on the CPU demo", "",
             "| CPU s budget | rlvr dynamic sampling | seeds | base pass@1 | rlvr pass@1 | TRL pass@1 | "
             "steps rlvr / TRL | rlvr - TRL (paired) | in s.e. |",
             "| ---: | --- | ---: | --- | --- | --- | --- | --- | ---: |"]
    for raw in raws:
        runs = [r for r in raw["runs"] if "eval" in r]
        side = {s: [r for r in runs if r["side"] == s] for s in SIDES}
        if not all(side.values()):
            continue
        cell = {s: "{:.3f} ± {:.3f}".format(*mean_se([r["eval"]["pass_at_1"] for r in rs])) for s, rs in side.items()}
        steps = " / ".join(f"{statistics.fmean(r['steps_done'] for r in rs):.1f}" for rs in side.values())
        base = [i["base_eval"]["pass_at_1"] for i in raw.get("seeds", {}).values() if "base_eval" in i]
        pairs = paired_differences(raw)
        d, ds = mean_se([x for _, x in pairs]) if pairs else (float("nan"), float("nan"))
        lines.append(f"| {raw['cpu_budget_s']:g} | {'on' if raw.get('rlvr_dynamic_sampling') else 'off'} | "
                     f"{len(pairs)} | "
                     f"{'{:.3f} ± {:.3f}'.format(*mean_se(base)) if base else '-'} | {cell['rlvr']} | {cell['trl']} | "
                     f"{steps} | **{d:+.3f} ± {ds:.3f}** | {d / ds if ds else float('nan'):.1f} |")
    lines.append("")
    for raw in raws:
        lines += [render(raw)]
    return "\n".join(lines).rstrip("\n") + "\n" + MARK_END + "\n"


def merge_saved(raw: dict) -> None:
    """Take into ``raw`` the runs and base evals that the raw file on disk has and ``raw`` lacks, when both have the same
    settings (another invocation with other ``--seeds`` may have written them meanwhile)."""
    path = raw_file(raw)
    if not path.exists():
        return
    disk = json.loads(path.read_text())
    if any(disk.get(k, False) != raw.get(k, False) for k in ("cpu_budget_s", "threads", "precision", "max_steps",
                                                             "rlvr_dynamic_sampling")):
        return
    have = {(r["side"], r["seed"]) for r in raw.get("runs", [])}
    raw["runs"] = raw.get("runs", []) + [r for r in disk.get("runs", []) if (r["side"], r["seed"]) not in have]
    for seed, info in disk.get("seeds", {}).items():
        mine = raw.setdefault("seeds", {}).setdefault(seed, {})
        for key, value in info.items():
            mine.setdefault(key, value)
    raw.setdefault("versions", disk.get("versions", {}))


def write_outputs(raw: dict) -> None:
    RESULTS_DIR.mkdir(exist_ok=True)
    merge_saved(raw)
    loads = [s["load_1m"] for r in raw["runs"] for s in r.get("steps", []) if "load_1m" in s] + raw.get("loads", [])
    raw["load_1m_range"] = [min(loads), max(loads)] if loads else [float("nan")] * 2
    raw_file(raw).write_text(json.dumps(raw, indent=1))
    raw_file(raw).with_suffix(".md").write_text(render(raw))
    raws = sorted((json.loads(p.read_text()) for p in RESULTS_DIR.glob("learning_vs_trl-*.json")),
                  key=lambda r: (r["cpu_budget_s"], r.get("rlvr_dynamic_sampling", False)))
    section = render_summary(raws)
    results = HERE / "RESULTS.md"
    text = results.read_text() if results.exists() else ""
    if MARK_START in text and MARK_END in text:
        head, rest = text.split(MARK_START, 1)
        text = head + section.rstrip("\n") + rest.split(MARK_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    results.write_text(text)
    print(f"wrote {raw_file(raw).with_suffix('.md')} and the learning section of {results}",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trl-venv", type=Path, default=REPO / ".venv-trl")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--cpu-budget", type=float, default=200.0, help="CPU seconds of training per run")
    ap.add_argument("--max-steps", type=int, default=200, help="a cap far above what the budget buys")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on both sides and in the evals")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once: 1 = one after the other (sides alternated), "
                    "2 = a seed's two sides together, more = seeds together too; the budget is CPU seconds, so "
                    "only wall time changes (and memory: a TRL run needs ~5 GB, an rlvr run ~4 GB)")
    ap.add_argument("--rlvr-dynamic-sampling", choices=["recipe", "off"], default="recipe",
                    help="rlvr's side as recipes/demo.yaml ships it (dynamic sampling on: its generation rounds are "
                    "paid from the same CPU budget), or off, the algorithm TRL's GRPOTrainer runs")
    ap.add_argument("--no-train", action="store_true", help="start no training run: record and render the "
                    "finished ones (with --reuse), scoring those not scored yet")
    ap.add_argument("--no-base-eval", action="store_true", help="skip scoring the untrained model per seed")
    ap.add_argument("--work-dir", type=Path, default=None,
                    help="default: runs/bench_learning_vs_trl/budget-<CPU s>[-dynamic]")
    ap.add_argument("--reuse", action="store_true", help="keep finished runs/evals of the same settings from "
                    "results/learning_vs_trl-<budget>.json (continue an interrupted invocation)")
    ap.add_argument("--render-only", action="store_true", help="rewrite the tables of --cpu-budget from its raw data")
    args = ap.parse_args()
    args.work_dir = args.work_dir or REPO / "runs" / "bench_learning_vs_trl" / (
        f"budget-{args.cpu_budget:g}{'-dynamic' if args.rlvr_dynamic_sampling == 'recipe' else ''}")
    if args.render_only:
        write_outputs(json.loads(raw_path(args.cpu_budget, args.rlvr_dynamic_sampling == "recipe").read_text()))
        return
    if not (args.trl_venv / "bin" / "python").exists():
        sys.exit(f"no TRL venv at {args.trl_venv}: run `python benchmarks/bench_vs_trl.py --setup-trl` first")
    from rlvr.models.precision import choose_precision

    args.precision = choose_precision("auto", "cpu").name
    args.rlvr_dynamic_sampling = args.rlvr_dynamic_sampling == "recipe"
    settings = {"cpu_budget_s": args.cpu_budget, "threads": args.threads, "precision": args.precision,
                "max_steps": args.max_steps, "rlvr_dynamic_sampling": args.rlvr_dynamic_sampling}
    saved = raw_path(args.cpu_budget, args.rlvr_dynamic_sampling)
    raw = json.loads(saved.read_text()) if args.reuse and saved.exists() else {}
    if {k: raw.get(k) for k in settings} != settings:
        raw = {}
    raw.setdefault("invocations", [raw["argv"]] if "argv" in raw else []).append(sys.argv[1:])
    raw.update(settings, machine={"cpu": cpu_info()}, argv=sys.argv[1:], commit=commit(),
               date=time.strftime("%Y-%m-%d"))
    raw.setdefault("runs", [])
    raw.setdefault("seeds", {})
    raw.setdefault("loads", [])
    args.work_dir.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    def one(seed: int, side: str, order: int, prompts: Path, model_dir: str) -> None:
        """Train ``side`` at ``seed``, score it, record it (threads share ``raw`` under ``lock``)."""
        with lock:
            raw["loads"].append(os.getloadavg()[0])
        run = train_rlvr(args, seed, args.work_dir) if side == "rlvr" else \
            train_trl(args, seed, args.work_dir, prompts, model_dir)
        run["order"], run["jobs"] = order, args.jobs
        print(f"{side} seed {seed}: {run['steps_done']} steps in {run['train_cpu_s']:.0f} CPU s "
              f"({run['train_wall_s']:.0f} s wall)", flush=True)
        run["eval"] = evaluate(args, run["model"], seed, args.work_dir / f"{side}-seed{seed}.eval.log")
        with lock:
            if side == "trl":
                raw["versions"] = run.get("versions", {})
            raw["runs"] = [r for r in raw["runs"] if not (r["side"] == side and r["seed"] == seed)] + [run]
            write_outputs(raw)

    todo = []
    for i, seed in enumerate(args.seeds):
        info = raw["seeds"].setdefault(str(seed), {})
        prompts = args.work_dir / f"train_prompts_seed{seed}.jsonl"
        info.update(export_train_prompts(seed, prompts))
        for order, side in enumerate(SIDES if i % 2 == 0 else SIDES[::-1]):
            if any(r["side"] == side and r["seed"] == seed and "eval" in r for r in raw["runs"]):
                print(f"{side} seed {seed}: reusing the saved run", flush=True)
            elif args.no_train and not (args.work_dir / f"{side}-seed{seed}.process.json").exists():
                print(f"{side} seed {seed}: no finished run, left out (--no-train)", flush=True)
            else:
                todo.append((seed, side, order, prompts, info["model_dir"]))
    # jobs=1: one run at a time, sides alternated; jobs=2: a seed's two sides at once (the same neighbours' load on
    # both); more: seeds at once too. The budget is CPU seconds, so only the wall time changes.
    with ThreadPoolExecutor(args.jobs) as pool:
        for future in [pool.submit(one, *job) for job in todo]:
            future.result()
    if not args.no_base_eval:
        todo = [seed for seed in args.seeds if "base_eval" not in raw["seeds"][str(seed)]]

        def base(seed: int) -> None:
            info = raw["seeds"][str(seed)]
            result = evaluate(args, info["model_dir"], seed, args.work_dir / f"base-seed{seed}.eval.log")
            with lock:
                info["base_eval"] = result
                write_outputs(raw)

        with ThreadPoolExecutor(args.jobs) as pool:
            for future in [pool.submit(base, seed) for seed in todo]:
                future.result()
    write_outputs(raw)


if __name__ == "__main__":
    main()
