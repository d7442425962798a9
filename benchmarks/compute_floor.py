"""The machine's limits and the cost floor of one GRPO step, for ``bench_vs_trl.py``.

- :func:`matmul_flops_per_s`: the GEMM throughput torch reaches on this CPU (FLOP/s) in a dtype, at a model's shapes.
- :func:`read_bandwidth_bytes_per_s`: how fast torch streams a large tensor from memory (bytes/s), the bound of
  batched decoding, which reads every weight once per new token.
- :func:`step_floor`: the FLOPs of one step (2 x params x tokens for generation and each no-grad forward, 6 x params
  x tokens for training, Kaplan et al. 2001.08361 section 2.1; a group's shared prompt counted once) and the seconds
  they take at those rates; decoding is a roofline per decode step (the larger of its live rows' FLOPs and one read of
  every weight), summed over the steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch


def _best_seconds(fn, repeats: int) -> float:
    fn()  # warm-up (allocations, oneDNN kernel selection)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_flops_per_s(dtype: torch.dtype, m: int = 2048, k: int = 576, n: int = 1536, repeats: int = 5) -> float:
    """Best-of-``repeats`` FLOP/s of an (m, k) @ (k, n) matmul in ``dtype`` (2 m k n FLOPs), at torch's thread count.

    The default shape is SmolLM2-135M's MLP projection (hidden 576, intermediate 1536) over 2048 tokens: large
    enough to reach the kernel's peak, the shape the training forward and backward run at.
    """
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    seconds = _best_seconds(lambda: torch.mm(a, b), repeats)
    return 2.0 * m * k * n / seconds


def read_bandwidth_bytes_per_s(mbytes: int = 512, repeats: int = 5) -> float:
    """Best-of-``repeats`` bytes/s of a sum over an fp32 tensor of ``mbytes`` MiB (far larger than the caches), on
    2 MB pages where the OS gives them (:class:`rlvr.kernels.huge_pages.HugePageArena`), as the decode step's packed
    weights lie: on 4 KB pages the hardware prefetchers stop at every page, and the same sum read 27-28 GB/s against
    34-36 GB/s on 2 MB pages (AMD EPYC, 2 threads, 2026-12-07), which would set the floor of a decode step too low a
    bar."""
    from rlvr.kernels.huge_pages import HugePageArena

    numel = mbytes * 2**20 // 4
    x = HugePageArena(numel * 4).take((numel,), torch.float32).fill_(1.0)
    seconds = _best_seconds(lambda: x.sum(), repeats)
    return numel * 4 / seconds


def machine_limits(precision: str) -> dict[str, float]:
    """This moment's matmul rate in ``precision`` (``"bf16"`` or ``"fp32"``; FLOP/s) and read bandwidth (bytes/s),
    measured in ~1 s: on a shared host both move from one minute to the next (the read bandwidth of one machine
    measured 26-68 GB/s within an hour), so a benchmark takes them again right before each run and holds its runs
    against the median."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    return {"matmul_flops_per_s": matmul_flops_per_s(dtype), "read_bytes_per_s": read_bandwidth_bytes_per_s()}


@dataclass
class StepFloor:
    """FLOPs and floor seconds of one step's stages (generation and training; scoring is negligible compute).

    ``generation_s`` is the roofline taken per decode step: the prefill's FLOPs, then for each decode step the larger
    of its live rows' FLOPs and one read of every weight. It is at least each of the totals beside it, all of the
    generation's FLOPs (``generation_compute_s``) and one read of the weights per decode step
    (``generation_bandwidth_s``), and above both where the rows still decoding fall from compute-bound to few.
    """

    generation_flops: float
    training_flops: float
    generation_compute_s: float
    generation_bandwidth_s: float
    generation_s: float
    training_s: float

    @property
    def step_s(self) -> float:
        return self.generation_s + self.training_s


def step_floor(params: int, prompt_tokens_per_group: list[int], completion_tokens: list[int], flops_per_s: float,
               bytes_per_s: float, weight_bytes: int, no_grad_forwards: int = 0) -> StepFloor:
    """The floor of one GRPO step.

    Args:
        params: model parameters (tied embeddings counted once).
        prompt_tokens_per_group: (B,) prompt length of each group; the prompt is shared by its G samples, so it is
            prefilled (and trained through) once per group.
        completion_tokens: (B x G,) response lengths; decode step k has the responses longer than k live, and the
            generation takes as many decode steps as its longest response.
        flops_per_s: matmul throughput in the step's precision. bytes_per_s: memory read bandwidth.
        weight_bytes: bytes per weight read by decoding (2 for bf16, 4 for fp32).
        no_grad_forwards: extra no-grad forwards over the batch (old or reference log-probs); 0 for one PPO epoch
            without KL.
    Raises:
        ValueError: a non-positive rate or parameter count.
    """
    if params <= 0 or flops_per_s <= 0 or bytes_per_s <= 0:
        raise ValueError(f"params, flops_per_s and bytes_per_s must be > 0, got {params}, {flops_per_s}, "
                         f"{bytes_per_s}")
    prompt_tokens = sum(prompt_tokens_per_group)
    tokens = prompt_tokens + sum(completion_tokens)
    gen = 2.0 * params * tokens
    train = 6.0 * params * tokens + no_grad_forwards * 2.0 * params * tokens
    decode_steps = max(completion_tokens, default=0)
    weight_read_s = params * weight_bytes / bytes_per_s  # one decode step's read of every weight
    row_s = 2.0 * params / flops_per_s  # one row's FLOPs in one decode step
    live = [sum(n > k for n in completion_tokens) for k in range(decode_steps)]
    stepwise = 2.0 * params * prompt_tokens / flops_per_s + sum(max(rows * row_s, weight_read_s) for rows in live)
    return StepFloor(generation_flops=gen, training_flops=train, generation_compute_s=gen / flops_per_s,
                     generation_bandwidth_s=decode_steps * weight_read_s, generation_s=stepwise,
                     training_s=train / flops_per_s)
