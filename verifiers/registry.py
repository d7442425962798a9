"""Verifier registry: register reward functions by name, look them up by name or import path.

A verifier is any callable ``fn(completion: str, sample: dict, **kwargs) -> float | None | dict``:

* a float (or int/bool) is the score;
* ``None`` means "cannot score this sample" (skipped, adds nothing to the reward);
* a dict carries ``"score"`` (float or None) plus extra fields that are logged as ``"<verifier>/<field>"``.

Register one with the decorator, then name it in a recipe::

    from rlvr.verifiers import verifier

    @verifier("starts_with_yes")
    def starts_with_yes(completion: str, sample: dict) -> float:
        return 1.0 if completion.lstrip().lower().startswith("yes") else 0.0

A recipe may also name any importable function as ``"package.module:function"`` without registering it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Hashable
from typing import Any

from rlvr import import_paths
from rlvr.did_you_mean import closest

VerifierFn = Callable[..., Any]
"""``(completion: str, sample: dict, **kwargs) -> float | None | dict``."""

CacheKeyFn = Callable[..., Hashable | None]
"""``(completion: str, sample: dict, **kwargs) -> Hashable | None``; ``None`` means "do not cache"."""

_REGISTRY: dict[str, VerifierFn] = {}
OLD_PACKAGE = "verifiers"
"""The top-level name this package had before it became ``rlvr.verifiers``; an old plug-in path naming it that
does not import gets an error saying so."""


class UnknownVerifierError(KeyError):
    """Raised by :func:`get_verifier` for a name that is neither registered nor importable."""

    def __str__(self) -> str:  # KeyError's str() would wrap the message in quotes
        return str(self.args[0]) if self.args else "unknown verifier"


BatchFn = Callable[..., list[Any]]
"""``(completions: list[str], samples: list[dict], **kwargs) -> list`` of what the verifier returns for each."""

UndecidedFn = Callable[[float | None, dict], bool]
"""``(score, extras) -> bool``: True when a result of the verifier does not decide the sample."""


def verifier(
    name: str, *, cache_key: CacheKeyFn | None = None, score_range: tuple[float | None, float | None] | None = None,
    batch: BatchFn | None = None, undecided: UndecidedFn | None = None,
    service_metrics: tuple[str, ...] | None = None,
) -> Callable[[VerifierFn], VerifierFn]:
    """Decorator registering ``fn`` under ``name``.

    Args:
        name: registry name used in recipes (``verifiers: [{name: math}]``); must not contain ``":"``.
        cache_key: optional ``(completion, sample, **kwargs) -> Hashable | None``. When given, a
            :class:`rlvr.verifiers.reward.RewardFunction` computes the key in the parent process and reuses the
            score of an earlier call with the same key instead of calling the verifier again (the math
            verifier keys on ``(gold, extracted answer)``). It must be cheap and must never hang.
        score_range: optional ``(low, high)`` bounds of a valid score, inclusive (``None`` = unbounded on that
            side). A score outside them is counted as a failure (``"range: ..."``), not added to the reward: a
            verifier that returns 5.0 where 1.0 is the best is broken, not generous.
        batch: optional ``(completions, samples, **kwargs) -> list`` scoring many samples at once, in order
            (one result per sample, as ``fn`` would return it, or an exception instance: that sample failed). A
            :class:`rlvr.verifiers.reward.RewardFunction` then sends all of a ``score()`` call's samples for this verifier
            to one worker call instead of one call per sample (the ``code`` verifier judges them in one
            ``rlvr.sandbox.run_many``).
        undecided: optional ``(score, extras) -> bool``, True for a result that scores the sample without deciding
            it (the ``math`` verifier's 0 for an answer it could not parse). A verifier whose ``fallback_for`` names
            this one runs on those samples (and on those scored None), see
            :attr:`rlvr.verifiers.reward.VerifierSpec.fallback_for`.
        service_metrics: the verifier calls a service (a judge model): the trainer logs, per step, its calls and
            cache hits (``reward/calls/<label>``, ``reward/cache_hits/<label>``), its agreement with the recipe's
            solved verifier where both scored (``reward/agreement/<label>``, ``reward/accepts_wrong/<label>``), and
            the mean over called samples of each numeric extra field named here (``reward/<field>/<label>``).

    Raises:
        ValueError: ``name`` is empty, contains ``":"``, or is already registered to a different function; a
            ``score_range`` whose low bound is above its high bound.
    """
    if not name or ":" in name:
        raise ValueError(f"verifier name must be non-empty and contain no ':', got {name!r}")
    if score_range is not None:
        low, high = score_range
        if low is not None and high is not None and low > high:
            raise ValueError(f"verifier {name!r}: score_range low {low} is above high {high}")

    def register(fn: VerifierFn) -> VerifierFn:
        existing = _REGISTRY.get(name)
        if existing is not None and _qualname(existing) != _qualname(fn):
            raise ValueError(
                f"verifier name {name!r} is already registered to {_qualname(existing)}; "
                f"pick another name for {_qualname(fn)}"
            )
        if cache_key is not None:
            fn.cache_key = cache_key  # type: ignore[attr-defined]
        if score_range is not None:
            fn.score_range = score_range  # type: ignore[attr-defined]
        if batch is not None:
            fn.batch = batch  # type: ignore[attr-defined]
        if undecided is not None:
            fn.undecided = undecided  # type: ignore[attr-defined]
        if service_metrics is not None:
            fn.service_metrics = tuple(service_metrics)  # type: ignore[attr-defined]
        fn.verifier_name = name  # type: ignore[attr-defined]
        _REGISTRY[name] = fn
        return fn

    return register


def get_verifier(name_or_path: str) -> VerifierFn:
    """Return the verifier registered as ``name_or_path``, or import ``"package.module:function"``.

    Raises:
        UnknownVerifierError (a ``KeyError``): the name is not registered (the message lists the valid
            names and the closest match), or the import path does not resolve to a callable.
    """
    _ensure_builtins()
    if ":" in name_or_path:
        return _import_path(name_or_path)
    fn = _REGISTRY.get(name_or_path)
    if fn is not None:
        return fn
    names = registered_names()
    close = closest(name_or_path, names)
    hint = f" Did you mean {close!r}?" if close else ""
    raise UnknownVerifierError(
        f"unknown verifier {name_or_path!r}.{hint} Registered verifiers: {', '.join(names)}; "
        "or name any function as 'package.module:function'."
    )


def registered_names() -> list[str]:
    """Sorted names of all registered verifiers."""
    _ensure_builtins()
    return sorted(_REGISTRY)


IMPORT_TIMEOUT_S = import_paths.IMPORT_TIMEOUT_S
"""How long a user's verifier module may take to import (in a child process first, see :func:`probe_import`)."""


class VerifierImportError(UnknownVerifierError):
    """A user's verifier module failed to import: a syntax error, an exception, ``sys.exit``/``os._exit`` or a hang at
    import. The message is one line naming the module, the file and line where that can be known, and the error."""


def probe_import(module_name: str, timeout_s: float = IMPORT_TIMEOUT_S) -> None:
    """:func:`rlvr.import_paths.probe_import` for a verifier module: import it in a forked child with a time limit
    first, so a module that loops, exits or raises at import costs one line.

    Raises:
        VerifierImportError: the import raised, called ``sys.exit``/``os._exit``, was killed, or ran past
            ``timeout_s``.
    """
    try:
        import_paths.probe_import(module_name, "verifier", timeout_s)
    except import_paths.ModuleImportError as exc:
        raise VerifierImportError(str(exc)) from exc


def _import_path(path: str) -> VerifierFn:
    try:
        return import_paths.resolve_import_path(path, "verifier", import_hint=_renamed_hint(path))
    except import_paths.ModuleImportError as exc:
        raise VerifierImportError(str(exc)) from exc
    except import_paths.ImportPathError as exc:
        raise UnknownVerifierError(str(exc)) from exc


def _renamed_hint(path: str) -> str:
    # Recipes written before the rename name built-ins as "verifiers.module:fn"; a top-level `verifiers` is not
    # this project's any more (prime-rl's library has that name), so say where the module went.
    if path.split(":")[0].split(".")[0] != OLD_PACKAGE:
        return ""
    return f"; this project's verifiers were renamed to {__package__}: write {__package__ + path[len(OLD_PACKAGE):]!r}"


def _ensure_builtins() -> None:
    # Importing the package registers the built-in verifiers (math, format, countdown, ...).
    importlib.import_module(__package__)


def _qualname(fn: VerifierFn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
