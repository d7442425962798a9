"""Tool-use rollouts in rounds against continuous batching across turns, on the tool demo's batch.

    .venv/bin/python benchmarks/bench_turn_scheduling.py                    # vLLM's CPU backend, 3 repetitions
    .venv/bin/python benchmarks/bench_turn_scheduling.py --reps 1 --prompts 2 --samples 2   # a smoke run

What runs: one training step's rollout of ``recipes/tool_demo.yaml`` (``--prompts`` held-out prompts x ``--samples``
samples, 8 x 8 by default, the recipe's batch; the sandboxed python tool, fenced calls, 3 turns, 64 sampled tokens a
sample) on the embedded SmolLM2-135M-Instruct with vLLM's engine, once per schedule
(:func:`rlvr.rollout.multi_turn.multi_turn_generate`'s ``scheduling``):

- ``rounds``: every unfinished sample is generated together; the environment answers the round's paused samples at
  once; the next round starts when the slowest sample of the last one has ended and every call is answered.
- ``continuous``: one request per sample and turn on vLLM's scheduler (``LLMEngine.add_request`` / ``step``); a
  sample whose call is answered joins the running batch at the next step, and the sandbox answers on a worker thread
  while the engine decodes.

The schedules alternate within each repetition (the first one alternating too), on one engine, after one warm-up
rollout of each; each rollout is seeded the same. Reported per schedule: the rollout's wall seconds (median over
repetitions, and each repetition's ratio continuous / rounds), the seconds in the engine and in the tool, turns
and calls per sample and sampled tokens. The training step's other stages (rewards, the update, the weight sync)
do not depend on the schedule: the rollout is the part of the step that changes.

Writes ``benchmarks/results/turn_scheduling.md`` (``--out``) and its json beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import study_header  # noqa: E402
from benchmarks.tool_demo_probe import load_inputs  # noqa: E402

SCHEDULES = ("rounds", "continuous")


def one_rollout(engine: Any, tokenizer: Any, env: Any, recipe: Any, rows: list[dict], samples: int,
                scheduling: str, seed: int) -> dict[str, float]:
    """One rollout of ``rows`` x ``samples`` under ``scheduling``: its timings and what it sampled."""
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.multi_turn import multi_turn_generate

    torch.manual_seed(seed)
    start = time.perf_counter()
    out = multi_turn_generate(engine, tokenizer, env, rows, samples,
                              SamplingParams(temperature=recipe.rollout.temperature,
                                             max_new_tokens=recipe.rollout.max_new_tokens),
                              max_turns=recipe.rollout.max_turns, eos_ids=engine.eos_ids,
                              max_response_tokens=recipe.rollout.response_token_cap(), scheduling=scheduling)
    wall = time.perf_counter() - start
    metrics = out.metrics()
    flat = [s for g in out.groups for s in g]
    return {"wall_s": wall, "engine_s": out.generate_seconds, "tool_s": out.tool_seconds,
            "turns_per_sample": metrics["tools/turns_per_sample"], "calls_per_sample": metrics["tools/calls_per_sample"],
            "sampled_tokens": float(sum(s.sampled_tokens for s in flat)), "environment_batches": float(out.rounds)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from rlvr.data.templates import prompt_messages
    from rlvr.models.loading import load_tokenizer, resolve_model_path
    from rlvr.runs.recipe_inputs import load_sampling_engine
    from rlvr.tools.loading import build_tool_environment

    torch.set_num_threads(args.threads)
    recipe, heldout, shots = load_inputs(args)
    model_path = resolve_model_path(recipe.model.name)
    tokenizer = load_tokenizer(model_path, recipe.model)
    engine = load_sampling_engine(recipe, model_path, tokenizer)
    env = build_tool_environment(recipe.rollout.tools_config(), tokenizer)
    rows = [{**r, "messages": prompt_messages(r, recipe.data, shots)} for r in heldout]
    data = study_header("bench_turn_scheduling.py", sys.argv[1:], threads=args.threads,
                        engine=recipe.rollout.engine, prompts=len(rows), samples=args.samples, reps=[])
    for scheduling in SCHEDULES:  # warm-up: vLLM's first batches, the sandbox's pool
        one_rollout(engine, tokenizer, env, recipe, rows, args.samples, scheduling, args.seed)
    for rep in range(args.reps):
        order = SCHEDULES if rep % 2 == 0 else SCHEDULES[::-1]
        result = {s: one_rollout(engine, tokenizer, env, recipe, rows, args.samples, s, args.seed + rep)
                  for s in order}
        data["reps"].append(result)
        print(f"rep {rep}: " + ", ".join(f"{s} {result[s]['wall_s']:.1f} s" for s in SCHEDULES), flush=True)
    data["load_1m_at_end"] = os.getloadavg()[0]
    if hasattr(engine, "close"):
        engine.close()
    return data


def report(data: dict[str, Any]) -> str:
    reps = data["reps"]
    cpu = data["cpu"]

    def med(s: str, key: str) -> float:
        return statistics.median(r[s][key] for r in reps)

    ratios = [r["continuous"]["wall_s"] / r["rounds"]["wall_s"] for r in reps]
    # the schedules draw other seeds, so their samples (and lengths) differ: tokens per second is the fair rate
    rates = [(r["continuous"]["sampled_tokens"] / r["continuous"]["wall_s"])
             / (r["rounds"]["sampled_tokens"] / r["rounds"]["wall_s"]) for r in reps]
    lines = [
        "# Tool-use rollouts: rounds vs continuous batching across turns", "",
        f"Measured {data['date']}, commit {data['commit']}, {cpu['model']} ({', '.join(cpu['flags'])}), "
        f"{cpu['cores']} cores, {data['threads']} torch thread(s); 1-minute load {data['load_1m_at_start']:.1f} at the "
        f"start, {data['load_1m_at_end']:.1f} at the end. Command: `{data['command']}`.", "",
        f"One rollout of `recipes/tool_demo.yaml`'s batch ({data['prompts']} held-out prompts x {data['samples']} "
        f"samples, the sandboxed python tool, 3 turns, 64 sampled tokens a sample) on the `{data['engine']}` engine, "
        f"{len(reps)} repetitions, schedules alternated, after one warm-up rollout of each; medians over repetitions.",
        "",
        "| schedule | rollout wall s | in the engine s | in the tool s | environment batches | turns / sample | "
        "calls / sample | sampled tokens | sampled tokens / wall s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in SCHEDULES:
        lines.append(f"| {s} | {med(s, 'wall_s'):.2f} | {med(s, 'engine_s'):.2f} | {med(s, 'tool_s'):.2f} | "
                     f"{med(s, 'environment_batches'):.0f} | {med(s, 'turns_per_sample'):.2f} | "
                     f"{med(s, 'calls_per_sample'):.2f} | {med(s, 'sampled_tokens'):.0f} | "
                     f"{statistics.median(r[s]['sampled_tokens'] / r[s]['wall_s'] for r in reps):.1f} |")
    lines += ["", f"Continuous / rounds, rollout wall time, per repetition: "
                  f"{', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}); sampled tokens "
                  f"per wall second, continuous / rounds: {', '.join(f'{x:.2f}' for x in rates)} (median "
                  f"{statistics.median(rates):.2f}). The schedules seed their draws differently (rounds: one seed a "
                  f"prompt and round; continuous: one a sample and turn), so their samples differ.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="recipes/tool_demo.yaml")
    p.add_argument("--set", action="append", default=["rollout.engine=vllm"],
                   help="recipe override KEY=VALUE (repeatable; default rollout.engine=vllm)")
    p.add_argument("--heldout", default="datasets/arith_tool_heldout.jsonl")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "turn_scheduling.md")
    args = p.parse_args(argv)
    data = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(data, indent=1))
    args.out.write_text(report(data))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
