"""`rlvr check` says which sandbox the code verifier will use, whether it enforces memory_mb, and what it offers."""
from types import SimpleNamespace

import pytest

from rlvr.preflight.report import Report
from rlvr.preflight.sandbox_check import check_sandbox
from rlvr.sandbox import backends
from rlvr.sandbox.backends.bwrap_backend import BwrapBackend, bwrap_problem


def _findings(monkeypatch, backend):
    monkeypatch.setattr(backends, "get_backend", lambda name="auto": backend)
    monkeypatch.setattr("rlvr.sandbox.get_backend", lambda name="auto": backend)
    report = Report()
    check_sandbox(report, [SimpleNamespace(name="code", kwargs={})])
    return [(f.level, f.message) for f in report.findings]


def test_a_sandbox_without_a_memory_cgroup_is_a_warning_that_says_so(monkeypatch):
    if bwrap_problem():
        pytest.skip(bwrap_problem())
    monkeypatch.setenv("RLVR_SANDBOX_CGROUP", "0")
    (level, message), (info, offers) = _findings(monkeypatch, BwrapBackend(workers=1))
    assert level == "warn"
    assert "memory_mb is not enforced" in message and "RLVR_SANDBOX_CGROUP=0" in message
    assert info == "info" and offers.startswith("bwrap: Python 3.") and "languages python" in offers


def test_a_sandbox_with_a_memory_cgroup_is_ok(monkeypatch):
    if bwrap_problem():
        pytest.skip(bwrap_problem())
    backend = BwrapBackend(workers=1)
    if not backend.memory_enforced:
        pytest.skip(f"no memory cgroup here: {backend.cgroups.problem}")
    (level, message), (info, offers) = _findings(monkeypatch, backend)
    assert level == "ok" and "memory_mb enforced by a memory cgroup" in message
    assert info == "info" and offers.startswith("bwrap: Python 3.")


def test_recipes_without_a_code_verifier_get_no_sandbox_finding(monkeypatch):
    report = Report()
    check_sandbox(report, [SimpleNamespace(name="math", kwargs={})])
    assert report.findings == []
