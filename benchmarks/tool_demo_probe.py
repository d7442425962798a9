"""Base rates of the tool-use demo's task on the embedded SmolLM2-135M-Instruct, before any training: with and without
the sandboxed python tool.

The prompts are the first ``--prompts`` rows of ``datasets/arith_tool_heldout.jsonl``, rendered as the demo recipe
renders them (``recipes/tool_demo.yaml``: ``boxed`` template, one example turn from its training split). Two
conditions, ``--samples`` samples per prompt at ``--temperature``:

- ``tool``: the recipe's tool rollout (:func:`rlvr.rollout.multi_turn.multi_turn_generate` over the recipe's engine,
  the fenced python tool run in the sandbox, ``rollout.max_turns`` turns, ``rollout.max_new_tokens`` sampled tokens
  over all turns); the example turn is the row's worked ``solution`` (python block, output block, boxed answer).
- ``no tool``: single-turn generation, the example turn shows only the boxed answer (``data.shot_field: null``).

Per condition: ``calling`` (fraction of samples with at least one tool call), ``code right`` (fraction of samples
with a call whose output is the gold answer), ``pass@1`` (the ``math`` verifier on the text the reward sees: the last
turn), ``mixed`` (prompts whose samples got both rewards: groups GRPO learns from), the tool error rate (calls whose
status is not ``ok``) and the sampled tokens per sample. Standard errors are over prompts.

    .venv/bin/python benchmarks/tool_demo_probe.py                 # 16 prompts x 8 samples, a few minutes on 2 cores

Writes ``benchmarks/results/tool_demo_probe.md`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import stamp  # noqa: E402


@dataclass
class Condition:
    """One condition's per-sample outcomes (prompt-major, ``samples`` per prompt)."""

    name: str
    rewards: list[float] = field(default_factory=list)
    calling: list[bool] = field(default_factory=list)
    code_right: list[bool] = field(default_factory=list)
    calls: int = 0
    call_errors: int = 0
    sampled_tokens: list[int] = field(default_factory=list)
    seconds: float = 0.0
    examples: list[str] = field(default_factory=list)


def mean_se(values: list[float], per: int) -> tuple[float, float]:
    """Mean of ``values`` and its standard error over groups of ``per`` consecutive values (prompts)."""
    groups = [sum(values[i:i + per]) / per for i in range(0, len(values), per)]
    m = sum(groups) / len(groups)
    if len(groups) < 2:
        return m, float("nan")
    var = sum((g - m) ** 2 for g in groups) / (len(groups) - 1)
    return m, math.sqrt(var / len(groups))


def load_inputs(args: argparse.Namespace) -> tuple[Any, list[dict], list[dict]]:
    """(the recipe, held-out rows, few-shot rows) of ``args.recipe``: the examples are those its training split
    shows."""
    from rlvr.config import load_recipe
    from rlvr.data.prompts import split_rows
    from rlvr.data.sources import _read_jsonl, load_rows

    recipe = load_recipe(args.recipe, args.set)
    if not recipe.rollout.tools:
        raise SystemExit(f"{args.recipe} has no rollout.tools: the probe compares the recipe's tools with none")
    _, _, shots = split_rows(load_rows(recipe.data), recipe.data, seed=recipe.seed)
    heldout = _read_jsonl(ROOT / args.heldout)[:args.prompts]
    return recipe, heldout, shots


def run_condition(name: str, engine: Any, tokenizer: Any, recipe: Any, rows: list[dict],
                  shots: list[dict], args: argparse.Namespace, score: Any) -> Condition:
    """Sample ``args.samples`` responses per row under one condition and score them."""
    from rlvr.data.templates import prompt_messages, render_prompt
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.multi_turn import multi_turn_generate
    from rlvr.tools.loading import build_tool_environment

    cond = Condition(name)
    sampling = SamplingParams(temperature=args.temperature, max_new_tokens=recipe.rollout.max_new_tokens)
    torch.manual_seed(args.seed)
    start = time.perf_counter()
    if name == "tool":
        cfg = recipe.data
        env = build_tool_environment(recipe.rollout.tools_config(), tokenizer)
        starts = [{**r, "messages": prompt_messages(r, cfg, shots)} for r in rows]
        out = multi_turn_generate(engine, tokenizer, env, starts, args.samples, sampling,
                                  max_turns=recipe.rollout.max_turns, eos_ids=engine.eos_ids,
                                  max_response_tokens=recipe.rollout.response_token_cap())
        for row, group in zip(rows, out.groups, strict=True):
            for s in group:
                cond.rewards.append(score(s.final_text, row))
                cond.calling.append(bool(s.calls))
                cond.code_right.append(any(c.status == "ok" and c.output.strip() == row["answer"] for c in s.calls))
                cond.calls += len(s.calls)
                cond.call_errors += sum(c.status != "ok" for c in s.calls)
                cond.sampled_tokens.append(s.sampled_tokens)
        cond.examples = [tokenizer.decode(s.token_ids) for s in out.groups[0][:3]]
    else:
        cfg = recipe.data.model_copy(update={"shot_field": None})
        prompts = [tokenizer(render_prompt(r, tokenizer, cfg, shots), add_special_tokens=False)["input_ids"]
                   for r in rows]
        groups = engine.generate(prompts, args.samples, sampling)
        for row, group in zip(rows, groups, strict=True):
            for c in group:
                text = tokenizer.decode(c.token_ids, skip_special_tokens=True)
                cond.rewards.append(score(text, row))
                cond.calling.append(False)
                cond.code_right.append(False)
                cond.sampled_tokens.append(len(c.token_ids))
        cond.examples = [tokenizer.decode(c.token_ids) for c in groups[0][:3]]
    cond.seconds = time.perf_counter() - start
    return cond


def probe(args: argparse.Namespace) -> tuple[list[Condition], dict[str, str], Any]:
    from rlvr.data.templates import prompt_messages, render_prompt
    from rlvr.models.loading import load_tokenizer, resolve_model_path
    from rlvr.runs.recipe_inputs import load_sampling_engine
    from rlvr.tools.loading import build_tool_environment
    from rlvr.verifiers.registry import get_verifier

    recipe, rows, shots = load_inputs(args)
    torch.set_num_threads(args.threads)
    model_path = resolve_model_path(recipe.model.name)
    tokenizer = load_tokenizer(model_path, recipe.model)
    engine = load_sampling_engine(recipe, model_path, tokenizer)
    math_verifier = get_verifier("math")

    def score(text: str, row: dict) -> float:
        result = math_verifier(text, row)
        value = result.get("score") if isinstance(result, dict) else result
        return float(value or 0.0)

    env = build_tool_environment(recipe.rollout.tools_config(), tokenizer)
    prompt_texts = {
        "tool": tokenizer.apply_chat_template(env.reset({"messages": prompt_messages(rows[0], recipe.data, shots)}),
                                              tokenize=False, add_generation_prompt=True),
        "no tool": render_prompt(rows[0], tokenizer, recipe.data.model_copy(update={"shot_field": None}), shots),
    }
    conds = []
    for name in args.conditions:
        conds.append(run_condition(name, engine, tokenizer, recipe, rows, shots, args, score))
        print(f"{name}: pass@1 {mean_se(conds[-1].rewards, args.samples)[0]:.3f} ({conds[-1].seconds:.0f} s)",
              flush=True)
    return conds, prompt_texts, recipe


def write_markdown(conds: list[Condition], prompt_texts: dict[str, str], recipe: Any, args: argparse.Namespace,
                   seconds: float) -> None:
    n = args.samples
    lines = [
        "# Tool-use demo probe: SmolLM2-135M-Instruct (embedded) before training, with and without the python tool",
        "",
        f"Measured {stamp()}.",
        f"Command: `.venv/bin/python benchmarks/tool_demo_probe.py {' '.join(sys.argv[1:])}`".rstrip(),
        "",
        f"Prompts: the first {args.prompts} rows of `{args.heldout}` x {n} samples at T={args.temperature}, rendered "
        f"as `{args.recipe}` renders them (one example turn from its training split). Sampled tokens per sample "
        f"(all turns): {recipe.rollout.max_new_tokens}; engine `{recipe.rollout.engine}`, {args.threads} torch "
        f"thread(s). Tools: `{json.dumps(recipe.rollout.tools_config().model_dump())}`.",
        f"Load average at write time (1/5/15 min): {'/'.join(f'{x:.1f}' for x in os.getloadavg())} on "
        f"{os.cpu_count()} cores (shared machine; times are wall-clock). Total {seconds:.0f} s.",
        "",
        "Columns: `pass@1` = the `math` verifier on the text the reward sees (the last turn), mean over samples "
        "(± standard error over prompts); `calling` = samples with at least one tool call; `code right` = samples "
        "with a call whose output is the gold answer; `mixed` = prompts whose samples got both rewards (groups GRPO "
        "learns from); `tool errors` = calls whose status is not ok (calls); `tokens` = sampled tokens per sample.",
        "",
        "| condition | pass@1 | calling | code right | mixed | tool errors | tokens | s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in conds:
        p, se = mean_se(c.rewards, n)
        groups = [c.rewards[i:i + n] for i in range(0, len(c.rewards), n)]
        mixed = sum(0 < sum(g) < len(g) for g in groups) / len(groups)
        calling = sum(c.calling) / len(c.calling)
        right = sum(c.code_right) / len(c.code_right)
        errors = f"{c.call_errors / c.calls:.2f} ({c.calls})" if c.calls else "- (0)"
        lines.append(f"| {c.name} | {p:.3f} ± {se:.3f} | {calling:.2f} | {right:.2f} | {mixed:.2f} | {errors} | "
                     f"{sum(c.sampled_tokens) / len(c.sampled_tokens):.1f} | {c.seconds:.0f} |")
    lines += ["", "## Prompts (first held-out row, chat template applied)", ""]
    for name, text in prompt_texts.items():
        lines += [f"### {name}", "", "````", text.rstrip("\n"), "````", ""]
    lines += ["## Sample responses (first prompt; tool outputs included)", ""]
    for c in conds:
        lines += [f"### {c.name}", ""]
        for ex in c.examples:
            lines += ["````", ex.rstrip("\n"), "````", ""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", default="recipes/tool_demo.yaml")
    p.add_argument("--set", action="append", default=[], help="recipe override KEY=VALUE (repeatable)")
    p.add_argument("--heldout", default="datasets/arith_tool_heldout.jsonl")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--conditions", nargs="+", default=["tool", "no tool"], choices=["tool", "no tool"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tool_demo_probe.md"))
    args = p.parse_args(argv)
    start = time.perf_counter()
    conds, prompt_texts, recipe = probe(args)
    write_markdown(conds, prompt_texts, recipe, args, time.perf_counter() - start)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
