"""The math answer verifier: extract the final answer, parse both sides, compare.

Example::

    >>> math_equal("\\\\frac{1}{2}", "so the answer is \\\\boxed{0.5}")
    True
    >>> math_equal("20 \\\\text{ cm}", "\\\\boxed{20 \\\\text{ m}}")
    False

Pipeline: :func:`rlvr.verifiers.math_extract.extract_answer` (both sides; golds can be whole solutions) ->
:func:`rlvr.verifiers.math_parse.parse_answer` (structure + latex2sympy leaves) ->
:func:`rlvr.verifiers.math_compare.answers_equal`, then :func:`rlvr.verifiers.math_compare.equal_up_to_constants`
(general solutions with renamed arbitrary constants). If our parser cannot read an answer, two answers are
equal only when their normalized texts are identical. A gold given as boxes named in one sentence
(``\\boxed{4} red and \\boxed{9} blue``) is an ordered answer: ``4, 9``, not ``9, 4``. A response whose box
never closes has no answer (reason ``unclosed \\boxed``).

Extraction (:mod:`rlvr.verifiers.math_extract`): :func:`judge_math` reads a response leniently by default
(judging outside text: the last sentence with math counts); the registered ``math`` verifier, the training
reward, reads only final-answer markers (``extraction="marked"``: a box, a closed ``<answer>`` block, "the
answer is"), and a completion cut at the length limit (``finish_reason == "length"`` in the sample) has an
answer only where such a marker closed before the cut.

``math_equal`` has no timeout of its own (sympy can be slow on adversarial input); the registered ``math``
verifier runs inside :class:`rlvr.verifiers.reward.RewardFunction`'s worker processes, which kill a call that
runs past its deadline. Exact numbers that would need more than ``MAX_DIGITS`` digits are never evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass

from rlvr.verifiers.format_tags import prompt_prefills_think
from rlvr.verifiers.math_compare import CompareConfig, answers_equal, equal_up_to_constants
from rlvr.verifiers.math_extract import EXTRACTION_MODES, extract_answer, has_unclosed_box, labelled_box_parts
from rlvr.verifiers.math_huge import huge_equal
from rlvr.verifiers.math_normalize import normalize
from rlvr.verifiers.math_parse import Answer, AnswerParseError, Scalar, Seq, parse_answer
from rlvr.verifiers.registry import verifier

_DECIMAL_COMMA = re.compile(r"^\$?-?\d+,\d+\$?$")

__all__ = ["MathVerdict", "extract_answer", "judge_math", "math_equal", "math_reward"]


@dataclass(frozen=True)
class MathVerdict:
    """``equal`` is None when the gold itself cannot be judged; ``reason`` says why it is not True."""

    equal: bool | None
    gold_answer: str | None
    pred_answer: str | None
    reason: str


def judge_math(
    gold: str | int | float,
    pred: str,
    *,
    min_sig_digits: int = 6,
    problem: str | None = None,
    extraction: str = "lenient",
    truncated: bool = False,
    prefilled_think: bool = False,
) -> MathVerdict:
    """Judge a response (or a bare answer) ``pred`` against ``gold`` and say why.

    Args:
        gold: the reference answer or a full reference solution (its last ``\\boxed{}`` is used); ints and
            floats are converted with ``str()``.
        pred: a whole model response or just its answer.
        min_sig_digits: significant digits a decimal needs to match a non-equal exact value approximately.
        problem: the question, when known. Arbitrary constants may be renamed (``y = A e^x`` for
            ``y = C e^x``) only when the name appears in neither the problem nor the other side.
        extraction: how the answer is found in ``pred``: ``"lenient"`` or ``"marked"`` (final-answer markers
            only), see :func:`rlvr.verifiers.math_extract.extract_answer`.
        truncated: ``pred`` was cut at the length limit: it has an answer only where a marker closed before
            the cut.
        prefilled_think: the prompt ended in ``<think>``, so ``pred`` starts inside the reasoning block.

    Raises:
        TypeError: ``pred`` is not a str, ``gold`` is not a str/int/float, or ``problem`` is not a str.
        ValueError: ``extraction`` is not ``"lenient"`` or ``"marked"``.
    """
    if isinstance(gold, bool) or not isinstance(gold, (str, int, float)):
        raise TypeError(f"gold must be a str, int or float, got {type(gold).__name__}")
    if not isinstance(pred, str):
        raise TypeError(f"pred must be a str, got {type(pred).__name__}")
    if problem is not None and not isinstance(problem, str):
        raise TypeError(f"problem must be a str or None, got {type(problem).__name__}")
    gold_text = extract_answer(str(gold)) or str(gold).strip()
    pred_text = extract_answer(pred, extraction=extraction, truncated=truncated, prefilled_think=prefilled_think)
    if not gold_text:
        return MathVerdict(None, None, pred_text, "empty gold")
    if pred_text is None:
        if has_unclosed_box(pred):
            reason = "unclosed \\boxed"
        elif truncated:
            reason = "cut off before a final answer"
        else:
            reason = "no final-answer marker" if extraction == "marked" else "no answer found"
        return MathVerdict(False, gold_text, None, reason)
    cfg = CompareConfig(min_sig_digits=min_sig_digits)
    gold_answer: Answer | None
    parts = labelled_box_parts(str(gold))
    try:
        if parts is not None:  # "\boxed{4} red and \boxed{9} blue": named parts, in this order
            gold_text = ", ".join(parts)
            gold_answer = Seq("tuple", tuple(parse_answer(p) for p in parts))
        else:
            gold_answer = parse_answer(gold_text)
    except AnswerParseError:
        gold_answer = None
    try:
        decimal_comma = isinstance(gold_answer, Scalar)
        pred_answer: Answer | None = parse_answer(pred_text, decimal_comma=decimal_comma)
    except AnswerParseError:
        pred_answer = None
    if isinstance(pred_answer, Scalar) and _DECIMAL_COMMA.match(gold_text.strip()):
        gold_answer = parse_answer(gold_text, decimal_comma=True)  # gold "1,22" against "1.22": one number
    if gold_answer is None or pred_answer is None:
        same = _compact(normalize(gold_text)) == _compact(normalize(pred_text))
        if same:
            return MathVerdict(True, gold_text, pred_text, "same text")
        if gold_answer is None:
            return MathVerdict(None, gold_text, pred_text, "gold unparseable")
        return MathVerdict(False, gold_text, pred_text, "answer unparseable")
    gold_huge = isinstance(gold_answer, Scalar) and gold_answer.too_large
    if gold_huge or isinstance(pred_answer, Scalar) and pred_answer.too_large:
        # compared exactly in a canonical power form (math_huge): equal, provably different, or undecided
        if answers_equal(gold_answer, pred_answer, cfg):
            return MathVerdict(True, gold_text, pred_text, "equal")
        if not gold_huge:
            return MathVerdict(False, gold_text, pred_text, "answer too large to evaluate")
        if isinstance(pred_answer, Scalar) and huge_equal(gold_answer.value, pred_answer.value) is False:
            return MathVerdict(False, gold_text, pred_text, "not equal")
        return MathVerdict(None, gold_text, pred_text, "gold too large to evaluate")
    if answers_equal(gold_answer, pred_answer, cfg):
        return MathVerdict(True, gold_text, pred_text, "equal")
    if equal_up_to_constants(gold_answer, pred_answer, cfg, problem=problem):
        return MathVerdict(True, gold_text, pred_text, "equal up to renamed constants")
    return MathVerdict(False, gold_text, pred_text, "not equal")


def math_equal(gold: str | int | float, pred: str) -> bool:
    """True when the response or answer ``pred`` gives the answer ``gold`` (see :func:`judge_math`)."""
    return judge_math(gold, pred).equal is True


def _compact(text: str) -> str:
    return "".join(text.split()).lower()


def _gold_of(sample: dict, answer_field: str) -> str | int | float:
    if answer_field not in sample:
        raise KeyError(
            f"math verifier needs sample[{answer_field!r}] (the gold answer); the sample has {sorted(sample)}"
        )
    return sample[answer_field]


def _problem_of(sample: dict, problem_field: str | None) -> str | None:
    problem = sample.get(problem_field) if problem_field else None
    return problem if isinstance(problem, str) else None


def _reading(sample: dict, extraction: str) -> dict:
    """How a training sample's completion is read: its extraction mode, whether it was cut at the length limit,
    and whether the prompt opened the reasoning block."""
    if extraction not in EXTRACTION_MODES:
        raise ValueError(f"math verifier: extraction must be one of {EXTRACTION_MODES}, got {extraction!r}")
    return {
        "extraction": extraction,
        "truncated": sample.get("finish_reason") == "length",
        "prefilled_think": prompt_prefills_think(str(sample.get("prompt", ""))),
    }


def _cache_key(
    completion: str,
    sample: dict,
    *,
    answer_field: str = "answer",
    min_sig_digits: int = 6,
    problem_field: str | None = "prompt",
    extraction: str = "marked",
) -> Hashable:
    gold = _gold_of(sample, answer_field)
    answer = extract_answer(completion, **_reading(sample, extraction))
    return (str(gold), answer, min_sig_digits, _problem_of(sample, problem_field))


UNDECIDED_REASONS = frozenset({"answer unparseable", "answer too large to evaluate"})
"""Reasons of a 0 that is not a decision: the response has an answer, but the rules cannot read or evaluate it (a
``fallback_for: math`` verifier, e.g. a judge, scores these)."""


def _undecided(score: float | None, extras: dict) -> bool:
    return score is None or extras.get("reason") in UNDECIDED_REASONS


@verifier("math", cache_key=_cache_key, score_range=(0.0, 1.0), undecided=_undecided)
def math_reward(
    completion: str,
    sample: dict,
    *,
    answer_field: str = "answer",
    min_sig_digits: int = 6,
    problem_field: str | None = "prompt",
    extraction: str = "marked",
) -> dict:
    """1.0 when the completion's final answer equals ``sample[answer_field]``, else 0.0; ``None`` when the
    gold cannot be judged. Returns ``{"score", "extracted", "reason"}``.

    ``extraction``: ``"marked"`` (default) reads only final-answer markers (a box, a closed ``<answer>`` block,
    "the answer is"); ``"lenient"`` also takes the last sentence with math. A sample with
    ``finish_reason == "length"`` is read as cut off: only a marker closed before the cut is an answer.

    ``sample[problem_field]`` (the prompt, optional; ``None`` to ignore it) is the question: an arbitrary
    constant named in it is never renamed to match the gold (see :func:`judge_math`).

    Raises ``KeyError`` naming the field when the sample has no gold answer.
    """
    verdict = judge_math(
        _gold_of(sample, answer_field),
        completion,
        min_sig_digits=min_sig_digits,
        problem=_problem_of(sample, problem_field),
        **_reading(sample, extraction),
    )
    score = None if verdict.equal is None else float(verdict.equal)
    return {"score": score, "extracted": verdict.pred_answer, "reason": verdict.reason}
