"""Suite-wide set-up: the build folder of C++ extensions fixed once, time limits, the test ordering, and the fixture
that skips a run's plots.

The build folder (``TORCH_EXTENSIONS_DIR``) is set up before any test runs, as an ``rlvr`` command does where it first
builds: a test that points ``RLVR_CACHE`` at a temporary folder must not move it there for the rest of the session
(every kernel would be built again).

The vLLM tests run last: a ``vllm.LLM`` in this process sets up torch.distributed's default group for itself, and a
DeepSpeed engine built after it in the same process fails with "Group ... is not registered". Every other test keeps
its order. The objects of a module with vLLM tests are collected when the module ends: vLLM tears down its
process-wide parallel groups when an in-process engine is garbage collected (a ``weakref.finalize`` calls
``EngineCore.shutdown`` -> ``cleanup_dist_env_and_memory``), so an earlier module's engine collected while a later
module's engine runs can take that engine's groups with it ("pipeline model parallel group is not initialized").

Every test's time limit (pytest-timeout's, ``timeout`` in pyproject.toml) is scaled like the subprocess limits of
:mod:`tests.limits`: by ``RLVR_TEST_TIME_SCALE`` and the machine's load when the suite starts.
"""

from __future__ import annotations

import gc

import pytest

from tests import limits


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    from rlvr.runtime.extensions import prepare_extension_builds

    if getattr(config.option, "timeout", None) is None and config.getini("timeout"):
        config.option.timeout = float(config.getini("timeout")) * limits.scale()
    prepare_extension_builds()


@pytest.fixture
def no_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """A training run without its PNG plots (~5 s per checkpoint on these CPUs), for tests that do not check them."""
    monkeypatch.setattr("rlvr.trainer.run.write_plots", lambda *args, **kwargs: None)


@pytest.fixture(autouse=True, scope="module")
def collect_vllm_engines_per_module(request: pytest.FixtureRequest) -> object:
    """Collect the garbage of an ending module with vLLM tests (its engines) before the next module builds an engine;
    see the module's docstring."""
    yield
    if any(item.get_closest_marker("vllm") for item in request.session.items
           if getattr(item, "module", None) is request.module):
        gc.collect()


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("vllm") is not None)  # stable: the rest keep their order
