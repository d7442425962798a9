"""A Ctrl-C that lands in a destructor is swallowed by Python; the latch raises it again at the next check."""

from __future__ import annotations

import gc
import signal
import sys

import pytest

from rlvr.runtime import interrupts
from rlvr.runtime.interrupts import latch_sigint, raise_if_interrupted


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler and unraisable hook before the test and after it."""
    handler, hook = signal.getsignal(signal.SIGINT), sys.unraisablehook
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, handler)
    sys.unraisablehook = hook
    interrupts._pending = False


class InterruptedWhileCollected:
    """SIGINT arrives while the garbage collector runs this object's ``__del__``: Python prints "Exception ignored"
    and goes on."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


def test_an_interrupt_swallowed_by_a_destructor_is_raised_at_the_next_check(default_sigint):
    reported = []
    sys.unraisablehook = reported.append
    assert latch_sigint()
    raise_if_interrupted()  # nothing pending: no raise
    InterruptedWhileCollected()  # collected at once; its KeyboardInterrupt is swallowed
    gc.collect()
    assert reported == []  # the "Exception ignored" report of the interrupt is not printed
    with pytest.raises(KeyboardInterrupt):
        raise_if_interrupted()
    with pytest.raises(KeyboardInterrupt):  # as Python's own handler: SIGINT raises where the main thread is
        signal.raise_signal(signal.SIGINT)
    assert latch_sigint()  # a new command starts with nothing pending
    raise_if_interrupted()


def test_other_unraisable_errors_still_reach_the_hook(default_sigint):
    reported = []
    sys.unraisablehook = reported.append
    latch_sigint()

    class Broken:
        def __del__(self) -> None:
            raise RuntimeError("a destructor's own bug")

    Broken()
    gc.collect()
    assert [type(r.exc_value) for r in reported] == [RuntimeError]


def test_a_handler_the_program_set_is_left_alone(default_sigint):
    def own(signum, frame):
        pass

    signal.signal(signal.SIGINT, own)
    assert not latch_sigint()
    assert signal.getsignal(signal.SIGINT) is own
