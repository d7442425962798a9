"""Running untrusted, model-written programs (Python, C, C++, Java, JavaScript) against tests, isolated (Docker, else bubblewrap).

    from rlvr import sandbox
    result = sandbox.run("print(sum(map(int, input().split())))", [{"input": "1 2\\n", "output": "3\\n"}])
    result.passed, result.codes            # (True, ["AC"])

Layout: `limits` (Limits), `jobs` (test formats, what enters the sandbox), `checkers` (output comparison,
on the host), `judge` (verdicts), `batch` (talking to the in-sandbox driver), `scheduler` (throughput),
`backends/` (docker, bwrap, remote servers, and the unsandboxed `none`), `harness/` (code that runs inside the
sandbox), `server` (`rlvr sandbox serve`: this machine's sandbox behind HTTP), `wire` and `fusion` (what crosses the
network), `languages` (how C, C++, Java and JavaScript are compiled and run), `capabilities` (what a backend's sandbox
offers: languages, Python modules), `setup.sh` (engine and image).
The folder `sandbox/` installs as `rlvr.sandbox` (pyproject's package-dir). It imports nothing from the rest of
`rlvr` (only the import-light `rlvr/__init__.py`) nor from `rlvr.verifiers`: it runs programs and knows no RL.
"""
from rlvr.sandbox.api import run, run_many
from rlvr.sandbox.backends import BACKENDS, get_backend, remote_backend
from rlvr.sandbox.capabilities import Capabilities, probe_capabilities
from rlvr.sandbox.checkers import parse_checker
from rlvr.sandbox.errors import SandboxError, SandboxUnavailable
from rlvr.sandbox.jobs import TEST_TYPES, Job
from rlvr.sandbox.languages import LANGUAGES, parse_language
from rlvr.sandbox.limits import Limits
from rlvr.sandbox.results import ExecResult, ExecStatus, JudgeResult, TestVerdict, Verdict

__all__ = [
    "BACKENDS", "LANGUAGES", "TEST_TYPES", "Capabilities", "ExecResult", "ExecStatus", "Job", "JudgeResult", "Limits",
    "SandboxError", "SandboxUnavailable", "TestVerdict", "Verdict", "get_backend", "parse_checker", "parse_language",
    "probe_capabilities", "remote_backend", "run", "run_many",
]
