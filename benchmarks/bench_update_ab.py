"""In-process A/B of the trainer's forward + backward (the update's cost): log-prob code and attention variants,
alternated in one process on the embedded SmolLM2-135M (fp32 master weights, bf16 autocast, as the trainer runs).

    python benchmarks/bench_update_ab.py --old-logprobs OLD.py --reps 3 --threads 1

One micro-batch of 2 prompts x 8 samples (random ids: cost does not depend on them), prompt P tokens (one prompt
left-padded by 5), responses of T - 45 .. T tokens (right-padded to T), through
:func:`rlvr.models.logprobs.shared_prefix_logprobs` and a backward of a token-weighted sum. Variants: ``old`` (the log-prob
module in ``--old-logprobs``, e.g. ``git show REV:rlvr/models/logprobs.py > /tmp/old.py``, with transformers' SDPA),
``fused`` (this tree's log-probs, SDPA), ``fused_gqa`` (this tree's log-probs and
:func:`rlvr.models.attention.grouped_query_attention`). Prints per variant the median seconds and the 1-minute load average.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--old-logprobs", type=Path, help="a previous rlvr/models/logprobs.py (variant 'old')")
    ap.add_argument("--prompt-tokens", type=int, default=57)
    ap.add_argument("--response-tokens", type=int, default=90)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from rlvr.config import resolve
    from rlvr.models import logprobs
    from rlvr.models.attention import GQA_ATTENTION
    from rlvr.models.loading import load_causal_lm, resolve_model_path

    recipe = resolve({"model": {"name": args.model}, "data": {"source": {"type": "jsonl", "path": "x.jsonl"}},
                      "verifiers": [{"name": "math"}]})
    model = load_causal_lm(resolve_model_path(recipe.model.name), recipe.model)
    variants = {"fused": (logprobs, "sdpa"), "fused_gqa": (logprobs, GQA_ATTENTION)}
    if args.old_logprobs:
        spec = importlib.util.spec_from_file_location("old_logprobs", args.old_logprobs)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        variants = {"old": (old, "sdpa"), **variants}
    torch.manual_seed(0)
    u, g, p, t = 2, 8, args.prompt_tokens, args.response_tokens
    # padded like a real batch (prompt 0 left-padded, responses of unequal lengths): with no padding transformers
    # passes no mask and SDPA's causal path runs whatever the attention setting
    p_ids, p_mask = torch.randint(100, 1000, (u, p)), torch.ones(u, p, dtype=torch.long)
    p_mask[0, :5] = 0
    row_prompt = torch.arange(u).repeat_interleave(g)
    resp, r_mask = torch.randint(100, 1000, (u * g, t)), torch.ones(u * g, t, dtype=torch.long)
    for row in range(u * g):
        r_mask[row, max(t - (u * g - 1 - row) * 3, 1):] = 0  # lengths t - 45 .. t
    weights = torch.randn(u * g, t) * r_mask

    def run(name: str) -> float:
        module, attn = variants[name]
        model.config._attn_implementation = attn
        t0 = time.perf_counter()
        lp, _ = module.shared_prefix_logprobs(model, p_ids, p_mask, row_prompt, resp, r_mask,
                                              autocast_dtype=torch.bfloat16)
        (lp * weights).mean().backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    names = list(variants)
    for name in names:
        run(name)  # warm-up
    times: dict[str, list[float]] = {k: [] for k in names}
    loads = []
    for rep in range(args.reps):
        for name in (names if rep % 2 == 0 else names[::-1]):
            times[name].append(run(name))
            loads.append(os.getloadavg()[0])
            print(f"rep {rep} {name}: {times[name][-1]:.2f} s, load {loads[-1]:.1f}", flush=True)
    for name in names:
        print(f"{name}: median {statistics.median(times[name]):.2f} s forward+backward "
              f"({u} x {g} rows, P={p}, T={t})")
    print(f"load 1-min median {statistics.median(loads):.1f}")


if __name__ == "__main__":
    main()
