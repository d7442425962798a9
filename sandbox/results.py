"""Typed results: what happened to one test (`ExecResult`), its verdict (`TestVerdict`), a program's
judgement (`JudgeResult`), and the two enums behind them."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class Verdict(str, Enum):
    """Verdict of one test, as judges name them."""

    AC = "AC"  # accepted
    WA = "WA"  # wrong answer (also: failed assert, or ended with code 0 before its tests finished)
    TLE = "TLE"  # time limit exceeded
    MLE = "MLE"  # memory limit exceeded
    RE = "RE"  # runtime error (exception, non-zero exit, crash)
    CE = "CE"  # compile error (the program does not parse)
    OLE = "OLE"  # output limit exceeded
    IE = "IE"  # internal error: the judge failed (the sandbox broke, the checker raised), not the program


class ExecStatus(str, Enum):
    """How one test run ended, before any comparison with expected output (reported by the sandbox)."""

    OK = "ok"  # ran to the end: exit code 0 (stdio), the call returned (call), the statement passed (assert)
    FAILED = "failed"  # an assert of the test code failed
    ERROR = "error"  # the program raised, exited non-zero or was killed by a signal
    EARLY_EXIT = "early_exit"  # the program ended with code 0 before its tests finished
    TIMEOUT = "timeout"
    MEMORY = "memory"
    OUTPUT_LIMIT = "output_limit"
    COMPILE_ERROR = "compile_error"
    SANDBOX_ERROR = "sandbox_error"  # the sandbox itself failed while this program ran


@dataclass(frozen=True)
class ExecResult:
    """One test run as the sandbox saw it.

    elapsed_s: wall-clock seconds of the run. stdout: what the program printed, up to the output cap (the
    output compared for stdio tests). stderr: the last 4 KiB of its stderr. value: for call tests, the
    returned value in `rlvr.sandbox.harness.codec` form. detail: one line on why it ended this way.
    """

    status: ExecStatus
    elapsed_s: float = 0.0
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    value: Any = None
    detail: str = ""


@dataclass(frozen=True)
class TestVerdict:
    """The verdict of test number `index` with a one-line reason and the run behind it."""

    __test__ = False  # not a pytest test class

    index: int
    verdict: Verdict
    reason: str
    result: ExecResult


@dataclass(frozen=True)
class JudgeResult:
    """A program judged against all of its tests.

    passed: every test AC (and there was at least one). fraction: share of AC tests, in [0, 1].
    backend: the sandbox that ran it (docker, bwrap, none). elapsed_s: seconds its tests ran in the sandbox
    (the sum of the tests' wall-clock times).
    error: set when the machinery failed while judging (the sandbox broke, or a checker raised): those tests
    read IE, and the program has no verdict of its own to score (`rlvr.verifiers.code` reports it as a failure
    of the machinery, never a 0).
    """

    verdicts: list[TestVerdict]
    backend: str
    elapsed_s: float = 0.0
    error: str | None = None

    @property
    def passed(self) -> bool:
        return bool(self.verdicts) and all(v.verdict is Verdict.AC for v in self.verdicts)

    @property
    def fraction(self) -> float:
        if not self.verdicts:
            return 0.0
        return sum(v.verdict is Verdict.AC for v in self.verdicts) / len(self.verdicts)

    @property
    def codes(self) -> list[str]:
        """The verdicts as strings, in test order, e.g. ["AC", "WA"]."""
        return [v.verdict.value for v in self.verdicts]

    def first_failure(self) -> TestVerdict | None:
        """The first test that was not accepted, or None."""
        return next((v for v in self.verdicts if v.verdict is not Verdict.AC), None)
