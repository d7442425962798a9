"""Code that runs inside the sandbox, shipped there as source text (the image holds only Debian + python3).

- `driver.py`: the trusted supervisor (one per batch): spawns programs, enforces limits, reports results,
  with `processes.py` (spawned programs, rlimits, clean-up) and `rpc.py` (`call`/`assert` sessions);
- `runner.py`: loaded into the program's own process for `call` and `assert` tests;
- `codec.py`: the plain-data codec all of them (and the host) use.
A shipped source is these files concatenated (one namespace), run with `python3 -I -c SOURCE`.
"""
from functools import cache
from pathlib import Path

_HERE = Path(__file__).parent


@cache
def driver_source() -> str:
    """Source of the in-sandbox driver (codec + processes + rpc + driver), for `python3 -I -c`."""
    return _bundle("codec.py", "processes.py", "rpc.py", "driver.py")


@cache
def runner_source() -> str:
    """Source of the in-program runner (codec + runner), for `python3 -I -c`."""
    return _bundle("codec.py", "runner.py")


def _bundle(*names: str) -> str:
    return "\n\n".join((_HERE / name).read_text() for name in names)
