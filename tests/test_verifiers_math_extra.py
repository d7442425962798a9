"""Math verifier: hand-labelled cases beyond the dev corpus (same categories, different strings), plus the
extraction and normalization rules one by one. Expected values are the mathematical truth, decided by hand."""

from __future__ import annotations

import time

import pytest

from verifiers.math_answer import judge_math, math_equal, math_reward
from verifiers.math_extract import extract_answer, find_boxed
from verifiers.math_normalize import normalize
from verifiers.math_parse import MAX_DIGITS, Scalar, digits_bound, parse_answer
from verifiers.math_units import split_unit

# (gold, prediction, equal)
CASES = [
    ('1234', '\\boxed{1,234}', True),
    ('1234', '1 234', True),
    ('-0.5', '\\boxed{-\\frac12}', True),
    ('3', '\\boxed{3.0}', True),
    ('7', '\\boxed{007}', True),
    ('1000', '1e3', True),
    ('2.5', '\\boxed{2.50}', True),
    ('12', '\\boxed{21}', False),
    ('5', '\\boxed{-5}', False),
    ('1000000', '\\boxed{10^6}', True),
    ('0.25', '\\boxed{\\frac{1}{4}}', True),
    ('0.2', '\\boxed{\\frac{1}{4}}', False),
    ('1.5', '1,5', True),
    ('15', '1,5', False),
    ('3', '\\boxed{3.}', True),
    ('12345', '12,345', True),
    ('1000', '\\boxed{1\\,000}', True),
    ('-12', '\\boxed{- 12}', True),
    ('7', 'The answer is $\\boxed{7}$.', True),
    ('7', '<think>hmm</think><answer>7</answer>', True),
    ('7', 'so x = 7.\n\nFinal answer: 7', True),
    ('7', 'Answer: \\(7\\)', True),
    ('7', "I think it's 7 but actually it's 8. The answer is 8.", False),
    ('8', "\\boxed{7}\n\nWait, that's wrong. \\boxed{8}", True),
    ('7', "\\boxed{7}\n\nWait, that's wrong. \\boxed{8}", False),
    ('0.5', 'The answer is \\boxed{\\frac{1}{2}}', True),
    ('5', '<think>the answer is 5</think>The answer is 6', False),
    ('12', '**Answer:** 12', True),
    ('12', 'Therefore, the final answer is: $\\boxed{12}$. I hope it is correct.', True),
    ('12', 'The final answer is 12', True),
    ('12', '$\\boxed{12}$ is the answer', True),
    ('12', '', False),
    ('12', "I don't know", False),
    ('25', '12 apples and 13 oranges, so the total is 25.', True),
    ('25', '12 apples and 13 oranges, so the total is 25 fruits.', True),
    ('3', '\\fbox{3}', True),
    ('3', '\\boxed{\\boxed{3}}', True),
    ('10', 'So $x=\\boxed{10}$.', True),
    ('10', 'the value is \\boxed {10}', True),
    ('6', 'Step 1: 2+2=4\nStep 2: 4+2=6\nSo we get 6', True),
    ('4', 'Step 1: 2+2=4\nStep 2: 4+2=6\nSo we get 6', False),
    ('42', '<answer>\nThe answer is 42\n</answer>', True),
    ('42', '<answer>\\boxed{42}</answer>', True),
    ('9', '\\boxed{3^2}', True),
    ('5', '\\boxed{5', False),
    ('5 \\text{ km}', '\\boxed{5000 \\text{ m}}', True),
    ('3 \\text{ hours}', '\\boxed{180 \\text{ minutes}}', True),
    ('10 \\text{ kg}', '\\boxed{10 \\text{ g}}', False),
    ('12 \\text{ inches}', '\\boxed{1 \\text{ foot}}', True),
    ('12 \\text{ cm}^2', '\\boxed{12 \\text{ cm}}', False),
    ('7', '\\boxed{7 \\text{ dollars}}', True),
    ('90 \\text{ degrees}', '\\boxed{90^\\circ}', True),
    ('\\frac{\\pi}{2}', '\\boxed{90^\\circ}', True),
    ('\\frac{\\pi}{3} \\text{ radians}', '\\boxed{60^\\circ}', True),
    ('20', '\\boxed{20\\text{ cm}}', True),
    ('20 \\text{ cm}', '\\boxed{20}', True),
    ('20 \\text{ cm}', '\\boxed{2 \\text{ cm}}', False),
    ('4 \\text{ m}', '\\boxed{4\\,\\mathrm{m}}', True),
    ('60 mph', '\\boxed{60 \\text{ miles per hour}}', True),
    ('50\\%', '\\boxed{0.5}', True),
    ('50\\%', '\\boxed{\\frac{1}{2}}', True),
    ('0.5', '\\boxed{50\\%}', True),
    ('50', '\\boxed{50\\%}', True),
    ('5\\%', '\\boxed{50\\%}', False),
    ('12.5\\%', '\\boxed{\\frac{1}{8}}', True),
    ('40', '40 percent', True),
    ('40\\%', '0.4', True),
    ('40\\%', '4', False),
    ('\\frac{2}{4}', '\\boxed{\\frac{1}{2}}', True),
    ('1/3', '\\boxed{0.333}', False),
    ('-\\frac{3}{2}', '\\boxed{-1.5}', True),
    ('\\frac{-3}{2}', '\\boxed{-\\frac32}', True),
    ('\\sqrt{12}', '\\boxed{2\\sqrt{3}}', True),
    ('\\frac{\\sqrt2}{2}', '\\boxed{\\frac{1}{\\sqrt2}}', True),
    ('\\sqrt{3}', '\\boxed{1.732}', False),
    ('\\sqrt{3}', '\\boxed{1.7320508}', True),
    ('2+\\sqrt{3}', '\\boxed{\\sqrt{3}+2}', True),
    ('\\sqrt[3]{8}', '\\boxed{2}', True),
    ('2\\pi', '\\boxed{6.28}', False),
    ('2\\pi', '\\boxed{6.283185307}', True),
    ('\\pi/2', '\\boxed{\\frac{\\pi}{2}}', True),
    ('\\frac{\\pi}{2}', 'pi/2', True),
    ('\\frac{\\pi}{2}', '\\boxed{1.57}', False),
    ('e^2', 'exp(2)', True),
    ('\\log_2 8', '\\boxed{3}', True),
    ('\\frac{\\pi}{2}', '\\boxed{90}', False),
    ('2\\sqrt{2}', '\\boxed{2\\sqrt{3}}', False),
    ('\\frac{1}{2}', '\\boxed{\\frac{1}{2}\\pi}', False),
    ('4', '\\boxed{4\\pi}', False),
    ('4\\pi', '\\boxed{4}', False),
    ('6.02 \\times 10^{23}', '6.02e23', True),
    ('6.02e23', '6.02 \\times 10^{22}', False),
    ('1.5 \\times 10^{-3}', '0.0015', True),
    ('2^{100}', '1267650600228229401496703205376', True),
    ('2^{100}', '\\boxed{2^{100}+1}', False),
    ('\\frac{1}{2^{99}}', '\\boxed{\\frac{1}{2^{98}}}', False),
    ('100!', '\\boxed{100!}', True),
    ('\\frac{1}{100!}', '\\boxed{\\frac{1}{99!}}', False),
    ('1', '\\boxed{9^{9^{9^{9}}}}', False),
    ('3^{1000}', '\\boxed{3^{1000}}', True),
    ('\\frac{3^{1000}-1}{2}', '\\boxed{\\frac{3^{1000}+1}{2}}', False),
    ('(0,1]', '\\boxed{(0, 1]}', True),
    ('(-\\infty, 0)', '\\boxed{x < 0}', True),
    ('[1,3]', '\\boxed{1 \\le x \\le 3}', True),
    ('[1,3]', '\\boxed{1 < x < 3}', False),
    ('(1, 2)', '\\boxed{1 < x < 2}', True),
    ('[0, \\infty)', '\\boxed{x \\geq 0}', True),
    ('(-\\infty, 2) \\cup (3, \\infty)', '\\boxed{x<2 \\text{ or } x>3}', True),
    ('[1,2]', '\\boxed{[1,2)}', False),
    ('(1,2)', '\\boxed{(2,1)}', False),
    ('\\{1,2\\}', '\\boxed{\\{2,1\\}}', True),
    ('1,2', '\\boxed{2,1}', True),
    ('(1,2,3)', '\\boxed{(1,2,3)}', True),
    ('(1,2)', '\\boxed{1,2}', True),
    ('\\{(1,2),(3,4)\\}', '\\boxed{(3,4),(1,2)}', True),
    ('x=1, y=2', '\\boxed{(1,2)}', True),
    ('(x,y)=(1,2)', '\\boxed{x=1, y=2}', True),
    ('(1,2)', '\\boxed{(1,2,3)}', False),
    ('\\{3\\}', '\\boxed{3}', True),
    ('3', '\\boxed{\\{3\\}}', True),
    ('(3, -1)', '\\boxed{(3,-1)}', True),
    ('\\begin{pmatrix}1\\\\2\\end{pmatrix}', '\\boxed{(1,2)}', True),
    ('\\begin{pmatrix}1\\\\2\\end{pmatrix}', '\\boxed{\\begin{pmatrix}2\\\\1\\end{pmatrix}}', False),
    ('y=2x+3', '\\boxed{2x - y + 3 = 0}', True),
    ('y=2x+3', '\\boxed{y = 3x+2}', False),
    ('x^2+y^2=1', '\\boxed{2x^2+2y^2=2}', True),
    ('x = 2', '\\boxed{2}', True),
    ('2', '\\boxed{x=2}', True),
    ('x+y=2', '\\boxed{2}', False),
    ('x > 2', '\\boxed{2 < x}', True),
    ('x > 2', '\\boxed{x \\geq 2}', False),
    ('x<2', '\\boxed{-x > -2}', True),
    ('x \\le 2', '\\boxed{x < 2}', False),
    ('\\pm 3', '\\boxed{3, -3}', True),
    ('\\pm 3', '\\boxed{3}', False),
    ('2 \\pm \\sqrt{3}', '\\boxed{2+\\sqrt3 \\text{ and } 2-\\sqrt3}', True),
    ('3+4i', '\\boxed{4i+3}', True),
    ('i', '\\boxed{-i}', False),
    ('\\frac{1+i}{2}', '\\boxed{0.5+0.5i}', True),
    ('2i', '\\boxed{2}', False),
    ('B', 'The answer is (B).', True),
    ('B', '\\boxed{(B)}', True),
    ('B', '\\boxed{\\textbf{(B)}}', True),
    ('B', '\\boxed{B \\text{ and } C}', False),
    ('B', '\\boxed{A}', False),
    ('C', 'The correct option is C', True),
    ('yes', '\\boxed{\\text{Yes}}', True),
    ('no', '\\boxed{\\text{yes}}', False),
    ('\\text{impossible}', 'impossible', True),
    ('\\text{(D)}', '\\boxed{D}', True),
    ('5', '\\boxed{5 \\text{ or } 6}', False),
    ('5', '\\boxed{5, 6}', False),
    ('5', '\\boxed{5}, \\boxed{6}', False),
    ('1,2', '\\boxed{1,2,3}', False),
    ('x=5', '\\boxed{x = 5 \\text{ or } x = -5}', False),
    ('3', '\\boxed{3 \\le x \\le 5}', False),
    ('5', '\\boxed{5 \\pm 1}', False),
    ('4\\frac{4}{9}', '\\boxed{\\frac{40}{9}}', True),
    ('1\\frac{1}{2}', '\\boxed{1.5}', True),
    ('-1\\frac12', '\\boxed{-1.5}', True),
    ('2 \\frac{1}{3}', '\\boxed{\\frac{7}{3}}', True),
    ('\\frac{7}{3}', '\\boxed{2\\frac{1}{3}}', True),
    ('45^\\circ', '\\boxed{45}', True),
    ('45', '\\boxed{45^\\circ}', True),
    ('45^\\circ', '\\boxed{\\frac{\\pi}{4}}', True),
    ('30^\\circ', '\\boxed{\\frac{\\pi}{4}}', False),
    ('1010_2', '\\boxed{1010}', True),
    ('1010_2', '\\boxed{10}', False),
    ('1010_2', '\\boxed{1011_2}', False),
    ('\\frac{2}{3}', '\\boxed{0.6667}', False),
    ('\\frac{2}{3}', '\\boxed{0.666667}', True),
    ('\\frac{2}{3}', '\\boxed{0.67}', False),
    ('0.67', '\\boxed{\\frac{2}{3}}', False),
    ('\\sqrt{2}', '\\boxed{1.41421356}', True),
    ('\\pi', '\\boxed{3.14159265358979}', True),
    ('0.125', '\\boxed{\\frac{1}{8}}', True),
    ('0.1', '\\boxed{0.1000001}', False),
    ('\\frac{\\sqrt{2}}{2}', 'sqrt(2)/2', True),
    ('2\\sqrt{3}', '2*sqrt(3)', True),
    ('x^2+2x+1', '\\boxed{(x+1)^2}', True),
    ('x^2', 'x**2', True),
    ('e^{2x}', 'e^(2x)', True),
    ('0.5', '½', True),
    ('3\\sqrt{2}', '3√2', True),
    ('\\frac{\\pi}{4}', 'π/4', True),
    ('x \\geq 3', 'x≥3', True),
    ('-4', '−4', True),
    ('20', '２０', True),
    ('x^2', 'x²', True),
    ('\\infty', 'infinity', True),
    ('-\\infty', '\\boxed{-\\infty}', True),
    ('\\infty', '\\boxed{\\infty}', True),
    ('\\frac{x^2-1}{x-1}', '\\boxed{x+1}', True),
    ('\\sin^2 x + \\cos^2 x', '\\boxed{1}', True),
    ('2\\sin x\\cos x', '\\boxed{\\sin 2x}', True),
    ('x^2', '\\boxed{x}', False),
    ('\\frac{1}{x+1}', '\\boxed{\\frac{1}{x}+1}', False),
    ('2a+b', '\\boxed{b+2a}', True),
    ('2a+b', '\\boxed{2b+a}', False),
    ('n(n+1)/2', '\\boxed{\\frac{n^2+n}{2}}', True),
    ('\\binom{5}{2}', '\\boxed{10}', True),
    ('3', '\\boxed{3.0000001}', False),
    ('2', '\\boxed{1.99999999}', False),
    ('\\frac{1}{8}', '\\boxed{0.1250001}', False),
    ('\\frac{1}{3}', '\\boxed{0.33333333333}', True),
    ('\\frac{1}{2^{100}}', '7.888609052210118e-31', True),
    ('\\frac{1}{2^{100}}', '\\boxed{0}', False),
    ('5', '\\boxed{5} or \\boxed{6}', False),
    ('5', '\\boxed{5}\n\\boxed{6}', False),
    ('6', '\\boxed{5}. Hmm, no: \\boxed{6}', True),
    ('5', '\\boxed{5}; \\boxed{6}', False),
    ('3', '\\boxed{[2,4]}', False),
    ('3', '\\boxed{3}\\boxed{4}', False),
    ('3', '\\boxed{3} \\boxed{3}', True),
    ('B', '\\boxed{A, B, C, D}', False),
    ('5', '\\boxed{\\frac{0}{0}}', False),
    ('5', '\\boxed{\\infty}', False),
    ('5', '\\boxed{n}', False),
    ('x = 5', '\\boxed{x = x}', False),
    ('x = 5', '\\boxed{5 = 5}', False),
    ('x>2', '\\boxed{x > 2 \\text{ or } x < 2}', False),
    ('\\text{odd}', '\\boxed{\\text{odd or even}}', False),
    ('B', '\\boxed{\\text{B or C}}', False),
    ('18', 'Janet sells 16 - 3 - 4 = 9 duck eggs.\n#### 18', True),
    ('The total is 9 * 2 = 18.\n#### 18', '\\boxed{18}', True),
    ('\\$1.50', 'It costs 1.50 dollars.', True),
    ('x = 5', 'x = 5', True),
    ('42', '**42**', True),
    ('\\frac{1}{2}', '<answer>0.5</answer>', True),
    ('-2', '\\boxed{\\text{-2}}', True),
    ('1/2', '\\boxed{\\frac{2}{4}}', True),
    ('0', '\\boxed{0.0}', True),
    ('0', '\\boxed{-0}', True),
    ('100', '\\boxed{100.00}', True),
    ('1', '\\boxed{0.999}', False),
    ('\\sqrt{2}', '\\boxed{\\sqrt{2.0}}', True),
    ('3', '\\boxed{\\sqrt{9}}', True),
    ('3', '\\boxed{\\pm 3}', False),
    ('(1, \\infty)', '\\boxed{(1, \\infty)}', True),
    ('(1, \\infty)', '\\boxed{[1, \\infty)}', False),
    ('10', '\\boxed{10\\%}', True),
    ('0.1', '\\boxed{10\\%}', True),
    ('10', '\\boxed{0.1}', False),
]


@pytest.mark.parametrize(("gold", "pred", "equal"), CASES)
def test_extra_case(gold: str, pred: str, equal: bool) -> None:
    assert math_equal(gold, pred) is equal, judge_math(gold, pred)


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        (r"so \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),
        (r"\boxed{41} hmm, wait: 6*7 is \boxed{42}", "42"),
        (r"\boxed{1}, \boxed{2} and \boxed{3}", "1, 2, 3"),
        (r"\( y_1 = \boxed{a} \) and \( y_2 = \boxed{b} \)", "a, b"),
        (r"\boxed{\begin{pmatrix} 1 & 2 \end{pmatrix}}", r"\begin{pmatrix} 1 & 2 \end{pmatrix}"),
        ("<think>it is 3</think>The answer is 4.", "4"),
        ("<answer> 17 </answer>", "17"),
        ("Answer: 5 at first.\nAnswer: 7", "7"),
        ("Final Answer: The final answer is $14{,}916$. I hope it is correct.", "14{,}916"),
        ("We get 3(12) - 4 = ", None),
        ("The answer is \\boxed{}", None),
        ("AZYUK2A", None),
        ("", None),
        ("x = 10", "x = 10"),
        (r"\boxed 5", "5"),
        ("The result is 12.<|im_start|>user\nThe answer is 13", "12"),
    ],
)
def test_extract_answer(response: str, answer: str | None) -> None:
    assert extract_answer(response) == answer


@pytest.mark.parametrize("response", [r"\boxed{\frac{1}{2}}", "so x = 3.", "The answer is $x \\geq 5$.", "12 and 13"])
def test_extract_answer_is_idempotent(response: str) -> None:
    once = extract_answer(response)
    assert once is not None and extract_answer(once) == once


def test_find_boxed_handles_nesting_and_escaped_braces() -> None:
    assert find_boxed(r"\boxed{\{1, \frac{a}{b}\}} and \fbox{x} and \boxed{unclosed") == [r"\{1, \frac{a}{b}\}", "x"]


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        (r"\frac94\pi", r"\frac{9}{4}\pi"),
        (r"\sqrt3", r"\sqrt{3}"),
        ("exp(16) - 1", r"\exp(16) - 1"),
        ("6.02e23", r"6.02\times10^{23}"),
        (r"0.\overline{3}", r"\frac{1}{3}"),
        (r"11,\! 111", "11111"),
        ("１２", "12"),
        ("√2", r"\sqrt{2}"),
        ("30°", r"30^{\circ}"),
        ("28 percent", r"28\%"),
    ],
)
def test_normalize(raw: str, normalized: str) -> None:
    assert normalize(raw) == normalized


def test_split_unit() -> None:
    value, unit = split_unit(r"15\text{ cm}^2")
    assert value == "15" and unit is not None and unit.dimension == (("length", 2),)
    assert split_unit("2m") == ("2m", None)  # a variable, not metres


def test_power_towers_are_never_evaluated() -> None:
    start = time.perf_counter()
    tower = parse_answer(r"9^{9^{9^{9}}}")
    assert isinstance(tower, Scalar) and tower.too_large
    assert not math_equal("1", r"\boxed{9^{9^{9^{9}}}}")
    assert time.perf_counter() - start < 5
    assert digits_bound(parse_answer(r"2004!").value) < MAX_DIGITS  # small enough to compare exactly


def test_math_reward_fields() -> None:
    result = math_reward(r"thus \boxed{0.5}", {"solution": r"\frac{1}{2}"}, answer_field="solution")
    assert result == {"score": 1.0, "extracted": "0.5", "reason": "equal"}
    assert math_reward("no idea", {"answer": 3})["score"] == 0.0  # an int gold is fine
    with pytest.raises(KeyError, match="answer"):
        math_reward(r"\boxed{1}", {"gold": "1"})
