"""Math verifier, issue 14: the shapes hard held-out pairs missed, each with its wrong-answer counterparts.

Expected values are the labels (``tests/data/math_cases_structured.jsonl``) or the mathematical truth, decided by
hand. Every right shape is paired with wrong answers in the same shape, so no rule here can pass by
accepting more: a labelled gold against values out of order or one value off, a label equation against
another value, a constant-renamed solution with a different term, a stated answer that is wrong, another
option letter, a decimal off in its last digit, a cut-off box.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sympy

from rlvr.verifiers.math_answer import judge_math, math_reward
from rlvr.verifiers.math_compare import equal_up_to_constants, rounds_to
from rlvr.verifiers.math_extract import extract_answer, has_unclosed_box, labelled_box_parts
from rlvr.verifiers.math_parse import Choice, parse_answer

CASES_FILE = Path(__file__).resolve().parents[1] / "data" / "math_cases_structured.jsonl"
STRUCTURED_CASES = [json.loads(line) for line in CASES_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("case", STRUCTURED_CASES, ids=[c["id"] for c in STRUCTURED_CASES])
def test_math_structured_case(case: dict) -> None:
    verdict = judge_math(case["gold"], case["pred"])
    assert (verdict.equal is True) is case["equal"], (
        f"{case['id']} [{case['category']}] {case['note']}: expected equal={case['equal']}, got {verdict}"
    )


def _check(gold: str, pred: str, equal: bool) -> None:
    verdict = judge_math(gold, pred)
    assert (verdict.equal is True) is equal, f"gold {gold!r} pred {pred!r}: expected {equal}, got {verdict}"


# ----------------------------------------------------------------------------------------------------
# Labelled multi-part golds: the gold names its parts, a prediction gives the values in the same order.

LABELLED_PARTS = [
    ("AB=4, CD=5", "4, 5", True),
    ("4, 5", "AB=4, CD=5", True),  # the reverse: the prediction names the parts
    ("$AB = 4$, $CD = 5$", "\\boxed{4, 5}", True),
    ("\\boxed{AB=4, CD=5}", "The answer is $4, 5$.", True),
    ("AB=4, CD=5", "\\boxed{(4, 5)}", True),
    ("x = 3, y = -2", "\\boxed{(3, -2)}", True),
    ("x = 3 \\text{ and } y = -2", "\\boxed{3, -2}", True),
    ("a=2, b=7", "\\boxed{b = 7, a = 2}", True),  # both name the parts: matched by name
    ("$m = 2$, $n = 3$", "$\\boxed{2}$, $\\boxed{3}$", True),
    ("x = 1 \\text{ or } x = 2", "\\boxed{2, 1}", True),  # two roots of one unknown: any order
    ("$AB = 4$ and $CD = 5$", "\\boxed{4, 5}", True),
    ("AB = 4 cm, CD = 5 cm", "\\boxed{4, 5}", True),
    ("width = 3, length = 5", "\\boxed{3, 5}", True),
    ("x=3, y=-2, z=1", "\\boxed{(3, -2, 1)}", True),
    ("AB = 4, CD = 5", "\\boxed{CD = 5, AB = 4}", True),
    ("(x, y) = (3, -2)", "\\boxed{3, -2}", True),
    ("a = 2, b = 7", "\\boxed{2} and \\boxed{7}", True),
    # wrong: a value off, the order swapped, a part missing or added
    ("AB=4, CD=6", "4, 5", False),
    ("4, 5", "AB=4, CD=6", False),
    ("$AB = 4$, $CD = 5$", "\\boxed{5, 4}", False),
    ("4, 5", "\\boxed{AB = 5, CD = 4}", False),
    ("x = 3, y = -2", "\\boxed{(-2, 3)}", False),
    ("a=2, b=7", "\\boxed{b = 2, a = 7}", False),
    ("$m = 2$, $n = 3$", "$\\boxed{2}$, $\\boxed{4}$", False),
    ("AB=4, CD=5", "\\boxed{4}", False),
    ("AB=4, CD=5", "\\boxed{4, 5, 6}", False),
    ("$AB = 4$ and $CD = 5$", "\\boxed{5, 4}", False),
    ("AB = 4 cm, CD = 5 cm", "\\boxed{4, 6}", False),
    ("width = 3, length = 5", "\\boxed{5, 3}", False),
    ("x=3, y=-2, z=1", "\\boxed{(3, 1, -2)}", False),
    ("AB = 4, CD = 5", "\\boxed{AB = 5, CD = 4}", False),
    ("(x, y) = (3, -2)", "\\boxed{-2, 3}", False),
    ("a = 2, b = 7", "\\boxed{7} and \\boxed{2}", False),
]

GOLD_BOXES_IN_A_SENTENCE = [
    ("\\boxed{1} papers and \\boxed{2} bins", "\\boxed{1,2}", True),
    ("\\boxed{3} apples and \\boxed{5} pears", "\\boxed{3, 5}", True),
    ("\\boxed{3} apples and \\boxed{5} pears", "\\boxed{3} and \\boxed{5}", True),
    ("The mean is \\boxed{12} and the median is \\boxed{10}.", "\\boxed{12, 10}", True),
    ("\\boxed{1} cat, \\boxed{2} dogs and \\boxed{3} fish", "\\boxed{1, 2, 3}", True),
    ("The length is \\boxed{5} cm and the width is \\boxed{3} cm.", "\\boxed{5, 3}", True),
    ("\\boxed{1} papers and \\boxed{2} bins", "\\boxed{2,1}", False),  # the order is the gold's sentence
    ("\\boxed{3} apples and \\boxed{5} pears", "\\boxed{5, 3}", False),
    ("\\boxed{3} apples and \\boxed{5} pears", "\\boxed{3}", False),
    ("\\boxed{3} apples and \\boxed{5} pears", "\\boxed{3, 5, 7}", False),
    ("\\boxed{3} apples and \\boxed{5} pears", "\\boxed{3, 6}", False),
    ("The mean is \\boxed{12} and the median is \\boxed{10}.", "\\boxed{10, 12}", False),
    ("\\boxed{1} cat, \\boxed{2} dogs and \\boxed{3} fish", "\\boxed{1, 3, 2}", False),
    ("The length is \\boxed{5} cm and the width is \\boxed{3} cm.", "\\boxed{3, 5}", False),
    ("\\boxed{4} red and \\boxed{9} blue", "\\boxed{\\{4, 9\\}}", False),  # a set has no order to match
]


@pytest.mark.parametrize(("gold", "pred", "equal"), LABELLED_PARTS + GOLD_BOXES_IN_A_SENTENCE)
def test_labelled_multi_part_golds(gold: str, pred: str, equal: bool) -> None:
    _check(gold, pred, equal)


def test_labelled_box_parts_reads_only_named_boxes_in_one_sentence() -> None:
    assert labelled_box_parts("\\boxed{1} papers and \\boxed{2} bins") == ["1", "2"]
    assert labelled_box_parts("so $\\boxed{4}$ red and $\\boxed{9}$ blue.") == ["4", "9"]
    assert labelled_box_parts("\\boxed{1}, \\boxed{2}") is None  # separators only: an ordinary list
    assert labelled_box_parts("\\boxed{4} or \\boxed{5}") is None  # alternatives, not named parts
    assert labelled_box_parts("\\boxed{41}. Wait, that is wrong: \\boxed{42}") is None
    assert labelled_box_parts("\\boxed{7}") is None


def test_a_prediction_keeps_its_self_correction_rule() -> None:
    # words between boxes of a *response* may be a hedge or a correction: only the last box counts there
    assert extract_answer("\\boxed{4} red or maybe \\boxed{9} blue") == "9"


# ----------------------------------------------------------------------------------------------------
# Equations whose left side is a label, not a variable.

LABEL_EQUATIONS = [
    ("|AB|=1", "1", True),
    ("$|AB| = 1$", "\\boxed{1}", True),
    ("$f(2) = 5$", "\\boxed{5}", True),
    ("$P(A) = 0.3$", "\\boxed{0.3}", True),
    ("$P(A) = 0.3$", "\\boxed{\\frac{3}{10}}", True),
    ("$P(X=2) = \\frac{1}{4}$", "\\boxed{\\frac14}", True),
    ("$\\angle ABC = 40^\\circ$", "\\boxed{40}", True),
    ("$AB = 5$", "\\boxed{5}", True),
    ("$S_{10} = 55$", "\\boxed{55}", True),
    ("$\\sin A = \\frac{3}{5}$", "\\boxed{\\frac35}", True),
    ("$f(-1) = 3$", "\\boxed{3}", True),
    ("$P(A|B) = 0.5$", "\\boxed{\\frac12}", True),
    ("$P(A \\cap B) = 0.12$", "\\boxed{0.12}", True),
    ("$\\Pr(A) = 0.3$", "\\boxed{0.3}", True),
    ("$E[X] = 3$", "\\boxed{3}", True),
    ("$|\\vec{a}| = 3$", "\\boxed{3}", True),
    ("$[ABC] = 12$", "\\boxed{12}", True),  # the area of triangle ABC
    ("$\\cos\\angle ABC = \\frac{1}{2}$", "\\boxed{\\frac12}", True),
    ("$P(\\text{red}) = \\frac{1}{3}$", "\\boxed{\\frac13}", True),
    ("$\\binom{5}{2} = 10$", "\\boxed{10}", True),  # a true numeric identity: its value
    ("5", "\\boxed{f(2) = 5}", True),
    ("1", "\\boxed{|AB| = 1}", True),
    # wrong values, and equations that are not labels
    ("|AB|=2", "1", False),
    ("$|AB| = 2$", "\\boxed{1}", False),
    ("$f(2) = 5$", "\\boxed{6}", False),
    ("$f(2) = 5$", "\\boxed{2}", False),
    ("$P(A) = 0.3$", "\\boxed{0.4}", False),
    ("$P(X=2) = \\frac{1}{4}$", "\\boxed{2}", False),
    ("$\\angle ABC = 40^\\circ$", "\\boxed{50^\\circ}", False),
    ("$AB = 5$", "\\boxed{6}", False),
    ("$S_{10} = 55$", "\\boxed{10}", False),
    ("5", "\\boxed{f(2) = 6}", False),
    ("$f(-1) = 3$", "\\boxed{-1}", False),
    ("$P(A|B) = 0.5$", "\\boxed{0.6}", False),
    ("$P(A \\cap B) = 0.12$", "\\boxed{0.13}", False),
    ("$E[X] = 3$", "\\boxed{4}", False),
    ("$|\\vec{a}| = 3$", "\\boxed{-3}", False),
    ("$|z| = 5$", "\\boxed{5}", False),  # a locus (a circle), not the length of a named segment
    ("$x(x+1) = 6$", "\\boxed{6}", False),  # a variable times a bracket: an equation, not a function value
    ("$[ABC] = 12$", "\\boxed{13}", False),
    ("$[x] = 3$", "\\boxed{3}", False),  # the integer part of x: an equation to solve
    ("$\\cos\\angle ABC = \\frac{1}{2}$", "\\boxed{\\frac13}", False),
    ("$P(\\text{red}) = \\frac{1}{3}$", "\\boxed{\\frac23}", False),
    ("$1 + 1 = 3$", "\\boxed{3}", False),  # a false identity states nothing
    ("$x + y = 5$", "\\boxed{5}", False),  # an equation in two unknowns, not a named value
    ("$1 + 1 = 2$", "\\boxed{1}", False),
]


@pytest.mark.parametrize(("gold", "pred", "equal"), LABEL_EQUATIONS)
def test_equations_with_a_label_on_the_left(gold: str, pred: str, equal: bool) -> None:
    _check(gold, pred, equal)


# ----------------------------------------------------------------------------------------------------
# General solutions with renamed arbitrary constants.

RENAMED_CONSTANTS = [
    ("Y(x) = -x + C + D/x", "Y(x) = A + B/x - x", True),
    ("$y = C_1 e^{x} + C_2 e^{-x}$", "$y = A e^{-x} + B e^{x}$", True),
    ("$y = c_1 \\cos x + c_2 \\sin x$", "$y = A\\sin x + B\\cos x$", True),
    ("$y = C_1 e^{x} + C_2 x e^{x}$", "$y = (A + Bx)e^{x}$", True),
    ("\\frac{x^2}{2} + C", "\\frac{x^2}{2} + K", True),
    ("y = Ce^{2x}", "y = Ke^{2x}", True),
    ("\\ln|x| + C", "\\ln|x| + C_1", True),
    ("x = \\frac{\\pi}{4} + n\\pi", "x = \\frac{\\pi}{4} + k\\pi", True),
    ("$y = C_1\\cos(2x) + C_2\\sin(2x)$", "$y = A\\sin 2x + B\\cos 2x$", True),
    ("\\frac{1}{2}\\ln|x| + C", "\\ln\\sqrt{|x|} + K", True),
    # a different term, a missing constant, a constant used twice, a renamed variable or parameter
    ("Y(x) = -x + C + D/x", "Y(x) = A + B/x + x", False),
    ("Y(x) = -x + C + D/x", "Y(x) = A + B/x^2 - x", False),
    ("$y = C_1 e^{x} + C_2 e^{-x}$", "$y = A e^{x} + B e^{2x}$", False),
    ("$y = C_1 e^{x} + C_2 e^{-x}$", "$y = A e^{x} + A e^{-x}$", False),
    ("$y = C_1 e^{x} + C_2 e^{-x}$", "$y = A e^{x} + B e^{-x} + D$", False),
    ("$y = c_1 \\cos x + c_2 \\sin x$", "$y = A\\sin 2x + B\\cos x$", False),
    ("\\frac{x^2}{2} + C", "\\frac{x^2}{2}", False),
    ("\\frac{x^2}{2} + C", "x^2 + K", False),
    ("y = Ce^{2x}", "y = Ke^{3x}", False),
    ("$y = C_1\\cos(2x) + C_2\\sin(2x)$", "$y = A\\sin x + B\\cos 2x$", False),
    ("-\\cos x + C", "K + \\cos x", False),
    ("y = C e^{x}", "y = C e^{t}", False),  # x is the variable, not an arbitrary constant
    ("x = 2a", "x = 2b", False),  # a lower-case a is a parameter of the problem
    ("K", "M", False),  # two names, no solution with a variable: nothing to rename
    ("2K", "\\boxed{2M}", False),
]


@pytest.mark.parametrize(("gold", "pred", "equal"), RENAMED_CONSTANTS)
def test_general_solutions_with_renamed_constants(gold: str, pred: str, equal: bool) -> None:
    _check(gold, pred, equal)


def test_a_constant_named_in_the_problem_is_not_renamed() -> None:
    gold, pred = "y = C_1 e^{x} + C_2 e^{-x}", "\\boxed{y = A e^{-x} + B e^{x}}"
    free = judge_math(gold, pred, problem="Find the general solution of $y'' = y$.")
    assert free.equal is True and free.reason == "equal up to renamed constants"
    given = judge_math(gold, pred, problem="Let $A = 2$. Find the general solution of $y'' = y$.")
    assert given.equal is False
    # where the problem has math, the article "A" in its prose names nothing
    assert judge_math(gold, pred, problem="A spring obeys $y'' = y$. Solve it.").equal is True


def test_math_reward_reads_the_problem_from_the_prompt() -> None:
    gold, pred = "y = C_1 e^{x} + C_2 e^{-x}", "\\boxed{y = A e^{-x} + B e^{x}}"
    assert math_reward(pred, {"answer": gold, "prompt": "Solve $y'' = y$."})["score"] == 1.0
    assert math_reward(pred, {"answer": gold, "prompt": "With $A = 2$, solve $y'' = y$."})["score"] == 0.0
    ignored = math_reward(pred, {"answer": gold, "prompt": "With $A = 2$..."}, problem_field=None)
    assert ignored["score"] == 1.0


def test_equal_up_to_constants_needs_a_one_to_one_renaming() -> None:
    gold = parse_answer("y = C_1 e^{x} + C_2 e^{-x}")
    assert equal_up_to_constants(gold, parse_answer("y = B e^{x} + A e^{-x}"))
    assert not equal_up_to_constants(gold, parse_answer("y = A e^{x} + A e^{-x}"))
    assert not equal_up_to_constants(gold, parse_answer("y = C_1 e^{x} + C_2 e^{-x} + A"))


# ----------------------------------------------------------------------------------------------------
# The answer stated first and then explained.

STATED_THEN_EXPLAINED = [
    ("7", "The total is 7. To see why: first 2 apples, then 3 pears, then 2 plums.", True),
    (
        "10",
        "There are 10 objects. Here is how to count them:\n1. the red ones (1)\n2. the blue ones (5)\n"
        "3. the green ones (4)",
        True,
    ),
    ("12", "She has 12 marbles. Here's why: 5 + 7 = 12.", True),
    ("24", "It takes 24 minutes.\n\nExplanation:\n- 3 laps\n- 8 minutes each", True),
    ("10", "There are 10 objects. Let me count them: (1) red, (5) blue, (4) green", True),
    ("10", "Total: 10\n\nBreakdown:\n- red: 1\n- blue: 5\n- green: 4", True),
    ("7", "The total is 7. Because 2 + 3 + 2 = 7.", True),
    ("7", "The total is 7, because 2 + 3 + 2 = 7.", True),
    ("10", "The number of objects is 10, and here is how to count them: (1) red, (5) blue, (4) green", True),
    # the stated answer is wrong, though the breakdown's last number or sum is the gold
    ("7", "The total is 8. To see why: first 2 apples, then 3 pears, then 2 plums.", False),
    ("2", "The total is 8. To see why: first 2 apples, then 3 pears, then 2 plums.", False),
    ("7", "The total is 8. To see why: 2 + 3 + 2 = 7.", False),
    (
        "10",
        "There are 9 objects. Here is how to count them:\n1. the red ones (1)\n2. the blue ones (5)\n"
        "3. the green ones (4)",
        False,
    ),
    ("4", "There are 10 objects. Here is how to count them: (1) ... (5) ... (4)", False),
    ("12", "She has 13 marbles. Here's why: 5 + 7 = 12.", False),
    ("10", "There are 11 objects. Let me count them: (1) red, (5) blue, (4) green", False),
    ("10", "Total: 11\n\nBreakdown:\n- red: 1\n- blue: 5\n- green: 4", False),
    ("7", "The total is 9. Because 2 + 3 + 2 = 7.", False),
    ("7", "The total is 9, because 2 + 3 + 2 = 7.", False),
    ("10", "The number of objects is 11, and here is how to count them: (1) red, (5) blue, (4) green", False),
]


@pytest.mark.parametrize(("gold", "pred", "equal"), STATED_THEN_EXPLAINED)
def test_answer_stated_first_then_explained(gold: str, pred: str, equal: bool) -> None:
    _check(gold, pred, equal)


def test_an_explanation_that_concludes_gives_the_answer() -> None:
    # "So there are 12" after the explanation is the answer, not the premise stated first
    text = "There are 3 boxes. Here is how I counted the objects: 3 boxes of 4 objects. So there are 12 objects."
    assert extract_answer(text) == "12"
    text = "We need x. Adding gives x = 5, because the sum is 10. Then y = 2x, which is 10. The result: 10"
    assert extract_answer(text) == "10"


def test_only_a_short_opening_is_a_stated_answer() -> None:
    # three sentences of working before "because": a derivation, whose last statement is the answer
    text = "Let a = 2. Let b = 3. Then a + b = 5. Because 5 is odd, we double it: 10"
    assert extract_answer(text) == "10"


# ----------------------------------------------------------------------------------------------------
# A multiple-choice letter with the option's text.

CHOICE_WITH_TEXT = [
    ("E", "\\boxed{E: the third listed risk factor}", True),
    ("C", "\\boxed{C. 42}", True),
    ("C", "\\boxed{C) the second option}", True),
    ("C", "\\boxed{(C) the second option}", True),
    ("C", "\\boxed{\\text{C: the second option}}", True),
    ("C", "\\boxed{C: smoking and obesity}", True),
    ("(C)", "\\boxed{C: the second option}", True),
    ("C", "The answer is C: the second option.", True),
    ("E", "The correct option is E: the third listed risk factor.", True),
    ("E", "E: the third listed risk factor", True),
    ("E", "**E: the third listed risk factor**", True),
    ("E", "Answer: (E) the third listed risk factor", True),
    ("E: the third listed risk factor", "\\boxed{E}", True),  # the gold carries the text
    ("E", "\\boxed{D: the third listed risk factor}", False),
    ("C", "The answer is B: the first option.", False),
    ("E", "The correct option is D: the second listed risk factor.", False),
    ("E", "D: the third listed risk factor", False),
    ("E", "Answer: (D) the third listed risk factor", False),
    ("E: the third listed risk factor", "\\boxed{D}", False),
    ("E", "\\boxed{\\text{D: the third listed risk factor}}", False),
    ("C", "\\boxed{C: 3, D: 4}", False),  # two options named: a hedge
    ("A", "\\boxed{(A) and (B)}", False),  # hedges: any second option letter
    ("A", "\\boxed{(A) or (B)}", False),
    ("A", "\\boxed{A: the first, or B}", False),
    ("A", "\\boxed{A) 3 or B) 4}", False),
    ("C", "\\boxed{C: the second option} or \\boxed{7}", False),  # two boxes joined: "C: ..., 7"
    ("D", "\\boxed{(D) 42, 7}", False),
    ("E", "\\boxed{E: the third listed risk factor, 7}", False),
    ("42", "\\boxed{C. 42}", False),  # a letter answers a letter gold only
]


@pytest.mark.parametrize(("gold", "pred", "equal"), CHOICE_WITH_TEXT)
def test_choice_letter_with_option_text(gold: str, pred: str, equal: bool) -> None:
    _check(gold, pred, equal)


def test_choice_with_text_parses_to_its_letter() -> None:
    assert parse_answer("E: the third listed risk factor") == Choice("E")
    assert parse_answer("\\text{(B) none of these}") == Choice("B")


# ----------------------------------------------------------------------------------------------------
# Decimals must round to the exact value at the precision they are written in.

DECIMALS = [
    ("\\frac{1}{3}", "0.333333", True),
    ("\\frac{1}{3}", "0.3333333", True),
    ("\\frac{2}{3}", "0.666667", True),
    ("\\frac{10}{3}", "3.33333", True),
    ("\\frac{2000}{3}", "666.667", True),
    ("\\frac{1}{30000}", "0.0000333333", True),
    ("\\sqrt{2}", "1.414214", True),
    ("\\pi", "3.141593", True),
    ("\\sqrt{17}", "4.123105625617661", True),
    ("\\frac{1}{3}", "0.333334", False),  # off by one in the 6th significant digit
    ("\\frac{2}{3}", "0.666668", False),
    ("\\frac{2}{3}", "0.666666", False),  # truncated, not rounded
    ("\\frac{2}{3}", "0.6666670", False),  # 7 digits written: 0.6666667 is the rounding
    ("\\frac{10}{3}", "3.33334", False),
    ("\\frac{2000}{3}", "666.666", False),
    ("\\frac{1}{30000}", "0.0000333334", False),
    ("\\sqrt{2}", "1.414213", False),
    ("\\sqrt{2}", "1.414215", False),
    ("\\pi", "3.141592", False),
    ("\\frac{1}{3}", "0.3333", False),  # too few digits to stand for an exact value at all
    ("\\frac{1}{3}", "33.3333\\%", True),
    ("\\frac{1}{3}", "33.3334\\%", False),
    ("-\\frac{1}{3}", "-0.333333", True),
    ("-\\frac{1}{3}", "-0.333334", False),
    ("\\frac{1}{3}", "3.33333 \\times 10^{-1}", True),
    ("\\frac{1}{3}", "3.33334 \\times 10^{-1}", False),
    ("x = \\frac{1}{3}", "x \\approx 0.333333", True),
    ("x = \\frac{1}{3}", "x \\approx 0.333334", False),
]


@pytest.mark.parametrize(("gold", "pred", "equal"), DECIMALS)
def test_decimal_rounds_to_the_exact_value(gold: str, pred: str, equal: bool) -> None:
    _check(gold, pred, equal)


def test_rounds_to_works_in_exact_arithmetic() -> None:
    third = sympy.Rational(1, 3)
    assert rounds_to(sympy.Rational(333333, 10**6), 6, third)
    assert not rounds_to(sympy.Rational(333334, 10**6), 6, third)
    # 17 significant digits: beyond float precision, still decided exactly
    assert rounds_to(sympy.Rational(33333333333333333, 10**17), 17, third)
    assert not rounds_to(sympy.Rational(33333333333333334, 10**17), 17, third)
    assert rounds_to(sympy.Rational(1000001, 10**6), 7, 1 + sympy.Rational(1, 10**6) + sympy.Rational(1, 10**9))
    with pytest.raises(ValueError, match="sig_digits"):
        rounds_to(third, 0, third)


# ----------------------------------------------------------------------------------------------------
# A box that never closes is no answer.

UNCLOSED = [
    ("2", "... so \\boxed{\\frac{1}{2}"),
    ("5", "so the answer is \\boxed{\\frac{10}{2}"),
    ("12", "The answer is \\boxed{12"),
    ("12", "\\boxed{12} wait, let me recompute: \\boxed{123"),
    ("3", "<answer>4</answer> so \\boxed{3"),
]


@pytest.mark.parametrize(("gold", "pred"), UNCLOSED)
def test_unclosed_box_scores_zero(gold: str, pred: str) -> None:
    verdict = judge_math(gold, pred)
    assert verdict.equal is False
    assert verdict.pred_answer is None
    assert verdict.reason == "unclosed \\boxed"
    assert math_reward(pred, {"answer": gold}) == {"score": 0.0, "extracted": None, "reason": "unclosed \\boxed"}


def test_has_unclosed_box() -> None:
    assert has_unclosed_box("so \\boxed{\\frac{1}{2}")
    assert not has_unclosed_box("so \\boxed{\\frac{1}{2}}")
    assert not has_unclosed_box("<think>\\boxed{1</think> The answer is \\boxed{12}.")  # inside the reasoning
    assert not has_unclosed_box("no box at all")
    assert judge_math("12", "<think>\\boxed{1</think> The answer is \\boxed{12}.").equal is True


# ----------------------------------------------------------------------------------------------------
# Euler's identity, and the final answer when a box follows an <answer> tag.

EULER = [
    ("-1", "\\boxed{e^{i\\pi}}", True),
    ("-1", "\\boxed{e^{\\pi i}}", True),
    ("1", "\\boxed{e^{2\\pi i}}", True),
    ("i", "\\boxed{e^{i\\pi/2}}", True),
    ("1", "\\boxed{e^{i\\pi}}", False),
    ("-1", "\\boxed{e^{i\\pi/2}}", False),
]


@pytest.mark.parametrize(("gold", "pred", "equal"), EULER)
def test_imaginary_unit_in_an_exponent(gold: str, pred: str, equal: bool) -> None:
    _check(gold, pred, equal)


def test_a_subscript_i_is_not_the_imaginary_unit() -> None:
    assert judge_math("x_{i}", "\\boxed{x_{i}}").equal is True
    assert judge_math("x_i + 1", "\\boxed{x_i}").equal is False


ANSWER_TAG_THEN_BOX = [
    ("3", "<answer>4</answer> so \\boxed{3}", True),
    ("4", "<answer>4</answer> so \\boxed{3}", False),
    ("4", "\\boxed{3} hmm. <answer>4</answer>", True),  # the tag is the final answer here
    ("3", "\\boxed{3} hmm. <answer>4</answer>", False),
    ("4", "<answer>\\boxed{4}</answer>", True),
]


@pytest.mark.parametrize(("gold", "pred", "equal"), ANSWER_TAG_THEN_BOX)
def test_the_final_answer_wins_between_tag_and_box(gold: str, pred: str, equal: bool) -> None:
    _check(gold, pred, equal)
