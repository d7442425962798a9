"""The examples of an SFT recipe: rows read, split into training and held-out examples, each tokenized once with its
loss mask (:mod:`rlvr.data.conversations`).

A row is a conversation (``data.messages_field``, with the tools of ``data.tools_field`` where it has them) or a
prompt and a completion (``data.prompt_field``, ``data.completion_field``): text is taken as it is (the completion
gets the eos token), lists of messages go through the chat template. Rows longer than ``data.max_length`` are dropped
(counted) or refused (``data.overlong``). The held-out split is ``data.eval_source``, or ``data.eval_size`` rows of a
seeded shuffle of ``data.source``.

Errors: :class:`rlvr.data.sources.DataError` (:class:`rlvr.data.conversations.MaskError` for a template that cannot
give a correct mask), naming the row, before any model is loaded.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedTokenizerBase

from rlvr.config import SFTDataConfig
from rlvr.data.conversations import (
    FENCED_OUTPUT,
    Message,
    TokenizedConversation,
    conversation_problem,
    tokenize_conversation,
    tokenize_plain,
)
from rlvr.data.sources import DataError, read_source, row_origin
from rlvr.data.special_text import special_strings


@dataclass
class Example:
    """One training sequence of an SFT (or one response of a DPO) recipe.

    Attributes:
        index: position in its split (stable: the data order is drawn over it).
        row: the dataset row (what verifiers of a generation eval read).
        ids: the whole sequence. mask: 1 on the ids learned (a target of the loss).
        context_len: ids before the first learned turn (the prompt of the sequence); ``ids[context_len:]`` is what the
            trainer treats as the response (with ``mask[context_len:]``).
        prompt_ids: the prompt of a generation eval on this row (before its last learned turn).
    """

    index: int
    row: dict[str, Any]
    ids: list[int]
    mask: list[int]
    context_len: int
    prompt_ids: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, index: int, row: dict[str, Any], tc: TokenizedConversation) -> Example:
        return cls(index, row, tc.ids, tc.mask, tc.context_len, tc.prompt_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.mask)


@dataclass
class ExampleSplit:
    """Training and held-out examples, and how many rows were dropped as longer than ``data.max_length``."""

    train: list[Example]
    eval: list[Example]
    dropped: int = 0


def use_chat_template(tokenizer: PreTrainedTokenizerBase, template: str | None) -> None:
    """Put the recipe's chat template (``data.chat_template``, already read from its file) on the tokenizer; the
    tokenizer saved with the run's checkpoints carries it."""
    if template is not None:
        tokenizer.chat_template = template


def _messages(value: Any, role: str) -> list[Message]:
    return [{"role": role, "content": value}] if isinstance(value, str) else list(value)


def _tools(row: dict[str, Any], cfg: SFTDataConfig, where: str) -> list[dict] | None:
    value = row.get(cfg.tools_field)
    if isinstance(value, str):  # a tools column stored as JSON text (as hub datasets often do)
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DataError(f"{where}: {cfg.tools_field!r} is text that is not JSON") from None
    if value is not None and not (isinstance(value, list) and all(isinstance(t, dict) for t in value)):
        raise DataError(f"{where}: {cfg.tools_field!r} must be a list of tools in the OpenAI function format")
    return value or None


def tokenize_row(row: dict[str, Any], cfg: SFTDataConfig, tokenizer: PreTrainedTokenizerBase, eos_ids: list[int],
                 specials: list[str], where: str) -> TokenizedConversation:
    """The ids and mask of one SFT row (see the module docstring). Raises DataError / MaskError naming ``where``."""
    kw = dict(special=cfg.special_tokens_in_text, specials=specials, where=where)
    if cfg.messages_field in row:
        messages = row[cfg.messages_field]
        prompt: list[Message] = []
        problem = conversation_problem(messages, completion=True)
        if problem:
            raise DataError(f"{where}: {cfg.messages_field!r} {problem}")
    elif cfg.prompt_field in row and cfg.completion_field in row:
        prompt_value, completion_value = row[cfg.prompt_field], row[cfg.completion_field]
        if isinstance(prompt_value, str) and isinstance(completion_value, str):
            return tokenize_plain(tokenizer, prompt_value, completion_value, eos_id=int(tokenizer.eos_token_id), **kw)
        prompt = _messages(prompt_value, "user")
        completion = _messages(completion_value, "assistant")
        for name, value, is_completion in ((cfg.prompt_field, prompt, False), (cfg.completion_field, completion, True)):
            problem = conversation_problem(value, completion=is_completion)
            if problem:
                raise DataError(f"{where}: {name!r} {problem}")
        messages = prompt + completion
    else:
        raise DataError(f"{where}: expected a {cfg.messages_field!r} field (a conversation) or {cfg.prompt_field!r} "
                        f"and {cfg.completion_field!r} fields; its fields are {sorted(row)}")
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(f"{where}: a conversation needs a chat template, and the tokenizer has none: set "
                        "data.chat_template (Jinja text or a .jinja file)")
    turns = [k for k, m in enumerate(messages) if m["role"] == "assistant" and k >= len(prompt)]
    trained = turns[-1:] if cfg.assistant_turns == "last" else turns
    return tokenize_conversation(tokenizer, messages, trained=trained, eos_ids=eos_ids,
                                 tools=_tools(row, cfg, where),
                                 masked_blocks=FENCED_OUTPUT if cfg.mask_fenced_outputs else None, **kw)


def build_sft_examples(cfg: SFTDataConfig, tokenizer: PreTrainedTokenizerBase, eos_ids: list[int],
                       seed: int) -> ExampleSplit:
    """Read, split and tokenize the recipe's rows (see the module docstring).

    Args:
        eos_ids: every id that ends a response (an assistant turn must end with one).
        seed: seeds the held-out split.
    Raises:
        DataError: unreadable data, a bad row (named), too few rows for the held-out split, or no training example
            left after dropping the overlong ones.
    """
    use_chat_template(tokenizer, cfg.chat_template)
    rows = read_source(cfg.source)
    if cfg.eval_source is not None:
        train_rows, eval_rows = rows, read_source(cfg.eval_source, keep_origins=True)
    else:
        if cfg.eval_size and len(rows) <= cfg.eval_size:
            raise DataError(f"data.eval_size={cfg.eval_size} needs more rows than the data has ({len(rows)}); lower "
                            "it or give data.eval_source")
        order = list(range(len(rows)))
        random.Random(seed).shuffle(order)
        eval_rows = [rows[i] for i in sorted(order[:cfg.eval_size])]
        held = set(order[:cfg.eval_size])
        train_rows = [r for i, r in enumerate(rows) if i not in held]
    if cfg.max_train_examples is not None:
        train_rows = train_rows[:cfg.max_train_examples]
    specials = special_strings(tokenizer)
    position = {id(r): i for i, r in enumerate(rows)}
    dropped = 0

    def examples(split: list[dict[str, Any]]) -> list[Example]:
        nonlocal dropped
        out = []
        for row in split:
            where = row_origin(row, position.get(id(row)))
            tc = tokenize_row(row, cfg, tokenizer, eos_ids, specials, where)
            if len(tc.ids) > cfg.max_length:
                if cfg.overlong == "error":
                    raise DataError(f"{where}: {len(tc.ids)} tokens, more than data.max_length={cfg.max_length}; "
                                    "raise it, or set data.overlong: drop")
                dropped += 1
                continue
            out.append(Example.of(len(out), row, tc))
        return out

    split = ExampleSplit(examples(train_rows), examples(eval_rows))
    split.dropped = dropped
    if not split.train:
        raise DataError(f"no training example left: every one of the {len(train_rows)} rows is longer than "
                        f"data.max_length={cfg.max_length}")
    return split
