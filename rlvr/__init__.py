"""rlvr: reinforcement learning from verifiable rewards.

``rlvr.verifiers`` and ``rlvr.sandbox`` live in the repository's top-level folders ``verifiers/`` and ``sandbox/``;
pyproject's ``package-dir`` installs them under ``rlvr`` (a checkout is used through ``pip install -e .``, which
``make install`` runs).

Kept import-light: the sandbox and the verifiers import this module first, and must not pull in torch.
"""

import os
import sys
import time
from pathlib import Path


def cache_dir() -> Path:
    """rlvr's cache root, the same for the CLI, ``make`` and the tests: ``$RLVR_CACHE``, else ``~/.cache/rlvr``. It
    holds the converted embedded model and, unless ``$TORCH_EXTENSIONS_DIR`` is set, ``torch_extensions/``."""
    env = os.environ.get("RLVR_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rlvr"


# torch's extension builder caches rlvr's fused CPU decode kernels and DeepSpeed's CPU ops here: built once per cache
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache_dir() / "torch_extensions"))


STALE_BUILD_LOCK_S = 900
"""A build lock older than this (seconds) is left by a killed build: a build here takes 1-3 minutes."""


def clear_stale_build_locks(extensions_dir: Path | None = None, max_age_s: float = STALE_BUILD_LOCK_S) -> list[Path]:
    """Remove ``<extensions_dir>/<op>/lock`` files older than ``max_age_s`` and return them.

    Why: torch's extension builder (used for rlvr's CPU decode kernels and DeepSpeed's CPU ops) holds a lock file while
    it compiles and waits, without a time limit, for another process's lock to go. A build killed mid-way leaves its
    lock, and every later run would wait forever at start-up.
    """
    folder = Path(extensions_dir or os.environ["TORCH_EXTENSIONS_DIR"])
    removed = []
    try:
        ops = list(folder.iterdir())
    except OSError:
        return removed
    for op in ops:
        lock = op / "lock"
        try:
            if time.time() - lock.stat().st_mtime > max_age_s:
                lock.unlink()
                removed.append(lock)
        except OSError:
            continue
    for lock in removed:
        print(f"rlvr: removed a build lock left by a killed build: {lock}", file=sys.stderr)
    return removed


clear_stale_build_locks()
