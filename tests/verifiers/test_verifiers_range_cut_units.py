"""Values beyond a double's range, completions cut at the length limit, money and compound units, scaled matrices,
numbers in words, and invisible answer blocks: the labelled cases of ``tests/data/math_cases_range_cut_units.jsonl``
and ``tests/data/format_cases_invisible.jsonl``, the training path that reads them, and the helpers behind them."""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from pathlib import Path

import mpmath
import pytest
import sympy

from rlvr.commands.verify import add_parser
from rlvr.verifiers.format_tags import boxed_format, is_blank, r1_format
from rlvr.verifiers.math_answer import judge_math, math_reward
from rlvr.verifiers.math_extract import extract_answer
from rlvr.verifiers.math_numeric import evaluate, relatively_close
from rlvr.verifiers.math_units import compound_quantity, parse_unit
from rlvr.verifiers.math_words import number_from_words

DATA = Path(__file__).resolve().parents[1] / "data"


def _read(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()]


MATH_CASES = _read("math_cases_range_cut_units.jsonl")
FORMAT_CASES = _read("format_cases_invisible.jsonl")


@pytest.mark.parametrize("case", MATH_CASES, ids=[c["id"] for c in MATH_CASES])
def test_labelled_case(case: dict) -> None:
    verdict = judge_math(case["gold"], case["pred"], truncated=case.get("finish_reason") == "length")
    assert (verdict.equal is True) is case["equal"], f"{case['id']} [{case['category']}] {case['note']}: {verdict}"


def test_every_class_is_labelled_both_ways() -> None:
    for category in {c["category"] for c in MATH_CASES}:
        labels = {c["equal"] for c in MATH_CASES if c["category"] == category}
        assert labels == {True, False}, category


@pytest.mark.parametrize("pred", [r"\boxed{e^{1000}}", r"\boxed{10^{400}\pi}", r"\boxed{\cosh(1000)}",
                                  r"\boxed{999!\sqrt2}", r"\boxed{-e^{710}}"])
@pytest.mark.parametrize("gold", ["42", "1/2", "-3", r"\sqrt{2}", "0.75"])
def test_an_out_of_range_value_equals_no_numeric_gold(gold: str, pred: str) -> None:
    assert judge_math(gold, pred).equal is False


def test_the_training_reward_scores_a_cut_off_completion_zero() -> None:
    cut = "<think>\n19 + 23 = 42, so maybe 42. But wait, I should double-check"
    assert math_reward(cut, {"answer": "42", "finish_reason": "length"})["score"] == 0.0
    assert math_reward(cut, {"answer": "42", "finish_reason": "length"})["reason"] == "cut off before a final answer"
    closed = "<think>19 + 23 = 42</think> \\boxed{42} and now let me"
    assert math_reward(closed, {"answer": "42", "finish_reason": "length"})["score"] == 1.0


def test_the_training_reward_reads_final_answer_markers_only() -> None:
    prose = "Adding 19 and 23 gives 42"
    assert math_reward(prose, {"answer": "42", "finish_reason": "stop"})["score"] == 0.0
    assert math_reward(prose, {"answer": "42"}, extraction="lenient")["score"] == 1.0
    assert math_reward("So the answer is 42.", {"answer": "42"})["score"] == 1.0
    assert math_reward("<answer>42</answer>", {"answer": "42"})["score"] == 1.0
    with pytest.raises(ValueError, match="extraction"):
        math_reward(prose, {"answer": "42"}, extraction="loose")


def test_an_unclosed_reasoning_block_has_no_marked_answer() -> None:
    assert extract_answer("<think>so \\boxed{42}", extraction="marked") is None
    assert extract_answer("<think>x</think> \\boxed{42}", extraction="marked") == "42"
    # the template opened the reasoning block: the completion starts inside it
    prefilled = {"answer": "42", "prompt": "<|im_start|>assistant\n<think>\n"}
    assert math_reward("so \\boxed{42} hmm", prefilled)["score"] == 0.0
    assert math_reward("so 42</think>\\boxed{42}", prefilled)["score"] == 1.0


@pytest.mark.parametrize("case", FORMAT_CASES, ids=[c["id"] for c in FORMAT_CASES])
def test_invisible_characters_are_no_content(case: dict) -> None:
    assert r1_format(case["completion"], {})["score"] == float(case["expected_reward"]), case["note"]


def test_invisible_characters_count_as_nothing_before_the_think_block_when_it_is_prefilled_too() -> None:
    from rlvr.verifiers.format_tags import check_r1_format

    # the template opened <think>; a byte-order mark before the reasoning (or before a repeated tag) is nothing
    assert check_r1_format("\ufeff2 + 2 = 4</think><answer>4</answer>", prefilled_think=True).ok
    assert check_r1_format("\ufeff<think>2 + 2 = 4</think><answer>4</answer>", prefilled_think=True).ok
    assert check_r1_format("\ufeff<think>2 + 2 = 4</think><answer>4</answer>").ok
    assert check_r1_format("\ufeffI think<think>2 + 2 = 4</think><answer>4</answer>").reason == "text before <think>"


def test_is_blank() -> None:
    assert is_blank("\u200b \u2060\ufeff\u00ad\n\t\u3000\u3164")
    assert not is_blank("\u200b7")
    # variation selectors, combining marks with nothing to attach to, bidi isolates, tags, the null notehead
    assert is_blank("\ufe0f\U000e0100\u0301\u034f\u20dd\u2066\u2069\U000e0020\U0001d159\u180e")
    assert not is_blank("7\ufe0f") and not is_blank("e\u0301")
    assert boxed_format("\\boxed{\u200b}", {}) == 0.0 and boxed_format("\\boxed{7}", {}) == 1.0


def test_evaluate_keeps_huge_and_tiny_values_finite_and_refuses_infinities() -> None:
    big = evaluate(sympy.exp(1000), 30)
    assert big is not None and mpmath.isfinite(big.real) and abs(big.real - mpmath.exp(1000)) < mpmath.exp(1000) * 1e-25
    tiny = evaluate(sympy.exp(-1000), 30)
    assert tiny is not None and tiny != 0
    assert evaluate(sympy.oo, 30) is None and evaluate(sympy.zoo, 30) is None and evaluate(sympy.nan, 30) is None
    assert evaluate(sympy.Symbol("x"), 30) is None
    # a difference that cancels exactly evaluates to zero, not to rounding noise
    assert evaluate(sympy.cos(sympy.pi / 5) - (1 + sympy.sqrt(5)) / 4, 60) == 0
    # a sum that cancels below sympy's default precision is worked out as far as its magnitudes call for
    assert evaluate(1 - sympy.tanh(1000), 30) != 0
    assert evaluate(1 - sympy.exp(800) / (sympy.exp(800) + 1), 30) != 0
    assert evaluate(sympy.cosh(900) - (sympy.exp(900) + sympy.exp(-900)) / 2, 30) == 0
    # and one beyond the capped precision is undecided, not zero
    assert evaluate(1 - sympy.tanh(10**6), 30) is None
    assert relatively_close(mpmath.mpc(1), mpmath.mpc(1 + 1e-45), 40)
    assert not relatively_close(mpmath.mpc(0), tiny, 40)
    assert not relatively_close(big, mpmath.mpc(42), 40)


@pytest.mark.parametrize("text,value", [("seven", 7), ("Twenty-one", 21), ("one hundred and five", 105),
                                        ("two thousand twenty", 2020), ("zero", 0), ("ninety nine", 99),
                                        ("seven apples", None), ("one or two", None), ("seven eight", None),
                                        ("ten seven", None), ("hundred", None), ("", None)])
def test_number_from_words(text: str, value: int | None) -> None:
    assert number_from_words(text) == value


def test_compound_quantity() -> None:
    assert compound_quantity("1 h 30 min") == (Fraction(90), parse_unit("min"))
    assert compound_quantity(r"2 \text{ ft } 6 \text{ in}") == (Fraction(30), parse_unit("in"))
    assert compound_quantity("1 hour and 30 minutes")[0] == 90
    assert compound_quantity("30 min 1 h") is None  # not largest first
    assert compound_quantity("2 m 3 s") is None  # two dimensions
    assert compound_quantity("90 min") is None  # one amount
    assert compound_quantity("2 apples 3 pears") is None  # unknown words


def _run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlvr")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_rlvr_verify_math_on_the_whole_labelled_set_accepts_no_wrong_answer(tmp_path, capsys) -> None:
    rows = [row for path in sorted(DATA.glob("math_cases*.jsonl")) for row in _read(path.name)]
    assert len(rows) > 400
    path = tmp_path / "all.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert _run_cli(["verify", "math", "--file", str(path), "--workers", "2", "--timeout", "30"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(out) == len(rows)
    false_accepts = [o["id"] for o in out if o["score"] == 1 and not o["equal"]]
    assert false_accepts == []
    wrong = [o["id"] for o in out if (o["score"] == 1) is not o["equal"]]
    assert wrong == []
