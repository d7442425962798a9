"""What a backend's sandbox offers programs: which languages it can compile and run, which Python modules a
program can import there, and its Python version. Found by one cheap probe per backend, cached per process.

The backends differ: the Docker image carries every toolchain and the Python modules in
`RLVR_SANDBOX_PACKAGES` (sandbox/image.env, e.g. python3-numpy), while bubblewrap (and `none`) run this
machine's own /usr, whose python3 may lack numpy. A program that imports a module its sandbox lacks fails
with RE, so a recipe that needs one should be refused before training (`rlvr check`), not score 0.

    caps = probe_capabilities(get_backend("bwrap"), ["numpy"])
    caps.modules["numpy"], caps.languages["java"], caps.summary()
"""
from __future__ import annotations

import json
import os
import re
import threading
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlvr.sandbox.backends.base import Backend
from rlvr.sandbox.errors import SandboxError
from rlvr.sandbox.jobs import Job
from rlvr.sandbox.languages import LANGUAGES
from rlvr.sandbox.limits import Limits
from rlvr.sandbox.results import ExecStatus
from rlvr.sandbox.scheduler import execute

# Modules beyond the standard library that model-written solutions commonly import (competitive programming,
# LeetCode-style and data tasks): every probe reports them. RLVR_SANDBOX_PROBE_MODULES (comma-separated) replaces
# the list.
COMMON_PYTHON_MODULES = ("numpy", "scipy", "sympy", "pandas", "networkx", "sortedcontainers")
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_IMAGE_ENV = Path(__file__).resolve().parent / "image.env"
_SPAWN_PATH = "/usr/local/bin:/usr/bin:/bin"  # where the driver looks up toolchains (harness/processes.py)

# Runs in the sandbox as an ordinary Python program; reads {"modules": [...], "tools": [...]} on stdin. find_spec
# locates a top-level module without importing it (a dotted name imports its parents), so the probe stays cheap.
_PROBE = """\
import importlib.util, json, shutil, sys
asked = json.loads(sys.stdin.read())
def found(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
print(json.dumps({"python": "%d.%d.%d" % sys.version_info[:3],
                  "modules": {m: found(m) for m in asked["modules"]},
                  "tools": {t: shutil.which(t, path=asked["path"]) is not None for t in asked["tools"]}}))
"""


@dataclass(frozen=True)
class Capabilities:
    """What one backend's sandbox offers.

    backend: its name (docker, bwrap, none). python: the sandbox's Python version ("3.11.2"). languages: each
    language of `rlvr.sandbox.languages.LANGUAGES` -> None when the sandbox can compile and run it, else why
    not. modules: each probed Python module -> whether a program there can import it.
    """

    backend: str
    python: str
    languages: dict[str, str | None]
    modules: dict[str, bool]

    def missing_modules(self, names: Iterable[str]) -> list[str]:
        """The modules of `names` a program cannot import here (each must have been probed; KeyError if not)."""
        return [name for name in names if not self.modules[name]]

    def summary(self) -> str:
        """One line: the Python version, the languages it runs (and lacks) and the probed modules it has (and
        lacks), e.g. ``bwrap: Python 3.11.2; languages python, c, cpp (no java: ...); modules: none of numpy``."""
        runs = [name for name, why in self.languages.items() if why is None]
        lacks = [name for name, why in self.languages.items() if why is not None]
        have = [m for m, ok in self.modules.items() if ok]
        missing = [m for m, ok in self.modules.items() if not ok]
        text = f"{self.backend}: Python {self.python}; languages {', '.join(runs) or 'none'}"
        if lacks:
            text += f" (not {', '.join(lacks)})"
        if self.modules:
            text += f"; Python modules {', '.join(have) or 'none'}"
            if missing:
                text += f" (not {', '.join(missing)})"
        return text


def probe_modules() -> tuple[str, ...]:
    """The modules every probe reports: RLVR_SANDBOX_PROBE_MODULES (comma-separated) or COMMON_PYTHON_MODULES.
    Raises ValueError for a name that is not a module name."""
    raw = os.environ.get("RLVR_SANDBOX_PROBE_MODULES")
    names = COMMON_PYTHON_MODULES if raw is None else tuple(n.strip() for n in raw.split(",") if n.strip())
    return tuple(check_module_name(n, "RLVR_SANDBOX_PROBE_MODULES") for n in names)


def check_module_name(name: object, where: str = "module") -> str:
    """`name` when it is a Python module name (``numpy``, ``scipy.sparse``); ValueError naming `where` otherwise."""
    if not isinstance(name, str) or not _MODULE_NAME.match(name):
        raise ValueError(f"{where}: {name!r} is not a Python module name (like 'numpy' or 'scipy.sparse')")
    return name


_lock = threading.Lock()
_probed: weakref.WeakKeyDictionary[Backend, Capabilities] = weakref.WeakKeyDictionary()


def probe_capabilities(backend: Backend, modules: Sequence[str] = ()) -> Capabilities:
    """What `backend`'s sandbox offers, with `modules` (plus `probe_modules()`) probed. One sandboxed program
    the first time for a backend instance; later calls reuse that answer and probe only modules not asked yet.

    Raises ValueError for a bad module name; SandboxError when the probe cannot run or answers nonsense."""
    wanted = list(dict.fromkeys([*probe_modules(), *(check_module_name(m) for m in modules)]))
    with _lock:
        known = _probed.get(backend)
        new = [m for m in wanted if known is None or m not in known.modules]
        if known is not None and not new:
            return known
        found = _run_probe(backend, new)
        if known is not None:
            found = Capabilities(known.backend, known.python, known.languages, {**known.modules, **found.modules})
        _probed[backend] = found
        return found


def _run_probe(backend: Backend, modules: list[str]) -> Capabilities:
    tools = sorted({t for lang in LANGUAGES.values() for t in lang.tools if not t.startswith("./")})
    asked = json.dumps({"modules": modules, "tools": tools, "path": _SPAWN_PATH})
    job = Job(_PROBE, [{"input": asked, "output": ""}], "stdio", "exact", Limits(time_s=20.0))
    run = execute(backend, [job])[0][0]
    if run.status is not ExecStatus.OK:
        raise SandboxError(f"the {backend.name} sandbox's capability probe ended {run.status.value}: "
                           f"{(run.detail or run.stderr).strip()[-300:]}")
    try:
        answer = json.loads(run.stdout)
        python, found, on_path = str(answer["python"]), answer["modules"], answer["tools"]
        modules_found = {m: found[m] is True for m in modules}
    except (ValueError, KeyError, TypeError) as e:
        raise SandboxError(f"the {backend.name} sandbox's capability probe wrote {run.stdout[:200]!r}: {e}") from None
    languages: dict[str, str | None] = {}
    for name, language in LANGUAGES.items():
        why = backend.language_problem(language)
        missing = [t for t in language.tools if not t.startswith("./") and on_path.get(t) is not True]
        if why is None and missing:
            why = f"the {backend.name} sandbox has no {', '.join(missing)} for {name} programs"
        languages[name] = why
    return Capabilities(backend.name, python, languages, modules_found)


def image_python_modules() -> tuple[str, ...]:
    """The Python modules the Docker image installs as Debian packages (``python3-numpy`` -> numpy), from
    `RLVR_SANDBOX_PACKAGES` in sandbox/image.env."""
    for line in _IMAGE_ENV.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "RLVR_SANDBOX_PACKAGES":
            return tuple(p.strip()[len("python3-"):] for p in value.split(",") if p.strip().startswith("python3-"))
    return ()


def module_remedy(backend: str, module: str) -> str:
    """What to do when `backend`'s sandbox lacks Python `module` (a clause for an error message)."""
    module = module.split(".")[0]  # the package to install
    image = f"add its Debian package (python3-{module}) to RLVR_SANDBOX_PACKAGES in sandbox/image.env, bump " \
            "RLVR_SANDBOX_IMAGE there and run `make sandbox`"
    if backend == "docker":
        return image
    docker = "use the docker backend (`backend: docker`; its image has it)" if module in image_python_modules() \
        else f"use the docker backend (`backend: docker`) after you {image}"
    return f"{docker}, or install it for this machine's python3 (the {backend} sandbox runs this machine's /usr: " \
           f"apt-get install python3-{module})"
