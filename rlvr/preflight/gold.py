"""Every answer verifier must score the dataset's own gold answer, written as the template asks for it
(``\\boxed{gold}`` for ``boxed``; ``<think>..</think><answer>\\boxed{gold}</answer>`` for ``r1``), as correct. A gold
that does not verify against itself is a row the run cannot learn from, or a verifier wired to the wrong field; an
unparseable gold that scores 1.0 or 0.0 is a known bug class (open-r1 #86, #215, #293)."""

from __future__ import annotations

from typing import Any

from rlvr.config import Recipe
from rlvr.data.prompts import Prompt
from rlvr.preflight.report import Report
from rlvr.verifiers.format_tags import prompt_prefills_think
from rlvr.verifiers.math_extract import extract_answer
from rlvr.verifiers.registry import get_verifier
from rlvr.verifiers.reward import RewardFunction, VerifierSpec

NOT_ANSWER_CHECKS = {"overlong": "shapes length, has no gold", "length_penalty": "shapes length, has no gold",
                     "countdown": "the rows hold no gold equation", "code": "would run the sandbox"}
"""Built-in verifiers the gold check leaves out, and why."""
WRONG_ANSWER = "-8675309.25"
"""A number no gold is: the negative control a correctness verifier must score below its best."""
BUILT_IN_ANSWER_CHECKS = {"math"}
"""Verifiers whose failure on every sampled gold is an error: the correctness reward would be constant, so no step
could learn. A format reward failing every gold is a warning (the run still learns from the answer reward), and so is
a custom verifier's (its answer format is its own). These verifiers also get the negative control: a wrong answer that
scores as well as the gold means the verifier accepts anything for that gold."""


def gold_completion(gold: Any, recipe: Recipe, prompt_text: str) -> str:
    """The completion a perfect policy would write for ``gold`` under the recipe's template."""
    answer = extract_answer(str(gold)) or str(gold).strip()  # a whole reference solution: its final answer
    boxed = f"\\boxed{{{answer}}}"
    if recipe.data.template == "r1":
        opening = "" if prompt_prefills_think(prompt_text) else "<think>"
        return f"{opening} The reference answer. </think> <answer> {boxed} </answer>"
    return f"The answer is {boxed}."


def _best_score(fn: Any) -> float:
    high = (getattr(fn, "score_range", None) or (None, None))[1]
    return 1.0 if high is None else float(high)


def check_gold(report: Report, recipe: Recipe, prompts: list[Prompt], specs: list[VerifierSpec],
               reward_fn: RewardFunction, row_number: dict[int, int], sample_rows: int = 16) -> None:
    """Score the gold of the first ``sample_rows`` training prompts with every answer verifier in ``reward_fn``.

    Adds ``error`` when a verifier of :data:`BUILT_IN_ANSWER_CHECKS` fails every sampled gold, ``warn`` when some
    fail or another verifier fails any (up to three examples, each with its dataset row number, the gold
    and the verifier's reason), ``ok`` otherwise, ``skip`` for verifiers with no gold to check. For the verifiers of
    :data:`BUILT_IN_ANSWER_CHECKS`, :data:`WRONG_ANSWER` written the same way must score below the best: ``warn``
    naming the rows where it does not, ``error`` when it does on every row.

    Args:
        row_number: ``id(row) -> its 0-based index in the dataset`` (rows are shuffled by the split).
    """
    field = recipe.data.answer_field
    if not specs:
        report.add("skip", "gold", "no verifiers (a reward model or the environment scores the completions): no gold "
                                   "to check")
        return
    checked = [(i, s) for i, s in enumerate(specs) if s.name not in NOT_ANSWER_CHECKS]
    for s in specs:
        if s.name in NOT_ANSWER_CHECKS:
            report.add("skip", "gold", f"{s.name}: not checked ({NOT_ANSWER_CHECKS[s.name]})")
    if not checked:
        return
    if field is None:
        report.add("skip", "gold", "data.answer_field is null: no gold to check "
                                   f"({', '.join(s.name for _, s in checked)})")
        return
    sample = prompts[:sample_rows]
    completions = [gold_completion(p.row[field], recipe, p.text) for p in sample]
    samples = [{**p.row, "prompt": p.text, "completion_tokens": 16, "max_new_tokens": recipe.rollout.max_new_tokens,
                "finish_reason": "stop"} for p in sample]
    controls = [gold_completion(WRONG_ANSWER, recipe, p.text) for p in sample]
    results = reward_fn.score(completions + controls, samples + samples)
    results, control_results = results[:len(sample)], results[len(sample):]
    labels = reward_fn.labels
    for index, spec in checked:
        label = labels[index]
        best = _best_score(get_verifier(spec.name))
        bad = []
        for p, res in zip(sample, results, strict=True):
            score = res.scores.get(label)
            if score is None or score < best - 1e-9:
                why = res.failures.get(label) or res.extras.get(f"{label}/reason") or (
                    "skipped (None)" if score is None else f"score {score:g}")
                bad.append(f"row {row_number.get(id(p.row), p.index)}: gold {str(p.row[field])[:60]!r} -> "
                           f"{'None' if score is None else f'{score:g}'} ({str(why)[:120]})")
        if _check_return_type(report, label, sample + sample, results + control_results, row_number):
            continue
        if spec.name in BUILT_IN_ANSWER_CHECKS:
            _check_control(report, label, best, sample, control_results, row_number, field)
        if not bad:
            report.add("ok", "gold", f"{label}: the gold of all {len(sample)} sampled rows scores {best:g}")
            continue
        every = len(bad) == len(sample)
        level = "error" if every and spec.name in BUILT_IN_ANSWER_CHECKS else "warn"
        head = (f"{label}: the gold answer scores below {best:g} on {'every one' if every else len(bad)} of "
                f"{len(sample)} sampled rows" + (" (the reward would be constant: check data.answer_field, the "
                                                  "verifier's kwargs and the template)" if every else ""))
        report.add(level, "gold", "\n".join([head, *bad[:3]] + ([f"... and {len(bad) - 3} more"] if len(bad) > 3
                                                                 else [])))


WRONG_TYPE = "error: returned "
"""The start of the failure of a verifier that returned a type it may not (see :func:`rlvr.verifiers.reward._judge`)."""


def _check_return_type(report: Report, label: str, sample: list[Prompt], results: list[Any],
                       row_number: dict[int, int]) -> bool:
    """An ``error`` when the verifier returned a value of a type it may not (a string, a list, a dict without
    ``score``) on any sampled completion: in training every such call fails. Returns whether it did."""
    wrong = [(p, res.failures[label]) for p, res in zip(sample, results, strict=True)
             if res.failures.get(label, "").startswith(WRONG_TYPE)]
    if not wrong:
        return False
    p, why = wrong[0]
    report.add("error", "gold", f"{label}: {why[len('error: '):]} on {len(wrong)} of {len(results)} sampled "
                                f"completions (e.g. row {row_number.get(id(p.row), p.index)}): a verifier returns a "
                                f"float, None (cannot score) or a dict with a 'score'")
    return True


def _check_control(report: Report, label: str, best: float, sample: list[Prompt], results: list[Any],
                   row_number: dict[int, int], field: str) -> None:
    """Report the rows where :data:`WRONG_ANSWER` scores ``best`` (the verifier accepts anything for that gold)."""
    lenient = [f"row {row_number.get(id(p.row), p.index)}: gold {str(p.row[field])[:60]!r}"
               for p, res in zip(sample, results, strict=True)
               if (res.scores.get(label) is not None and res.scores[label] >= best - 1e-9)]
    if not lenient:
        return
    every = len(lenient) == len(sample)
    head = (f"{label}: a wrong answer ({WRONG_ANSWER}) scores {best:g} against the gold on "
            f"{'every one' if every else len(lenient)} of {len(sample)} sampled rows: the verifier accepts anything "
            f"there (a gold it cannot parse?)")
    report.add("error" if every else "warn", "gold", "\n".join([head, *lenient[:3]]))
