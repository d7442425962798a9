"""Where the update's time goes: torch.profiler over one GRPO update on the embedded SmolLM2-135M, by op category.

    python benchmarks/profile_update.py --shape demo --precision bf16 --micro-batch 16 --threads 1

One update as the trainer runs it (:func:`bench_update_ab.run_update`: the shared-prefix forward per micro-batch, a
token-weighted backward, one fused AdamW step) over random ids of a real step's shapes, ``demo``
(``recipes/demo.yaml``'s step) or ``vs_trl`` (``bench_vs_trl.py``'s): :data:`bench_update_ab.SHAPES`.

Prints the wall time, the op time by category (GEMMs, casts and copies, attention, the log-prob, element-wise,
optimizer, other), the GEMMs' achieved FLOP/s, and the step's training floor (6 x params x tokens, a group's prompt
once, at this process's measured matmul rate in the same precision: :mod:`compute_floor`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_update_ab import SHAPES, load_model, make_batch, run_update  # noqa: E402
from compute_floor import matmul_flops_per_s, step_floor  # noqa: E402
from machine import stamp  # noqa: E402

CATEGORIES = [  # first match wins; matched against the profiler's op names
    ("gemm", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "mkldnn")),
    ("cast/copy", ("aten::_to_copy", "aten::copy_", "aten::clone", "aten::contiguous", "aten::cat",
                   "aten::index_select", "aten::index", "aten::gather", "aten::scatter", "aten::fill_",
                   "aten::zero_", "aten::zeros", "aten::empty")),
    ("attention", ("softmax", "masked_fill", "aten::where", "grouped_query")),
    ("log-prob", ("_FusedTokenLogprobs", "logsumexp", "aten::exp", "aten::sub_")),
    ("optimizer", ("_fused_adamw", "adam")),
    ("embedding", ("embedding",)),
    ("element-wise", ("aten::mul", "aten::add", "aten::pow", "aten::rsqrt", "aten::mean", "aten::silu", "aten::neg",
                      "aten::div", "aten::sum", "aten::sigmoid", "aten::sub", "aten::threshold", "aten::silu_backward",
                      "aten::rsub")),
]


def category(name: str) -> str:
    for cat, keys in CATEGORIES:
        if any(k in name for k in keys):
            return cat
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="demo")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--micro-batch", type=int, default=16, help="rows per forward/backward (optim.micro_batch_size)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=2, help="timed updates without the profiler (median reported)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from rlvr.models import logprobs

    model = load_model()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=0.0, fused=True)
    dtype = torch.bfloat16 if args.precision == "bf16" else None
    batch = make_batch(args.shape)

    def update() -> None:
        run_update(model, logprobs, batch, args.micro_batch, dtype, opt)

    update()  # warm-up
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        update()
        times.append(time.perf_counter() - t0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True) as prof:
        update()
    totals: dict[str, float] = {}
    gemm_flops = 0.0
    for evt in prof.key_averages():
        cat = category(evt.key)
        totals[cat] = totals.get(cat, 0.0) + evt.self_cpu_time_total / 1e6
        if cat == "gemm":
            gemm_flops += evt.flops or 0.0
    op_total = sum(totals.values())
    tokens = batch.tokens
    rate = matmul_flops_per_s(torch.bfloat16 if dtype else torch.float32)
    floor = step_floor(params, batch.prompt_mask.sum(1).tolist(), batch.response_mask.sum(1).tolist(), rate, 1.0,
                       2).training_s
    wall = statistics.median(times)
    print(stamp())
    print(f"{args.shape} {args.precision} micro-batch {args.micro_batch}, {args.threads} thread(s), "
          f"load {os.getloadavg()[0]:.1f}: update {wall:.2f} s (median of {args.reps}; {times})")
    print(f"  floor {floor:.2f} s ({tokens} tokens, 6 x {params / 1e6:.1f}M params, matmul {rate / 1e9:.0f} GFLOP/s):"
          f" {wall / floor:.2f}x")
    for cat, sec in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"  {cat:13s} {sec:7.3f} s  {100 * sec / op_total:5.1f}%")
    if totals.get("gemm"):
        print(f"  GEMMs: {gemm_flops / 1e9:.0f} GFLOP at {gemm_flops / totals['gemm'] / 1e9:.0f} GFLOP/s")
    top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:15]
    for evt in top:
        print(f"    {evt.key:40s} {evt.self_cpu_time_total / 1e6:7.3f} s  x{evt.count}  [{category(evt.key)}]")


if __name__ == "__main__":
    main()
