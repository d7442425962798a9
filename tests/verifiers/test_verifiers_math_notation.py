"""Chains that must agree, numbers too large to evaluate, angle units, interval and set notation, repetends, real odd
roots, boxed prose and numbers in words: the labelled cases of ``tests/data/math_cases_notation.jsonl`` and the
helpers behind them."""

from __future__ import annotations

import json
import time
from fractions import Fraction
from pathlib import Path

import pytest
import sympy

from rlvr.verifiers.math_answer import judge_math, math_reward
from rlvr.verifiers.math_huge import canonical, huge_equal, reduce_huge
from rlvr.verifiers.math_parse import parse_answer
from rlvr.verifiers.math_words import find_number_phrases, value_from_words

DATA = Path(__file__).resolve().parents[1] / "data"
CASES = [
    json.loads(line)
    for line in (DATA / "math_cases_notation.jsonl").read_text(encoding="utf-8").splitlines()
    if line.strip()
]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_labelled_case(case: dict) -> None:
    verdict = judge_math(case["gold"], case["pred"])
    assert (verdict.equal is True) is case["equal"], f"{case['id']} [{case['category']}] {case['note']}: {verdict}"


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_the_training_reward_agrees_on_boxed_cases(case: dict) -> None:
    if "\\boxed" not in case["pred"]:
        pytest.skip("the training reward reads final-answer markers only")
    score = math_reward(case["pred"], {"answer": case["gold"]})["score"]
    assert score == float(case["equal"]), case["id"]


def test_every_class_is_labelled_both_ways() -> None:
    for category in {c["category"] for c in CASES}:
        labels = {c["equal"] for c in CASES if c["category"] == category}
        assert labels == {True, False}, category


# ----------------------------------------------------------------------------------------------------
# Numbers too large to evaluate


def _tower(text: str) -> sympy.Basic:
    answer = parse_answer(text)
    return answer.value


def test_huge_equal_decides_towers_exactly_and_quickly() -> None:
    tower = _tower("9^{9^{9^9}}")
    start = time.perf_counter()
    assert huge_equal(tower, _tower("3^{2 \\cdot 9^{9^9}}")) is True
    assert huge_equal(tower, _tower("27^{\\frac{2}{3} \\cdot 9^{9^9}}")) is True
    assert huge_equal(tower, _tower("3^{9^{9^9}}")) is False  # 3^{2A} - 3^A: one term outweighs the other
    assert huge_equal(tower, _tower("3^{2 \\cdot 9^{9^9}} + 1")) is False  # the difference is one term, -1
    assert huge_equal(tower, sympy.Integer(5)) is False
    power = _tower("2^{10^{10}}")
    assert huge_equal(power, _tower("2 \\cdot 2^{10^{10}}")) is False  # the ratio is exactly 2, not 1
    assert huge_equal(power, _tower("\\sqrt{2} \\cdot 2^{10^{10} - 1/2}")) is True
    assert time.perf_counter() - start < 5


def test_huge_equal_is_undecided_where_the_form_says_nothing() -> None:
    big = _tower("2^{10^{10}}")
    x = sympy.Symbol("x")
    # x^N - x^N cancels whatever x is, but x^N - 1 may be zero: a symbol's sign is unknown
    assert huge_equal(sympy.Pow(x, big, evaluate=False), 1) is None
    # a negative base to a power whose parity is not worked out
    assert canonical(sympy.Pow(-3, big, evaluate=False)) is None


def test_reduce_huge_evaluates_what_is_left() -> None:
    assert reduce_huge(_tower("2^{2^{64}} - 2^{2^{64}}")) == 0
    assert reduce_huge(_tower("\\frac{10^{10^{10}}}{10^{10^{10}-1}}")).doit() == 10
    assert reduce_huge(_tower("9^{9^{9^9}}")) is None  # still too large
    assert parse_answer("x^{10^{10}} - x^{10^{10}} + 1").value == 1
    assert parse_answer("9^{9^{9^9}}").too_large


def test_a_huge_gold_against_an_undecidable_answer_is_not_judged() -> None:
    verdict = judge_math("9^{9^{9^9}}", "\\boxed{\\sin(9^{9^{9^9}})}")
    assert verdict.equal is None and verdict.reason == "gold too large to evaluate"


# ----------------------------------------------------------------------------------------------------
# Chains


@pytest.mark.parametrize("pred,equal", [
    ("\\boxed{x = 5 = 6}", False), ("\\boxed{x = 6 = 6}", True), ("\\boxed{x = 3 \\cdot 2 = 6}", True),
    ("\\boxed{x = \\frac{12}{2} = 6.0}", True), ("\\boxed{x = 6 = 6.5}", False), ("\\boxed{6 = x}", False),
])
def test_an_assignment_chain_counts_only_when_its_values_agree(pred: str, equal: bool) -> None:
    assert judge_math("6", pred).equal is equal


def test_a_contradicting_chain_is_no_answer_in_an_equation_either() -> None:
    assert judge_math("y = 2x + 1", "\\boxed{y = 2x + 1}").equal is True
    assert judge_math("y = 2x + 1", "\\boxed{y = 3x = 2x + 1}").equal is False
    assert judge_math("y = 2x + 1", "\\boxed{y = x + x + 1 = 2x + 1}").equal is True


# ----------------------------------------------------------------------------------------------------
# Angle units


@pytest.mark.parametrize("pred", ["60 \\text{ rad}", "60 rad", "60\\,\\mathrm{rad}", "60 radians", "60 \\text{radians}"])
def test_radians_never_equal_degrees_as_bare_numbers(pred: str) -> None:
    for gold in ("60^\\circ", "60°", "60 \\text{ degrees}", "60 \\text{deg}", "60\\degree"):
        assert judge_math(gold, f"\\boxed{{{pred}}}").equal is False, (gold, pred)


@pytest.mark.parametrize("pred", ["\\frac{\\pi}{3} \\text{ rad}", "\\pi/3 rad", "\\frac{\\pi}{3}\\,\\mathrm{radians}"])
def test_radians_convert_to_degrees(pred: str) -> None:
    for gold in ("60^\\circ", "60°", "60 \\text{ degrees}", "60 \\text{deg}", "\\frac{\\pi}{3}"):
        assert judge_math(gold, f"\\boxed{{{pred}}}").equal is True, (gold, pred)


def test_a_unit_word_after_the_answer_in_prose_is_kept() -> None:
    assert judge_math("\\frac{\\pi}{2}", "The angle is $90$ degrees.").equal is True
    assert judge_math("90 \\text{ rad}", "The angle is $90$ degrees.").equal is False
    assert judge_math("20 \\text{ m}", "The rope is $20$ cm long.").equal is False
    assert judge_math("20", "There are $20$ in the box.").equal is True  # "in" read as a word, not inches


# ----------------------------------------------------------------------------------------------------
# Intervals and sets


@pytest.mark.parametrize("text,normal", [
    ("]0, 1]", "(0, 1]"), ("[0, 1[", "[0, 1)"), ("]0;1[", "(0, 1)"), ("x \\in ]-\\infty, 2]", "x \\in (-\\infty, 2]"),
    ("[0, 1]", "[0, 1]"), ("[\\sqrt[3]{2}, 5]", "[\\sqrt[3]{2}, 5]"), ("[1, 2], [3, 4]", "[1, 2], [3, 4]"),
])
def test_iso_intervals_are_rewritten_and_nothing_else(text: str, normal: str) -> None:
    from rlvr.verifiers.math_normalize import normalize

    assert normalize(text) == normal


def test_solution_set() -> None:
    from rlvr.verifiers.math_sets import solution_set

    x, y = sympy.symbols("x y")
    zero, one = sympy.Integer(0), sympy.Integer(1)
    assert solution_set(("<", "<="), [zero, x, one]) == sympy.Interval.Lopen(0, 1)
    assert solution_set(("!=",), [x, zero]) == sympy.Union(sympy.Interval.open(-sympy.oo, 0), sympy.Interval.open(0, sympy.oo))
    assert solution_set(("<",), [x, y]) is None  # two variables
    assert solution_set(("<",), [x, one], variable=y) is None  # not the named variable
    assert solution_set(("<",), [x]) is None  # malformed
    assert solution_set(("<",), [x, 1]) is None  # not a sympy expression


# ----------------------------------------------------------------------------------------------------
# Numbers in words


@pytest.mark.parametrize("text,value", [
    ("two hundred fifty-six", 256), ("twelve hundred", 1200), ("three billion four million", 3_004_000_000),
    ("one million two hundred thousand", 1_200_000), ("three and a half", Fraction(7, 2)),
    ("one and one half", Fraction(3, 2)), ("one quarter", Fraction(1, 4)), ("a third", Fraction(1, 3)),
    ("five twelfths", Fraction(5, 12)), ("one hundredth", Fraction(1, 100)), ("seven thirty-seconds", Fraction(7, 32)),
    ("three point one four", Fraction(314, 100)), ("2.5 million", 2_500_000), ("3 and a half", Fraction(7, 2)),
    ("minus three and a half", Fraction(-7, 2)),
    ("three seconds", None), ("one thirds", None), ("twenty hundred", None), ("seven apples", None), ("half", None),
    ("one million one million", None), ("", None),
])
def test_value_from_words(text: str, value) -> None:
    assert value_from_words(text) == value


def test_find_number_phrases_skips_words_that_name_things() -> None:
    text = "We have 3 apples; each one is red, the two pears are ripe, so in all there are twenty-one fruits."
    assert [(text[a:b], v) for a, b, v in find_number_phrases(text)] == [("twenty-one", 21)]
    assert [v for _, _, v in find_number_phrases("It is one.")] == [1]
    assert [v for _, _, v in find_number_phrases("It costs 2.5 million and 3 dollars")] == [2_500_000]


def test_the_training_reward_reads_an_answer_in_words_after_an_anchor() -> None:
    completion = "<think>3 apples and 9 more</think> So the answer is twelve."
    assert math_reward(completion, {"answer": "12"})["score"] == 1.0
    assert math_reward(completion, {"answer": "3"})["score"] == 0.0


# ----------------------------------------------------------------------------------------------------
# Bounded work


@pytest.mark.parametrize("pred", [
    "one " * 5000 + ".",
    "The answer is " + "one hundred and " * 2000 + "five.",
    "\\boxed{0.(" + "3" * 5000 + ")}",
    "\\boxed{0." + "3" * 5000 + "}",
    "\\boxed{\\{x \\mid " + " \\text{ or } ".join(f"x > {i}" for i in range(200)) + "\\}}",
    "\\boxed{" + " = ".join(["1"] * 300) + "}",
])
def test_adversarial_answers_are_judged_quickly_and_without_raising(pred: str) -> None:
    start = time.perf_counter()
    assert judge_math("12", pred).equal is False
    assert time.perf_counter() - start < 5


def test_a_congruence_states_its_residue() -> None:
    # members of a congruence agree modulo something, not as numbers: not a contradicting chain
    assert judge_math("1", "\\boxed{2^{100} \\equiv 1 \\mod 3}").equal is True
    assert judge_math("2", "\\boxed{2^{100} \\equiv 1 \\mod 3}").equal is False
    assert judge_math("1", "\\boxed{2^{100} = 1}").equal is False
