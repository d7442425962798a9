"""rlvr: reinforcement learning from verifiable rewards.

``rlvr.verifiers`` and ``rlvr.sandbox`` live in the repository's top-level folders ``verifiers/`` and ``sandbox/``;
pyproject's ``package-dir`` installs them under ``rlvr`` (a checkout is used through ``pip install -e .``, which
``make install`` runs).

Kept import-light and without side effects: the sandbox and the verifiers (every verifier worker) import this module
first, so it pulls in no torch, sets no environment variable and touches no file (the build folder of the CPU kernels
is set up where they are built, :mod:`rlvr.runtime.extensions`).
"""

import os
from pathlib import Path


def cache_dir() -> Path:
    """rlvr's cache root, the same for the CLI, ``make`` and the tests: ``$RLVR_CACHE``, else ``~/.cache/rlvr``. It
    holds the converted embedded model, the per-machine timings and, unless ``$TORCH_EXTENSIONS_DIR`` is set,
    ``torch_extensions/`` (:func:`rlvr.runtime.extensions.extensions_dir`)."""
    env = os.environ.get("RLVR_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rlvr"
