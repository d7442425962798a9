"""Choosing the compute precision (``trainer.precision``) for the device a run actually has.

bf16 autocast is only a speed-up where the hardware computes in bf16. On a CPU without native bf16 matmul
(AVX2-only, most laptops) torch emulates it, about 20x slower than fp32 for a SmolLM2-135M forward + backward (torch's
kernels capped to AVX2 on an AVX-512 Xeon; numbers in ``benchmarks/RESULTS.md``). With AVX512_BF16 or AMX it is
faster than fp32. So ``auto`` picks bf16 on CUDA devices that support it and on CPUs with native bf16, fp32 elsewhere.

The same choice serves the trainer's forwards, the HF rollout engine, the vLLM engine's weight dtype, ``rlvr eval``
and ``rlvr filter`` (everything that builds a model from a recipe goes through :func:`choose_precision`).
"""
from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from functools import cache
from typing import Literal

import torch

PrecisionName = Literal["bf16", "fp32"]

#: What bf16 costs where the CPU emulates it (measured, see the module docstring): named in the warning.
EMULATED_BF16_SLOWDOWN = "about 20x slower than fp32"


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a run uses and why.

    Attributes:
        name: ``bf16`` (autocast forwards in bf16; log-probs, losses and master weights stay fp32) or ``fp32``.
        reason: one sentence naming the device and the capability that decided, for the start-up line.
    """

    name: PrecisionName
    reason: str

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype for ``torch.autocast``; ``None`` = no autocast (fp32)."""
        return torch.bfloat16 if self.name == "bf16" else None

    @property
    def vllm_dtype(self) -> str:
        """vLLM's ``dtype=`` argument for the rollout engine's weights."""
        return "bfloat16" if self.name == "bf16" else "float32"


def _cpu_flags() -> set[str]:
    """The ``flags`` field of ``/proc/cpuinfo`` (empty where there is none, e.g. macOS)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


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


def choose_precision(requested: Literal["auto", "bf16", "fp32"], device: torch.device | str) -> PrecisionChoice:
    """Resolve ``trainer.precision`` for ``device``.

    Args:
        requested: ``auto`` (bf16 where the device computes it natively, else fp32), ``bf16`` or ``fp32``.
        device: where the model runs (``cpu`` or ``cuda[:i]``).

    Returns:
        The choice and its reason. A forced ``bf16`` on a CPU without native bf16 is honoured but warns (a
        ``UserWarning`` naming the expected slowdown); a forced ``bf16`` on a CUDA device without bf16 raises.

    Raises:
        ValueError: ``requested`` is not one of the three names, or ``bf16`` on a CUDA device that lacks it.
    """
    if requested not in ("auto", "bf16", "fp32"):
        raise ValueError(f"trainer.precision: {requested!r} is not one of 'auto', 'bf16', 'fp32'")
    device = torch.device(device)
    if device.type == "cuda":
        native = torch.cuda.is_bf16_supported()
        evidence = f"{torch.cuda.get_device_name(device)} {'supports' if native else 'does not support'} bf16"
        if requested == "bf16" and not native:
            raise ValueError(f"trainer.precision=bf16, but {evidence}: use precision 'fp32' or 'auto'")
    elif device.type == "cpu":
        native, evidence = cpu_native_bf16()
        if requested == "bf16" and not native:
            warnings.warn(f"trainer.precision=bf16 on a {evidence}, {EMULATED_BF16_SLOWDOWN} on such CPUs; "
                          "use trainer.precision=auto (or fp32)", UserWarning, stacklevel=2)
    else:  # mps, xpu, ...: no measurements here, so only what was asked for, and fp32 for auto
        native, evidence = False, f"device {device.type}: bf16 speed unknown"
    if requested == "auto":
        name: PrecisionName = "bf16" if native else "fp32"
        return PrecisionChoice(name, f"precision auto -> {name}: {evidence}")
    return PrecisionChoice(requested, f"precision {requested} (set in the recipe): {evidence}")


@cache
def _announce(reason: str) -> None:
    print(f"[rlvr] {reason}", file=sys.stderr, flush=True)  # stderr: `rlvr eval` prints its JSON on stdout


def announce_precision(choice: PrecisionChoice) -> None:
    """Print the choice and its reason on stderr once per process (a second engine with the same choice prints
    nothing)."""
    _announce(choice.reason)
