"""Token ids and a loss mask for supervised fine-tuning: which tokens of a conversation the model must learn.

The mask comes from rendering, by the rule the tool rollouts use (ids = ``template(prefix + message) -
template(prefix)``). For each assistant turn ``k`` that is trained on:

- ``before`` = the template's ids of the messages before it with the generation prompt (what the model sees when it
  starts that turn), ``after`` = the ids with the turn appended;
- ``after`` must start with ``before``, and the whole conversation's ids (one ``apply_chat_template`` of every
  message: the sequence that is trained on) must start with ``after``; else the template rewrites earlier text once a
  turn follows (a template that drops ``<think>`` from earlier turns, or prefills the generation prompt differently)
  and no mask is right: :class:`MaskError` naming the row, never a silent all-ones mask;
- the turn's tokens are ``after[len(before):]`` up to and including the first end-of-turn id (one of the model's eos
  ids; a turn without one is an error: a model trained on it would not learn to stop); what the template writes
  after that id (a newline) is glue, masked;
- the turn's text must be in those tokens (a template that strips ``<think>...</think>`` or rewrites the message
  would train on something else): else :class:`MaskError`;
- an empty ``<think></think>`` block that the template inserts before the message (the model does not choose it) is
  masked.

Everything else (system, user and tool messages, the template's role headers, earlier or untrained assistant turns)
has mask 0. Prompt/completion rows are a conversation too: the prompt's messages (a text prompt is one user turn),
then the completion's (a text completion is one assistant turn); only the completion's assistant turns are trained.
Without a chat template (``template: plain``) a row is ``prompt`` text then ``completion`` text and the eos token; the
completion and the eos are trained.

Text from the data never becomes a control token: with ``split``, each message's text is tokenized with special
tokens split into ordinary ones (:mod:`rlvr.data.special_text`); with ``refuse``, such a row is an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from transformers import PreTrainedTokenizerBase

from rlvr.data.sources import DataError
from rlvr.data.special_text import find_special, tokenize_split, with_placeholders

Message = dict[str, Any]
ROLES = ("system", "user", "assistant", "tool")
_EMPTY_THINK = re.compile(r"\s*<think>\s*</think>\s*")
FENCED_OUTPUT = re.compile(r"```output\n.*?```\n?", re.S)
"""An ```output block inside an assistant turn: the fenced call format's tool answer, which the rollout appends after
the model's closed ```python block (``rlvr.tools.formats``); the model never samples it."""


class MaskError(DataError):
    """A row whose loss mask cannot be derived correctly from the chat template (it rewrites earlier turns, drops the
    assistant's text, or ends a turn without an eos id)."""


@dataclass
class TokenizedConversation:
    """One training sequence.

    Attributes:
        ids: the whole sequence's token ids.
        mask: per id, 1 where the model learns the token (it is a target of the loss), 0 elsewhere.
        prompt_ids: the ids the model sees before the last trained turn starts (generation prompt included): the
            prompt of a generation eval on this row.
        context_len: the ids before the first trained turn starts (the template's generation prompt included): the
            prompt of the sequence, shared by the responses of a preference pair.
    """

    ids: list[int]
    mask: list[int]
    prompt_ids: list[int]
    context_len: int

    @property
    def first_trained(self) -> int:
        """Index of the first id with mask 1."""
        return self.mask.index(1)


def conversation_problem(messages: Any, *, completion: bool = False) -> str | None:
    """Why ``messages`` is not a usable conversation (a list of ``{"role", ...}`` mappings with known roles, text
    content or, for an assistant turn, ``tool_calls``), or None. ``completion``: the messages are a completion and
    must hold an assistant turn."""
    if not isinstance(messages, list) or not messages:
        return "expected a non-empty list of {'role', 'content'} messages"
    for i, m in enumerate(messages, 1):
        if not isinstance(m, dict):
            return f"message {i} is a {type(m).__name__}, not a mapping"
        role = m.get("role")
        if role not in ROLES:
            return f"message {i} has role {role!r}; expected one of {', '.join(ROLES)}"
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            return f"message {i} ({role}) has content of type {type(content).__name__}; expected text"
        calls = m.get("tool_calls")
        if calls is not None and (role != "assistant" or not isinstance(calls, list)):
            return f"message {i} has tool_calls, which only an assistant turn may hold, as a list"
        if not (content or "").strip() and not calls:
            return f"message {i} ({role}) is empty"
    if completion and not any(m["role"] == "assistant" for m in messages):
        return "the completion holds no assistant turn to learn"
    return None


def _texts(messages: Sequence[Message]) -> list[str]:
    return [m["content"] for m in messages if isinstance(m.get("content"), str)]


def _call_texts(messages: Sequence[Message]) -> list[str]:
    """The text of every tool call (name and arguments) of ``messages``."""
    out = []
    for m in messages:
        for call in m.get("tool_calls") or []:
            out.append(json.dumps(call, ensure_ascii=False))
    return out


class Renderer:
    """Token ids of conversations under a tokenizer's chat template, dataset text kept out of control tokens.

    Args:
        tokenizer: with a chat template (or ``template: plain`` rows only).
        tools: the row's tools (OpenAI function format) passed to the template, or None.
        special: ``refuse`` or ``split`` (``data.special_tokens_in_text``). specials: the tokenizer's special strings
            (:func:`rlvr.data.special_text.special_strings`).
        where: the row's origin, for errors.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, tools: list[dict] | None, *,
                 special: Literal["refuse", "split"], specials: list[str], where: str) -> None:
        self.tokenizer, self.tools, self.where = tokenizer, tools, where
        self.special, self.specials = special, specials
        self.split = False

    def check_text(self, messages: Sequence[Message]) -> None:
        """Decide how the row's text is tokenized: refuse it (DataError naming the row) or split it, where it holds a
        special token's string; tool-call arguments and the tools column are refused either way (the template writes
        them as JSON, where a placeholder cannot stand)."""
        for text in _texts(messages):
            found = find_special(text, self.specials)
            if found is not None:
                if self.special == "refuse":
                    raise DataError(f"{self.where}: a message holds {found!r}, the text of a special token of the "
                                    "tokenizer: tokenized as is it would become that control token. Remove it, or set "
                                    "data.special_tokens_in_text: split to keep it as ordinary text")
                self.split = True
        for text in _call_texts(messages) + [json.dumps(self.tools or [], ensure_ascii=False)]:
            found = find_special(text, self.specials)
            if found is not None:
                raise DataError(f"{self.where}: a tool call or the tools column holds {found!r}, the text of a special "
                                "token of the tokenizer; it cannot be kept as ordinary text there: remove it")

    def ids(self, messages: Sequence[Message], *, generation_prompt: bool = False) -> list[int]:
        """The template's ids of ``messages`` (rendered, then tokenized without added special tokens, as
        ``apply_chat_template(tokenize=True)`` does)."""
        kw = dict(tools=self.tools, tokenize=False, add_generation_prompt=generation_prompt)
        if not self.split:
            text = self.tokenizer.apply_chat_template(list(messages), **kw)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        marks, back = with_placeholders(_texts(messages))
        it = iter(marks)
        marked = [{**m, "content": next(it)} if isinstance(m.get("content"), str) else m for m in messages]
        try:
            return tokenize_split(self.tokenizer, self.tokenizer.apply_chat_template(marked, **kw), back)
        except ValueError as exc:
            raise MaskError(f"{self.where}: {exc}") from None


def _assistant_text_kept(tokenizer: PreTrainedTokenizerBase, span: list[int], message: Message) -> bool:
    """Whether the rendered turn ``span`` holds the message's text and the names of its tool calls."""
    text = tokenizer.decode(span, skip_special_tokens=False)
    squash = " ".join(text.split())
    content = (message.get("content") or "").strip()
    if content and " ".join(content.split()) not in squash:
        return False
    for call in message.get("tool_calls") or []:
        name = (call.get("function") or {}).get("name") if isinstance(call, dict) else None
        if name and name not in text:
            return False
    return True


def _boilerplate_tokens(tokenizer: PreTrainedTokenizerBase, span: list[int], message: Message) -> int:
    """How many leading ids of ``span`` are an empty ``<think></think>`` block the template put there (not in the
    message's own text): they are masked, the model does not choose them."""
    if (message.get("content") or "").lstrip().startswith("<think>"):
        return 0
    if not _EMPTY_THINK.match(tokenizer.decode(span, skip_special_tokens=False)):
        return 0
    lead = 0
    for i in range(1, len(span) + 1):
        if _EMPTY_THINK.fullmatch(tokenizer.decode(span[:i], skip_special_tokens=False)):
            lead = i
        elif lead:
            break
    return lead


def _masked_blocks(tokenizer: PreTrainedTokenizerBase, span: list[int], blocks: re.Pattern) -> list[int]:
    """Indices into ``span`` of the ids whose text overlaps a match of ``blocks`` in the span's decoded text."""
    text = tokenizer.decode(span, skip_special_tokens=False)
    matches = [m.span() for m in blocks.finditer(text)]
    if not matches:
        return []
    ends = [len(tokenizer.decode(span[:i + 1], skip_special_tokens=False)) for i in range(len(span))]
    starts = [0] + ends[:-1]
    return [i for i, (a, b) in enumerate(zip(starts, ends, strict=True))
            if any(a < e and s < b for s, e in matches)]


def tokenize_conversation(tokenizer: PreTrainedTokenizerBase, messages: list[Message], *, trained: Sequence[int],
                          eos_ids: Sequence[int], tools: list[dict] | None = None,
                          special: Literal["refuse", "split"] = "refuse", specials: Sequence[str] = (),
                          where: str = "row", masked_blocks: re.Pattern | None = None) -> TokenizedConversation:
    """The ids of ``messages`` under the chat template and the mask of the assistant turns ``trained`` (indices into
    ``messages``; see the module docstring for the rule and its checks).

    Args:
        trained: indices of assistant messages to learn (others are context).
        eos_ids: every id that ends a response (:func:`rlvr.models.loading.eos_token_ids`).
        tools: the row's tools column (OpenAI function format), passed to the template.
        special, specials: see :class:`Renderer`. where: the row's origin, named by errors.
        masked_blocks: text inside a trained turn that is not learned (:data:`FENCED_OUTPUT`: the tool answers of the
            fenced call format); an id overlapping it is masked.
    Returns:
        the whole conversation's ids (one rendering) and the mask.
    Raises:
        MaskError: the template rewrites earlier turns, drops the assistant's text, or ends a trained turn without an
            eos id. DataError: no turn to train, or text holding a special token's string under ``refuse``.
    """
    if not trained:
        raise DataError(f"{where}: no assistant turn to learn")
    trained = sorted(trained)
    r = Renderer(tokenizer, tools, special=special, specials=list(specials), where=where)
    r.check_text(messages)
    full = r.ids(messages)
    mask = [0] * len(full)
    eos = set(int(i) for i in eos_ids)
    prompt_ids: list[int] = []
    context_len = None
    for k in trained:
        message = messages[k]
        if message.get("role") != "assistant":
            raise DataError(f"{where}: message {k + 1} is a {message.get('role')} turn, not an assistant turn")
        before = r.ids(messages[:k], generation_prompt=True)
        after = r.ids(messages[:k + 1])
        if after[:len(before)] != before:
            raise MaskError(f"{where}: the chat template renders the conversation before assistant turn {k + 1} "
                            "differently once that turn is appended (its generation prompt is not how the turn "
                            "starts): no loss mask can be derived; fix the template (data.chat_template)")
        if full[:len(after)] != after:
            raise MaskError(f"{where}: the chat template rewrites assistant turn {k + 1} once later messages follow "
                            "(it drops <think> from earlier turns, or otherwise changes them): no loss mask matches "
                            "what is trained; train on the last turn only (data.assistant_turns: last) or use a "
                            "template that only appends (data.chat_template)")
        span = after[len(before):]
        end = next((j for j, t in enumerate(span) if t in eos), None)
        if end is None:
            names = [tokenizer.convert_ids_to_tokens(i) for i in sorted(eos)]
            raise MaskError(f"{where}: the chat template ends assistant turn {k + 1} without any of the eos ids "
                            f"{sorted(eos)} ({names}): a model trained on it would not learn to stop; fix the "
                            "template (data.chat_template) or the model's eos ids (generation_config.json)")
        if not _assistant_text_kept(tokenizer, span[:end + 1], message):
            raise MaskError(f"{where}: the chat template does not write assistant turn {k + 1} as the data has it (it "
                            "strips <think>...</think> or otherwise rewrites the text): training on its rendering "
                            "would teach something else; use a template that keeps the text (data.chat_template)")
        lead = _boilerplate_tokens(tokenizer, span[:end + 1], message)
        for j in range(len(before) + lead, len(before) + end + 1):
            mask[j] = 1
        if masked_blocks is not None:
            for j in _masked_blocks(tokenizer, span[:end + 1], masked_blocks):
                mask[len(before) + j] = 0
        prompt_ids = before
        context_len = len(before) if context_len is None else context_len
    if not any(mask):
        raise MaskError(f"{where}: every trained turn is template boilerplate: nothing to learn")
    if not context_len:
        raise MaskError(f"{where}: the template writes nothing before the first trained turn, so nothing precedes "
                        "its first token to predict it from")
    return TokenizedConversation(full, mask, prompt_ids, context_len)


def tokenize_plain(tokenizer: PreTrainedTokenizerBase, prompt: str, completion: str, *, eos_id: int,
                   special: Literal["refuse", "split"] = "refuse", specials: Sequence[str] = (),
                   where: str = "row") -> TokenizedConversation:
    """``prompt`` text, then ``completion`` text and the eos id, without a chat template; the completion and the eos
    are learned.

    Raises:
        DataError: an empty prompt or completion, or text holding a special token's string under ``refuse``.
    """
    parts = []
    for name, text in (("prompt", prompt), ("completion", completion)):
        if not text:
            raise DataError(f"{where}: the {name} is empty")
        found = find_special(text, list(specials))
        if found is not None and special == "refuse":
            raise DataError(f"{where}: the {name} holds {found!r}, the text of a special token of the tokenizer: "
                            "tokenized as is it would become that control token. Remove it, or set "
                            "data.special_tokens_in_text: split")
        parts.append(list(tokenizer(text, add_special_tokens=False, split_special_tokens=found is not None)
                          ["input_ids"]))
    p, c = parts
    return TokenizedConversation(p + c + [int(eos_id)], [0] * len(p) + [1] * (len(c) + 1), p, len(p))
