"""Code that runs inside the sandbox, shipped there as source text (the image holds only Debian + python3).

- `driver.py`: the trusted supervisor (one per batch): spawns programs, enforces limits, reports results;
- `runner.py`: loaded into the program's own process for `call` and `assert` tests;
- `codec.py`: the plain-data codec both of them (and the host) use.
Each shipped source is codec.py followed by the file, run with `python3 -I -c SOURCE`.
"""
from functools import cache
from pathlib import Path

_HERE = Path(__file__).parent


@cache
def driver_source() -> str:
    """Source of the in-sandbox driver (codec + driver), for `python3 -I -c`."""
    return _bundle("driver.py")


@cache
def runner_source() -> str:
    """Source of the in-program runner (codec + runner), for `python3 -I -c`."""
    return _bundle("runner.py")


def _bundle(name: str) -> str:
    return (_HERE / "codec.py").read_text() + "\n\n" + (_HERE / name).read_text()
