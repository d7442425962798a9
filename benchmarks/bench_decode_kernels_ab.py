"""In-process A/B of the fused decode step's kernels: ``decode_kernels.cpp`` as it was at an older revision against
this tree's, both built here, each driving whole rollouts of the embedded SmolLM2-135M, alternated in one process.

    python benchmarks/bench_decode_kernels_ab.py --old-rev REV --prompts 2 --n 8 --steps 128 --reps 6 --threads 2

One :class:`~rlvr.kernels.fused_decode.FusedDecoder` (the same packed weights) decodes ``--n`` samples of each of
``--prompts`` prompts for ``--steps`` steps (eos suppressed, so every row stays live: bench_vs_trl's shape is 2 x 8
rows, 128 new tokens; or, with ``--lengths``, row i ends after its i-th length, as a real rollout's rows leave as they
finish), with its kernel module swapped between the two builds (a build without ``decode_layers`` runs
each step as the Python loop of its kernel calls); the first side alternates every repetition.
:func:`bench_decode_gemm_ab.build_at` builds both. Prints the median seconds of a rollout and of a decode step per
build, the per-repetition ratio after / before, whether the two builds sampled the same tokens (the same seed: kernels
that change no bit sample the same), and the 1-minute load average, with the CPU. Builds go to a temporary folder
(~1 min each).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from bench_decode_ab import QUESTIONS  # noqa: E402
from bench_decode_gemm_ab import build_at  # noqa: E402
from machine import stamp  # noqa: E402
from profile_decode import add_lengths_option, lengths_stop_when, lengths_text, load_decoder  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-rev", required=True, help="the git revision whose decode_kernels.cpp is 'before'")
    ap.add_argument("--prompts", type=int, default=2, choices=range(1, len(QUESTIONS) + 1))
    ap.add_argument("--n", type=int, default=8, help="samples per prompt (rows live = prompts x n)")
    ap.add_argument("--steps", type=int, default=128, help="decode steps a rollout (every row runs them all)")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    add_lengths_option(ap, "default: every row runs --steps")
    args = ap.parse_args()
    stop_when = lengths_stop_when(ap, args)
    torch.set_num_threads(args.threads)
    from rlvr.rollout import decode

    with tempfile.TemporaryDirectory() as folder:
        builds = {"before": build_at(args.old_rev, Path(folder), "rlvr_decode_kernels_before"),
                  "after": build_at(None, Path(folder), "rlvr_decode_kernels_after")}
    gen, fused, ids, mask, pad_id = load_decoder(torch.bfloat16, args.prompts)

    one_call = fused.one_call

    def rollout(name: str) -> tuple[float, torch.Tensor]:
        fused.kernels = builds[name]
        # a revision whose kernels run no whole step in one call (no decode_layers): the Python loop of their calls
        fused.one_call = one_call and hasattr(builds[name], "decode_layers")
        torch.manual_seed(0)
        t0 = time.perf_counter()
        tokens, _ = decode.sample(gen, ids, mask, args.n, max_new_tokens=args.steps, temperature=1.0, top_k=0,
                                  top_p=1.0, eos_ids=[], pad_id=pad_id, fused=fused, stop_when=stop_when)
        return time.perf_counter() - t0, tokens

    sampled = {name: rollout(name)[1] for name in builds}  # warm-up: kernel selection, first touch of the caches
    times: dict[str, list[float]] = {name: [] for name in builds}
    loads = []
    for rep in range(args.reps):
        for name in (list(builds) if rep % 2 == 0 else list(builds)[::-1]):
            times[name].append(rollout(name)[0])
        loads.append(os.getloadavg()[0])
    ratios = [a / b for a, b in zip(times["after"], times["before"], strict=True)]
    same = torch.equal(sampled["before"], sampled["after"])
    live = f"{args.prompts * args.n} rows live" if args.lengths is None else lengths_text(args.lengths)
    print(f"{stamp()}; {args.threads} thread(s); {live}, {args.steps} decode steps a rollout; "
          f"{'the same tokens' if same else 'different tokens'} sampled by both builds")
    for name in builds:
        median = statistics.median(times[name])
        print(f"{name} ({'rev ' + args.old_rev if name == 'before' else 'this tree'}): median {median:.3f} s a "
              f"rollout, {median / args.steps * 1e3:.2f} ms a decode step (prefill included)")
    print(f"after / before per repetition: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max "
          f"{max(ratios):.3f}); load 1-min median {statistics.median(loads):.1f}")


if __name__ == "__main__":
    main()
