"""Find the final answer in a whole model response.

Order of evidence (the first that exists wins):

1. The text after the last ``</think>`` (a reasoning block is never the answer), cut at the first
   chat-template token such as ``<|im_start|>`` (the model began a new turn).
2. The final answer is the one given last: a closed ``\\boxed{}`` after the last ``</answer>`` wins
   (``<answer>4</answer> so \\boxed{3}`` -> ``3``); otherwise the last ``<answer>...</answer>`` block
   narrows the search to its content.
3. A ``\\boxed{`` that never closes (a completion cut off at the length limit) is no answer at all: the
   cut-off ``\\boxed{12`` may have been ``\\boxed{123}`` (see :func:`has_unclosed_box`).
4. The last *group* of ``\\boxed{}``/``\\fbox{}``: boxes joined only by separators (commas, "and",
   ``\\quad``, ``\\text{ and }``, labels like ``y_2 =``) form one multi-part answer
   (``\\boxed{1}, \\boxed{2}``); boxes split by prose are self-corrections and only the last counts
   (``\\boxed{41} ... wait ... \\boxed{42}`` -> ``42``).
5. The last anchor phrase: "final answer is", "the answer is", "Answer:", "the correct choice is".
6. A region that is itself a bare answer (``\\frac{1}{2}``, ``x = 10``, ``$1$ and $2$``,
   ``AB = 4, CD = 5``), or one option with its text (``E: the third listed risk factor``).
7. An answer stated first and then explained, in a short opening (at most two sentences) before a cue
   such as "Here is how", "To see why", "Explanation:", ", because": "There are 10 objects. Here is how
   to count them: ... (5) ... (4)" -> ``10``; unless the explanation concludes anew ("So there are 12.").
8. The last sentence that holds math or a number in words: its math after the last "is"/"=", else its last
   ``$...$``, else its last number, in digits or in words ("We have 3 apples ... so there are twelve" ->
   ``twelve``). A final sentence ending in an operator (``... = ``) is a truncated response: no answer.

Two extraction modes (``extraction=``):

* ``"lenient"`` (the default of :func:`extract_answer`, for judging outside text, e.g. ``rlvr verify math``):
  all of the above.
* ``"marked"`` (the training default of the ``math`` verifier): only a final-answer marker gives an answer:
  a closed ``\\boxed{}``, a closed ``<answer>...</answer>`` block, or an anchor phrase (5). Steps 6-8 guess
  an answer from unmarked prose; a policy trained on such guesses is rewarded for answers it never gave.
  A reasoning block that never closes (``<think>`` without ``</think>``, or a prompt that prefilled
  ``<think>``) has no answer, and only the text after ``</think>`` is searched.

A completion cut at the length limit (``truncated=True``) is read in ``"marked"`` mode whatever was asked,
and an anchor counts only when its sentence ended before the cut: "... might be 42. But wait, I should
double-check" has no answer, nor has "The answer is 4" (it may have been 42).

:func:`extract_answer` is idempotent on what it returns, and runs in time linear in the response length
(no nested quantifiers), so it is safe to call in the trainer process.
"""

from __future__ import annotations

import re

from rlvr.verifiers.math_words import find_number_phrases, value_from_words

MAX_CHARS = 30_000
"""Only the last 30,000 characters of a response are searched (the final answer is at the end); this
bounds the work on adversarial inputs."""

_CHAT_TOKENS = re.compile(
    r"<\|im_start\|>|<\|im_end\|>|<\|endoftext\|>|<\|eot_id\|>|<\|end\|>|<\|user\|>|<\|assistant\|>|"
    r"<｜end▁of▁sentence｜>|<end_of_turn>|<start_of_turn>|</s>"
)
# A turn header the completion opens with ("<|im_start|>assistant"): not an end of turn, the text follows it.
_LEADING_HEADER = re.compile(
    r"^\s*(?:<\|im_start\|>\s*assistant\b|<\|assistant\|>|<start_of_turn>\s*model\b|<｜Assistant｜>)[ \t]*\n?"
)
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_ANSWER_OPEN = "<answer>"
_ANSWER_CLOSE = "</answer>"
_HOPE = re.compile(r"\s*I hope (?:it|this|that) is correct\.?", re.IGNORECASE)

# A separator between two boxes of one multi-part answer.
_BOX_SEPARATOR = re.compile(
    r"^(?:\s|[,;&$]|\*\*|\\\(|\\\)|\\\[|\\\]|\\\\|\\quad|\\qquad|\\[,;:! ]|~|\band\b|\bor\b|"
    r"\\(?:text|textrm|mbox|mathrm)\s*\{[^{}]{0,40}\}|"
    r"[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*=)*$"
)
# Words between the boxes of one gold sentence: "\boxed{1} papers and \boxed{2} bins".
_PART_WORDS = re.compile(r"^[\s,;$]*(?:[A-Za-z][A-Za-z'\-]*[\s,;$]*){1,6}$")
_CORRECTION_WORDS = re.compile(
    r"\b(?:wait|but|however|actually|no|not|wrong|mistake|instead|recheck|rechecking|correct|hmm|oops)\b",
    re.IGNORECASE,
)

# Anchors, all matched case-insensitively; the candidate answer starts at the end of the match.
_ANCHORS = re.compile(
    r"final\s+answer\s*(?:is|:|：)\s*:?|"
    r"\*\*final\s+answer\*\*\s*:?|"
    r"(?:the\s+)?(?:correct\s+)?answer\s+(?:is|should\s+be|would\s+be|will\s+be)\s*:?|"
    r"\banswer\s*(?:[:：]|\*\*\s*:|:\s*\*\*)|"
    r"\banswer\s+(?=\$|\\\(|\\\[)|"
    r"(?:correct\s+)?(?:choice|option)\s+is\s*:?|"
    r"^\s*####",
    re.IGNORECASE | re.MULTILINE,
)

_ANCHOR_KEYS = re.compile(r"answer|choice|option|####", re.IGNORECASE)
_MATH_ENV = re.compile(  # bounded lengths keep scans linear on unclosed delimiters
    r"(?<!\\)\$\$(?P<dd>[^$]{1,3000}?)(?<!\\)\$\$|"
    r"\\\[(?P<br>.{1,3000}?)\\\]|"
    r"\\\((?P<pa>.{1,3000}?)\\\)|"
    r"(?<![\\$])\$(?P<d>(?:\\\$|[^$]){1,3000}?)(?<!\\)\$",
    re.DOTALL,
)
_NUMBER = re.compile(
    r"(?<![A-Za-z0-9_.])"
    r"-?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:[.,]\d+)?|\.\d+)"
    r"(?:\s*/\s*\d+(?![.,]\d))?"
    r"(?:\s*(?:%|\\%|percent\b))?"
    r"(?![A-Za-z0-9_])"
)
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}(?![A-Za-z^_{])")  # "Ke^{2x}" is math, not a word
_CHOICE_WITH_TEXT = re.compile(r"\(?[A-J]\)?\s*[:.)]\s+[A-Za-z]")  # an option letter, then its text
_CONNECTOR_WORDS = frozenset({"and", "or", "to"})
# A sentence that starts explaining an answer already given; and one that concludes anew.
_EXPLANATION_CUE = re.compile(
    r"(?:(?<=[.!?])\s+|\n\s*|,\s+(?:and\s+)?)(?:"
    r"here(?:\s+is|'s|\s+are)\s+(?:how|why|the\s+(?:breakdown|reasoning|explanation|count|steps?)|a\s+breakdown)|"
    r"to\s+see\s+(?:why|this|how)|(?:this\s+is\s+)?because|let\s+me\s+(?:explain|show|count|break)|to\s+explain|"
    r"the\s+reason\s+is|(?:explanation|reasoning|breakdown|justification|why|how)\s*:)",
    re.IGNORECASE,
)
_CONCLUSION = re.compile(
    r"(?:(?<=[.!?:])\s+|\n\s*)(?:(?:so|therefore|thus|hence|in\s+total|altogether|in\s+all|overall|finally|"
    r"in\s+conclusion|that\s+(?:gives|makes)|this\s+(?:gives|makes)|we\s+get)\b|"
    r"(?:the\s+)?(?:result|total|answer|sum)\s*(?:is\b|:|=))",
    re.IGNORECASE,
)
_TRUNCATED_END = re.compile(r"(?:[=+\-*/^(\\,]|\\(?:times|cdot|frac|sqrt))\s*$")


def find_boxed_spans(text: str) -> list[tuple[int, int, str]]:
    """All ``\\boxed{...}``/``\\fbox{...}`` (braces nested to any depth, ``\\{`` ignored) and ``\\boxed x``
    (one token) in ``text``, as ``(start, end, content)``; a box inside another box is left out. An unclosed
    box (truncated output) is skipped. Linear time."""
    if not _BOX_COMMAND.search(text):
        return []
    pairs = _brace_pairs(text)
    spans: list[tuple[int, int, str]] = []
    outer_end = -1
    for match in _BOX_COMMAND.finditer(text):
        if match.start() < outer_end:
            continue  # \boxed{\boxed{2}}: the outer box is the answer
        i = match.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            end = pairs.get(i)
            if end is not None:
                spans.append((match.start(), end + 1, text[i + 1 : end]))
                outer_end = end + 1
        elif match.end() < len(text) and text[match.end()] == " ":
            token = re.match(r"[^\s$]+", text[i : i + 200])
            if token:
                spans.append((match.start(), i + token.end(), token.group()))
    return spans


def _brace_pairs(text: str) -> dict[int, int]:
    """Position of each ``{`` -> position of its matching ``}`` (escaped braces ignored), in one pass."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_TOKEN.finditer(text):
        token = m.group()
        if token == "{":
            stack.append(m.start())
        elif token == "}" and stack:
            pairs[stack.pop()] = m.start()
    return pairs


def find_boxed(text: str) -> list[str]:
    """Contents of all boxes in ``text``, in order (see :func:`find_boxed_spans`)."""
    return [content for _, _, content in find_boxed_spans(text)]


EXTRACTION_MODES = ("lenient", "marked")


def extract_answer(
    completion: str, *, extraction: str = "lenient", truncated: bool = False, prefilled_think: bool = False
) -> str | None:
    """The final answer of a model response, as a string, or ``None`` when it gives none.

    See the module docstring for the order of evidence. Multi-part boxed answers come back joined with
    ``", "``. Used for scoring and for majority voting (maj@k), so equal answers should come back as
    equal strings more often than not; equivalence is decided by :func:`rlvr.verifiers.math_answer.math_equal`.

    Args:
        completion: the model's response.
        extraction: ``"lenient"`` (every step of the module docstring) or ``"marked"`` (final-answer markers
            only: boxes, closed ``<answer>`` blocks, anchor phrases; an unclosed ``<think>`` is no answer).
        truncated: the completion was cut at the length limit (``finish_reason == "length"``): read as
            ``"marked"``, and an anchor's sentence must have ended before the cut.
        prefilled_think: the prompt ended in ``<think>`` (the chat template opened the reasoning block), so
            the completion starts inside it (``"marked"`` mode only).

    Raises:
        TypeError: ``completion`` is not a str.
        ValueError: ``extraction`` is not one of ``EXTRACTION_MODES``.
    """
    if not isinstance(completion, str):
        raise TypeError(f"completion must be a str, got {type(completion).__name__}")
    if extraction not in EXTRACTION_MODES:
        raise ValueError(f"extraction must be one of {EXTRACTION_MODES}, got {extraction!r}")
    turn_ended = False
    if extraction == "marked" or truncated:
        region = _marked_region(completion, prefilled_think)
        if region is None:
            return None
        text, in_answer_block, turn_ended = region
    else:
        text, in_answer_block = _final_region(completion), True
    if _has_unclosed_box(text):
        return None  # a cut-off "\boxed{12" may have been "\boxed{123}": no answer, never a guess
    boxes = find_boxed_spans(text)
    anchor = _last_anchor(text)
    cut_mid_sentence = truncated and not turn_ended  # an end-of-turn token ends the last sentence
    if anchor is not None and cut_mid_sentence and not anchor[2] and (not boxes or anchor[0] >= boxes[-1][1]):
        return None  # the last stated answer was cut mid-sentence: "The answer is 4" may have been 42
    if boxes:
        if anchor is not None and anchor[0] >= boxes[-1][1]:  # "\\boxed{200} ... The final answer is 10,455"
            reduced = _reduce(anchor[1])
            if reduced is not None:
                return reduced
        group = _last_box_group(text, boxes)
        parts = [_strip_outer(_without_answer_phrase(content)) for content in group]
        parts = [p for p in parts if p]
        return ", ".join(parts) if parts else None
    if anchor is not None:
        return _reduce(anchor[1])
    if not in_answer_block:
        return None  # "marked": unmarked prose is no answer
    stripped = _strip_outer(text)
    if stripped and _is_bare_answer(stripped):
        return stripped
    if _CHOICE_WITH_TEXT.match(stripped) and "\n" not in stripped and len(stripped) <= 300:
        return stripped  # the whole response is one option: "E: the third listed risk factor"
    stated = _stated_before_explanation(text)
    if stated is not None:
        return stated
    return _last_statement(text)


def _final_region(completion: str) -> str:
    text = _LEADING_HEADER.sub("", completion[-MAX_CHARS:])
    cut = _CHAT_TOKENS.search(text)
    if cut:
        text = text[: cut.start()]
    think_end = text.rfind("</think>")
    if think_end >= 0 and text[think_end + len("</think>") :].strip():
        text = text[think_end + len("</think>") :]
    open_at = text.rfind(_ANSWER_OPEN)
    if open_at >= 0:
        inner = text[open_at + len(_ANSWER_OPEN) :]
        close_at = inner.find(_ANSWER_CLOSE)
        after = inner[close_at + len(_ANSWER_CLOSE) :] if close_at >= 0 else ""
        inner = inner[:close_at] if close_at >= 0 else inner
        if _BOX_COMMAND.search(after):  # "<answer>4</answer> so \boxed{3}": the box is the final answer
            text = after
        elif inner.strip():
            text = inner
    return _HOPE.sub("", text)


def _marked_region(completion: str, prefilled_think: bool) -> tuple[str, bool, bool] | None:
    """The part of ``completion`` where ``"marked"`` extraction looks, whether it is the content of a closed
    ``<answer>`` block (itself a marker), and whether a chat-template token ended the turn after it; ``None`` when
    the reasoning block never closed or nothing follows it."""
    text = _LEADING_HEADER.sub("", completion[-MAX_CHARS:])
    cut = _CHAT_TOKENS.search(text)
    if cut:
        text = text[: cut.start()]
    turn_ended = cut is not None
    think_open, think_close = text.rfind("<think>"), text.rfind("</think>")
    if think_close >= 0 and think_open < think_close:
        text = text[think_close + len("</think>") :]
    elif think_open >= 0 or prefilled_think:
        return None  # cut (or stopped) inside the reasoning: a tentative value there is no answer
    if not text.strip():
        return None
    open_at = text.rfind(_ANSWER_OPEN)
    if open_at >= 0:
        inner = text[open_at + len(_ANSWER_OPEN) :]
        close_at = inner.find(_ANSWER_CLOSE)
        if close_at < 0:
            return inner, False, turn_ended  # an unclosed block: only a closed box or anchor inside it counts
        after = inner[close_at + len(_ANSWER_CLOSE) :]
        if _BOX_COMMAND.search(after):  # "<answer>4</answer> so \boxed{3}": the box is the final answer
            return after, False, turn_ended
        if inner[:close_at].strip():
            return _HOPE.sub("", inner[:close_at]), True, True
    return _HOPE.sub("", text), False, turn_ended


def has_unclosed_box(completion: str) -> bool:
    """True when the part of ``completion`` searched for the answer (see :func:`extract_answer`) holds a
    ``\\boxed{``/``\\fbox{`` whose brace never closes, e.g. a response cut off at the length limit
    (``... so \\boxed{\\frac{1}{2}``). :func:`extract_answer` returns ``None`` for such a response."""
    if not isinstance(completion, str):
        raise TypeError(f"completion must be a str, got {type(completion).__name__}")
    return _has_unclosed_box(_final_region(completion))


def _has_unclosed_box(text: str) -> bool:
    if not _BOX_COMMAND.search(text):
        return False
    pairs = _brace_pairs(text)
    for match in _BOX_COMMAND.finditer(text):
        i = match.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{" and i not in pairs:
            return True
    return False


# "The answer is", "Final answer:", "Answer =" opening a box's content, optionally inside \text{...}.
_BOX_ANSWER_PHRASE = re.compile(
    r"^\s*(?P<wrap>\\(?:text|textbf|textit|textrm|textnormal|mathrm|mbox)\s*\{)?\s*"
    r"(?:(?:so|thus|therefore|hence),?\s+)?(?:the\s+)?(?:final\s+|correct\s+)?(?:answer|result)\s*(?:is\b|[:=：])\s*:?\s*",
    re.IGNORECASE,
)


def _without_answer_phrase(content: str) -> str:
    """A box's content without an answer phrase it opens with: ``\\text{The answer is } 12`` and
    ``\\text{Answer: 12}`` are ``12``; anything else is returned as it is."""
    m = _BOX_ANSWER_PHRASE.match(content)
    if m is None:
        return content
    rest = content[m.end() :]
    if m.group("wrap"):  # drop the brace that closed the \text{ the phrase opened
        depth = 0
        for i, ch in enumerate(rest):
            if ch == "{" and (i == 0 or rest[i - 1] != "\\"):
                depth += 1
            elif ch == "}" and (i == 0 or rest[i - 1] != "\\"):
                if depth == 0:
                    inside, after = rest[:i].strip(), rest[i + 1 :].strip()
                    rest = f"{inside} {after}".strip() if inside else after
                    break
                depth -= 1
        else:
            return content
    return rest.strip() or content


def _last_box_group(text: str, boxes: list[tuple[int, int, str]]) -> list[str]:
    group = [boxes[-1]]
    for prev in reversed(boxes[:-1]):
        between = text[prev[1] : group[0][0]]
        if len(between) > 80 or not _BOX_SEPARATOR.match(between) or _CORRECTION_WORDS.search(between):
            break
        group.insert(0, prev)
    contents = [content for _, _, content in group]
    deduped = [c for i, c in enumerate(contents) if c.strip() not in [d.strip() for d in contents[:i]]]
    return deduped


def labelled_box_parts(gold: str) -> list[str] | None:
    """The parts of a gold answer given as boxes in one sentence, each named by the words around it
    (``\\boxed{4} red and \\boxed{9} blue`` -> ``["4", "9"]``), in order; None for any other shape.

    For golds only: a reference answer does not correct itself, so words between its boxes label the
    parts. In a model response the same words may be a hedge or a correction (only the last box counts
    there, see :func:`extract_answer`). Boxes joined by separators alone (``\\boxed{1}, \\boxed{2}``) or
    by "or" are not this shape.
    """
    if not isinstance(gold, str):
        raise TypeError(f"gold must be a str, got {type(gold).__name__}")
    region = _final_region(gold)
    boxes = find_boxed_spans(region)
    group = boxes[-1:]
    labelled = False
    for prev in reversed(boxes[:-1]):
        between = region[prev[1] : group[0][0]]
        words = re.findall(r"[A-Za-z]+", between)
        if len(between) > 60 or not _PART_WORDS.match(between) or _CORRECTION_WORDS.search(between):
            break
        if any(w.lower() == "or" for w in words):
            return None
        labelled = labelled or any(w.lower() not in _CONNECTOR_WORDS for w in words)
        group.insert(0, prev)
    if len(group) < 2 or not labelled:
        return None
    parts = [_strip_outer(content) for _, _, content in group]
    return parts if all(parts) else None


def _last_anchor(text: str) -> tuple[int, str, bool] | None:
    """``(position, text after it up to the end of the sentence, whether that sentence ended before the end of
    the text)`` for the last anchor phrase."""
    # Every anchor contains one of these words; find them at C speed, then try the full pattern near the
    # last ones only (the full pattern over a 30,000-character response costs milliseconds).
    for key in reversed(list(_ANCHOR_KEYS.finditer(text))):
        last = None
        for match in _ANCHORS.finditer(text, max(0, key.start() - 40), min(len(text), key.end() + 40)):
            last = match
        if last is not None:
            rest = text[last.end() :].lstrip()
            candidate = _sentence(rest)
            after = rest[len(candidate) :]
            # the sentence ended where something follows its end: a period at the very end may be "42." of "42.5"
            ended = bool(after) and after not in (".", "!", "?")
            return (last.start(), candidate, ended) if candidate.strip() else None
    return None


def _sentence(text: str) -> str:
    """``text`` up to the end of its first sentence (a blank line, or ``.``/``!``/``?`` then whitespace),
    skipping over math environments."""
    i = 0
    n = len(text)
    while i < n:
        env = _MATH_ENV.match(text, i) if text[i] in "$\\" and _may_open_env(text, i) else None
        if env:
            if _env_content(env).rstrip().endswith("."):  # "$$ ... = 2.$$ Next sentence"
                return text[: env.end()]
            i = env.end()
            continue
        ch = text[i]
        if ch == "\n" and text[:i].strip():
            return text[:i]
        if ch in ".!?" and (i + 1 == n or text[i + 1].isspace()):
            return text[:i]
        i += 1
    return text


_CLOSERS = {"\\[": "\\]", "\\(": "\\)", "$$": "$$", "$": "$"}


def _may_open_env(text: str, i: int) -> bool:
    """Cheap pre-check (a C-speed ``find``) that a math environment opening at ``i`` closes within 3000
    characters, so unclosed delimiters cost no regex scan."""
    for opener in ("\\[", "\\(", "$$", "$"):
        if text.startswith(opener, i):
            return text.find(_CLOSERS[opener], i + len(opener), i + len(opener) + 3001) >= 0
    return False


def _reduce(candidate: str) -> str | None:
    """Turn the text after an anchor (or one sentence) into just the answer."""
    if len(candidate) > 2000:  # keep the work bounded: the last 2000 characters, from a token boundary
        tail = candidate[-2000:]
        cut = re.search(r"\s", tail)
        if cut is None:
            return None
        candidate = tail[cut.end() :]
    candidate = candidate.strip().strip("*").strip()
    candidate = re.sub(r"^[\"'“”]+|[\"'“”]+$", "", candidate).strip()
    if not candidate:
        return None
    if _TRUNCATED_END.search(candidate):
        return None
    if value_from_words(candidate.rstrip(".")) is not None:  # "The answer is twenty-one.", "three and a half"
        return candidate.rstrip(".")
    if _CHOICE_WITH_TEXT.match(candidate):  # "The answer is C: the second option."
        return _strip_outer(candidate)
    envs = list(_MATH_ENV.finditer(candidate))
    if envs:
        outside = _MATH_ENV.sub(" ", candidate)
        words = [w.lower() for w in _WORD.findall(outside)]
        if all(w in _CONNECTOR_WORDS for w in words):  # "$12$ and $13$", "$x = 3$"
            pieces = [_env_content(env).strip() for env in envs]
            leftover = _MATH_ENV.sub("\x00", candidate).split("\x00")
            joined = pieces[0]
            for sep, piece in zip(leftover[1:-1], pieces[1:], strict=True):
                joined += f" {sep.strip()} {piece}" if sep.strip() and sep.strip() != "," else f", {piece}"
            return _strip_outer(joined)
        tail = _after_copula(candidate)
        if tail is not None and tail != candidate and re.search(r"[\d$\\]", tail):
            reduced = _reduce(tail)
            if reduced is not None:
                return reduced
        last = _env_content(envs[-1]).strip().rstrip(".").strip()
        return (last + _unit_after(candidate, envs[-1].end())) if last else None
    if _is_bare_answer(candidate):
        return _strip_outer(candidate)
    tail = _after_copula(candidate)
    if tail is not None and tail != candidate and _is_bare_answer(tail.strip().rstrip(".")):
        return _strip_outer(tail.strip().rstrip("."))
    if tail is not None and _stated_number(tail, after_copula=True) is not None:
        return _stated_number(tail, after_copula=True)
    return _stated_number(candidate, after_copula=False)


def _stated_number(text: str, after_copula: bool) -> str | None:
    """The number ``text`` states, in digits or in words. After "is"/"are"/"=" (``after_copula``) the last number in
    digits, unless words come first ("so there are twelve, from 3 and 9" gives ``twelve``; "there are 12 ways to pick
    two" gives ``12``); elsewhere the last number ("We have 3 apples, then twelve in all" gives ``twelve``)."""
    digits = list(_NUMBER.finditer(text))
    words = find_number_phrases(text)
    if not words:
        return digits[-1].group().strip() if digits else None
    if not digits:
        start, end, _ = words[-1]
    elif after_copula:
        if words[0][0] > digits[0].start():
            return digits[-1].group().strip()
        start, end, _ = words[0]
    elif words[-1][1] > digits[-1].end():
        start, end, _ = words[-1]
    else:
        return digits[-1].group().strip()
    return text[start:end]


def _states_number_in_words(sentence: str) -> bool:
    """A sentence without digits that states a number in words: after "is"/"are"/"="... or at its end ("In total
    there are twelve fruits.", "She ends up with twelve."); not a number word in passing ("the two options")."""
    phrases = find_number_phrases(sentence)
    if not phrases:
        return False
    tail = _after_copula(sentence)
    if tail is not None and find_number_phrases(tail):
        return True
    return phrases[-1][1] >= len(sentence.rstrip().rstrip(".!?").rstrip())


_WORD_AFTER = re.compile(r"\s*([A-Za-z]+)\b")


def _unit_after(text: str, end: int) -> str:
    """`` <unit>`` when the word right after a math environment is a known unit ("$90$ degrees", "$20$ cm"), so the
    answer keeps it; else ``""``."""
    from rlvr.verifiers.math_units import parse_unit

    m = _WORD_AFTER.match(text, end)
    if m is None:
        return ""
    word = m.group(1).lower()
    if word in ("in", "at", "s", "l", "g"):  # "$20$ in total": more often English than a unit
        return ""
    if word in ("degree", "degrees", "deg"):
        return " degrees"
    unit = parse_unit(word)
    return f" \\text{{ {word}}}" if unit is not None and unit.known else ""


def _env_content(env: re.Match[str]) -> str:
    return next(g for g in env.groups() if g is not None)


_COPULA = re.compile(r"\s(?:is|are|equals|be|was|gives|get|=)\s", re.IGNORECASE)


def _after_copula(text: str) -> str | None:
    """Text after the last " is "/" are "/" = " outside math environments, or None."""
    masked = _MATH_ENV.sub(lambda m: "\x01" * len(m.group()), text)
    last = None
    for match in _COPULA.finditer(masked):
        last = match
    if last is None:
        return None
    return text[last.end() :].strip()


def _is_bare_answer(text: str) -> bool:
    """True when ``text`` reads as an answer rather than prose: at most one ordinary word outside math,
    ``\\text{}`` and unit/connector words, and short."""
    if len(text) > 400 or "\n\n" in text.strip():
        return False
    outside = _MATH_ENV.sub(" ", text)
    outside = re.sub(
        r"\\(?:text|textrm|textbf|textnormal|mbox|mathrm|operatorname|begin|end)\s*\{[^{}]*\}", " ", outside
    )
    outside = _PART_LABEL.sub(" ", outside)  # "AB=4, CD=5": segment names, not prose
    words = [w.lower() for w in _WORD.findall(outside)]
    from rlvr.verifiers.math_units import is_unit_word

    prose = [w for w in words if w not in _CONNECTOR_WORDS and not is_unit_word(w) and w not in _MATH_WORDS]
    if prose and re.search(r"\d", outside):
        return False  # "Soucis : 2,74" is a sentence with a number in it, not an answer
    return len(prose) <= 1 and len(words) <= 4


# A name on the left of "=": "AB =", "|AB| =", "CD_1 =", "width =" (a labelled part of a multi-part answer).
_PART_LABEL = re.compile(r"(?<![A-Za-z\\])\|?[A-Za-z]{1,12}\|?(?:_\{?\w{1,4}\}?)?\s*(?==)")

_MATH_WORDS = frozenset(
    {"sqrt", "pi", "exp", "log", "ln", "sin", "cos", "tan", "sec", "csc", "cot", "infty", "inf", "infinity", "frac"}
)


def _strip_outer(text: str) -> str:
    """Remove surrounding whitespace, markdown bold, math delimiters and a final period."""
    text = text.strip()
    for _ in range(3):
        before = text
        text = text.strip().strip("*").strip()
        for left, right in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
            if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
                inner = text[len(left) : len(text) - len(right)]
                if left == "$" and "$" in inner.replace("\\$", ""):
                    break
                text = inner.strip()
                break
        text = re.sub(r"(?<![.\d])[.。](?!\.)$", "", text).strip()  # a final period, not an ellipsis
        if text == before:
            break
    return text


def _last_statement(text: str) -> str | None:
    body = text.rstrip()
    if not body:
        return None
    if _TRUNCATED_END.search(body):
        return None
    sentences = _split_sentences(body)
    for sentence in reversed(sentences):
        if re.search(r"\d|\$|\\\(|\\\[", sentence) or _states_number_in_words(sentence):
            return _reduce(sentence)
    return None


def _stated_before_explanation(text: str) -> str | None:
    """The answer of a response that states it and then explains it ("The total is 7. To see why: first 2
    apples, then 3 pears, then 2 plums."): the last statement of the opening (at most two sentences, 300
    characters) before the first explanation cue, as long as the explanation draws no conclusion of its own
    ("... So there are 12."), which would be the answer."""
    cue = _EXPLANATION_CUE.search(text)
    if cue is None or _CONCLUSION.search(text, cue.end()):
        return None
    head = text[: cue.start()]
    if not re.search(r"\d|\$|\\\(|\\\[", head) or len(head) > 300 or len(_split_sentences(head)) > 2:
        return None  # the answer must open the response; a long derivation is not a stated answer
    return _last_statement(head.rstrip().rstrip(":"))


def _split_sentences(text: str) -> list[str]:
    out: list[str] = []
    rest = text
    while rest.strip():
        head = _sentence(rest)
        out.append(head)
        rest = rest[len(head) + 1 :]
    return out
