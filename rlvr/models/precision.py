"""Choosing the compute precision (``trainer.precision``) for the device a run actually has, per stage.

bf16 autocast is only a speed-up where the hardware computes in bf16 fast enough. On a CPU without native bf16 matmul
(AVX2-only, most laptops) torch emulates it, about 20x slower than fp32 for a SmolLM2-135M forward + backward (torch's
kernels capped to AVX2 on an AVX-512 Xeon; numbers in ``benchmarks/RESULTS.md``). A CPU flag is not enough either way:
on a 2-core Xeon with AVX512_BF16 and no AMX a bf16 matmul ran at 138 GFLOP/s against fp32's 249 (the demo's update
step ~1.3x slower in bf16), while on a 2-core AMD EPYC with AVX512_BF16 bf16 ran ~2x faster than fp32.

So ``auto`` decides:

- on CUDA: bf16 where the device supports it, fp32 elsewhere (no measurement);
- on a CPU without native bf16 (:func:`rlvr.kernels.machine.cpu_native_bf16`): fp32, without measuring;
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
import sys
import time
import warnings
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import torch

from rlvr.kernels import machine

PrecisionName = Literal["bf16", "fp32"]

#: What bf16 costs where the CPU emulates it (measured, see the module docstring): named in the warning.
EMULATED_BF16_SLOWDOWN = "about 20x slower than fp32"

BF16_MIN_SPEEDUP = 1.10
"""bf16 is chosen for a stage only where it measured at least this many times as fast as fp32. Within 10% fp32 wins:
it is exact, a measurement on a busy machine varies by a few percent, and bf16 costs more than its matmuls (autocast's
casts of the weights in training; a weight copy and a cast after every step in generation)."""

DEFAULT_MATMUL_SHAPE = (576, 1536)
"""(hidden, intermediate) measured where the model's are not given: SmolLM2-135M's, the embedded model's."""

MIN_MEASURED_FLOPS = 1e8
"""A model whose training-shaped matmul (:data:`TRAIN_TOKENS` rows) is under this many FLOPs (~1 ms) is kept in fp32
without measuring: its step is overhead, not matmuls, so bf16 cannot pay, and timings that small are noise that
would flip the choice (and the numbers a seed gives) between two first runs of a machine."""

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

CACHE_VERSION = 1
"""Part of the cache key: a change to what is measured bumps it."""

MIN_PLAUSIBLE = {"decode_gbps": 1.0, "train_gflops": 1.0}
"""Below these (fp32 GB/s of weights a decode step reads; fp32 GFLOP/s of a training matmul) a measurement says more
about the load the machine was under than about the machine (any x86 core streams several GB/s): a cached figure this
low is measured again."""


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
    measured_at: str = ""
    """When it was measured (UTC, ``YYYY-MM-DD HH:MM``); empty for a measurement that did not record it."""
    load: float | None = None
    """The 1-minute load average per core when it was measured (above 1: other work competed for the cores)."""

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

    def plausible(self) -> bool:
        """Whether the fp32 figures are above :data:`MIN_PLAUSIBLE` (not the figures of a machine too busy to tell)."""
        return (self.decode_gbps("fp32") >= MIN_PLAUSIBLE["decode_gbps"]
                and self.train_gflops("fp32") >= MIN_PLAUSIBLE["train_gflops"])

    def when(self) -> str:
        """``measured 2026-12-06 04:20 UTC at load 0.4 a core``, as far as it was recorded."""
        parts = [f"measured {self.measured_at} UTC" if self.measured_at else ""]
        if self.load is not None:
            parts.append(f"at load {self.load:.1f} a core")
        return " ".join(p for p in parts if p)

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
        train_s = machine.median_seconds({"fp32": lambda: F.linear(x, w), "bf16": lambda: F.linear(xb, wb)})
        rows, hidden, inter, count = decode_shape
        one = torch.randn(inter, hidden, generator=gen) / math.sqrt(hidden)
        weights = [one.clone() for _ in range(count)]
        xd = torch.randn(rows, hidden, generator=gen)
        xdb = xd.bfloat16()
        weights_bf16 = [wt.bfloat16() for wt in weights]
        packed = None
        if machine.bf16_packing_supported():
            # as rlvr.kernels.packed_linear packs the generation copy's weights (laid out for 16 rows)
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

        decode_s = machine.median_seconds({"fp32": decode_fp32, "bf16": decode_bf16})
    return train_s, decode_s


def _cache_key(train_shape: tuple[int, int, int], decode_shape: tuple[int, int, int, int]) -> dict[str, Any]:
    return {"version": CACHE_VERSION, **machine.machine_key(), "train_shape": list(train_shape),
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
        load = float(data["load"]) if data.get("load") is not None else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all(math.isfinite(t) and t > 0 for t in (*train_s.values(), *decode_s.values())):
        return None
    found = Calibration(tuple(key["train_shape"]), tuple(key["decode_shape"]), train_s, decode_s, key, path, True,
                        str(data.get("measured_at", "")), load)
    return found if found.plausible() else None


def _load_per_core() -> float | None:
    """The 1-minute load average over the cores, or None where the system does not say."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return None


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
        differently keyed file is measured again and rewritten, and so is one whose figures are implausible
        (:data:`MIN_PLAUSIBLE`; the file records when and at what load it was measured). A plausible measurement is
        kept, whatever the load then, so the choice (and with it the numbers a seed gives) stays the same on every run
        of the machine. Delete the file to measure again. A cache folder that cannot be written costs only
        the cache (``path`` is ``None``).
    Raises:
        RuntimeError: torch fails a bf16 matmul on this CPU (see :func:`measure_matmuls`).
    """
    from rlvr import cache_dir
    from rlvr.runtime.atomic import atomic_write_text

    train_shape, decode_shape = _shapes(*(shape or DEFAULT_MATMUL_SHAPE))
    key = _cache_key(train_shape, decode_shape)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / f"precision-{digest}.json"
    if str(path) in _CALIBRATIONS:
        return _CALIBRATIONS[str(path)]
    found = _read_cached(path, key)
    if found is None:
        load = _load_per_core()
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        train_s, decode_s = measure_matmuls(train_shape, decode_shape)
        try:
            atomic_write_text(path, json.dumps({"key": key, "train_s": train_s, "decode_s": decode_s,
                                                "measured_at": when, "load": load}, indent=1))
            written: Path | None = path
        except OSError:
            written = None
        found = Calibration(train_shape, decode_shape, train_s, decode_s, key, written, False, when, load)
    _CALIBRATIONS[str(path)] = found
    return found


def _measured_choice(shape: tuple[int, int] | None, evidence: str) -> PrecisionChoice:
    """``auto`` on a CPU with native bf16: each stage from :func:`calibrate`."""
    try:
        cal = calibrate(shape)
    except RuntimeError as exc:  # a torch build whose bf16 matmul fails here: fp32 is always safe
        return PrecisionChoice("fp32", f"precision auto: training fp32, generation fp32 (the bf16 measurement "
                                       f"failed: {exc}) [{evidence}]")
    train, gen = cal.choice("training"), cal.choice("generation")
    other_t, other_g = ("fp32" if train == "bf16" else "bf16"), ("fp32" if gen == "bf16" else "bf16")
    path = machine.home_relative(cal.path) if cal.path is not None else None
    where = f"cached: {path}" if cal.cached else f"measured, saved to {path}" if path is not None else \
        "measured, not cached"
    when = f"; {cal.when()}" if cal.when() else ""
    # three significant figures: the printed ratio is the ratio of the printed figures (to their rounding)
    reason = (f"precision auto: training {train} (matmul {train} {cal.train_gflops(train):.3g} vs {other_t} "
              f"{cal.train_gflops(other_t):.3g} GFLOP/s), generation {gen} (decode {gen} {cal.decode_gbps(gen):.3g} "
              f"vs {other_g} {cal.decode_gbps(other_g):.3g} GB/s of weights; bf16 {cal.speedup('generation'):.2f}x "
              f"as fast, counting the bytes read) [{cal.key['cpu']}: {evidence}; {cal.key['threads']} thread(s); "
              f"{where}{when}]")
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
        fp32 (not measured); for a model under :data:`MIN_MEASURED_FLOPS` fp32 (not measured); on a CPU with native
        bf16 each stage by :func:`calibrate` (bf16 where at least
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
        native, evidence = machine.cpu_native_bf16()
        if requested == "bf16" and not native:
            warnings.warn(f"trainer.precision=bf16 on a {evidence}, {EMULATED_BF16_SLOWDOWN} on such CPUs; "
                          "use trainer.precision=auto (or fp32)", UserWarning, stacklevel=2)
        hidden, inter = shape or DEFAULT_MATMUL_SHAPE
        if requested == "auto" and native and 2 * TRAIN_TOKENS * hidden * inter < MIN_MEASURED_FLOPS:
            return PrecisionChoice("fp32", f"precision auto: training fp32, generation fp32 (a model this small, "
                                           f"hidden {hidden} x intermediate {inter}, gains nothing from bf16; not "
                                           f"measured) [{evidence}]")
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
