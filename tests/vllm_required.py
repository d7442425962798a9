"""The gate of every test that needs vLLM: skip where vLLM is absent, fail in CI (``CI=true``), where ``make test``
installs vLLM's CPU backend, so a broken install cannot pass as a run of skips."""

from __future__ import annotations

import os
from typing import Any

import pytest

INSTALL_HINT = "`make test` installs it, `make install-vllm` alone"


def in_ci() -> bool:
    """True where CI set ``CI`` (``true``/``1``/``yes``, any case)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_vllm() -> Any:
    """The imported ``vllm`` module; skips the test where vLLM does not import, or fails it under ``CI=true``."""
    from rlvr.rollout.vllm_engine import VLLMNotInstalledError, import_vllm

    try:
        return import_vllm()
    except VLLMNotInstalledError as exc:
        if in_ci():
            pytest.fail(f"CI=true and vLLM does not import, so the vLLM tests cannot run: {exc} ({INSTALL_HINT})",
                        pytrace=False)
        pytest.skip(f"vLLM is not installed ({INSTALL_HINT})")
