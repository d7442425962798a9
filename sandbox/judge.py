"""From what happened (`ExecResult`) to verdicts: the comparison with expected outputs, on the host."""
from __future__ import annotations

from rlvr.sandbox.checkers import json_form
from rlvr.sandbox.jobs import Job
from rlvr.sandbox.results import ExecResult, ExecStatus, JudgeResult, TestVerdict, Verdict

_BY_STATUS = {
    ExecStatus.FAILED: Verdict.WA,
    ExecStatus.EARLY_EXIT: Verdict.WA,
    ExecStatus.ERROR: Verdict.RE,
    ExecStatus.TIMEOUT: Verdict.TLE,
    ExecStatus.MEMORY: Verdict.MLE,
    ExecStatus.OUTPUT_LIMIT: Verdict.OLE,
    ExecStatus.COMPILE_ERROR: Verdict.CE,
    ExecStatus.SANDBOX_ERROR: Verdict.IE,
}


def judge_test(job: Job, index: int, result: ExecResult) -> TestVerdict:
    """The verdict of test `index` of `job` given how its run ended.

    Only a run that ended OK can be AC: stdio output must pass the job's checker, a call's value must equal
    the expected value; an assert statement that ran to its end is AC. A checker that raises (a fault of the
    judge, not of the program) makes this test IE, never an exception out of the batch."""
    try:
        return _judge_test(job, index, result)
    except Exception as e:  # noqa: BLE001 - one test's checker fault must not take the other programs' verdicts
        return TestVerdict(index, Verdict.IE, f"checker failed: {type(e).__name__}: {str(e)[:200]}", result)


def _judge_test(job: Job, index: int, result: ExecResult) -> TestVerdict:
    if result.status is not ExecStatus.OK:
        reason = result.detail or result.status.value
        return TestVerdict(index, _BY_STATUS[result.status], reason, result)
    checker = job.parsed_checker
    if job.test_type == "stdio":
        ok, reason = checker.same_output(result.stdout, job.tests[index]["output"])
    elif job.test_type == "call":
        try:
            value = json_form(result.value)
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            return TestVerdict(index, Verdict.RE, f"unreadable return value: {e}", result)
        ok, reason = checker.same_value(value, job.tests["cases"][index]["expected"])
    else:
        ok, reason = True, ""
    return TestVerdict(index, Verdict.AC if ok else Verdict.WA, reason, result)


def judge(job: Job, results: list[ExecResult], backend: str, elapsed_s: float, error: str | None = None) -> JudgeResult:
    """Judge every test of `job`; raises ValueError when the number of results differs from the tests."""
    if len(results) != job.n_tests:
        raise ValueError(f"{len(results)} results for a job with {job.n_tests} tests")
    verdicts = [judge_test(job, i, r) for i, r in enumerate(results)]
    if error is None:
        error = next((v.reason for v in verdicts if v.verdict is Verdict.IE), None)
    return JudgeResult(verdicts=verdicts, backend=backend, elapsed_s=elapsed_s, error=error)
