"""In-process A/B of one GRPO update (every micro-batch's forward + backward and the AdamW step): the log-prob and
attention code of an older revision against this tree's, alternated in one process on the embedded SmolLM2-135M
(fp32 master weights; bf16 autocast or fp32, as the trainer runs).

    python benchmarks/bench_update_ab.py --old-rev REV --shape demo --before-micro-batch 16 --micro-batch 64 --reps 4

``before`` runs ``rlvr/models/logprobs.py``, ``rlvr/models/attention.py`` and ``rlvr/kernels/cpu_fused_layers.py``
as they were at ``REV`` (read with ``git show``; the last over this tree's compiled kernels) with
``--before-micro-batch`` rows per forward, the RMSNorm / SwiGLU kernels only if ``REV`` had them; ``after`` runs
this tree's with ``--micro-batch``. Both take the same random ids of a real step's shapes (:data:`SHAPES`), the same
token-weighted loss and an AdamW step at learning rate 0 (the same work, and the weights stay as they are, so every
repetition computes the same thing).
Prints each repetition, the medians, the per-pair ratio after / before and the 1-minute load average, with the CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import MethodType, ModuleType

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = {  # prompts, group size, prompt tokens, (shortest, longest) response
    "demo": (8, 8, 96, (5, 16)),
    "vs_trl": (2, 8, 57, (45, 128)),
}
"""``demo``: ``recipes/demo.yaml``'s step (8 prompts x 8 samples, the few-shot prompt of 96 tokens, responses of 5-16
tokens: ~8 in the demo's samples). ``vs_trl``: ``bench_vs_trl.py``'s step (2 x 8, prompts of 57 tokens, responses
up to 128 tokens)."""


@dataclass
class UpdateBatch:
    """Random ids in a step's shapes: U prompts (one left-padded by 5) of P tokens, N = U x G responses (right-padded
    to T_max), and per-token loss weights (zero on padding)."""

    prompt_ids: torch.Tensor  # (U, P)
    prompt_mask: torch.Tensor  # (U, P)
    response_ids: torch.Tensor  # (N, T_max)
    response_mask: torch.Tensor  # (N, T_max)
    weights: torch.Tensor  # (N, T_max)
    group_size: int

    @property
    def tokens(self) -> int:
        """Tokens a step trains on: each prompt once, every response token."""
        return int(self.prompt_mask.sum()) + int(self.response_mask.sum())


def make_batch(shape: str, seed: int = 0) -> UpdateBatch:
    """The synthetic batch of ``shape`` (a key of :data:`SHAPES`); response lengths spread evenly over the range."""
    u, g, p, (t_min, t_max) = SHAPES[shape]
    n = u * g
    gen = torch.Generator().manual_seed(seed)
    p_ids, p_mask = torch.randint(100, 1000, (u, p), generator=gen), torch.ones(u, p, dtype=torch.long)
    p_mask[0, :5] = 0
    lengths = torch.linspace(t_min, t_max, n).round().long()[torch.randperm(n, generator=gen)]
    r_mask = (torch.arange(t_max).unsqueeze(0) < lengths.unsqueeze(1)).long()
    return UpdateBatch(p_ids, p_mask, torch.randint(100, 1000, (n, t_max), generator=gen), r_mask,
                       torch.randn(n, t_max, generator=gen) * r_mask, g)


def run_update(model: torch.nn.Module, logprobs: ModuleType, batch: UpdateBatch, micro_batch: int,
               autocast_dtype: torch.dtype | None, optimizer: torch.optim.Optimizer) -> None:
    """One update as the trainer runs it: ``logprobs.shared_prefix_logprobs`` per micro-batch of ``micro_batch``
    rows (each group's prompt once), the backward of the token-weighted sum over the step's tokens, one step."""
    n, g = batch.response_ids.shape[0], batch.group_size
    total = float(batch.response_mask.sum())
    for start in range(0, n, micro_batch):
        rows = list(range(start, min(start + micro_batch, n)))
        groups = sorted({r // g for r in rows})
        slot = {grp: k for k, grp in enumerate(groups)}
        t = int(batch.response_mask[rows].sum(1).max())
        lp, _ = logprobs.shared_prefix_logprobs(
            model, batch.prompt_ids[groups], batch.prompt_mask[groups], torch.tensor([slot[r // g] for r in rows]),
            batch.response_ids[rows, :t], batch.response_mask[rows, :t], autocast_dtype=autocast_dtype)
        (lp * batch.weights[rows, :t]).sum().div(total).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def load_model() -> torch.nn.Module:
    """The embedded SmolLM2-135M-Instruct as the trainer loads it on a CPU (fp32), with rlvr's attention and its
    RMSNorm / SwiGLU kernels (:func:`rlvr.kernels.cpu_fused_layers.fuse_cpu_layers`) where they build."""
    from rlvr.config import resolve
    from rlvr.kernels.cpu_fused_layers import fuse_cpu_layers
    from rlvr.models.attention import use_grouped_query_attention
    from rlvr.models.loading import load_causal_lm, resolve_model_path

    recipe = resolve({"model": {"name": "embedded:smollm2-135m-instruct"},
                      "data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}]})
    model = load_causal_lm(resolve_model_path(recipe.model.name), recipe.model)
    use_grouped_query_attention(model)
    fuse_cpu_layers(model)
    return model


def fused_layers_switch(model: torch.nn.Module, before: ModuleType | None = None) -> Callable[[str], None]:
    """A switch of the RMSNorm and MLP modules' forwards: ``switch("after")`` the fused forwards ``fuse_cpu_layers``
    set on the instances, ``switch("none")`` their classes' own (transformers' ops), ``switch("before")`` the forwards
    of ``before`` (an older ``cpu_fused_layers`` module; this tree's where None)."""
    fused = {module: module.__dict__["forward"] for module in model.modules() if "forward" in module.__dict__}
    old = {module: MethodType(getattr(before, forward.__func__.__name__), module) if before is not None else forward
           for module, forward in fused.items()}

    def switch(state: str) -> None:
        for module, forward in fused.items():
            if state == "none":
                module.__dict__.pop("forward", None)
            else:
                module.forward = forward if state == "after" else old[module]
    return switch


def _module_at(rev: str, path: str, name: str, folder: Path) -> ModuleType:
    """``path`` as it was at git revision ``rev``, imported as module ``name``."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True)
    file = folder / f"{name}.py"
    file.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _exists_at(rev: str, path: str) -> bool:
    """Whether git revision ``rev`` has a file at ``path``."""
    return subprocess.run(["git", "cat-file", "-e", f"{rev}:{path}"], cwd=ROOT, capture_output=True).returncode == 0


def old_fused_layers(rev: str) -> ModuleType | None:
    """``rlvr/kernels/cpu_fused_layers.py`` as it was at ``rev``, its forwards calling this tree's compiled kernels
    (each kernel call the old code makes must still take its arguments); None where ``rev`` has no such file."""
    from rlvr.kernels import cpu_fused_layers

    if not _exists_at(rev, "rlvr/kernels/cpu_fused_layers.py"):
        return None
    with tempfile.TemporaryDirectory() as folder:
        old = _module_at(rev, "rlvr/kernels/cpu_fused_layers.py", "old_cpu_fused_layers", Path(folder))
    old.fused_layer_kernels = cpu_fused_layers.fused_layer_kernels
    return old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-rev", required=True, help="the git revision whose log-prob and attention code is 'before'")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="demo")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--before-micro-batch", type=int, default=16)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from machine import stamp
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    from rlvr.models import attention, logprobs

    with tempfile.TemporaryDirectory() as folder:
        old_logprobs = _module_at(args.old_rev, "rlvr/models/logprobs.py", "old_logprobs", Path(folder))
        old_attention = _module_at(args.old_rev, "rlvr/models/attention.py", "old_attention", Path(folder))
    # importing the old attention module registered it under rlvr's name: give it its own, and this tree's back
    AttentionInterface.register("rlvr_gqa_before", old_attention.grouped_query_attention)
    AttentionMaskInterface.register("rlvr_gqa_before", sdpa_mask)
    AttentionInterface.register(attention.GQA_ATTENTION, attention.grouped_query_attention)
    if hasattr(old_logprobs, "GQA_ATTENTION"):  # the old code checks for its attention under rlvr's name
        old_logprobs.GQA_ATTENTION = "rlvr_gqa_before"

    model = load_model()
    old_fused = old_fused_layers(args.old_rev)
    fused_layers = fused_layers_switch(model, old_fused)
    # an older revision kept the kernels under rlvr/models: its 'before' runs this tree's forwards
    before_fused = ("before" if old_fused is not None or _exists_at(args.old_rev, "rlvr/models/cpu_fused_layers.py")
                    else "none")
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0, fused=True)
    dtype = torch.bfloat16 if args.precision == "bf16" else None
    batch = make_batch(args.shape)
    variants = {"before": (old_logprobs, "rlvr_gqa_before", args.before_micro_batch, before_fused),
                "after": (logprobs, attention.GQA_ATTENTION, args.micro_batch, "after")}

    def run(name: str) -> float:
        module, attn, micro_batch, fused = variants[name]
        model.config._attn_implementation = attn
        fused_layers(fused)
        t0 = time.perf_counter()
        run_update(model, module, batch, micro_batch, dtype, optimizer)
        return time.perf_counter() - t0

    for name in variants:
        run(name)  # warm-up
    times: dict[str, list[float]] = {k: [] for k in variants}
    loads = []
    for rep in range(args.reps):
        for name in (list(variants) if rep % 2 == 0 else list(variants)[::-1]):
            times[name].append(run(name))
            loads.append(os.getloadavg()[0])
            print(f"rep {rep} {name}: {times[name][-1]:.2f} s, load {loads[-1]:.1f}", flush=True)
    ratios = [a / b for a, b in zip(times["after"], times["before"], strict=True)]
    gap = logprob_gap(model, variants, batch, dtype, fused_layers)
    u, g, p, (t_min, t_max) = SHAPES[args.shape]
    print(f"{stamp()}; {args.threads} thread(s), {args.precision}; shape {args.shape}: {u} x {g} rows, P={p}, "
          f"T={t_min}-{t_max}, {batch.tokens} tokens")
    for name, (_, _, micro_batch, _) in variants.items():
        print(f"{name} ({'rev ' + args.old_rev if name == 'before' else 'this tree'}, micro-batch {micro_batch}): "
              f"median {statistics.median(times[name]):.2f} s an update")
    print(f"after / before per repetition: {', '.join(f'{r:.2f}' for r in ratios)}; median "
          f"{statistics.median(ratios):.2f}; load 1-min median {statistics.median(loads):.1f}")
    for name, (worst, mean) in gap.items():
        print(f"log-probs of the real tokens, {name}: max |difference| {worst:.2e}, mean {mean:.2e} nats")


def logprob_gap(model: torch.nn.Module, variants: dict, batch: UpdateBatch, autocast_dtype: torch.dtype | None,
                fused_layers: Callable[[str], None]) -> dict[str, tuple[float, float]]:
    """Max and mean |difference| of the batch's response log-probs (all rows in one micro-batch, no grad): after vs
    before, and each against the before code in fp32 (what rounding alone moves; random ids make high-entropy
    predictions, so bf16 moves them more than real text would)."""
    n, g = batch.response_ids.shape[0], batch.group_size
    real = batch.response_mask.bool()

    def logprobs(name: str, dtype: torch.dtype | None) -> torch.Tensor:
        module, attn, _, fused = variants[name]
        model.config._attn_implementation = attn
        fused_layers(fused)
        with torch.no_grad():
            lp, _ = module.shared_prefix_logprobs(model, batch.prompt_ids, batch.prompt_mask, torch.arange(n) // g,
                                                  batch.response_ids, batch.response_mask, autocast_dtype=dtype)
        return lp[real]

    ref, before, after = logprobs("before", None), logprobs("before", autocast_dtype), logprobs("after", autocast_dtype)
    pairs = {"after vs before": after - before, "before vs fp32": before - ref, "after vs fp32": after - ref}
    return {name: (float(d.abs().max()), float(d.abs().mean())) for name, d in pairs.items()}


if __name__ == "__main__":
    main()
