"""What a recipe names by import path, ``package.module:name`` (a verifier function, a tool function, an environment
class): the module imported in a forked child first, with a time limit, then here; errors are one line naming the
path, with the closest public name of the module where the name is mistyped.

Pure Python (no torch, nothing else of rlvr but :mod:`rlvr.did_you_mean`), so the verifiers can use it.

Example::

    resolve_import_path("rlvr.tools.envs.number_guessing:NumberGuessing", "environment", expected="class")
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from typing import Any, Literal

from rlvr.did_you_mean import closest

IMPORT_TIMEOUT_S = 60.0
"""How long a user's module may take to import (in a child process first, see :func:`probe_import`)."""


class ImportPathError(ValueError):
    """An import path that does not resolve: not ``package.module:name``, a module that is not there, a name the
    module lacks, or an object of the wrong kind. The message is one line that names the path."""


class ModuleImportError(ImportPathError):
    """A user's module failed to import: a syntax error, an exception, ``sys.exit``/``os._exit`` or a hang at import.
    The message names the module, the file and line where that can be known, and the error."""


def resolve_import_path(path: str, kind: str, expected: Literal["function", "class"] = "function", *,
                        import_hint: str = "") -> Any:
    """The object ``path`` (``package.module:name``, ``name`` may be dotted: ``module:Class.method``) names.

    Args:
        kind: what the recipe names (``verifier``, ``tool``, ``environment``): the messages start with it.
        expected: ``function`` (any callable) or ``class``.
        import_hint: appended to the message when the module cannot be imported.
    Raises:
        ModuleImportError: the module raised, exited or hung at import (:func:`probe_import`).
        ImportPathError: not of that form; the module is missing; it has no such name (the closest public name of
            the right kind is suggested); the object is not of the ``expected`` kind.
    """
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ImportPathError(f"{kind} path {path!r} must look like 'package.module:"
                              f"{'ClassName' if expected == 'class' else 'function'}'")
    probe_import(module_name, kind)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportPathError(f"{kind} path {path!r}: cannot import module {module_name!r} ({exc}){import_hint}") \
            from exc
    fits = inspect.isclass if expected == "class" else callable
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(module) if not n.startswith("_") and fits(getattr(module, n)))
            close = closest(attr, public)
            hint = f" Did you mean {close!r}?" if close else ""
            raise ImportPathError(f"{kind} path {path!r}: module {module_name!r} has no {attr!r}.{hint}")
        obj = getattr(obj, part)
    if not fits(obj):
        raise ImportPathError(f"{kind} path {path!r} names a {type(obj).__name__}, expected a {expected}")
    return obj


def probe_import(module_name: str, kind: str = "verifier", timeout_s: float = IMPORT_TIMEOUT_S) -> None:
    """Import ``module_name`` in a forked child with a time limit before the caller imports it: a module that loops,
    exits or raises at import costs one line, never a hung or silently exited ``rlvr``. Does nothing for a module
    already imported, or where ``fork`` is missing.

    Raises:
        ModuleImportError: the import raised (naming the file and line of the innermost frame in the module's own
            file, or of the syntax error), called ``sys.exit``/``os._exit``, was killed, or ran past ``timeout_s``.
    """
    import json
    import os
    import select
    import signal
    import time

    if module_name in sys.modules or not hasattr(os, "fork"):
        return
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked child
        os.close(read_end)
        report: dict[str, Any] = {"ok": True}
        try:
            importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not (exc.name and (module_name == exc.name or module_name.startswith(exc.name + "."))):
                report = {"ok": False, "error": _describe_import_error(module_name, kind, exc)}
            # else: the module itself is missing, which the caller's own import reports with its hints
        except BaseException as exc:  # noqa: BLE001 - SystemExit at import is a failure to report too
            report = {"ok": False, "error": _describe_import_error(module_name, kind, exc)}
        with os.fdopen(write_end, "w") as fh:
            fh.write(json.dumps(report))
        os._exit(0)
    os.close(write_end)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    with os.fdopen(read_end, "rb") as fh:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fh], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise ModuleImportError(f"{kind} module {module_name!r} did not finish importing in "
                                        f"{timeout_s:g} s (a loop or a wait at import?)")
            chunk = os.read(fh.fileno(), 65536)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode("utf-8", "replace")
    if text:
        report = json.loads(text)
        if not report["ok"]:
            raise ModuleImportError(report["error"])
        return
    how = f"exited with code {os.waitstatus_to_exitcode(status)}" if os.WIFEXITED(status) else \
        f"was killed by signal {os.WTERMSIG(status)}"
    raise ModuleImportError(f"{kind} module {module_name!r} {how} while importing (os._exit at import?)")


def _describe_import_error(module_name: str, kind: str, exc: BaseException) -> str:
    """One line: the module, where the error is (file:line) and what it is. Runs in the probing child."""
    import traceback

    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}:{exc.lineno}"
        return f"{kind} module {module_name!r} does not parse: {where}: {exc.msg}"
    frames = traceback.extract_tb(exc.__traceback__)
    try:  # (in the child: finding the spec may import parent packages)
        origin = getattr(importlib.util.find_spec(module_name), "origin", None)
    except (ImportError, ValueError):
        origin = None
    # The module's own last frame, not the innermost one: a library may wrap sys.exit (wandb does once imported).
    own = [f for f in frames if f.filename == origin] or frames
    where = f" at {own[-1].filename}:{own[-1].lineno}" if own else ""
    if isinstance(exc, SystemExit):
        return f"{kind} module {module_name!r} called sys.exit({exc.code!r}) while importing{where}"
    return f"{kind} module {module_name!r} raised while importing{where}: {type(exc).__name__}: {exc}"[:600]
