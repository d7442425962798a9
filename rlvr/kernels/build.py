"""Building and loading rlvr's CPU kernels: ``decode_kernels.cpp`` (the fused bf16 decode-step kernels of
:mod:`rlvr.kernels.fused_decode`) and, through :func:`build_kernels`, the trainer's log-prob kernels
(:mod:`rlvr.kernels.cpu_logprobs`), both AVX-512 and including ``avx512.h`` (shared vector helpers); and, AVX2 and
including ``avx2.h``, the fp32 decode kernels (:mod:`rlvr.kernels.fp32_decode`: the GEMM and the fused fp32
step's kernels) and the trainer's RMSNorm / SwiGLU kernels (:mod:`rlvr.kernels.cpu_fused_layers`). Both decode sources
include ``decode_common.h`` (their ISA-free shape checks and sampling scan).

The kernels are compiled on first use with torch's own extension builder (``torch.utils.cpp_extension.load``: g++ and
ninja, ~50 s on 2 cores) and cached under ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/rlvr/torch_extensions``,
:func:`rlvr.runtime.extensions.prepare_extension_builds`, which also clears a build lock a killed build left); torch
rebuilds them when the source or the flags change. The AVX-512 ones are loaded only
where torch runs AVX-512 kernels, the AVX2 ones where it runs AVX2 or AVX-512 kernels. Where they cannot be built (no
compiler, another CPU), :func:`build_kernels` says why once on stderr and returns None, and the caller keeps torch's
ops (transformers' modules for decoding).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import torch

from rlvr.runtime.extensions import prepare_extension_builds, use_one_ninja

SOURCE = Path(__file__).with_name("decode_kernels.cpp")
DECODE_SOURCES = (SOURCE, SOURCE.with_name("avx512.h"), SOURCE.with_name("decode_common.h"))
"""The decode kernels' source files (the extension and the header it includes)."""
CFLAGS = ["-O3", "-fopenmp", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mamx-tile",
          "-mamx-bf16", "-mfma", "-mprefer-vector-width=512"]
"""-fopenmp: ``at::parallel_for`` splits work over torch's own OpenMP threads (the same libgomp torch loads). The AMX
and AVX512_BF16 instructions are compiled in but only run where the CPU has them (:func:`amx_supported`)."""
AVX2_CFLAGS = ["-O3", "-fopenmp", "-mavx2", "-mfma"]
"""The fp32 decode kernels' build (``fp32_decode_kernels.cpp``): any x86 CPU torch runs AVX2 kernels on."""


def amx_supported() -> bool:
    """Whether this CPU has AMX tiles with bf16 (``amx_linear``); torch's own check, as its oneDNN uses."""
    check = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(check is not None and check())


def kernels_supported() -> tuple[bool, str]:
    """Whether this CPU runs the AVX-512 build, and why not in words."""
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith("AVX512"):
        return False, f"torch runs {capability} kernels, the fused decode kernels are built for AVX-512"
    return True, ""


def avx2_supported() -> tuple[bool, str]:
    """Whether this CPU runs the AVX2 + FMA build (:data:`AVX2_CFLAGS`), and why not in words."""
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith(("AVX2", "AVX512")):
        return False, f"torch runs {capability} kernels, the fp32 decode kernels are built for AVX2"
    return True, ""


def build_kernels(name: str, source: Path, what: str, fallback: str, cflags: list[str] | None = None,
                  supported: Callable[[], tuple[bool, str]] = kernels_supported) -> ModuleType | None:
    """Build (once per machine, cached) and load the extension ``name`` from ``source`` with ``cflags`` (default
    :data:`CFLAGS`, AVX-512), or None where this CPU (``supported``) or machine cannot build or run it, the reason
    printed once. ``what`` names the kernels and ``fallback`` what runs instead, in the messages."""
    ok, reason = supported()
    if not ok:
        return None
    try:
        from torch.utils.cpp_extension import load

        use_one_ninja()
        folder = prepare_extension_builds()
        print(f"[rlvr] loading {what} (built on first use on a machine, ~1 min; cached under {folder})",
              file=sys.stderr, flush=True)
        return load(name=name, sources=[str(source)], extra_cflags=cflags or CFLAGS, verbose=False)
    except Exception as err:  # no compiler or ninja, a build error: the caller keeps torch's ops
        print(f"[rlvr] {what} unavailable ({type(err).__name__}: {str(err).splitlines()[0][:200]}); {fallback}",
              file=sys.stderr, flush=True)
        return None


@lru_cache(maxsize=1)
def decode_kernels() -> ModuleType | None:
    """The compiled kernels (``add_rms_norm``, ``rope``, ``decode_attention``, ``silu_mul``, ``sample_tokens``,
    ``amx_linear``, ``dot_linear``, ``amx_pack``, ``amx_permitted``), or None where this CPU or machine cannot build or
    run them (the reason printed once)."""
    return build_kernels("rlvr_decode_kernels", SOURCE, "the fused decode kernels",
                         "the hf engine decodes with transformers' modules")
