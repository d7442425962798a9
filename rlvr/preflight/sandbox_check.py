"""The code sandbox a recipe's `code` verifier will use: which backend, and whether it enforces memory_mb."""

from __future__ import annotations

from typing import Any

from rlvr.preflight.report import Report

SANDBOX_VERIFIERS = ("code",)


def check_sandbox(report: Report, specs: list[Any]) -> None:
    """One finding when a verifier runs programs: ``ok`` naming the backend (and how it bounds memory), ``warn`` when
    the backend cannot enforce memory_mb (bubblewrap without a memory cgroup: memory outside a process's address
    space, a memfd or shared memory, is the host's) or when no sandbox can run here (every code reward is None)."""
    if not any(spec.name in SANDBOX_VERIFIERS for spec in specs):
        return
    from rlvr.sandbox import SandboxUnavailable, get_backend

    try:
        backend = get_backend("auto")
    except SandboxUnavailable as exc:
        report.add("warn", "sandbox", f"no sandbox can run programs here, so every code reward is None: {exc}")
        return
    report.add("ok" if backend.memory_enforced else "warn", "sandbox", backend.description())
