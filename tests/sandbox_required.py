"""The gate of a test that needs a real sandbox backend: skip where the backend cannot run here, fail in CI
(``CI=true``), where ``make test`` installs Docker and bubblewrap, so a broken install cannot pass as a run of skips."""

from __future__ import annotations

import pytest

from tests.vllm_required import in_ci


def require_backend(name: str) -> None:
    """Skip the test where the sandbox backend ``name`` (``docker`` or ``bwrap``) is not available (its reason), or
    fail it under ``CI=true``."""
    from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
    from rlvr.sandbox.backends.docker_backend import docker_problem

    problem = docker_problem() if name == "docker" else bwrap_problem()
    if problem:
        if in_ci():
            pytest.fail(f"CI=true and the {name} sandbox backend is not available: {problem}", pytrace=False)
        pytest.skip(f"{name}: {problem}")
