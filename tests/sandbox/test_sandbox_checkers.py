"""Output checkers and the plain-data codec: pure host-side logic, no sandbox needed."""
import math
import time

import pytest

from rlvr.sandbox.checkers import Checker, json_form, parse_checker
from rlvr.sandbox.harness.codec import MAX_DEPTH, EncodeError, decode, encode, validated


@pytest.mark.parametrize("got, expected, ok", [
    ("1 2 3   ", "1 2 3\n", True),  # trailing spaces, no final newline
    ("7\n", "7\r\n", True),  # CRLF expected
    ("1\n2\n3\n\n\n", "1\n2\n3\n", True),  # trailing empty lines
    ("1\n2\n", "1\n2\n3\n", False),  # a missing line (zip() would pass it)
    ("1\n2\n3\ndebug\n", "1\n2\n3\n", False),  # an extra line
    ("1\n2\n3\ndebug", "1\n2\n3", False),  # an extra line, no final newlines anywhere
    (" 1\n", "1\n", True),  # leading whitespace, as APPS, TACO and LiveCodeBench strip it
    ("\t1 2 \r\n  3\n", "1 2\n3\n", True),  # both ends of every line
    ("\n\n1\n", "1\n", True),  # empty lines before the output
    ("1  2\n", "1 2\n", False),  # spaces inside a line count
    ("1\n\n2\n", "1\n2\n", False),  # an empty line inside the output counts
    ("", "0\n", False),
    ("YES\n", "yes\n", False),
])
def test_lines_checker(got, expected, ok):
    assert parse_checker("lines").same_output(got, expected)[0] is ok


def test_lines_ci_ignores_case_only():
    c = parse_checker("lines_ci")
    assert c.same_output("YES\nNo \n", "yes\nno\n")[0] is True
    assert c.same_output("YES\n", "yes\nno\n")[0] is False


def test_exact_checker_is_byte_for_byte():
    c = parse_checker("exact")
    assert c.same_output("3\n", "3\n")[0] is True
    assert c.same_output("3", "3\n")[0] is False
    assert c.same_output("3 \n", "3\n")[0] is False
    assert c.same_output(" 3\n", "3\n")[0] is False  # what `lines` accepts, `exact` does not


@pytest.mark.parametrize("got, expected, ok", [
    ("0.333333333", "0.333333333333", True),  # within 1e-6 absolute
    ("3.3333333333e-01", "0.333333333333", True),  # scientific notation
    ("0.33333", "0.333333333333", False),  # 3.3e-6 off: outside both 1e-6 absolute and relative
    ("1000000.5", "1000000.0", True),  # 5e-7 relative
    ("1000002", "1000000", False),  # 2e-6 relative
    ("1.0 2.0", "1.0", False),  # token count differs
    ("YES 0.5", "YES 0.5000001", True),  # non-numeric tokens must be equal
    ("NO 0.5", "YES 0.5", False),
    ("nan", "0.5", False),
    ("inf", "inf", True),
    ("1_000.5", "1000.5", False),  # Python's float() reads these; a contest checker does not
    ("\uff11\uff12", "12", False),  # full-width digits
    ("infinity", "inf", False),
    ("+.5", "0.5", True),  # sign and a bare fraction are ASCII decimal notation
    ("5.", "5", True),
    ("1" * 400, "2.5", False),  # a double overflows to inf: a wrong number, not an error
])
def test_float_checker(got, expected, ok):
    assert parse_checker("float:1e-6").same_output(got, expected)[0] is ok


def test_float_checker_aliases():
    assert parse_checker("float_1e-6") == Checker("float", 1e-6)
    assert parse_checker("float") == Checker("float", 1e-6)
    assert parse_checker("float:0.01").tol == 0.01


def test_json_checker_compares_values():
    c = parse_checker("json")
    assert c.same_output('{"a": [1, 2]}', '{ "a" : [1,2] }')[0] is True
    assert c.same_output('{"a": [2, 1]}', '{"a": [1, 2]}')[0] is False
    assert c.same_output("not json", "1")[0] is False


@pytest.mark.parametrize("got, expected, ok", [
    ((1, 4, 9), [1, 4, 9], True),  # tuples are lists in JSON
    ({3, 1, 2}, [1, 2, 3], True),  # sets become sorted lists
    ({1: "a"}, {"1": "a"}, True),  # JSON object keys are strings
    (True, 1, False),  # a bool is not a number
    (1, True, False),
    (2.0, 2, True),
    ([1, [2, 3]], [1, [2, 4]], False),
    (None, [], False),
    ("1", 1, False),
])
def test_value_comparison_for_call_tests(got, expected, ok):
    # as on the host: the value arrives encoded by the sandbox, then is put in JSON form
    assert parse_checker("json").same_value(json_form(encode(got)), expected)[0] is ok


@pytest.mark.parametrize("checker, got, expected, ok", [
    ("float:1e-6", 10 ** 400, 2.5, False),  # float(10 ** 400) raises OverflowError: compared exactly instead
    ("json", 10 ** 400, 2.5, False),
    ("float:1e-6", 2.5, 10 ** 400, False),
    ("float:1e-6", [1, 10 ** 400], [1, 1e300], False),
    ("json", 2 ** 53 + 1, float(2 ** 53), False),  # a double would round the int and call them equal
    ("float:1e-6", 2 ** 53 + 1, float(2 ** 53), True),  # within the relative tolerance
    ("float:1e-6", 3, 3.0000001, True),
    ("float:1e-6", 10 ** 400, float("inf"), False),
    ("float:1e-6", 10 ** 400, float("nan"), False),
])
def test_an_int_and_a_float_compare_exactly(checker, got, expected, ok):
    assert parse_checker(checker).same_value(got, expected)[0] is ok


def test_json_output_of_a_huge_integer_is_a_wrong_answer():
    assert parse_checker("json").same_output(str(10 ** 400), "2.5")[0] is False
    assert parse_checker("json").same_output("9" * 5000, "2.5") == (False, "output is not JSON")


def test_a_checker_that_raises_is_that_tests_internal_error(monkeypatch):
    """A fault of the checker is the verdict IE of that test (and the program's error), not an exception."""
    from rlvr.sandbox import checkers
    from rlvr.sandbox.jobs import Job
    from rlvr.sandbox.judge import judge
    from rlvr.sandbox.results import ExecResult, ExecStatus

    job = Job("print(1)", [{"input": "", "output": "1\n"}, {"input": "", "output": "2\n"}], "stdio", "lines")
    calls = iter([RuntimeError("boom"), None])

    def flaky(self, got, expected):
        err = next(calls)
        if err:
            raise err
        return got == expected, ""

    monkeypatch.setattr(checkers.Checker, "same_output", flaky)
    result = judge(job, [ExecResult(ExecStatus.OK, stdout="1\n"), ExecResult(ExecStatus.OK, stdout="2\n")], "docker", 0.0)
    assert result.codes == ["IE", "AC"]
    assert result.error == "checker failed: RuntimeError: boom"


def test_value_comparison_with_float_tolerance():
    assert parse_checker("float:1e-6").same_value([0.3333333], [1 / 3])[0] is True
    assert parse_checker("json").same_value([0.3333333], [1 / 3])[0] is False


def test_json_form_hashes_nothing_the_program_chose():
    colliding = [k * (2**61 - 1) for k in range(50_000)]  # all hash to 0: a set of them takes minutes
    encoded = {"~": "set", "v": colliding}
    assert json_form(encoded) == sorted(colliding)
    assert json_form({"~": "dict", "v": [[{"~": "tuple", "v": [1, 2]}, 3]]}) == {"[1, 2]": 3}


@pytest.mark.parametrize("name", ["line", "float:abc", "float:-1", "", 3])
def test_bad_checker_names_are_refused_with_the_valid_ones(name):
    with pytest.raises(ValueError, match="checker"):
        parse_checker(name)


def test_codec_round_trip_keeps_types():
    value = (1, [2.5, "x", None, True], {3: b"\x00\xff", (1, 2): frozenset({1})}, {4, 5}, complex(1, -2), 10**40)
    assert decode(encode(value)) == value
    assert type(decode(encode((1,)))) is tuple
    assert math.isnan(decode(encode(float("nan"))))


def test_codec_reduces_subclasses_to_their_real_value():
    class AlwaysEqual(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    class Liar(list):
        def __iter__(self):
            return iter([1, 2, 3])

    assert encode(AlwaysEqual(0)) == 0
    assert type(decode(encode(AlwaysEqual(0)))) is int
    assert decode(encode(Liar([9]))) == [9]


def test_codec_refuses_non_data():
    with pytest.raises(EncodeError, match="function"):
        encode(lambda: 1)
    cyclic = []
    cyclic.append(cyclic)
    with pytest.raises(EncodeError, match="deeper"):
        encode(cyclic)


def test_validated_accepts_what_encode_makes_and_returns_it_unchanged():
    value = (1, [2.5, "x", None, True], {3: b"\x00\xff", (1, (2, b"")): frozenset({1, (3,)})}, {4, 5}, complex(1, -2))
    encoded = encode(value)
    assert validated(encoded) is encoded
    nested = 0
    for _ in range(MAX_DEPTH):
        nested = [nested]
    assert validated(encode(nested)) == encode(nested)


def test_validated_takes_linear_time_on_colliding_keys():
    colliding = [[k * (2**61 - 1), 0] for k in range(30_000)]  # all hash to 0: decode() would take seconds
    started = time.monotonic()
    assert validated({"~": "dict", "v": colliding})["v"][-1] == [29_999 * (2**61 - 1), 0]
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("data, message", [
    ({"~": "dict", "v": [[1, 2, 3]]}, "pairs"),
    ({"~": "dict", "v": [[[1], 2]]}, "a list cannot be a dict key"),
    ({"~": "set", "v": [{"~": "set", "v": []}]}, "a set cannot be a dict key or a set element"),
    ({"~": "tuple", "v": [1], "x": 2}, "not an encoded value"),
    ({"~": "object", "v": []}, "not an encoded value"),
    ({"v": []}, "not an encoded value"),
    ({"~": "bytes", "v": "zz"}, "hex"),
    ({"~": "bytes", "v": [1]}, "hex string"),
    ({"~": "complex", "v": [1.0]}, r"\[real, imag\]"),
    ({"~": "complex", "v": [True, 0.0]}, r"\[real, imag\]"),
    ({"~": "tuple", "v": 3}, "must be a list"),
    ([[{"~": "frozenset", "v": [[1]]}]], "a list cannot be"),
])
def test_validated_refuses_what_encode_never_makes(data, message):
    with pytest.raises(ValueError, match=message):
        validated(data)


def test_validated_refuses_nesting_deeper_than_encode_allows():
    nested = 0
    for _ in range(MAX_DEPTH + 1):
        nested = [nested]
    with pytest.raises(ValueError, match="deeper"):
        validated(nested)
