"""Reading a judge model's verdict, and preparing the text it judges.

Three ways to read a verdict (the ``judge`` verifier's ``verdict``):

- ``score_line``: the last line of the form ``Score: N`` (``**Score:** 7``, ``score = 7.5`` too);
- ``json``: the last JSON object in the reply with a numeric ``"score"``;
- ``yes_no_logprob``: the probability the judge puts on "yes" against "no" as its first token (from the endpoint's
  ``top_logprobs``), which needs no text at all and is the cheapest on a small judge.

A reply with no verdict, a number outside the declared range, or a first token that is neither yes nor no raises
:class:`VerdictError`: the judge failed (or refused), which is a failure of the machinery, never a score of 0.

>>> read_score_line("The answer matches.\\nScore: 9", (0, 10))
9.0
>>> strip_reasoning("<think>2+2 is 4, or is it 5</think>The answer is 4.")
'The answer is 4.'
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

VERDICTS = ("score_line", "json", "yes_no_logprob")

_SCORE_LINE = re.compile(r"(?im)^[ \t>*_#-]*score[ \t*_]*[:=][ \t*_]*([-+]?\d+(?:\.\d+)?)(?:[ \t]*/[ \t]*\d+(?:\.\d+)?)?"
                         r"[ \t*_.]*$")
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.S)
# Markers that chat templates use as control tokens (<|im_end|>, <｜end▁of▁sentence｜>, [INST], </s>); a zero-width
# space inside keeps a response from closing the judge's turn and writing its own verdict.
_MARKERS = re.compile(r"<\||\|>|<｜|｜>|\[/?INST\]|</?s>")
_ZWSP = "\u200b"


class VerdictError(ValueError):
    """The judge's reply holds no verdict that can be read (or one outside the score range, or a refusal)."""


def strip_reasoning(text: str) -> str:
    """``text`` without its reasoning: every closed ``<think>...</think>`` block removed, anything before a
    ``</think>`` that was never opened (the prompt prefilled ``<think>``) dropped, and an unclosed ``<think>`` cut off
    with everything after it (reasoning that never ended has no answer)."""
    text = _THINK_BLOCK.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text.strip()


def defuse_markers(text: str) -> str:
    """``text`` with chat-template control markers (``<|...|>``, ``<｜...｜>``, ``[INST]``, ``</s>``) broken by a
    zero-width space, so that text placed in a judge's prompt stays text when the server tokenizes it."""
    return _MARKERS.sub(lambda m: m.group(0)[0] + _ZWSP + m.group(0)[1:], text)


def check_range(score_range: object) -> tuple[float, float]:
    """``(low, high)`` from a two-number list or tuple with low < high. Raises ValueError otherwise."""
    if (not isinstance(score_range, (list, tuple)) or len(score_range) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                       for v in score_range)
            or not score_range[0] < score_range[1]):
        raise ValueError(f"score_range must be two finite numbers [low, high] with low < high, got {score_range!r}")
    return float(score_range[0]), float(score_range[1])


def _in_range(value: float, score_range: tuple[float, float], where: str) -> float:
    low, high = score_range
    if not low <= value <= high:
        raise VerdictError(f"the judge's score {value:g} ({where}) is outside the score range [{low:g}, {high:g}]")
    return value


def read_score_line(reply: str, score_range: tuple[float, float]) -> float:
    """The number of the last ``Score: N`` line of ``reply`` (the judge's own reasoning stripped first). Raises
    VerdictError when there is none or it is outside ``score_range``."""
    found = _SCORE_LINE.findall(strip_reasoning(reply))
    if not found:
        raise VerdictError("no 'Score: N' line in the judge's reply")
    return _in_range(float(found[-1]), score_range, "its Score line")


def read_json_score(reply: str, score_range: tuple[float, float]) -> float:
    """The ``"score"`` of the last JSON object in ``reply`` that has a numeric one. Raises VerdictError when there is
    none or it is outside ``score_range``."""
    text = strip_reasoning(reply)
    decoder = json.JSONDecoder()
    found = None
    for start in [m.start() for m in re.finditer(r"\{", text)]:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        score = value.get("score") if isinstance(value, dict) else None
        if isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score):
            found = float(score)
    if found is None:
        raise VerdictError('no JSON object with a numeric "score" in the judge\'s reply')
    return _in_range(found, score_range, "its JSON score")


MIN_YES_NO_MASS = 0.01
"""Least probability the judge's first token must put on yes and no together for a verdict to be read."""


def yes_probability(top_logprobs: Mapping[str, float]) -> float:
    """P(yes) / (P(yes) + P(no)) over the first token's candidates (``token -> logprob``; "yes", " Yes", "YES" are
    all yes). Raises VerdictError when yes and no together have less than :data:`MIN_YES_NO_MASS` (the judge meant
    something else: a refusal, a preamble)."""
    yes = no = 0.0
    for token, logprob in top_logprobs.items():
        word = token.strip().lower()
        if word == "yes":
            yes += math.exp(logprob)
        elif word == "no":
            no += math.exp(logprob)
    if yes + no < MIN_YES_NO_MASS:
        shown = ", ".join(f"{t!r}: {math.exp(lp):.3f}" for t, lp in sorted(top_logprobs.items(), key=lambda kv: -kv[1])[:5])
        raise VerdictError(f"the judge's first token is neither yes nor no (P(yes)+P(no) = {yes + no:.4f}; top: {shown})")
    return yes / (yes + no)


def normalized(value: float, score_range: tuple[float, float]) -> float:
    """``value`` on ``score_range`` mapped to [0, 1] (low -> 0, high -> 1)."""
    low, high = score_range
    return (value - low) / (high - low)
