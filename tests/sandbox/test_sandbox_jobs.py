"""Jobs and limits: validation errors that name the bad thing, and what may enter the sandbox."""
import json

import pytest

from rlvr.sandbox import Job, Limits
from rlvr.sandbox.batch import request_bytes
from rlvr.sandbox.jobs import split_assert_code


def test_limits_from_mapping_and_errors():
    assert Limits.from_mapping({"time_s": 3, "memory_mb": 128, "output_kb": 64}) == Limits(time_s=3, memory_mb=128, output_kb=64)
    assert Limits.from_mapping(None) == Limits()
    with pytest.raises(ValueError, match=r"unknown limit 'time'.*time_s"):
        Limits.from_mapping({"time": 2})
    with pytest.raises(ValueError, match="time_s must be a positive number"):
        Limits(time_s=0)
    with pytest.raises(ValueError, match="memory_mb must be at least 32"):
        Limits(memory_mb=8)


@pytest.mark.parametrize("tests, test_type, match", [
    ([], "stdio", "non-empty list"),
    ([{"input": "1"}], "stdio", r"stdio test 0 must be"),
    ({"fn_name": "f", "cases": [{"args": 1, "expected": 2}]}, "call", "call case 0"),
    ({"fn_name": "not a name", "cases": []}, "call", "fn_name a Python name"),
    ("x = 1\n", "assert", "hold no test"),
    ("assert (", "assert", "do not parse"),
    ([{"input": "", "output": ""}], "pytest", "unknown test_type 'pytest'"),
])
def test_malformed_tests_are_refused_by_name(tests, test_type, match):
    with pytest.raises(ValueError, match=match):
        Job("print(1)", tests, test_type)


def test_test_type_aliases_and_json_string_tests():
    job = Job("def f(x): return x", json.dumps({"fn_name": "f", "cases": [{"args": [1], "expected": 1}]}), "functional")
    assert job.test_type == "call" and job.n_tests == 1


def test_assert_code_is_split_into_setup_and_tests():
    code = "import math\ndef check(c):\n    assert c(1) == 2\nassert f(1) == 2\nfor x in range(2):\n    assert f(x)\ncheck(f)\n"
    kinds = [is_test for _, is_test in split_assert_code(code)]
    assert kinds == [False, False, True, True, True]
    assert Job("def f(x): return x + 1", code, "assert").n_tests == 3


def test_expected_outputs_never_enter_the_sandbox():
    stdio = Job("print(input())", [{"input": "in-1\n", "output": "EXPECTED-OUT-1\n"}])
    call = Job("def f(x): return x", {"fn_name": "f", "cases": [{"args": ["arg-1"], "expected": "EXPECTED-VALUE-2"}]}, "call")
    payload = request_bytes([stdio, call], pid_namespace=True, scratch=["/tmp"], nproc=None).decode()
    assert "in-1" in payload and "arg-1" in payload
    assert "EXPECTED-OUT-1" not in payload and "EXPECTED-VALUE-2" not in payload
