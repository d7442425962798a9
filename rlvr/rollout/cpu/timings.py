"""Kernel timings measured once per machine and kept in rlvr's cache, so that every run on a machine makes the same
choice of kernel (and the same seed samples the same tokens) even where two kernels time within noise of each other.

A file ``<rlvr cache>/<kind>-<hash>.json`` holds ``{"key": ..., "seconds": {name: s}}``; the key is the machine
(:func:`rlvr.models.precision.machine_key`: CPU, flags, torch version and kernel level, threads) plus what the caller
adds (the kernels' source, the shapes measured). Delete the file to measure again.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any


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
    from rlvr.models.precision import home_relative, machine_key
    from rlvr.runs.atomic import atomic_write_text

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
