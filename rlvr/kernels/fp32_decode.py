"""fp32 decoding on a CPU: the AVX2 + FMA kernels of ``fp32_decode_kernels.cpp``, and the decode GEMM's measured choice.

Where training and generation run in fp32 (``precision: auto`` on a CPU without native bf16), the ``hf`` engine
decodes with the policy itself. A decode step multiplies a few rows (the running samples) by every weight once, so
its GEMMs are bound by streaming the weights, which a BLAS tuned for large matrices does not reach at 16 rows: on an
AMD EPYC with AVX2 (2 threads), MKL's ``F.linear`` streamed SmolLM2's fp32 weights at ~3 GB/s. ``fp32_linear`` reads
each weight once, straight from the ``nn.Linear`` (no packed copy, so nothing to refresh after a weight sync).
Whether it beats ``F.linear`` on a machine is measured once, over the model's own first weights, and cached
(:mod:`rlvr.kernels.timings`).

Llama-style models decode through the fused fp32 step (:class:`rlvr.kernels.fused_decode.FusedDecoder`, whose
element-wise and attention kernels are in the same source); for other models, :func:`fp32_decode_linears` routes
the linear layers' small no-grad inputs through ``fp32_linear`` while transformers' modules decode.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlvr.kernels.build import AVX2_CFLAGS, avx2_supported, build_kernels
from rlvr.kernels.timings import cached_timings, choose, measurement_generator, source_digest

SOURCE = Path(__file__).with_name("fp32_decode_kernels.cpp")
SOURCES = (SOURCE, SOURCE.with_name("avx2.h"), SOURCE.with_name("decode_common.h"))
MAX_ROWS = 64
"""Inputs of at most this many rows (a decode step's running samples) take the kernel; larger ones (a prefill)
keep ``F.linear``, which is compute-bound there and blocks for it."""
MEASURE_BYTES = 64 << 20
"""How much of the model's linear weights the measurement streams a pass: more than a CPU's last-level cache."""
CACHE_VERSION = 1
"""Part of the measurement's cache key: a change to what is measured bumps it."""


@lru_cache(maxsize=1)
def fp32_kernels() -> ModuleType | None:
    """The compiled kernels (``fp32_linear``, ``fp32_linears``, ``add_rms_norm``, ``rope``, ``decode_attention``,
    ``silu_mul``, ``sample_tokens``), or None where this CPU or machine cannot build or run them (the reason
    printed)."""
    return build_kernels("rlvr_fp32_decode_kernels", SOURCE, "the fp32 decode kernels",
                         "fp32 decoding keeps transformers' modules and F.linear",
                         cflags=AVX2_CFLAGS, supported=avx2_supported)


def _decode_weights(model: nn.Module) -> list[Tensor]:
    """The first fp32 linear weights of ``model`` in module order, about :data:`MEASURE_BYTES` of them."""
    weights, total = [], 0
    for module in model.modules():
        if type(module) is nn.Linear and module.weight.dtype == torch.float32 and module.weight.is_contiguous():
            weights.append(module.weight.detach())
            total += module.weight.numel() * 4
            if total >= MEASURE_BYTES:
                break
    return weights


def fp32_decode_timings(kernels: ModuleType, weights: list[Tensor], rows: int = 16) -> dict[str, float]:
    """Median seconds of one pass of ``rows`` random fp32 rows through every weight (out, in) of ``weights``:
    ``kernel`` (``fp32_linear``) and ``torch`` (``F.linear``), alternated as the precision measurement alternates
    its matmuls (:func:`rlvr.kernels.machine.median_seconds`)."""
    from rlvr.kernels.machine import median_seconds

    gen = measurement_generator()  # not the global RNG: a measurement must not shift the run's samples
    inputs = {w.shape[1]: torch.randn(rows, w.shape[1], generator=gen) for w in weights}
    with torch.no_grad():
        return median_seconds({"kernel": lambda: [kernels.fp32_linear(inputs[w.shape[1]], w, None) for w in weights],
                               "torch": lambda: [F.linear(inputs[w.shape[1]], w) for w in weights]})


def measured_fp32_decode(model: nn.Module) -> ModuleType | None:
    """The kernels if ``fp32_linear`` streamed ``model``'s first fp32 linear weights (~64 MB) faster than
    ``F.linear`` on this machine, else None; printed with the figures. Measured once per machine, kernel source and
    weight shapes (~0.2-1 s), then read from the cache.
    """
    weights = _decode_weights(model)
    kernels = fp32_kernels() if weights else None
    if kernels is None:
        return None
    key = {"version": CACHE_VERSION, "kernel_source": source_digest(SOURCES),
           "shapes": [list(w.shape) for w in weights]}
    seconds, where = cached_timings("fp32-decode", key, ("kernel", "torch"),
                                    lambda: fp32_decode_timings(kernels, weights))
    faster = choose(seconds, "kernel", "torch") == "kernel"  # the kernel unless F.linear is clearly faster
    megabytes = sum(w.numel() for w in weights) * 4 / 1e6
    print(f"[rlvr] fp32 decode GEMMs (16 rows over {megabytes:.0f} MB of weights): fp32_linear "
          f"{seconds['kernel'] * 1e3:.1f} ms, F.linear {seconds['torch'] * 1e3:.1f} ms; using "
          f"{'fp32_linear' if faster else 'F.linear'} [{where}]", file=sys.stderr, flush=True)
    return kernels if faster else None


def _kernel_forward(module: nn.Linear, kernels: ModuleType, x: Tensor) -> Tensor:
    weight, bias = module.weight, module.bias
    rows = x.numel() // max(x.shape[-1], 1)
    if (rows > MAX_ROWS or x.dtype != torch.float32 or torch.is_grad_enabled() or torch.is_autocast_enabled("cpu")
            or x.device.type != "cpu" or not weight.is_contiguous() or weight.dtype != torch.float32):
        return F.linear(x, weight, bias)
    out = kernels.fp32_linear(x.reshape(rows, x.shape[-1]).contiguous(), weight, bias)
    return out.view(*x.shape[:-1], weight.shape[0])


@contextmanager
def fp32_decode_linears(model: nn.Module, kernels: ModuleType) -> Iterator[None]:
    """Within the block, each ``nn.Linear`` of ``model`` computes fp32 inputs of at most :data:`MAX_ROWS` rows,
    without grad or autocast, through ``kernels.fp32_linear`` (fp32 sums in another order than ``F.linear``'s, so
    results agree to ~1e-6 relative, not bit for bit); everything else, and every layer after the block, is as
    before. The layers' own parameters are read, so a weight change is seen at once."""
    patched = []
    for module in model.modules():
        if type(module) is nn.Linear:
            patched.append((module, module.__dict__.get("forward")))
            module.forward = lambda x, module=module: _kernel_forward(module, kernels, x)
    try:
        yield
    finally:
        for module, own in patched:
            if own is None:
                del module.forward
            else:
                module.forward = own
