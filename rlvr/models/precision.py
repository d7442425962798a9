"""Choosing the compute precision (``trainer.precision``) for the device a run actually has, per stage.

bf16 autocast is only a speed-up where the hardware computes in bf16 fast enough. On a CPU without native bf16 matmul
(AVX2-only, most laptops) torch emulates it, about 20x slower than fp32 for a SmolLM2-135M forward + backward (torch's
kernels capped to AVX2 on an AVX-512 Xeon; numbers in ``benchmarks/RESULTS.md``). A CPU flag is not enough either way:
on a 2-core Xeon with AVX512_BF16 and no AMX a bf16 matmul ran at 138 GFLOP/s against fp32's 249 (the demo's update
step ~1.3x slower in bf16), while on a 2-core AMD EPYC with AVX512_BF16 bf16 ran ~2x faster than fp32.

So ``auto`` decides:

- on CUDA: bf16 where the device supports it, fp32 elsewhere (no measurement);
- on a CPU without native bf16 (:func:`cpu_native_bf16`): fp32, without measuring;
- on a CPU with native bf16: by measurement (:func:`calibrate`, ~1-2 s once per machine, then read from a cache file),
  per stage: *training* (the autocast dtype of every forward and backward) from a training-shaped matmul,
  *generation* (the ``hf`` engine's generation copy, vLLM's weights) from a decode-shaped, bandwidth-bound one.
  bf16 is chosen for a stage only where it measured at least :data:`BF16_MIN_SPEEDUP` times as fast as fp32; within
  that margin fp32 is kept (exact; and for generation no copy of the weights).

A forced ``bf16`` or ``fp32`` means both stages and measures nothing. The same choice serves the trainer's forwards,
the HF rollout engine, the vLLM engine's weight dtype, ``rlvr eval``, ``rlvr filter`` and ``rlvr check``'s memory
estimate (everything that builds a model from a recipe goes through :func:`choose_precision`).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import torch

PrecisionName = Literal["bf16", "fp32"]

#: What bf16 costs where the CPU emulates it (measured, see the module docstring): named in the warning.
EMULATED_BF16_SLOWDOWN = "about 20x slower than fp32"

BF16_MIN_SPEEDUP = 1.10
"""bf16 is chosen for a stage only where it measured at least this many times as fast as fp32. Within 10% fp32 wins:
it is exact, a measurement on a busy machine varies by a few percent, and bf16 costs more than its matmuls (autocast's
casts of the weights in training; a weight copy and a cast after every step in generation)."""

DEFAULT_MATMUL_SHAPE = (576, 1536)
"""(hidden, intermediate) measured where the model's are not given: SmolLM2-135M's, the embedded model's."""

TRAIN_TOKENS = 1024
"""Rows of the training-shaped matmul (tokens of a micro-batch); fewer where the model is so wide that one matmul
would pass :data:`TRAIN_FLOP_CAP`."""

TRAIN_FLOP_CAP = 4e9
"""At most this many FLOPs in one training-shaped matmul (~40 ms at 100 GFLOP/s): tokens, then the intermediate size,
are cut down to it."""

DECODE_ROWS = 8
"""Rows of the decode-shaped matmul: a few sequences' next tokens against the whole weight (bandwidth-bound)."""

DECODE_WEIGHT_BYTES = 128 * 2**20
"""fp32 bytes of the weights one decode-shaped measurement reads (copies of the same shape, in turn), more than a
CPU's caches hold: a decode step reads the model's weights from memory, so must the measurement."""

DECODE_MAX_WEIGHTS = 64
"""At most this many copies of the weight: a small model's (a test model's) decode is bound by per-call overhead, and
thousands of tiny matmuls would only make the measurement slow."""

MEASURE_SECONDS = 0.25
"""Time spent repeating each of the four measurements (after a warm-up call; at least 3 and at most 50 repeats)."""

CACHE_VERSION = 1
"""Part of the cache key: a change to what is measured bumps it."""

#: /proc/cpuinfo flags that bear on bf16 and fp32 matmul speed: part of the cache key.
RELEVANT_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a run uses and why.

    Attributes:
        name: the training stage: ``bf16`` (autocast forwards and backwards in bf16; log-probs, losses and master
            weights stay fp32) or ``fp32``.
        reason: one sentence naming the device and the evidence that decided, for the start-up line.
        generation: the generation stage (the ``hf`` engine's generation copy, vLLM's weights); ``None`` (the
            default) = the same as ``name``. Only ``auto`` on a CPU with native bf16 sets it apart.
    """

    name: PrecisionName
    reason: str
    generation: PrecisionName | None = None

    def __post_init__(self) -> None:
        if self.generation is None:
            object.__setattr__(self, "generation", self.name)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype for the training stage's ``torch.autocast``; ``None`` = no autocast (fp32)."""
        return torch.bfloat16 if self.name == "bf16" else None

    @property
    def generation_dtype(self) -> torch.dtype | None:
        """The ``hf`` rollout engine's ``autocast_dtype`` (the dtype of its generation copy of fp32 weights);
        ``None`` = generate with the fp32 weights themselves."""
        return torch.bfloat16 if self.generation == "bf16" else None

    @property
    def vllm_dtype(self) -> str:
        """vLLM's ``dtype=`` argument for the rollout engine's weights (the generation stage)."""
        return "bfloat16" if self.generation == "bf16" else "float32"


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


def matmul_shape(model: Any) -> tuple[int, int] | None:
    """``(hidden, intermediate)`` of a transformers model (or of its ``config``), the sizes :func:`calibrate`
    measures; ``None`` where the config names no hidden size. The intermediate size falls back to 4 x hidden."""
    config = getattr(model, "config", model)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    if not isinstance(hidden, int) or hidden <= 0:
        return None
    intermediate = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None)
    return hidden, intermediate if isinstance(intermediate, int) and intermediate > 0 else 4 * hidden


@dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` measured on this CPU, and where it is cached.

    Attributes:
        train_shape: ``(tokens, hidden, intermediate)``: ``x (tokens, hidden) @ W (intermediate, hidden)^T``.
        decode_shape: ``(rows, hidden, intermediate, weights)``: ``rows`` rows against each of ``weights`` distinct
            ``(intermediate, hidden)`` weights in turn.
        train_s, decode_s: median seconds of one such matmul (decode: of the pass over all ``weights``), by
            ``fp32`` / ``bf16``. The bf16 decode reads oneDNN-packed weights where the CPU packs them, as the ``hf``
            engine's generation copy does.
        key: what the measurement depends on (CPU, flags, torch, threads, shapes); the cache file's name hashes it.
        path: the cache file (``None`` where it could not be written). cached: read from ``path``, not measured now.
    """

    train_shape: tuple[int, int, int]
    decode_shape: tuple[int, int, int, int]
    train_s: dict[str, float]
    decode_s: dict[str, float]
    key: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    cached: bool = False

    def train_gflops(self, name: PrecisionName) -> float:
        """GFLOP/s of the training-shaped matmul in ``name``."""
        tokens, hidden, inter = self.train_shape
        return 2 * tokens * hidden * inter / self.train_s[name] / 1e9

    def decode_gbps(self, name: PrecisionName) -> float:
        """GB/s of weights read by the decode-shaped matmul in ``name`` (bf16 reads 2 bytes a weight, fp32 4)."""
        _, hidden, inter, weights = self.decode_shape
        return weights * hidden * inter * (2 if name == "bf16" else 4) / self.decode_s[name] / 1e9

    def speedup(self, stage: Literal["training", "generation"]) -> float:
        """fp32's time over bf16's for ``stage`` (> 1: bf16 is faster)."""
        times = self.train_s if stage == "training" else self.decode_s
        return times["fp32"] / times["bf16"]

    def choice(self, stage: Literal["training", "generation"]) -> PrecisionName:
        """bf16 where it measured at least :data:`BF16_MIN_SPEEDUP` times as fast as fp32 for ``stage``, else fp32."""
        return "bf16" if self.speedup(stage) >= BF16_MIN_SPEEDUP else "fp32"


def _shapes(hidden: int, intermediate: int) -> tuple[tuple[int, int, int], tuple[int, int, int, int]]:
    """The training and decode shapes measured for a model of these sizes (capped, see :data:`TRAIN_FLOP_CAP` and
    :data:`DECODE_WEIGHT_BYTES`, :data:`DECODE_MAX_WEIGHTS`)."""
    tokens = TRAIN_TOKENS
    while tokens > 256 and 2 * tokens * hidden * intermediate > TRAIN_FLOP_CAP:
        tokens //= 2
    train_inter = max(64, min(intermediate, int(TRAIN_FLOP_CAP // (2 * tokens * hidden))))
    decode_inter = max(64, min(intermediate, DECODE_WEIGHT_BYTES // (4 * hidden)))
    weights = min(DECODE_MAX_WEIGHTS, max(1, round(DECODE_WEIGHT_BYTES / (4 * hidden * decode_inter))))
    return (tokens, hidden, train_inter), (DECODE_ROWS, hidden, decode_inter, weights)


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


def measure_matmuls(train_shape: tuple[int, int, int],
                    decode_shape: tuple[int, int, int, int]) -> tuple[dict[str, float], dict[str, float]]:
    """Time the training-shaped and the decode-shaped matmul (see :class:`Calibration` for the shapes) in fp32 and
    bf16 on the CPU, with torch's current thread count.

    Returns:
        ``(train_s, decode_s)``: median seconds by ``fp32`` / ``bf16``. About 1-2 s in all on a 2-core CPU; the
        decode-shaped weights take ``1.5 x`` :data:`DECODE_WEIGHT_BYTES` of memory while it runs.
    Raises:
        RuntimeError: torch fails a bf16 matmul on this CPU.
    """
    from torch.nn import functional as F

    gen = torch.Generator().manual_seed(0)
    tokens, hidden, inter = train_shape
    x = torch.randn(tokens, hidden, generator=gen)
    w = torch.randn(inter, hidden, generator=gen) / math.sqrt(hidden)
    xb, wb = x.bfloat16(), w.bfloat16()
    with torch.no_grad():
        train_s = median_seconds({"fp32": lambda: F.linear(x, w), "bf16": lambda: F.linear(xb, wb)})
        rows, hidden, inter, count = decode_shape
        one = torch.randn(inter, hidden, generator=gen) / math.sqrt(hidden)
        weights = [one.clone() for _ in range(count)]
        xd = torch.randn(rows, hidden, generator=gen)
        xdb = xd.bfloat16()
        weights_bf16 = [wt.bfloat16() for wt in weights]
        packed = None
        if bf16_packing_supported():
            # as rlvr.rollout.cpu.packed_linear packs the generation copy's weights (laid out for 16 rows)
            packed = [torch.ops.mkldnn._reorder_linear_weight(wt.contiguous(), 16) for wt in weights_bf16]
            weights_bf16 = []

        def decode_fp32() -> None:
            for wt in weights:
                F.linear(xd, wt)

        def decode_bf16() -> None:
            if packed is not None:  # the generation copy's packed linear layers
                for wt in packed:
                    torch.ops.mkldnn._linear_pointwise(xdb, wt, None, "none", [], "")
            else:
                for wt in weights_bf16:
                    F.linear(xdb, wt)

        decode_s = median_seconds({"fp32": decode_fp32, "bf16": decode_bf16})
    return train_s, decode_s


def machine_key() -> dict[str, Any]:
    """What a CPU timing measured here depends on, for a cache key: the CPU model name, its bf16-relevant flags,
    torch's kernel level, ``ONEDNN_MAX_CPU_ISA``, the torch version and the thread count."""
    flags = _cpu_flags()
    return {"cpu": _cpu_model_name(), "flags": [f for f in RELEVANT_FLAGS if f in flags],
            "kernels": torch.backends.cpu.get_cpu_capability(), "onednn_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def _cache_key(train_shape: tuple[int, int, int], decode_shape: tuple[int, int, int, int]) -> dict[str, Any]:
    return {"version": CACHE_VERSION, **machine_key(), "train_shape": list(train_shape),
            "decode_shape": list(decode_shape)}


def _read_cached(path: Path, key: dict[str, Any]) -> Calibration | None:
    """The calibration in ``path`` if it is whole and measured under ``key``; ``None`` otherwise (missing, corrupt,
    another key)."""
    try:
        data = json.loads(path.read_text())
        if data["key"] != key:
            return None
        train_s = {n: float(data["train_s"][n]) for n in ("fp32", "bf16")}
        decode_s = {n: float(data["decode_s"][n]) for n in ("fp32", "bf16")}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all(math.isfinite(t) and t > 0 for t in (*train_s.values(), *decode_s.values())):
        return None
    return Calibration(tuple(key["train_shape"]), tuple(key["decode_shape"]), train_s, decode_s, key, path, True)


_CALIBRATIONS: dict[str, Calibration] = {}
"""This process's calibrations by cache file: a second engine in the same process reuses the first's."""


def calibrate(shape: tuple[int, int] | None = None) -> Calibration:
    """Measure (or read from the cache) how fast this CPU multiplies training- and decode-shaped matrices in bf16 and
    fp32, with torch's current thread count.

    Args:
        shape: ``(hidden, intermediate)`` of the model (:func:`matmul_shape`); ``None``: :data:`DEFAULT_MATMUL_SHAPE`.

    Returns:
        The measurement. It is cached in ``<rlvr cache>/precision-<hash>.json`` (``$RLVR_CACHE``, default
        ``~/.cache/rlvr``; written atomically), keyed by the CPU model name, its bf16-relevant flags, torch's kernel
        level, ``ONEDNN_MAX_CPU_ISA``, the torch version, the thread count and the shapes; a missing, corrupt or
        differently keyed file is measured again and rewritten. Delete the file to measure again. A cache folder
        that cannot be written costs only the cache (``path`` is ``None``).
    Raises:
        RuntimeError: torch fails a bf16 matmul on this CPU (see :func:`measure_matmuls`).
    """
    from rlvr import cache_dir
    from rlvr.runs.atomic import atomic_write_text

    train_shape, decode_shape = _shapes(*(shape or DEFAULT_MATMUL_SHAPE))
    key = _cache_key(train_shape, decode_shape)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / f"precision-{digest}.json"
    if str(path) in _CALIBRATIONS:
        return _CALIBRATIONS[str(path)]
    found = _read_cached(path, key)
    if found is None:
        train_s, decode_s = measure_matmuls(train_shape, decode_shape)
        try:
            atomic_write_text(path, json.dumps({"key": key, "train_s": train_s, "decode_s": decode_s}, indent=1))
            written: Path | None = path
        except OSError:
            written = None
        found = Calibration(train_shape, decode_shape, train_s, decode_s, key, written, False)
    _CALIBRATIONS[str(path)] = found
    return found


def home_relative(path: Path) -> str:
    """``path`` with the home folder written ``~``."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


def _measured_choice(shape: tuple[int, int] | None, evidence: str) -> PrecisionChoice:
    """``auto`` on a CPU with native bf16: each stage from :func:`calibrate`."""
    try:
        cal = calibrate(shape)
    except RuntimeError as exc:  # a torch build whose bf16 matmul fails here: fp32 is always safe
        return PrecisionChoice("fp32", f"precision auto: training fp32, generation fp32 (the bf16 measurement "
                                       f"failed: {exc}) [{evidence}]")
    train, gen = cal.choice("training"), cal.choice("generation")
    other_t, other_g = ("fp32" if train == "bf16" else "bf16"), ("fp32" if gen == "bf16" else "bf16")
    where = (f"cached: {home_relative(cal.path)}" if cal.cached else
             f"measured, saved to {home_relative(cal.path)}" if cal.path is not None else "measured, not cached")
    reason = (f"precision auto: training {train} (matmul {train} {cal.train_gflops(train):.0f} vs {other_t} "
              f"{cal.train_gflops(other_t):.0f} GFLOP/s), generation {gen} (decode {gen} {cal.decode_gbps(gen):.1f} "
              f"vs {other_g} {cal.decode_gbps(other_g):.1f} GB/s of weights, bf16 {cal.speedup('generation'):.2f}x "
              f"as fast) [{cal.key['cpu']}: {evidence}; {cal.key['threads']} thread(s); {where}]")
    return PrecisionChoice(train, reason, gen)


def choose_precision(requested: Literal["auto", "bf16", "fp32"], device: torch.device | str,
                     shape: tuple[int, int] | None = None) -> PrecisionChoice:
    """Resolve ``trainer.precision`` for ``device``, per stage (training, generation; see the module docstring).

    Args:
        requested: ``auto``, ``bf16`` or ``fp32`` (a forced one is both stages).
        device: where the model runs (``cpu`` or ``cuda[:i]``).
        shape: ``(hidden, intermediate)`` of the model (:func:`matmul_shape`), the sizes a CPU's ``auto`` measures;
            ``None``: :data:`DEFAULT_MATMUL_SHAPE`.

    Returns:
        The choice and its reason. ``auto``: on CUDA bf16 where the device supports it; on a CPU without native bf16
        fp32 (not measured); on a CPU with native bf16 each stage by :func:`calibrate` (bf16 where at least
        :data:`BF16_MIN_SPEEDUP` x as fast as fp32; ~1-2 s the first time on a machine, then cached). A forced
        ``bf16`` on a CPU without native bf16 is honoured but warns (a ``UserWarning`` naming the expected
        slowdown); a forced ``bf16`` on a CUDA device without bf16 raises.

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
        if requested == "auto" and native:
            return _measured_choice(shape, evidence)
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
