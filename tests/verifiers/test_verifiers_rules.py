"""Rule verifiers: countdown equations, DAPO overlong punishment, length penalty, format options, boxed format."""

from __future__ import annotations

import pytest

from rlvr.verifiers.countdown import EquationError, countdown, evaluate_equation
from rlvr.verifiers.format_tags import boxed_format, check_r1_format, r1_format
from rlvr.verifiers.length import length_penalty, overlong, overlong_penalty

SAMPLE = {"numbers": [2, 5, 6], "target": 20}


@pytest.mark.parametrize(
    ("completion", "score"),
    [
        ("<answer>(6 - 2) * 5</answer>", 1.0),
        ("so \\boxed{5 \\times (6 - 2)} = 20", 1.0),
        ("<answer>(6 - 2) * 5 = 20</answer>", 1.0),
        ("<answer>20 = 5*(6-2)</answer>", 1.0),
        ("<answer>6 * 5 - 2</answer>", 0.0),  # 28
        ("<answer>(6 - 2) * 5 * 1</answer>", 0.0),  # 1 is not given
        ("<answer>(6 - 2) * 5 + 2 - 2</answer>", 0.0),  # 2 used three times
        ("<answer>4 * 5</answer>", 0.0),  # 4 is not given
        ("<answer>2 ** 5 - 6 * 2</answer>", 0.0),  # power is not allowed
        ("<answer>__import__('os').system('true')</answer>", 0.0),
        ("<answer>(5 + 6 * 2) / (6 - 6)</answer>", 0.0),
        ("no equation here", 0.0),
    ],
)
def test_countdown(completion: str, score: float) -> None:
    assert countdown(completion, SAMPLE)["score"] == score


def test_countdown_fractions_are_exact_and_operators_configurable() -> None:
    assert countdown("<answer>6 / (1 - 3/4)</answer>", {"numbers": [6, 1, 3, 4], "target": 24})["score"] == 1.0
    assert countdown("<answer>(6 - 2) * 5</answer>", SAMPLE, allowed_operators="+-")["score"] == 0.0
    with pytest.raises(EquationError, match="Call"):
        evaluate_equation("print(1)")
    with pytest.raises(KeyError, match="target"):
        countdown("<answer>1</answer>", {"numbers": [1]})


@pytest.mark.parametrize(("length", "expected"), [(0, 0.0), (80, 0.0), (85, -0.25), (90, -0.5), (100, -1.0), (130, -1.0)])
def test_overlong_penalty_follows_dapo_eq_13(length: int, expected: float) -> None:
    # L_max = 100, L_cache = 20: free up to 80 tokens, then linear down to -1 at 100
    assert overlong_penalty(length, 100, 20) == pytest.approx(expected)


def test_overlong_reads_the_sample() -> None:
    sample = {"completion_tokens": 90, "max_new_tokens": 100}
    assert overlong("", sample, buffer_tokens=20) == pytest.approx(-0.5)
    assert overlong("", sample, buffer_tokens=20, penalty=0.5) == pytest.approx(-0.25)
    assert overlong("", {"completion_tokens": 90}, max_length_tokens=100, buffer_tokens=20) == pytest.approx(-0.5)
    assert overlong("", sample) == pytest.approx(-0.5)  # default buffer: a fifth of 100
    with pytest.raises(KeyError, match="completion_tokens"):
        overlong("", {"max_new_tokens": 100})


def test_length_penalty() -> None:
    sample = {"completion_tokens": 60, "max_new_tokens": 110}
    assert length_penalty("", sample, free_tokens=10) == pytest.approx(-0.5)
    assert length_penalty("", {"completion_tokens": 5, "max_new_tokens": 110}, free_tokens=10) == 0.0
    assert length_penalty("", {"completion_tokens": 500, "max_new_tokens": 110}) == -1.0
    with pytest.raises(ValueError, match="free_tokens"):
        length_penalty("", sample, free_tokens=110)


def test_format_tag_names_are_configurable() -> None:
    text = "<reasoning>x</reasoning>\n<solution>4</solution>"
    assert r1_format(text, {}, think_tag="reasoning", answer_tag="solution")["score"] == 1.0
    assert r1_format(text, {})["score"] == 0.0
    with pytest.raises(ValueError, match="identifiers"):
        check_r1_format(text, think_tag="a b")


@pytest.mark.parametrize(
    ("completion", "ok"),
    [
        ("  <think>a</think>  <answer>b</answer>  ", True),
        ("<think>a</think>text<answer>b</answer>", False),
        ("hi <think>a</think><answer>b</answer>", False),
        ("<answer>b</answer><think>a</think>", False),
        ("<think>a<answer>b</answer></think>", False),
        ("<think> \n </think><answer>b</answer>", False),
    ],
)
def test_r1_layout(completion: str, ok: bool) -> None:
    assert check_r1_format(completion).ok is ok


def test_boxed_format() -> None:
    assert boxed_format("so \\boxed{3}", {}) == 1.0
    assert boxed_format("so \\boxed{ }", {}) == 0.0
    assert boxed_format("so \\boxed{3", {}) == 0.0
    assert boxed_format("so 3", {}) == 0.0


def test_format_ignores_a_trailing_end_of_turn_token() -> None:
    assert check_r1_format("<think>x</think><answer>4</answer>\n<|im_end|>").ok
    assert not check_r1_format("<think>x</think><answer>4</answer><|im_end|> more").ok
