"""rlvr: reinforcement learning from verifiable rewards.

``rlvr.verifiers`` and ``rlvr.sandbox`` live in the repository's top-level folders ``verifiers/`` and ``sandbox/``;
pyproject's ``package-dir`` installs them under ``rlvr`` (a checkout is used through ``pip install -e .``, which
``make install`` runs).

Kept import-light: the sandbox and the verifiers import this module first, and must not pull in torch.
"""

import os
from pathlib import Path


def cache_dir() -> Path:
    """rlvr's cache root, the same for the CLI, ``make`` and the tests: ``$RLVR_CACHE``, else ``~/.cache/rlvr``. It
    holds the converted embedded model and, unless ``$TORCH_EXTENSIONS_DIR`` is set, ``torch_extensions/``."""
    env = os.environ.get("RLVR_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "rlvr"


# torch's extension builder caches rlvr's fused CPU decode kernels and DeepSpeed's CPU ops here: built once per cache
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache_dir() / "torch_extensions"))
