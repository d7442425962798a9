"""The CPU demo with rollouts from a vLLM server at max_off_policy_steps K = 0, 1, 2, against the in-process engine:

    python benchmarks/server_rollouts.py                  # 3 seeds x 4 arms
    python benchmarks/server_rollouts.py --seeds 0 --ks 0 1

Every arm is ``rlvr train recipes/demo.yaml`` (30 GRPO steps, the demo's held-out eval before and after), one process
tree each, timed by :func:`rm_ppo_chain.run_stage` (wall, CPU of the tree, load average):

- ``in-process``: the recipe as shipped (``rollout.engine: hf``), all ``--threads`` torch threads to the one process;
- ``server K=k``: ``rollout.engine: server`` with one ``rlvr serve`` started by the run on vLLM's CPU backend
  (``--server-threads`` OpenMP threads), the trainer on ``--trainer-threads`` torch threads, weights sent after every
  optimizer step through the ``file`` transfer (shared memory), and ``rollout.max_off_policy_steps: k``.

Per arm: held-out pass@1 after training (mean ± s.e. over seeds), wall and CPU seconds, the mean weight-sync time, the
mean time the trainer waited for its batch, mean staleness and the samples dropped as too stale. Writes
OUT/server_rollouts.json and benchmarks/results/server_rollouts.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import study_header  # noqa: E402
from rm_ppo_chain import run_stage  # noqa: E402
from sft_cold_start import fmt, summary  # noqa: E402


def arm_argv(arm: str, seed: int, run_dir: Path, args: argparse.Namespace) -> list[str]:
    """``rlvr train recipes/demo.yaml`` for ``arm`` (``in-process`` or ``server-K``) and ``seed``."""
    sets = [f"seed={seed}", *args.set]
    if arm == "in-process":
        sets += [f"trainer.num_threads={args.threads}"]
    else:
        k = int(arm.removeprefix("server-K"))
        sets += ["rollout.engine=server", "rollout.servers.launch.count=1",
                 f"rollout.servers.launch.threads={args.server_threads}", f"trainer.num_threads={args.trainer_threads}",
                 f"rollout.max_off_policy_steps={k}"]
    return ["train", "recipes/demo.yaml", "-o", str(run_dir), "--overwrite", *[a for s in sets for a in ("--set", s)]]


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def step_means(run_dir: Path) -> dict[str, Any]:
    """The per-step means the report shows, from a run's metrics.jsonl."""
    steps = [r for r in records(run_dir) if "time/sync_s" in r or "time/rollout_s" in r]
    # each training step's seconds: its phase timers summed
    step_seconds = [sum(v for k, v in r.items() if k.startswith("time/") and k.endswith("_s")) for r in steps]

    def mean(key: str) -> float | None:
        values = [r[key] for r in steps if key in r]
        return statistics.fmean(values) if values else None

    return {"sync_s": mean("time/sync_s"), "rollout_wait_s": mean("time/rollout_wait_s"),
            "rollout_s": mean("time/rollout_s"), "update_s": mean("time/update_s"),
            "producer_s": mean("rollout/collector_rollout_s"),
            "staleness_mean": mean("rollout/staleness_mean"),
            # every sampled token (dynamic sampling's dropped groups too) over the generation's own seconds (K >= 1:
            # the producer's, which overlap the update)
            "tokens_per_s": sum(r.get("rollout/tokens_generated", 0.0) for r in steps) / max(sum(
                r.get("rollout/collector_rollout_s", r.get("time/rollout_s", 0.0)) for r in steps), 1e-9),
            "stale_dropped": sum(r.get("rollout/stale_samples_dropped", 0.0) for r in steps),
            # the training steps alone: the wall time less start-up and the two evals
            "train_s": sum(step_seconds), "step_s": statistics.fmean(step_seconds) if steps else None}


def arithmetic(arms: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The overlap arithmetic with this run's own numbers: K = 0's phases, the step overlap would give at best, and
    what each arm's step took (means over seeds)."""
    def m(arm: str, key: str) -> float | None:
        values = [r[key] for r in arms.get(arm, []) if r.get(key) is not None]
        return statistics.fmean(values) if values else None

    gen, upd, sync = m("server-K0", "rollout_s"), m("server-K0", "update_s"), m("server-K0", "sync_s")
    if None in (gen, upd, sync):
        return []
    seq, best = gen + upd + sync, max(gen, upd) + sync
    steps = "; ".join(f"{arm} {m(arm, 'step_s'):.1f} s" for arm in arms if m(arm, "step_s") is not None)
    producer = "; ".join(f"{arm} {m(arm, 'producer_s'):.1f} s" for arm in arms if m(arm, "producer_s") is not None)
    return [
        "",
        f"The arithmetic with these runs' numbers (means over seeds). With K = 0 a step is generation {gen:.1f} s on",
        f"the server's thread, then the update {upd:.1f} s on the trainer's, then the sync {sync:.2f} s: {seq:.1f} s,",
        f"one core idle at any time. The best overlap can do is max(t_gen, t_train) + t_sync = {best:.1f} s "
        f"({seq / best:.2f}x).",
        f"Measured seconds a step: {steps}. With K >= 1 the producer's rollout seconds a step ({producer}) are",
        f"longer than K = 0's rollout ({gen:.1f} s): they hold the pauses of the weight syncs (a sync waits for the",
        "requests in flight to pause: sync s/step above) and generation beside the update; how much each costs was",
        "not measured. So overlap wins back little of what it could. The in-process arm decodes with rlvr's own CPU",
        "kernels on both threads;",
        "vLLM's CPU backend, made for larger models and batches, is the slower engine for this model on one core, so",
        "here the server path costs time. It pays where the servers have devices of their own.",
    ]


def run_arm(arm: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One training run; its timings, summary and the per-step means the report shows."""
    run_dir = args.out / f"{arm}-s{seed}"
    stage = run_stage(f"{arm}-s{seed}", arm_argv(arm, seed, run_dir, args), args.out / "logs")
    return {"arm": arm, "seed": seed, **stage, "summary": summary(run_dir), **step_means(run_dir)}


def report(data: dict[str, Any]) -> str:
    cpu = data["cpu"]
    lines = [
        "# Server rollouts on the CPU: K = 0, 1, 2 against the in-process engine",
        "",
        f"Measured {data['date']} at commit {data['commit']} on {cpu['model']} ({cpu['cores']} cores, "
        f"flags {', '.join(cpu['flags'])}), by `{data['command']}`; load average at start {data['load_1m_at_start']:.2f}.",
        f"Threads: in-process {data['threads']} torch threads; server arms {data['server_threads']} OpenMP thread(s) "
        f"for the vLLM server and {data['trainer_threads']} torch thread(s) for the trainer. Overrides of "
        f"recipes/demo.yaml for every arm: {', '.join(data.get('overrides') or []) or 'none'}.",
        "",
        "| arm | seeds | held-out pass@1 after | before | wall s | train s | CPU s | update s/step | sync s/step | "
        "wait s/step | staleness | dropped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    arms: dict[str, list[dict[str, Any]]] = {}
    for run in data["runs"]:
        arms.setdefault(run["arm"], []).append(run)
    for arm, runs in arms.items():
        for r in runs:  # K >= 1: the wait for a batch made ahead; otherwise the rollout itself
            r["wait_s"] = r.get("rollout_wait_s") if r.get("rollout_wait_s") is not None else r.get("rollout_s")

        def col(key: str, digits: int = 1, runs: list[dict[str, Any]] = runs) -> str:
            values = [r[key] for r in runs if r.get(key) is not None]
            return fmt(values, digits) if values else "-"
        after = [r["summary"]["eval_after"]["pass_at_1"] for r in runs]
        before = [r["summary"]["eval_before"]["pass_at_1"] for r in runs]
        lines.append(f"| {arm} | {len(runs)} | {fmt(after)} | {fmt(before)} | {col('wall_s', 0)} | "
                     f"{col('train_s', 0)} | {col('cpu_s', 0)} | {col('update_s', 2)} | {col('sync_s', 2)} | "
                     f"{col('wait_s', 2)} | {col('staleness_mean', 2)} | {col('stale_dropped', 0)} |")
    lines += [
        "",
        "pass@1: the demo's own held-out eval (128 prompts x 4 samples at T = 1), mean ± s.e. over seeds. wall: the",
        "whole command (start-up, both evals, training); train: the training steps alone (their phase timers summed;",
        "the server arms' evals run on the server's thread). wait: the seconds a step waited for its batch (with K = 0",
        "the whole rollout, in-process too). staleness: optimizer steps between",
        "the weights that sampled a batch and the weights it trained. dropped: samples older than K when trained.",
        "",
        "On 2 cores overlap cannot pay much: the server's decode and the trainer's update are both compute-bound on",
        "the same two cores, so running them at once only shares the cores between them. Where generation has its own",
        "GPU and training another, a step costs max(t_gen, t_train) + t_sync instead of t_gen + t_train + t_sync.",
        *arithmetic(arms),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ks", type=int, nargs="+", default=[0, 1, 2], help="max_off_policy_steps of the server arms")
    ap.add_argument("--no-in-process", action="store_true", help="leave out the in-process arm")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the in-process arm (default 2)")
    ap.add_argument("--trainer-threads", type=int, default=1, help="torch threads of the server arms' trainer")
    ap.add_argument("--server-threads", type=int, default=1, help="OpenMP threads of the server arms' vLLM server")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for every arm (e.g. trainer.steps=12)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "server_rollouts")
    ap.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "results" / "server_rollouts.md")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="only rewrite the report from this json (the step means re-read from --out's run folders)")
    args = ap.parse_args()

    if args.from_json is not None:
        data = json.loads(args.from_json.read_text())
        refreshed = False
        for run in data["runs"]:  # the step means again where the run folders are still there
            run_dir = args.out / f"{run['arm']}-s{run['seed']}"
            if (run_dir / "metrics.jsonl").exists():
                run.update(step_means(run_dir))
                refreshed = True
        if refreshed:  # the json keeps what the report shows, for when the run folders are gone
            args.from_json.write_text(json.dumps(data, indent=1))
    else:
        (args.out / "logs").mkdir(parents=True, exist_ok=True)
        data = study_header("server_rollouts.py", sys.argv[1:], threads=args.threads,
                            trainer_threads=args.trainer_threads, server_threads=args.server_threads,
                            overrides=args.set, runs=[])
        arms = ([] if args.no_in_process else ["in-process"]) + [f"server-K{k}" for k in args.ks]
        for seed in args.seeds:  # seeds outermost: a cut run still has every arm of its first seeds
            for arm in arms:
                data["runs"].append(run_arm(arm, seed, args))
                (args.out / "server_rollouts.json").write_text(json.dumps(data, indent=1))
    args.report.write_text(report(data))
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
