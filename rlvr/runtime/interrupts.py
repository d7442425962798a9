"""Ctrl-C that is never lost.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be when SIGINT arrives. When that is a
``__del__`` method or a weakref callback run by the garbage collector, the interpreter prints "Exception ignored in
..." and carries on: the interrupt is gone, and a training run goes on for hundreds of steps. :func:`latch_sigint`
installs a handler that raises ``KeyboardInterrupt`` just as Python's own does and also remembers that it fired;
:func:`raise_if_interrupted`, called where a long loop passes often (each training step, each decoded token, each
chunk of a solve-rate filter), raises it again if it was swallowed. The "Exception ignored" report of a swallowed
interrupt is not printed: the interrupt is still on its way.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

_pending = False


def _on_sigint(signum: int, frame: Any) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


def latch_sigint() -> bool:
    """Make SIGINT raise ``KeyboardInterrupt`` and remember it (see the module). Only in the main thread and only over
    Python's default handler (an embedding program's own handler is left alone); returns whether it was installed.
    Clears an earlier interrupt, so a process that runs several commands starts each with none pending."""
    global _pending
    _pending = False
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGINT) not in (signal.default_int_handler, _on_sigint):
        return False
    signal.signal(signal.SIGINT, _on_sigint)
    if not getattr(sys.unraisablehook, "passes_over_interrupts", False):
        sys.unraisablehook = _with_previous(sys.unraisablehook)
    return True


def _with_previous(previous: Any) -> Any:
    """An unraisable hook that passes over a swallowed interrupt (raise_if_interrupted raises it where it can end the
    command) and hands everything else to ``previous``."""
    def hook(unraisable: Any) -> None:
        if not (_pending and unraisable.exc_type is KeyboardInterrupt):
            previous(unraisable)
    hook.passes_over_interrupts = True  # type: ignore[attr-defined]
    return hook


def raise_if_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` if SIGINT has arrived since :func:`latch_sigint`: the one that may have been
    swallowed by a destructor or weakref callback. A check of one global: cheap enough for a per-token loop."""
    if _pending:
        raise KeyboardInterrupt
