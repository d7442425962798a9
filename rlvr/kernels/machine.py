"""This CPU as timings and kernel choices see it: its model name and flags, whether it multiplies bf16 natively, whether
oneDNN prepacks bf16 weights, the key a timing measured here is cached under (:func:`machine_key`), and a timer of
alternating calls (:func:`median_seconds`). Read by the kernels' timings (:mod:`rlvr.kernels.timings`) and by the
choice of precision (:mod:`rlvr.models.precision`).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch

MEASURE_SECONDS = 0.25
"""Seconds :func:`median_seconds` spends repeating each call (after a warm-up call; at least 3 and at most 50
repeats)."""

#: /proc/cpuinfo flags that bear on bf16 and fp32 matmul speed: part of the cache key.
RELEVANT_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


def _cpuinfo_field(name: str) -> str | None:
    """The first ``name`` field of ``/proc/cpuinfo`` (``None`` where there is none, e.g. macOS)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_flags() -> set[str]:
    """The ``flags`` field of ``/proc/cpuinfo`` (empty where there is none)."""
    return set((_cpuinfo_field("flags") or "").split())


def cpu_native_bf16() -> tuple[bool, str]:
    """Whether this CPU multiplies bf16 matrices natively (AVX512_BF16 or AMX), and the evidence, in words.

    Asks torch first (``torch.cpu._is_avx512_bf16_supported`` / ``_is_amx_tile_supported``, the checks its oneDNN
    kernels use), then ``/proc/cpuinfo``'s flags where torch lacks those functions. Apple silicon (arm64 with bf16
    in its ISA from M2 on) is not detected and gets fp32: safe, since fp32 is never the slow path. A CPU whose
    kernels are capped below AVX-512 (``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``: how an AVX2-only
    machine is emulated on an AVX-512 one) counts as emulating bf16: measured here, a 512 x 2048 x 2048 bf16 matmul
    took 31 s under that cap against 38 ms uncapped.
    """
    has_avx512_bf16 = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    has_amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
    if has_avx512_bf16 is not None and has_amx is not None:
        found = [name for name, check in (("AVX512_BF16", has_avx512_bf16), ("AMX", has_amx)) if check()]
    else:
        flags = _cpu_flags()
        found = [name for name, flag in (("AVX512_BF16", "avx512_bf16"), ("AMX", "amx_bf16")) if flag in flags]
    capability = torch.backends.cpu.get_cpu_capability()
    onednn_cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if found and not capability.startswith("AVX512"):  # ATEN_CPU_CAPABILITY capped torch's kernels below AVX-512
        return False, f"CPU has {' + '.join(found)} but torch runs {capability} kernels: bf16 would be emulated"
    if found and onednn_cap and not any(isa in onednn_cap for isa in ("BF16", "AMX", "AVX10", "DEFAULT", "ALL")):
        return False, f"CPU has {' + '.join(found)} but ONEDNN_MAX_CPU_ISA={onednn_cap}: bf16 would be emulated"
    if found:
        return True, f"CPU has native bf16 ({' + '.join(found)}; torch kernels {capability})"
    return False, f"CPU has no native bf16 (no AVX512_BF16 or AMX; torch kernels {capability}): bf16 would be emulated"


def _cpu_model_name() -> str:
    """``model name`` of ``/proc/cpuinfo``, else what :mod:`platform` knows (e.g. ``arm`` on macOS)."""
    return _cpuinfo_field("model name") or platform.processor() or platform.machine() or "unknown CPU"


def bf16_packing_supported() -> bool:
    """Whether oneDNN can prepack bf16 linear weights here (``torch.ops.mkldnn._reorder_linear_weight``): built into
    torch, and a CPU with native bf16 (:func:`cpu_native_bf16`; oneDNN refuses the packing on an AVX2-only CPU)."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and cpu_native_bf16()[0])


def median_seconds(calls: dict[str, Any]) -> dict[str, float]:
    """Median wall seconds of each no-argument callable, after a warm-up call each; the calls alternate (and swap
    order every round) so that a load that comes and goes weighs on all of them alike."""
    for fn in calls.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    start = time.perf_counter()
    rounds = 0
    while rounds < 3 or (rounds < 50 and time.perf_counter() - start < MEASURE_SECONDS * len(calls)):
        for name in names if rounds % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - t0)
        rounds += 1
    return {name: statistics.median(ts) for name, ts in times.items()}


def machine_key() -> dict[str, Any]:
    """What a CPU timing measured here depends on, for a cache key: the CPU model name, its bf16-relevant flags,
    torch's kernel level, ``ONEDNN_MAX_CPU_ISA``, the torch version and the thread count."""
    flags = _cpu_flags()
    return {"cpu": _cpu_model_name(), "flags": [f for f in RELEVANT_FLAGS if f in flags],
            "kernels": torch.backends.cpu.get_cpu_capability(), "onednn_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def home_relative(path: Path) -> str:
    """``path`` with the home folder written ``~``."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)
