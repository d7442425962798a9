"""Where torch's extension builder builds rlvr's CPU kernels and DeepSpeed's CPU ops, and the lock files a killed
build leaves there.

Set up where something is built (:func:`rlvr.kernels.build.build_kernels`; :func:`rlvr.runtime.distributed.
init_distributed`, whose first DeepSpeed use on a machine builds its communication op), never on import: importing
``rlvr`` (as every verifier worker does) changes no environment variable and deletes no file. Every build of the
process uses one ninja (:func:`use_one_ninja`).
"""

from __future__ import annotations

import os
import sys
import time
from functools import cache
from pathlib import Path

from rlvr import cache_dir

STALE_BUILD_LOCK_S = 900
"""A build lock older than this (seconds) is left by a killed build: a build here takes 1-3 minutes."""
IDLE_BUILD_LOCK_S = 60
"""A build lock older than this with no compiler or ninja running in its folder is left by a killed build too (a live
build starts its ninja within seconds of taking the lock)."""


def extensions_dir() -> Path:
    """The folder torch builds extensions in: ``$TORCH_EXTENSIONS_DIR``, else ``<rlvr cache>/torch_extensions``
    (:func:`rlvr.cache_dir`), the same for the CLI, ``make`` and the tests."""
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    return Path(env).expanduser() if env else cache_dir() / "torch_extensions"


@cache
def prepare_extension_builds() -> Path:
    """Before the first build of this process: point torch's builder at :func:`extensions_dir` (it and DeepSpeed read
    only ``TORCH_EXTENSIONS_DIR``, so it is set where unset) and clear the stale build locks there
    (:func:`clear_stale_build_locks`). Once per process; returns the folder."""
    folder = extensions_dir()
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(folder))
    clear_stale_build_locks(folder)
    return folder


def _building_in(folder: Path) -> bool:
    """Whether a process (ninja, a compiler) works in ``folder`` now: its working folder or command line names it."""
    import psutil

    text = str(folder)
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        try:
            if (proc.info["cwd"] or "").startswith(text) or any(text in part for part in proc.info["cmdline"] or ()):
                return True
        except (psutil.Error, TypeError):
            continue
    return False


def clear_stale_build_locks(extensions_dir: Path, max_age_s: float = STALE_BUILD_LOCK_S,
                            idle_age_s: float = IDLE_BUILD_LOCK_S) -> list[Path]:
    """Remove ``<extensions_dir>/<op>/lock`` files left by killed builds and return them: older than ``max_age_s``, or
    older than ``idle_age_s`` with no process building in that op's folder (rlvr's kernels and DeepSpeed's CPU ops
    alike); a missing folder is no error.

    Why: torch's extension builder (used for rlvr's CPU kernels and DeepSpeed's CPU ops) holds a lock file while it
    compiles and waits, without a time limit, for another process's lock to go. A build killed mid-way leaves its
    lock, and every later run would wait for it.
    """
    removed = []
    try:
        ops = list(Path(extensions_dir).iterdir())
    except OSError:
        return removed
    for op in ops:
        lock = op / "lock"
        try:
            age = time.time() - lock.stat().st_mtime
            if age > max_age_s or (age > idle_age_s and not _building_in(op)):
                lock.unlink()
                removed.append(lock)
        except OSError:
            continue
    for lock in removed:
        print(f"rlvr: removed a build lock left by a killed build: {lock}", file=sys.stderr)
    return removed


def use_one_ninja() -> str | None:
    """Put the ninja of rlvr's own environment (the ``ninja`` package, a declared dependency) first on ``PATH``, for
    every C++ build of the process: rlvr's kernels and DeepSpeed's ops. Two ninjas (a system ninja-build first on
    ``PATH`` for ``make`` and ``.venv/bin/rlvr``, the venv's for an activated shell) keep each other's build logs
    unreadable, so every switch rebuilds every extension (1-3 min each); and with no ninja on ``PATH`` at all DeepSpeed
    refuses to build. Returns the folder put first, or None where the package is missing."""
    try:
        import ninja
    except ImportError:
        return None
    folder = str(ninja.BIN_DIR)
    parts = os.environ.get("PATH", "").split(os.pathsep)
    if parts[0] != folder:
        os.environ["PATH"] = os.pathsep.join([folder] + [p for p in parts if p and p != folder])
    return folder
