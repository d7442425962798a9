"""The code sandboxes a recipe will use (its ``code`` verifiers', its ``python`` tool's): which backend, whether it
enforces memory_mb, what each available backend offers (languages, Python modules), and whether the backends the
recipe uses offer what it needs: the languages its rows name (``language``) and ``sandbox.python_modules``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.data.sources import row_origin
from rlvr.preflight.report import Report

SANDBOX_VERIFIERS = ("code",)
SANDBOX_TOOLS = ("python",)
PROBED_BACKENDS = ("docker", "bwrap")  # reported when available, whichever the recipe uses


@dataclass(frozen=True)
class SandboxUse:
    """One user of the sandbox in a recipe: ``who`` (``the code verifier``) asks for backend ``backend`` (``auto``,
    ``docker``, ``bwrap``, ``none``); ``languages``: whether its programs are in the rows' languages (the code
    verifier's), else Python only."""

    who: str
    backend: str
    languages: bool
    kwargs: dict[str, Any] = field(default_factory=dict, compare=False)
    """The verifier's kwargs (its ``sandbox_urls`` and token variable name remote servers)."""


def sandbox_uses(specs: Sequence[Any], recipe: Any = None) -> list[SandboxUse]:
    """The recipe's sandbox users: each ``code`` verifier (its ``backend`` kwarg, default ``auto``) and each built-in
    ``python`` tool of ``recipe.rollout.tools``."""
    uses = [SandboxUse(f"the {spec.name} verifier", str(spec.kwargs.get("backend", "auto")), True, dict(spec.kwargs))
            for spec in specs if spec.name in SANDBOX_VERIFIERS]
    tools = recipe.rollout.tools if recipe is not None else []
    uses += [SandboxUse(f"the {tool.name} tool", str(tool.kwargs.get("backend", "auto")), False)
             for tool in tools if tool.name in SANDBOX_TOOLS]
    return uses


def check_sandbox(report: Report, specs: Sequence[Any], recipe: Any = None,
                  rows: list[dict[str, Any]] | None = None) -> None:
    """Findings when the recipe runs programs (nothing otherwise):

    - per backend used, ``ok`` naming it (and how it bounds memory), ``warn`` when it cannot enforce memory_mb
      (bubblewrap without a memory cgroup) or when no sandbox can run here;
    - ``info``: what each available backend (docker, bwrap, and any other used) offers, from one probe each;
    - ``error``: one per Python module of ``sandbox.python_modules``, and per language the rows name, that a backend
      the recipe uses lacks, naming the module or language, the backend and what to do. An unknown language in a
      row is an ``error`` too.
    """
    uses = sandbox_uses(specs, recipe)
    if not uses:
        return
    from rlvr.sandbox import SandboxError, SandboxUnavailable, get_backend
    from rlvr.sandbox.capabilities import probe_capabilities

    modules = list(recipe.sandbox.python_modules) if recipe is not None else []
    languages = _row_languages(report, rows) if rows is not None and any(u.languages for u in uses) else {}
    used: dict[int, tuple[Any, list[SandboxUse]]] = {}  # backend instance id -> (backend, its users)
    for use in uses:
        try:
            backend = _backend_of(use)
        except (SandboxUnavailable, ValueError) as exc:
            report.add("warn", "sandbox", f"{use.who} asks for sandbox backend {use.backend!r}, which cannot run "
                                          f"here, so every one of its calls fails: {exc}")
            continue
        used.setdefault(id(backend), (backend, []))[1].append(use)
    for backend, _ in used.values():
        if backend.name == "remote":  # its servers: do they answer, and take the token?
            problems = backend.probe()
            report.add("warn" if problems else "ok", "sandbox",
                       backend.description() + "".join(f"; {p}" for p in problems))
            continue
        report.add("ok" if backend.memory_enforced else "warn", "sandbox", backend.description())

    probed: dict[int, Any] = {}  # backend instance id -> Capabilities, or None when its probe failed
    candidates = [b for b, _ in used.values()]
    for name in PROBED_BACKENDS:
        try:
            candidates.append(get_backend(name))
        except SandboxUnavailable as exc:
            report.add("info", "sandbox", f"{name}: not available here ({str(exc).splitlines()[0][:200]})")
    for backend in candidates:
        if id(backend) in probed:
            continue
        try:
            caps = probe_capabilities(backend, modules)
            report.add("info", "sandbox", caps.summary())
        except SandboxError as exc:
            caps = None
            report.add("warn", "sandbox", f"could not probe what the {backend.name} sandbox offers: {exc}")
        probed[id(backend)] = caps

    for key, (backend, users) in used.items():
        caps = probed.get(key)
        if caps is not None:
            _needs(report, backend.name, caps, users, modules, languages)


def _backend_of(use: SandboxUse) -> Any:
    """The backend ``use`` runs its programs in: by name, or the remote servers of a verifier's ``sandbox_urls``.
    Raises SandboxUnavailable or ValueError when it cannot run here."""
    from rlvr.sandbox import get_backend
    from rlvr.verifiers.code import sandbox_backend

    k = use.kwargs
    chosen = sandbox_backend(use.backend, k.get("sandbox_urls"), k.get("sandbox_token_env", "RLVR_SANDBOX_TOKEN"),
                             k.get("sandbox_protocol"))
    return get_backend(chosen) if isinstance(chosen, str) else chosen


def _needs(report: Report, backend: str, caps: Any, users: list[SandboxUse], modules: list[str],
           languages: dict[str, tuple[int, str]]) -> None:
    """``error`` findings for what `users` need that the `backend` sandbox (`caps`) lacks."""
    from rlvr.sandbox.capabilities import module_remedy

    who = " and ".join(u.who for u in users) + (" use" if len(users) > 1 else " uses")
    for module in caps.missing_modules(modules):
        report.add("error", "sandbox", f"sandbox.python_modules: {module!r} cannot be imported in the {backend} "
                                       f"sandbox that {who}; {module_remedy(backend, module)}")
    if not any(u.languages for u in users):
        return
    for language, (count, first) in languages.items():
        why = caps.languages.get(language)
        if why is not None:
            remedy = "" if backend == "docker" else "; or use the docker backend (`backend: docker`: its image has " \
                                                    "every toolchain)"
            report.add("error", "sandbox", f"{count} row(s) (first: {first}) are {language} programs, which the "
                                           f"{backend} sandbox cannot run: {why}{remedy}")


def _row_languages(report: Report, rows: list[dict[str, Any]]) -> dict[str, tuple[int, str]]:
    """language -> (rows in it, where the first is) over the rows' ``language`` fields (default python); an
    ``error`` for the first row whose language is unknown."""
    from rlvr.sandbox import parse_language

    found: dict[str, tuple[int, str]] = {}
    bad = 0
    for i, row in enumerate(rows):
        try:
            name = parse_language(row.get("language") or "python").name
        except ValueError as exc:
            if not bad:
                report.add("error", "sandbox", f"{row_origin(row, i)}: {exc}")
            bad += 1
            continue
        count, first = found.get(name, (0, ""))
        found[name] = (count + 1, first or row_origin(row, i))
    if bad > 1:
        report.add("error", "sandbox", f"{bad - 1} more row(s) name an unknown language")
    return found
