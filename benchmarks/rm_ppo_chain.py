"""The learned-reward chain on the CPU demo task, end to end, with one command:

    python benchmarks/rm_ppo_chain.py                 # sized for ~30 min on 2 idle cores (make rm-ppo-demo)
    python benchmarks/rm_ppo_chain.py --quick         # a smoke run of every stage: tiny sizes, a few minutes
    python benchmarks/rm_ppo_chain.py --pairs datasets/larger_2d_pairs.jsonl   # reuse shipped pairs (skips stage a)

Stages (each an ``rlvr`` command in its own process, so each is what a user would type):

a. ``pairs``: ``rlvr rm pairs recipes/demo.yaml``: the untrained demo policy's own samples, a verified-correct
   completion chosen over an incorrect one of the same prompt (the math verifier labels them);
b. ``rm``: ``rlvr rm train recipes/rm_demo.yaml`` on those pairs: held-out pairwise accuracy and ECE;
c. ``ppo_kl`` and ``ppo_no_kl``: ``rlvr train recipes/ppo_rm_demo.yaml`` against that RM, the math verifier logged as
   gold (``optimise: false``): with the recipe's KL penalty, and without one at a higher learning rate;
d. the plot: proxy (RM score) and gold (verifier) against sqrt(KL from the initial policy), Gao et al. 2022 Fig. 1;
e. ``grpo_rm``: GRPO against the same RM (only ``algorithm.name`` differs from ``ppo_kl``: same prompts x
   samples, model, reward model, KL penalty), for the step time of PPO vs GRPO: the median over the steps after the
   first (warm-up) of each stage (rollout, reward, old/ref log-probs, values, update policy / critic), the same steps
   of ``ppo_kl``.

Every stage's wall time, CPU time (user + system of its process tree) and the 1-minute load average (at start, mean
and max while it ran, sampled every 5 s) go into ``OUT/chain.json`` and ``OUT/chain.md`` with the CPU's name and flags:
the machine is shared, so a wall time means little without the load beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import cpu_description  # noqa: E402
from rm_ppo_report import curve_summary, plot_gold_vs_proxy, read_curve, stage_medians, step_time_table  # noqa: E402


@dataclass
class Sizes:
    """What each stage runs; ``full`` fits ~30 minutes on 2 idle cores, ``quick`` exercises every stage."""

    pair_prompts: int = 240      # demo training prompts sampled for pairs (x demo's 8 samples)
    pair_group_size: int | None = None
    rm_overrides: list[str] = field(default_factory=list)
    ppo_steps: int = 20          # --ppo-steps (the no-KL run's gold peaks near step 9)
    prompts_per_step: int = 6
    group_size: int = 4
    lr_kl: float = 1.0e-5        # the recipe's
    lr_no_kl: float = 3.0e-5     # no KL penalty and a higher lr: a chance for over-optimisation to show
    timing_steps: int = 3        # GRPO steps (and the same first steps of ppo_kl): 1 warm-up + 2 measured


FULL = Sizes()
QUICK = Sizes(pair_prompts=12, pair_group_size=4, rm_overrides=["train.prompts_per_step=4", "train.eval_every=0"],
              ppo_steps=3, prompts_per_step=2, group_size=4, timing_steps=3)


class LoadSampler:
    """The 1-minute load average every ``every_s`` seconds on a daemon thread, while a stage runs."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s, self.samples = every_s, [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_stage(name: str, argv: list[str], log_dir: Path) -> dict[str, Any]:
    """Run one ``rlvr`` command (``python -m rlvr.cli ...``), its output teed to ``log_dir/<name>.log``; returns
    its wall and CPU seconds and the load average. Raises CalledProcessError naming the log when it fails."""
    cmd = [sys.executable, "-m", "rlvr.cli", *argv]
    log = log_dir / f"{name}.log"
    print(f"\n=== {name}: rlvr {' '.join(argv)}", flush=True)
    cpu0, t0 = _children_cpu_s(), time.perf_counter()
    with LoadSampler() as load, log.open("w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            print(line, end="", flush=True)
        rc = proc.wait()
    if rc:
        raise subprocess.CalledProcessError(rc, cmd, output=f"see {log}")
    return {"stage": name, "command": "rlvr " + " ".join(argv), "wall_s": round(time.perf_counter() - t0, 1),
            "cpu_s": round(_children_cpu_s() - cpu0, 1), "load_1m_start": round(load.samples[0], 2),
            "load_1m_mean": round(statistics.fmean(load.samples), 2), "load_1m_max": round(max(load.samples), 2)}


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def ppo_argv(run_dir: Path, rm_dir: Path, sizes: Sizes, threads: int, steps: int, extra: list[str]) -> list[str]:
    """``rlvr train recipes/ppo_rm_demo.yaml`` against ``rm_dir`` with the chain's sizes and ``extra`` overrides."""
    sets = [f"reward_model.path={rm_dir}", f"trainer.steps={steps}", f"trainer.num_threads={threads}",
            f"rollout.prompts_per_step={sizes.prompts_per_step}", f"rollout.group_size={sizes.group_size}", *extra]
    return ["train", "recipes/ppo_rm_demo.yaml", "-o", str(run_dir), "--overwrite",
            *[a for s in sets for a in ("--set", s)]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="run folder (default runs/rm_ppo_chain[_quick])")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of every stage")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads per process (default 1)")
    ap.add_argument("--pairs", type=Path, default=None, help="reuse this pairs file: skips stage a")
    ap.add_argument("--rm", type=Path, default=None, help="reuse this `rlvr rm train` run: skips stage b")
    ap.add_argument("--ppo-steps", type=int, default=None, help="steps of each PPO run (default 20; --quick 3)")
    ap.add_argument("--plot", type=Path, default=None,
                    help="plot path (default docs/rm_ppo_gold_vs_proxy.png; OUT/gold_vs_proxy.png with --quick)")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.ppo_steps is not None:
        if args.ppo_steps < sizes.timing_steps:
            ap.error(f"--ppo-steps must be >= {sizes.timing_steps} (the steps the PPO vs GRPO timing compares)")
        sizes = replace(sizes, ppo_steps=args.ppo_steps)
    out = (args.out or ROOT / "runs" / ("rm_ppo_chain_quick" if args.quick else "rm_ppo_chain")).resolve()
    plot_path = args.plot or (out / "gold_vs_proxy.png" if args.quick else ROOT / "docs" / "rm_ppo_gold_vs_proxy.png")
    out.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    t = args.threads
    stages: list[dict[str, Any]] = []
    t0, cpu0 = time.perf_counter(), _children_cpu_s()

    # a. pairs from the demo policy's own samples, labelled by the math verifier
    pairs = args.pairs.resolve() if args.pairs else out / "pairs.jsonl"
    if args.pairs is None:
        a = ["rm", "pairs", "recipes/demo.yaml", "--out", str(pairs), "--prompts", str(sizes.pair_prompts),
             "--set", f"trainer.num_threads={t}"]
        if sizes.pair_group_size:
            a += ["--group-size", str(sizes.pair_group_size)]
        stages.append(run_stage("pairs", a, out / "logs"))
    # b. the reward model on them
    rm_dir = args.rm.resolve() if args.rm else out / "rm"
    if args.rm is None:
        sets = [f"data.source.path={pairs}", f"train.num_threads={t}", *sizes.rm_overrides]
        stages.append(run_stage("rm", ["rm", "train", "recipes/rm_demo.yaml", "-o", str(rm_dir),
                                       *[x for s in sets for x in ("--set", s)]], out / "logs"))
    rm_summary = json.loads((rm_dir / "summary.json").read_text())
    # c. PPO against it, with and without the KL penalty (gold = the math verifier, logged only)
    runs = {"ppo_kl": [f"optim.lr={sizes.lr_kl}"],
            "ppo_no_kl": ["algorithm.kl.beta=0.0", f"optim.lr={sizes.lr_no_kl}"]}
    for name, extra in runs.items():
        stages.append(run_stage(name, ppo_argv(out / name, rm_dir, sizes, t, sizes.ppo_steps, extra), out / "logs"))
    # e. GRPO against the same RM on the same batch shape (only the advantage estimator differs from ppo_kl)
    stages.append(run_stage("grpo_rm", ppo_argv(out / "grpo_rm", rm_dir, sizes, t, sizes.timing_steps,
                                                [f"optim.lr={sizes.lr_kl}", "algorithm.name=grpo"]),
                            out / "logs"))
    total_wall, total_cpu = time.perf_counter() - t0, _children_cpu_s() - cpu0

    # d. the over-optimisation plot and the numbers
    curves = {name: read_curve(_records(out / name)) for name in runs}
    beta = yaml.safe_load((out / "ppo_kl" / "recipe.resolved.yaml").read_text())["algorithm"]["kl"]["beta"]
    labels = {"ppo_kl": f"PPO, KL penalty (beta {beta:g}), lr {sizes.lr_kl:g}",
              "ppo_no_kl": f"PPO, no KL penalty, lr {sizes.lr_no_kl:g}"}
    plot_gold_vs_proxy({labels[k]: v for k, v in curves.items()}, plot_path,
                       title=f"SmolLM2-135M-Instruct vs a learned RM (held-out pair acc. "
                             f"{rm_summary['eval']['pairwise_accuracy']:.3f}); gold = math verifier")
    timing = {"PPO": stage_medians(_records(out / "ppo_kl")[:sizes.timing_steps]),
              "GRPO": stage_medians(_records(out / "grpo_rm"))}
    report = {"cpu": cpu_description(), "threads": t, "sizes": asdict(sizes),
              "rm": {k: rm_summary["eval"].get(k) for k in ("pairwise_accuracy", "ece", "length_correlation",
                                                             "n_pairs", "n_prompts")}
              | {"before": rm_summary.get("eval_before"), "train_pairs": rm_summary.get("train_pairs")},
              "curves": {k: curve_summary(v) for k, v in curves.items()}, "step_time": timing,
              "stages": stages, "total_wall_s": round(total_wall, 1), "total_cpu_s": round(total_cpu, 1),
              "plot": str(plot_path)}
    if args.pairs is None:
        # `rlvr rm pairs` ends with its stats as one indented JSON object
        found = re.findall(r"^\{$.*?^\}$", (out / "logs" / "pairs.log").read_text(), re.M | re.S)
        report["pairs"] = json.loads(found[-1]) if found else None
    (out / "chain.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "chain.md").write_text(markdown(report))
    print("\n" + markdown(report))
    return 0


def markdown(report: dict[str, Any]) -> str:
    """The chain's numbers as markdown: stages (wall, CPU, load), RM eval, gold/proxy per run, step times."""
    cpu = report["cpu"]
    lines = [f"CPU: {cpu['model']}, {cpu['cores']} cores ({', '.join(cpu['flags'])}); {report['threads']} torch "
             f"thread(s) per process. Total {report['total_wall_s']:.0f} s wall, {report['total_cpu_s']:.0f} s CPU.",
             "", "| stage | wall s | CPU s | load 1m (start / mean / max) |", "| --- | --- | --- | --- |"]
    for s in report["stages"]:
        lines.append(f"| {s['stage']} | {s['wall_s']:.0f} | {s['cpu_s']:.0f} | {s['load_1m_start']:.1f} / "
                     f"{s['load_1m_mean']:.1f} / {s['load_1m_max']:.1f} |")
    rm = report["rm"]
    before = rm.get("before") or {}
    lines += ["", f"RM held-out ({rm['n_pairs']} pairs, {rm['n_prompts']} prompts): pairwise accuracy "
              f"{rm['pairwise_accuracy']:.3f}, ECE {rm['ece']:.3f} (untrained head: "
              f"{before.get('pairwise_accuracy', float('nan')):.3f}, {before.get('ece', float('nan')):.3f})", "",
              "| run | gold start / peak (step, sqrt KL) / end | proxy start / peak / end | final KL (nats) |",
              "| --- | --- | --- | --- |"]
    for name, c in report["curves"].items():
        g, p = c["gold"], c["proxy"]
        lines.append(f"| {name} | {g['start']:.3f} / {g['peak']:.3f} ({g['peak_step']}, {g['peak_sqrt_kl']:.2f}) / "
                     f"{g['end']:.3f} | {p['start']:.2f} / {p['peak']:.2f} / {p['end']:.2f} | "
                     f"{c['final_kl']:.3f} |")
    lines += ["", f"(means over {next(iter(report['curves'].values()))['window']} steps)", "",
              step_time_table(report["step_time"])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
