"""Kernel timings measured once per machine and kept in rlvr's cache, so that every run on a machine makes the same
choice of kernel (and the same seed samples the same tokens) even where two kernels time within noise of each other.

A file ``<rlvr cache>/<kind>-<hash>.json`` holds ``{"key": ..., "seconds": {name: s}}``; the key is the machine
(:func:`rlvr.kernels.machine.machine_key`: CPU, flags, torch version and kernel level, threads) plus what the caller
adds (the kernels' source, the shapes measured). Delete the file to measure again.

What a measurement does must not change the numbers a seed gives: its inputs come from a generator of its own
(:func:`measurement_generator`), never from torch's global RNG (a cold cache would otherwise shift the run's samples),
and a choice between kernels that round differently takes the default one unless the other is at least
:data:`SWITCH_MARGIN` faster (:func:`choose`), so timings within noise of each other cannot flip it between two
measurements.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

SWITCH_MARGIN = 0.15
"""How much faster (a share of the default's time) the other kernel must measure to be chosen over the default."""


def measurement_generator(seed: int = 0) -> Any:
    """A ``torch.Generator`` for a measurement's random inputs: the global RNG, which seeds the run, stays untouched."""
    import torch

    return torch.Generator().manual_seed(seed)


def choose(seconds: dict[str, float], default: str, other: str) -> str:
    """``default``, unless ``other`` took at most ``1 - SWITCH_MARGIN`` of its time."""
    return other if seconds[other] <= (1.0 - SWITCH_MARGIN) * seconds[default] else default


def source_digest(paths: tuple[Path, ...]) -> str:
    """A short hash of the files' contents (a kernel's source), for a cache key."""
    return hashlib.sha256(b"".join(path.read_bytes() for path in paths)).hexdigest()[:16]


def _read(path: Path, key: dict[str, Any], names: tuple[str, ...]) -> dict[str, float] | None:
    """The timings in ``path`` if it is whole and measured under ``key``, else None (missing, corrupt, another key)."""
    try:
        data = json.loads(path.read_text())
        seconds = {name: float(data["seconds"][name]) for name in names}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return seconds if data.get("key") == key and all(0 < s < math.inf for s in seconds.values()) else None


def cached_timings(kind: str, key: dict[str, Any], names: tuple[str, ...],
                   measure: Callable[[], dict[str, float]]) -> tuple[dict[str, float], str]:
    """Seconds by name (``names``) for ``key`` on this machine: read from the cache, else ``measure()`` and saved.

    Returns:
        ``(seconds, where)``: ``where`` says ``cached: PATH``, ``measured, saved to PATH`` or ``measured, not cached``
        (an unwritable cache folder), for the caller's message.
    """
    from rlvr import cache_dir
    from rlvr.kernels.machine import home_relative, machine_key
    from rlvr.runtime.atomic import atomic_write_text

    full_key = {**key, **machine_key()}
    digest = hashlib.sha256(json.dumps(full_key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / f"{kind}-{digest}.json"
    seconds = _read(path, full_key, names)
    if seconds is not None:
        return seconds, f"cached: {home_relative(path)}"
    seconds = measure()
    try:
        atomic_write_text(path, json.dumps({"key": full_key, "seconds": seconds}, indent=1))
    except OSError:
        return seconds, "measured, not cached"
    return seconds, f"measured, saved to {home_relative(path)}"
