"""Run the rlvr CLI with one fault at an exact point of its work, for faults a kill from outside cannot time:

    python benchmarks/faults/inject.py --kill-writing 'summary\\.json' -- train RECIPE -o RUN
    python benchmarks/faults/inject.py --kill-calling rlvr.runs.checkpoint:write_manifest --nth 2 -- train ...

``--kill-writing REGEX``: the process sends itself SIGKILL halfway through its first write to a file whose name
matches REGEX (opened for writing through Python's ``open`` or written by ``torch.save``): half the bytes reach the
disk (flushed and fsynced), then the process is gone, as with a ``kill -9`` from outside at that instant (no handler,
``finally`` or ``atexit`` runs). ``--kill-calling MODULE:FUNCTION``: SIGKILL when that function is called.
``--nth N``: at the N-th matching write or call instead of the first. Everything else is ``rlvr.cli.main``.
"""

from __future__ import annotations

import argparse
import builtins
import importlib
import io
import os
import re
import signal
import sys
from typing import Any

_real_open = builtins.open
_seen = 0


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _half(data: bytes | str) -> bytes | str:
    return data[: max(1, len(data) // 2)] if len(data) > 1 else data


class _KilledMidWrite:
    """A file whose first write is cut in half by SIGKILL."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh

    def write(self, data: Any) -> int:
        self._fh.write(_half(data))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        _die()
        return 0  # not reached

    def __enter__(self) -> _KilledMidWrite:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def _nth_match(pattern: re.Pattern[str], name: str, nth: int) -> bool:
    global _seen
    if not pattern.search(os.path.basename(name)):
        return False
    _seen += 1
    return _seen == nth


def kill_writing(pattern: re.Pattern[str], nth: int) -> None:
    """Install the ``--kill-writing`` fault (see the module docstring)."""

    def faulty_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        fh = _real_open(file, mode, *args, **kwargs)
        if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+") and \
                _nth_match(pattern, os.fsdecode(file), nth):
            return _KilledMidWrite(fh)
        return fh

    builtins.open = faulty_open
    io.open = faulty_open
    try:
        import torch
    except ImportError:
        return
    real_save = torch.save

    def faulty_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)) and _nth_match(pattern, os.fsdecode(f), nth):
            buf = io.BytesIO()
            real_save(obj, buf, *args, **kwargs)
            with _real_open(f, "wb") as fh:
                fh.write(_half(buf.getvalue()))
                fh.flush()
                os.fsync(fh.fileno())
            _die()
        return real_save(obj, f, *args, **kwargs)

    torch.save = faulty_save


def kill_calling(target: str, nth: int) -> None:
    """Install the ``--kill-calling MODULE:FUNCTION`` fault (see the module docstring)."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    real = getattr(module, attr)
    calls = 0

    def faulty(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == nth:
            _die()
        return real(*args, **kwargs)

    setattr(module, attr, faulty)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--kill-writing", metavar="REGEX", help="SIGKILL halfway through writing a matching file")
    where.add_argument("--kill-calling", metavar="MODULE:FUNCTION", help="SIGKILL when FUNCTION is called")
    parser.add_argument("--nth", type=int, default=1, help="the N-th matching write or call (default 1)")
    parser.add_argument("cli", nargs=argparse.REMAINDER, help="-- then the rlvr command line")
    args = parser.parse_args(argv)
    cli = args.cli[1:] if args.cli[:1] == ["--"] else args.cli
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # the CLI imports as `python -m` would
    if args.kill_writing:
        kill_writing(re.compile(args.kill_writing), args.nth)
    else:
        kill_calling(args.kill_calling, args.nth)
    from rlvr.cli import main as rlvr_main

    return rlvr_main(cli)


if __name__ == "__main__":
    sys.exit(main())
