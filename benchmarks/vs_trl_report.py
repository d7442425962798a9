"""Markdown for ``benchmarks/RESULTS.md`` from ``bench_vs_trl.py``'s measurements (no measuring here)."""

from __future__ import annotations

import time

MODEL_TITLES = {"smollm2": "SmolLM2-135M-Instruct (embedded, Llama, 30 layers, vocab 49,152)",
                "tiny": "tiny random Qwen2-shaped model (hidden 64, 2 layers, SmolLM2's tokenizer: vocab 49,152)"}


def _s(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def _side_rows(summ: dict) -> list[str]:
    rows = ["| side | step s, median (min-max) | generation s | scoring s | training s | completion tokens/step | "
            "peak RSS MB | load avg (1 min, median) | runs x timed steps |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for side in ("rlvr", "trl"):
        s = summ["sides"][side]
        name = "rlvr" if side == "rlvr" else f"TRL {s['versions'].get('trl', '')}"
        rows.append(f"| {name} | {_s(s['step_s'])} ({_s(s['step_min_s'])}-{_s(s['step_max_s'])}) | "
                    f"{_s(s['generation_s'])} | {_s(s['scoring_s'])} | {_s(s['training_s'])} | "
                    f"{s['completion_tokens']:.0f} | {s['peak_rss_mb']:.0f} | {s['load_1m']:.1f} | "
                    f"{s['runs']} x {s['steps'] // max(s['runs'], 1)} |")
    return rows


def _floor_rows(summ: dict) -> list[str]:
    rows = ["| side | generation floor s (compute / bandwidth) | generation / floor | training floor s | "
            "training / floor | step floor s | step / floor |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for side in ("rlvr", "trl"):
        s, f = summ["sides"][side], summ["sides"][side]["floor"]
        rows.append(f"| {side} | {f['generation']:.2f} ({f['generation_compute']:.2f} / "
                    f"{f['generation_bandwidth']:.2f}) | {s['generation_s'] / f['generation']:.1f}x | "
                    f"{f['training']:.2f} | {s['training_s'] / f['training']:.1f}x | {f['step']:.2f} | "
                    f"{s['step_s'] / f['step']:.1f}x |")
    return rows


FINDINGS = ""
"""The profile and what was fixed (hand-written: it describes code, not a measurement of this run)."""


def render_results(machine: dict, summaries: dict, steps: int, argv: list[str], findings: str = "") -> str:
    """The whole RESULTS.md: headline ratio, per-model tables, the floor, the machine, versions and the command."""
    cpu = machine["cpu"]
    lines = ["# rlvr vs TRL `GRPOTrainer`: step time, memory and the machine's floor", "",
             f"Written by `python benchmarks/bench_vs_trl.py {' '.join(argv)}`".rstrip() + " on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: every number below comes from that one "
             "invocation. Raw per-step data: `benchmarks/results/vs_trl_raw.json`.", ""]
    if "smollm2" in summaries:
        lines += [f"step time ratio rlvr/TRL: {summaries['smollm2']['ratio']:.2f}", "",
                  "(SmolLM2-135M, median over the alternated pairs of rlvr's median step time / TRL's; per pair: "
                  + ", ".join(f"{x:.2f}" for x in summaries["smollm2"]["pair_ratios"]) + ")", ""]
    lines += ["## Machine and settings", "",
              f"- CPU: {cpu['model']}, {cpu['cores']} cores, flags {', '.join(cpu['flags'])}; torch kernel level "
              f"{cpu['torch_capability']}. Shared with other jobs: see the load averages.",
              f"- Precision: **{machine['precision']}** on both sides (`auto`: bf16 where the CPU has AVX-512 bf16 or "
              "AMX, else fp32): fp32 master weights, bf16 autocast for generation and training forwards.",
              f"- torch threads: {machine['threads']} on both sides (`--threads`). With 2 threads on 2 cores shared "
              "with other jobs (load average 5-11), OpenMP threads wait on each other: the same tiny-model step took "
              "47-92 s at 2 threads and 12-15 s at 1.",
              "- Both: GRPO, 2 prompts x 8 samples a step, up to 128 new tokens, temperature 1, top-p 1, lr 1e-6 "
              "(constant), no KL (no reference model), token-mean loss (TRL `loss_type=\"dapo\"`), clip 0.2, grad "
              "clip 1.0, advantages scaled by the group std, one optimizer step per generation, HF-transformers "
              "`generate`, math-verify rewards (rlvr `math` verifier; TRL `accuracy_reward`), no gradient "
              "checkpointing (TRL's default is on; off here as on rlvr's side).",
              "- Prompts: reasoning-gym `basic_arithmetic` (seed 0), user turn = question + \"Put your final answer "
              "within \\boxed{}.\", the model's chat template. Each side draws its own shuffled order.",
              "- Runs alternate rlvr / TRL, the first side swapped every pair, so background load hits both; the "
              f"first of the {steps} steps of every run is a warm-up and not counted.",
              "- Stages. rlvr: its own timers (generation = `rollout`, scoring = `reward`, training = `advantages` + "
              "`update` + `sync`). TRL: its `profiling_context` blocks (generation = `transformers.generate`, "
              "scoring = `_calculate_rewards`, training = step minus `_prepare_inputs`).", ""]
    for name, summ in summaries.items():
        lines += [f"## {MODEL_TITLES.get(name, name)}", "", *(_side_rows(summ)), "",
                  f"rlvr/TRL step time, median of pairs: {summ['ratio']:.2f} (per pair: "
                  + ", ".join(f"{x:.2f}" for x in summ["pair_ratios"]) + ")", ""]
    lines += ["## The machine's limit", "",
              f"Measured in the same invocation, at {machine['threads']} thread(s): matmul "
              f"{machine['matmul_flops_per_s']['bf16'] / 1e9:.0f} GFLOP/s bf16 and "
              f"{machine['matmul_flops_per_s']['fp32'] / 1e9:.0f} GFLOP/s fp32 ((2048 x 576) @ (576 x 1536), "
              f"SmolLM2's MLP shape), memory read {machine['read_bytes_per_s'] / 1e9:.1f} GB/s (sum over a 512 MiB "
              f"tensor); load average {machine['load_1m_at_start']:.1f} when measured.", "",
              "Floor of a step from its own token counts: generation 2 x params x tokens, training (forward + "
              "backward) 6 x params x tokens, a group's shared prompt counted once, at the matmul rate above; "
              "decoding also cannot beat reading every weight once per decode step (bf16: 2 bytes/param) at the read "
              "bandwidth, and the generation floor is the larger of the two (roofline). No no-grad forward is "
              "needed (one PPO epoch, no KL).", ""]
    for name, summ in summaries.items():
        lines += [f"{MODEL_TITLES.get(name, name)}, {summ['params'] / 1e6:.1f}M parameters:", "",
                  *(_floor_rows(summ)), ""]
    if findings:
        lines += [findings.rstrip(), ""]
    vr = summaries[next(iter(summaries))]["sides"]
    lines += ["## Versions and command", "",
              f"- rlvr side: torch {vr['rlvr']['versions']['torch']}, transformers "
              f"{vr['rlvr']['versions']['transformers']} (this repo's venv).",
              f"- TRL side: trl {vr['trl']['versions']['trl']}, torch {vr['trl']['versions']['torch']}, transformers "
              f"{vr['trl']['versions']['transformers']} (its own venv, `python benchmarks/bench_vs_trl.py "
              "--setup-trl`).",
              f"- Command: `python benchmarks/bench_vs_trl.py {' '.join(argv)}`".rstrip() + " (from the repo root, "
              "with the Makefile's environment: `RLVR_CACHE`, `HF_HUB_OFFLINE=1`).", "",
              "![step time per stage](results/vs_trl.png)", ""]
    return "\n".join(lines)
