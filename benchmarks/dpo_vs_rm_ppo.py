"""DPO on the demo's preference pairs against the reward model + PPO chain on the same pairs, one command:

    python benchmarks/dpo_vs_rm_ppo.py            # make dpo-demo
    python benchmarks/dpo_vs_rm_ppo.py --skip-ppo # DPO and the base model only

Every stage is an ``rlvr`` command in its own process (as a user types it), timed (wall, CPU of its process tree, the
1-minute load average beside):

1. ``base_eval``: ``rlvr eval`` of the untrained embedded model on the demo's 128 held-out prompts
   (``recipes/demo.yaml``'s eval: 4 samples at T=1, the ``math`` verifier: the gold reward);
2. ``dpo``: ``rlvr dpo recipes/dpo_demo.yaml`` on datasets/larger_2d_pairs.jsonl (353 training pairs, 90 held out
   from 45 prompts), then ``dpo_eval``: the same ``rlvr eval`` of its policy;
3. ``rm``: ``rlvr rm train recipes/rm_demo.yaml`` on the same pairs (353 / 90 held out from 45 prompts, its own
   split), ``ppo``: ``rlvr train recipes/ppo_rm_demo.yaml`` against it with ``make rm-ppo-demo``'s KL run
   (benchmarks/rm_ppo_chain.py: 20 steps, 6 prompts x 4 samples, lr 1e-5, KL beta 0.2), then ``ppo_eval``.

Held-out preference accuracy: DPO's implicit reward (beta log-ratio) ranks the held-out pair right; the RM's score
does. Writes OUT/dpo_vs_rm_ppo.json, benchmarks/results/dpo_vs_rm_ppo.md and docs/demo_dpo_vs_rm_ppo.png.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import study_header  # noqa: E402
from rm_ppo_chain import FULL, ppo_argv, run_stage  # noqa: E402

BASE = "embedded:smollm2-135m-instruct"


def eval_result(log: Path) -> dict[str, Any]:
    """The result ``rlvr eval`` prints last (one indented JSON object)."""
    found = re.findall(r"^\{$.*?^\}$", log.read_text(), re.M | re.S)
    if not found:
        raise ValueError(f"{log}: no JSON result of rlvr eval in it")
    return json.loads(found[-1])


def gold_eval(name: str, target: str, out: Path, threads: int) -> dict[str, Any]:
    """``rlvr eval TARGET --recipe recipes/demo.yaml``: pass@1 on the demo's held-out prompts."""
    argv = ["eval", target, "--recipe", "recipes/demo.yaml", "--set", f"trainer.num_threads={threads}"]
    stage = run_stage(name, argv, out / "logs")
    return {**stage, "result": eval_result(out / "logs" / f"{name}.log")}


def plot(data: dict[str, Any], path: Path) -> None:
    """Gold pass@1 (± s.e. over prompts) and training wall time of each policy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("base", "dpo", "rm_ppo") if n in data["policies"]]
    labels = {"base": "untrained", "dpo": "DPO", "rm_ppo": "RM + PPO"}
    colours = {"base": "tab:gray", "dpo": "tab:orange", "rm_ppo": "tab:blue"}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8.4, 3.6))
    for i, n in enumerate(names):
        p = data["policies"][n]
        a1.bar(i, p["pass_at_1"], yerr=p["pass_at_1_se"], color=colours[n], capsize=4)
        a2.bar(i, p["train_wall_s"], color=colours[n])
    for ax in (a1, a2):
        ax.set_xticks(range(len(names)), [labels[n] for n in names])
        ax.grid(axis="y", alpha=0.3)
    a1.set_ylabel("gold pass@1, 128 held-out prompts x 4")
    a1.set_ylim(0, 1)
    a2.set_ylabel("training wall s (all stages)")
    fig.suptitle("SmolLM2-135M on the demo's preference pairs: DPO vs reward model + PPO", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(data: dict[str, Any]) -> str:
    """The markdown results file."""
    cpu = data["cpu"]
    lines = ["# DPO vs reward model + PPO on the demo's preference pairs", "",
             f"Measured {data['date']}, commit {data['commit']}, {cpu['model']} ({', '.join(cpu['flags'])}), "
             f"{cpu['cores']} cores shared with other jobs, {data['threads']} torch thread(s) per process. "
             f"Command: `{data['command']}`. One seed (0) of each: no spread across seeds is estimated.", "",
             "Gold pass@1: `rlvr eval POLICY --recipe recipes/demo.yaml`, the demo's 128 held-out prompts (none is a "
             "pair's prompt) x 4 samples at T=1, the `math` verifier; ± standard error over prompts. Held-out "
             "preference accuracy: 90 pairs of 45 held-out prompts (DPO and the RM hold out 45 prompts each, "
             "by their own seeded splits).", "",
             "| policy | gold pass@1 | held-out pref. acc. (before -> after) | training stages | training wall s | "
             "training CPU s |", "| --- | ---: | --- | --- | ---: | ---: |"]
    for n, label in (("base", "untrained"), ("dpo", "DPO"), ("rm_ppo", "RM + PPO (KL)")):
        p = data["policies"].get(n)
        if p is None:
            continue
        acc = p.get("pref_accuracy")
        acc_s = "-" if acc is None else f"{acc[0]:.3f} -> {acc[1]:.3f}"
        lines.append(f"| {label} | {p['pass_at_1']:.3f} ± {p['pass_at_1_se']:.3f} | {acc_s} | "
                     f"{', '.join(p['stages']) or '-'} | {p['train_wall_s']:.0f} | {p['train_cpu_s']:.0f} |")
    lines += ["", "| stage | command | wall s | CPU s | load 1m (start / mean / max) |",
              "| --- | --- | ---: | ---: | --- |"]
    for s in data["stages"]:
        command = s["command"].replace(str(ROOT) + "/", "")  # paths inside the checkout, as a user types them
        lines.append(f"| {s['stage']} | `{command}` | {s['wall_s']:.0f} | {s['cpu_s']:.0f} | "
                     f"{s['load_1m_start']:.1f} / {s['load_1m_mean']:.1f} / {s['load_1m_max']:.1f} |")
    d = data.get("dpo_summary")
    if d:
        b, a, nan = d["eval_before"], d["eval_after"], float("nan")
        lines += ["", f"DPO held-out, before -> after: loss {b.get('loss', nan):.3f} -> {a.get('loss', nan):.3f}, "
                  f"margin {b.get('margin', nan):.3f} -> {a.get('margin', nan):.3f}, chosen log-prob "
                  f"{b.get('logps_chosen', nan):.2f} -> {a.get('logps_chosen', nan):.2f}, rejected "
                  f"{b.get('logps_rejected', nan):.2f} -> {a.get('logps_rejected', nan):.2f}; pass@1 of its own "
                  f"samples on the held-out pair prompts {b.get('pass_at_1', nan):.3f} -> "
                  f"{a.get('pass_at_1', nan):.3f}."]
    lines += ["", f"Plot: `{data['plot']}`.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "dpo_vs_rm_ppo")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads per process (default 1)")
    ap.add_argument("--skip-ppo", action="store_true", help="DPO and the untrained model only")
    ap.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "results" / "dpo_vs_rm_ppo.md")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "demo_dpo_vs_rm_ppo.png")
    args = ap.parse_args()
    out, t = args.out.resolve(), args.threads
    (out / "logs").mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = study_header("dpo_vs_rm_ppo.py", sys.argv[1:], threads=t, stages=[], policies={})
    stages: list[dict[str, Any]] = data["stages"]

    def record(stage: dict[str, Any]) -> dict[str, Any]:
        stages.append({k: v for k, v in stage.items() if k != "result"})
        (out / "dpo_vs_rm_ppo.json").write_text(json.dumps(data, indent=1))
        return stage

    def policy(name: str, ev: dict[str, Any], train: list[dict[str, Any]], acc: tuple[float, float] | None) -> None:
        r = ev["result"]
        data["policies"][name] = {"pass_at_1": r["pass_at_1"], "pass_at_1_se": r["pass_at_1_se"],
                                  "num_prompts": r["num_prompts"], "k": r["k"], "pref_accuracy": acc,
                                  "stages": [s["stage"] for s in train],
                                  "train_wall_s": sum(s["wall_s"] for s in train),
                                  "train_cpu_s": sum(s["cpu_s"] for s in train)}

    policy("base", record(gold_eval("base_eval", BASE, out, t)), [], None)

    dpo_dir = out / "dpo"
    dpo = record(run_stage("dpo", ["dpo", "recipes/dpo_demo.yaml", "-o", str(dpo_dir), "--overwrite",
                                   "--set", f"trainer.num_threads={t}"], out / "logs"))
    ds = json.loads((dpo_dir / "summary.json").read_text())
    data["dpo_summary"] = {k: ds[k] for k in ("steps", "cpu_seconds", "eval_before", "eval_after")}
    policy("dpo", record(gold_eval("dpo_eval", str(dpo_dir), out, t)), [dpo],
           (ds["eval_before"]["accuracy"], ds["eval_after"]["accuracy"]))

    if not args.skip_ppo:
        rm_dir, ppo_dir = out / "rm", out / "ppo"
        rm = record(run_stage("rm", ["rm", "train", "recipes/rm_demo.yaml", "-o", str(rm_dir),
                                     "--set", f"train.num_threads={t}"], out / "logs"))
        rs = json.loads((rm_dir / "summary.json").read_text())
        ppo = record(run_stage("ppo", ppo_argv(ppo_dir, rm_dir, FULL, t, FULL.ppo_steps,
                                               [f"optim.lr={FULL.lr_kl}"]), out / "logs"))
        policy("rm_ppo", record(gold_eval("ppo_eval", str(ppo_dir), out, t)), [rm, ppo],
               ((rs.get("eval_before") or {}).get("pairwise_accuracy", float("nan")),
                rs["eval"]["pairwise_accuracy"]))

    data["plot"] = str(args.plot.relative_to(ROOT)) if args.plot.is_relative_to(ROOT) else str(args.plot)
    plot(data, args.plot)
    args.report.write_text(report(data))
    (out / "dpo_vs_rm_ppo.json").write_text(json.dumps(data, indent=1))
    print(args.report.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
