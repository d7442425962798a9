"""Format rewards: the R1 ``<think>...</think><answer>...</answer>`` layout, and "has a ``\\boxed{}``".

The R1 layout (DeepSeek-R1, arXiv 2501.12948, section 2.2.2) is checked strictly, because lenient regexes
reward broken layouts (see ``tests/data/format_cases.jsonl``, written against open-r1's ``format_reward`` and
trl's ``think_format_reward``): ``re.MULTILINE`` ``$`` lets text follow ``</answer>``, a non-greedy ``.*?``
spans two answers. Here the tags are counted, not pattern-matched.

Example::

    >>> check_r1_format("<think>\\n2+2=4\\n</think>\\n<answer>4</answer>").ok
    True
    >>> check_r1_format("<think>x</think><answer>4</answer> Hope this helps!").reason
    'text after </answer>'
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from rlvr.verifiers.math_extract import find_boxed
from rlvr.verifiers.registry import verifier

_TAG_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")
_END_OF_TURN = re.compile(r"(?:\s*(?:<\|im_end\|>|<\|endoftext\|>|<\|eot_id\|>|<\|end\|>|</s>|<｜end▁of▁sentence｜>|<end_of_turn>))+\s*$")


# Letters and symbols that render as nothing (Hangul fillers, the blank Braille pattern, the musical null
# notehead); with the Unicode format (Cf: U+200B, U+2060, U+FEFF, U+00AD), control (Cc) and separator (Z*)
# categories they do not make a block non-empty.
_BLANK_LOOKALIKES = frozenset("\u115f\u1160\u3164\uffa0\u2800\U0001d159")
_BLANK_CATEGORIES = frozenset(("Cf", "Cc", "Zs", "Zl", "Zp"))
# Nonspacing and enclosing marks (variation selectors U+FE00-FE0F and U+E0100-E01EF, the combining grapheme joiner
# U+034F, accents): they show only on a visible character, so text of marks alone shows nothing.
_MARK_CATEGORIES = frozenset(("Mn", "Me"))


def is_blank(text: str) -> bool:
    """True when ``text`` shows nothing: only whitespace, format characters (zero-width space, word joiner,
    byte-order mark, soft hyphen, bidi controls, tags), control characters, blank lookalikes, and combining marks
    or variation selectors with no visible character to attach to."""
    return all(
        ch in _BLANK_LOOKALIKES or unicodedata.category(ch) in _BLANK_CATEGORIES
        or unicodedata.category(ch) in _MARK_CATEGORIES
        for ch in text
    )


@dataclass(frozen=True)
class FormatVerdict:
    """``ok`` is True when the layout is valid; ``reason`` says what is wrong (``"ok"`` otherwise)."""

    ok: bool
    reason: str


def check_r1_format(
    completion: str,
    *,
    think_tag: str = "think",
    answer_tag: str = "answer",
    prefilled_think: bool = False,
) -> FormatVerdict:
    """Check that ``completion`` is one non-empty think block, then one non-empty answer block, then nothing.

    One rule for the whole completion: what shows nothing counts as nothing (:func:`is_blank`: whitespace,
    zero-width and other format characters such as U+FEFF, U+200B-U+200D, U+2060 and U+00AD, blank lookalikes,
    marks with nothing to attach to). So a block of them alone is empty, and they are no text before
    ``<think>``, between the blocks or after ``</answer>``. This is the strict choice for a reward: counting them as
    text would let a policy fill a block with zero-width spaces and be paid for an answer no reader sees, while a
    byte-order mark that a tokenizer or server puts first must not cost a sample its reward (the same mark is
    ignored between and after the blocks).

    Only such blank characters are allowed before the think block and between the two blocks; a trailing
    end-of-turn token (``<|im_end|>``, ``</s>``, ...) is ignored. Tags are case-sensitive. When
    the chat template already put ``<think>`` in the prompt (``prefilled_think``),
    the completion starts inside the think block, so the opening tag is added back before checking (a
    completion that repeats it is accepted too).

    Raises:
        ValueError: a tag name that is not a plain identifier (letters, digits, ``_``, ``-``).
    """
    for tag in (think_tag, answer_tag):
        if not _TAG_NAME.match(tag):
            raise ValueError(f"tag names must be plain identifiers like 'think', got {tag!r}")
    if think_tag == answer_tag:
        raise ValueError(f"think_tag and answer_tag must differ, both are {think_tag!r}")
    t_open, t_close, a_open, a_close = f"<{think_tag}>", f"</{think_tag}>", f"<{answer_tag}>", f"</{answer_tag}>"
    text = _without_end_of_turn(completion)  # an end-of-turn token kept by the decoder is not trailing text
    if prefilled_think and not _lstrip_blank(text).startswith(t_open):
        text = t_open + text
    for tag in (t_open, t_close, a_open, a_close):
        count = text.count(tag)
        if count != 1:
            return FormatVerdict(False, f"{tag} appears {count} times, expected once")
    body = _lstrip_blank(text)
    if not body.startswith(t_open):
        return FormatVerdict(False, f"text before {t_open}")
    think_end = body.index(t_close)
    answer_start = body.index(a_open)
    answer_end = body.index(a_close)
    if not think_end < answer_start < answer_end:
        return FormatVerdict(False, f"tags out of order, expected {t_open}..{t_close} {a_open}..{a_close}")
    if is_blank(body[len(t_open) : think_end]):
        return FormatVerdict(False, f"empty {think_tag} block")
    if not is_blank(body[think_end + len(t_close) : answer_start]):
        return FormatVerdict(False, f"text between {t_close} and {a_open}")
    if is_blank(body[answer_start + len(a_open) : answer_end]):
        return FormatVerdict(False, f"empty {answer_tag} block")
    if not is_blank(body[answer_end + len(a_close) :]):
        return FormatVerdict(False, f"text after {a_close}")
    return FormatVerdict(True, "ok")


def _lstrip_blank(text: str) -> str:
    start = 0
    while start < len(text) and is_blank(text[start]):
        start += 1
    return text[start:]


def _rstrip_blank(text: str) -> str:
    end = len(text)
    while end > 0 and is_blank(text[end - 1]):
        end -= 1
    return text[:end]


def _without_end_of_turn(text: str) -> str:
    """``text`` without the end-of-turn tokens it ends with, blank characters around them included."""
    while True:
        stripped = _rstrip_blank(text)
        m = _END_OF_TURN.search(stripped)
        if m is None:
            return stripped
        text = stripped[: m.start()]


def prompt_prefills_think(prompt: str, think_tag: str = "think") -> bool:
    """True when the rendered prompt ends with an opening think tag (chat templates of R1-style models)."""
    return prompt.rstrip().endswith(f"<{think_tag}>")


@verifier("format", score_range=(0.0, 1.0))
def r1_format(
    completion: str,
    sample: dict,
    *,
    think_tag: str = "think",
    answer_tag: str = "answer",
    prefilled_think: bool | None = None,
) -> dict:
    """R1 format reward: 1.0 for a valid ``<think>..</think><answer>..</answer>`` layout, else 0.0.

    Reads ``sample["prompt"]`` (optional) when ``prefilled_think`` is ``None``: a prompt ending in
    ``<think>`` means the template prefilled the opening tag. Returns ``{"score", "reason"}``.
    """
    if prefilled_think is None:
        prefilled_think = prompt_prefills_think(str(sample.get("prompt", "")), think_tag)
    verdict = check_r1_format(completion, think_tag=think_tag, answer_tag=answer_tag, prefilled_think=prefilled_think)
    return {"score": 1.0 if verdict.ok else 0.0, "reason": verdict.reason}


@verifier("boxed_format", score_range=(0.0, 1.0))
def boxed_format(completion: str, sample: dict) -> float:
    """1.0 if ``completion`` contains a ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces and
    non-empty content, else 0.0. Reads no sample fields."""
    return 1.0 if any(not is_blank(content) for content in find_boxed(completion)) else 0.0
