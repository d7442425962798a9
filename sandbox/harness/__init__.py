"""Code that runs inside the sandbox, shipped there as source text (the image holds only Debian + python3).

- `driver.py`: the trusted supervisor (one per sandbox, serving batch after batch): spawns programs,
  enforces limits, reports results, with `processes.py` (spawned programs, rlimits, clean-up) and `rpc.py`
  (`call`/`assert` sessions);
- `forkserver.py`: a warm Python, started by the driver, that forks a fresh child per Python program run;
- `runner.py`: loaded into the program's own process for `call` and `assert` tests;
- `codec.py`: the plain-data codec all of them (and the host) use.
A shipped source is these files concatenated (one namespace), run with `python3 -I -c SOURCE`.
"""
from functools import cache
from pathlib import Path

_HERE = Path(__file__).parent


@cache
def driver_source() -> str:
    """Source of the in-sandbox driver (codec + processes + fork server client + rpc + driver), for
    `python3 -I -c`."""
    return _bundle("codec.py", "processes.py", "forkserver_client.py", "rpc.py", "driver.py")


@cache
def forkserver_source() -> str:
    """Source of the in-sandbox fork server (processes + forkserver), for `python3 -I -B -c`."""
    return _bundle("processes.py", "forkserver.py")


@cache
def runner_source() -> str:
    """Source of the in-program runner (codec + runner), for `python3 -I -c`."""
    return _bundle("codec.py", "runner.py")


def _bundle(*names: str) -> str:
    return "\n\n".join((_HERE / name).read_text() for name in names)
