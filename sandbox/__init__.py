"""Running untrusted, model-written programs (Python, C, C++, Java, JavaScript) against tests, isolated (Docker, else bubblewrap).

    import sandbox
    result = sandbox.run("print(sum(map(int, input().split())))", [{"input": "1 2\\n", "output": "3\\n"}])
    result.passed, result.codes            # (True, ["AC"])

Layout: `limits` (Limits), `jobs` (test formats, what enters the sandbox), `checkers` (output comparison,
on the host), `judge` (verdicts), `batch` (talking to the in-sandbox driver), `scheduler` (throughput),
`backends/` (docker, bwrap, and the unsandboxed `none`), `harness/` (code that runs inside the sandbox),
`languages` (how C, C++, Java and JavaScript are compiled and run), `setup.sh` (engine and image). This package imports nothing from `rlvr` or `verifiers`.
"""
from sandbox.api import run, run_many
from sandbox.backends import BACKENDS, get_backend
from sandbox.checkers import parse_checker
from sandbox.errors import SandboxError, SandboxUnavailable
from sandbox.jobs import TEST_TYPES, Job
from sandbox.languages import LANGUAGES, parse_language
from sandbox.limits import Limits
from sandbox.results import ExecResult, ExecStatus, JudgeResult, TestVerdict, Verdict

__all__ = [
    "BACKENDS", "LANGUAGES", "TEST_TYPES", "ExecResult", "ExecStatus", "Job", "JudgeResult", "Limits", "SandboxError",
    "SandboxUnavailable", "TestVerdict", "Verdict", "get_backend", "parse_checker", "parse_language", "run",
    "run_many",
]
