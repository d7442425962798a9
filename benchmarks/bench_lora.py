"""Full fine-tuning against LoRA (rank 8 and rank 64) on the CPU demo (``recipes/demo.yaml``, embedded SmolLM2-135M).

    python benchmarks/bench_lora.py                                 # 5 steps a run, 64 held-out prompts (~15 min)
    python benchmarks/bench_lora.py --steps 30 --eval-size 128 --rounds 2   # the demo's length, for a quiet machine

Each arm is one ``rlvr train`` of the demo recipe with the same seed (so the same held-out split, few-shot example and
first prompt draws); the arms differ only in ``model.lora`` and the learning rate (LoRA's is ``--lora-lr``, full
fine-tuning keeps the recipe's). Runs alternate arm by arm (full, r8, r64, full, ...) so background load on a shared
machine falls on every arm alike. Per arm: the step time split into rollout / update / sync (medians over the steps
after the first), the trainer process's peak RSS (``wait4``), the bytes of optimizer state in its final checkpoint
(every tensor of DeepSpeed's optimizer state file: Adam's two moments), held-out pass@1 before -> after with its
standard error (``summary.json``), and the 1-minute load average sampled every 5 s during the run. Writes
``benchmarks/results/lora.md`` and ``lora_raw.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.machine import stamp  # noqa: E402
from rlvr.runs.metrics import read_metrics  # noqa: E402

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
ARMS = {"full": None, "lora-r8": 8, "lora-r64": 64}
"""Arm -> LoRA rank (alpha = 2 x rank, all linear layers); ``None`` = full fine-tuning."""


def _optimizer_state_bytes(ckpt: Path) -> tuple[int, int]:
    """(bytes, elements) of every tensor of the optimizer state in the checkpoint's DeepSpeed folder (Adam's step
    counters are 0-d tensors: one element each, beside the two moments)."""
    import torch

    def walk(obj) -> tuple[int, int]:
        if isinstance(obj, torch.Tensor):
            return obj.numel() * obj.element_size(), obj.numel()
        items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
        sums = [walk(v) for v in items]
        return sum(s[0] for s in sums), sum(s[1] for s in sums)

    total = (0, 0)
    for f in sorted(ckpt.glob("deepspeed/**/*optim_states.pt")):  # ZeRO 1-3: the optimizer's own files
        b, n = walk(torch.load(f, map_location="cpu", weights_only=False))
        total = (total[0] + b, total[1] + n)
    if total == (0, 0):  # ZeRO-0: the optimizer state is the "optimizer" entry of the module state file
        for f in sorted(ckpt.glob("deepspeed/**/*model_states.pt")):
            b, n = walk(torch.load(f, map_location="cpu", weights_only=False).get("optimizer") or {})
            total = (total[0] + b, total[1] + n)
    return total


def _run(args: argparse.Namespace, arm: str, index: int) -> dict:
    out = args.runs_dir / f"{arm}-{index}"
    rank = ARMS[arm]
    sets = [f"trainer.steps={args.steps}", f"data.eval_size={args.eval_size}", "trainer.save_every=0",
            f"seed={args.seed}", f"trainer.num_threads={args.threads}"]
    if rank is not None:
        sets += [f"model.lora.rank={rank}", f"model.lora.alpha={2 * rank}", f"optim.lr={args.lora_lr}"]
    cmd = [sys.executable, "-m", "rlvr.cli", "train", str(args.recipe), "-o", str(out), "--overwrite"]
    for s in sets:
        cmd += ["--set", s]
    loads: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            loads.append(os.getloadavg()[0])
            stop.wait(5.0)

    sampler = threading.Thread(target=sample, daemon=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"{time.strftime('%H:%M:%S')} start {arm} (run {index}): {' '.join(cmd)}", flush=True)
    start = time.time()
    with open(f"{out}.log", "w") as log:
        sampler.start()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        stop.set()
        sampler.join()
    wall = time.time() - start
    if proc.returncode:
        raise RuntimeError(f"{arm} failed (exit {proc.returncode}); see {out}.log")
    steps = [m for m in read_metrics(out) if "time/rollout_s" in m]
    for m in steps:  # the step: the sum of its stages (rollout, reward, advantages, update, sync, ...)
        m["step_total_s"] = sum(v for k, v in m.items() if k.startswith("time/") and k.endswith("_s"))
    timed = steps[1:] or steps  # the first step warms caches and kernels up

    def med(key: str) -> float:
        return statistics.median([m.get(key, 0.0) for m in timed])

    summary = json.loads((out / "summary.json").read_text())
    ckpt = max((out / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    opt_bytes, opt_elems = _optimizer_state_bytes(ckpt)
    if not args.keep_checkpoints:  # a full run's checkpoint is ~2 GB (weights + Adam moments)
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    row = {"arm": arm, "run": index, "lora_rank": rank, "steps": len(steps), "wall_s": wall,
           "step_s": med("step_total_s"), "rollout_s": med("time/rollout_s"), "update_s": med("time/update_s"),
           "sync_s": med("time/sync_s"), "peak_rss_mb": usage.ru_maxrss / 1024, "optimizer_state_bytes": opt_bytes,
           "optimizer_state_elements": opt_elems, "eval_before": summary.get("eval_before"),
           "eval_after": summary.get("eval_after"), "load_median": statistics.median(loads) if loads else None,
           "load_min": min(loads, default=None), "load_max": max(loads, default=None)}
    print(f"{time.strftime('%H:%M:%S')} done {arm}: {json.dumps(row)}", flush=True)
    return row


def _pass(e: dict | None) -> str:
    return "-" if not e else f"{e['pass_at_1']:.3f} ± {e['pass_at_1_se']:.3f}"


def _report(args: argparse.Namespace, rows: list[dict], when: str, load_start: float) -> str:
    lines = [f"# Full fine-tuning vs LoRA on the CPU demo ({when})", "",
             f"Written by `python benchmarks/bench_lora.py {' '.join(sys.argv[1:])}`: {stamp()}.", "",
             f"`recipes/demo.yaml` (GRPO, embedded SmolLM2-135M-Instruct, 8 prompts x 8 samples, 16 new tokens, hf "
             f"engine, precision auto, {args.threads} torch thread(s)), seed {args.seed}, **{args.steps} steps a run, "
             f"eval_size {args.eval_size}** "
             f"(held-out pass@1 from {args.eval_size} prompts x 4 samples), {args.rounds} run(s) per arm, alternated. "
             f"Full fine-tuning at the recipe's lr 5e-6; LoRA (all linear layers, alpha = 2 x rank) at lr "
             f"{args.lora_lr:g}. Step times are medians over each run's steps after the first (step s: the sum of "
             f"every timed stage, reward and advantages included). Other processes "
             f"share the machine: 1-minute load average {load_start:.1f} at the start, each run's in its column "
             f"(median, min-max, sampled every 5 s).", "",
             "| arm | trainable params | optimizer state | step s | rollout s | update s | sync s | peak RSS MB | "
             "pass@1 before | pass@1 after | load avg |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        params = r["optimizer_state_elements"] // 2  # Adam: exp_avg and exp_avg_sq per trainable element
        lines.append(f"| {r['arm']} | {params / 1e6:.2f}M | {r['optimizer_state_bytes'] / 2**20:.1f} MiB | "
                     f"{r['step_s']:.2f} | {r['rollout_s']:.2f} | {r['update_s']:.2f} | {r['sync_s']:.3f} | "
                     f"{r['peak_rss_mb']:.0f} | {_pass(r['eval_before'])} | {_pass(r['eval_after'])} | "
                     f"{r['load_median']:.1f} ({r['load_min']:.1f}-{r['load_max']:.1f}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", type=Path, default=REPO / "recipes/demo.yaml")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--eval-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=1, help="runs per arm (alternated)")
    p.add_argument("--lora-lr", type=float, default=5e-5, help="LoRA's learning rate (full fine-tuning: the recipe's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per run (1: on cores shared with other jobs, OpenMP threads of 2 wait on each "
                        "other whenever one is descheduled)")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--runs-dir", type=Path, default=REPO / "runs/bench_lora")
    p.add_argument("--keep-checkpoints", action="store_true")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks/results/lora.md")
    args = p.parse_args()
    load_start = os.getloadavg()[0]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = [_run(args, arm, i) for i in range(args.rounds) for arm in args.arms]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_name("lora_raw.json").write_text(json.dumps(rows, indent=1))
    text = _report(args, rows, when, load_start)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
