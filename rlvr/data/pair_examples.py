"""The pairs of a preference (DPO) recipe: rows in the format ``rlvr rm train`` reads (:mod:`rlvr.data.preferences`),
split by prompt into training and held-out pairs, each tokenized once: a shared prompt and two responses with their
loss masks.

A text prompt is taken as it is, control tokens included (``rlvr rm pairs`` writes the prompt the policy saw, chat
template and all); a text response is tokenized as text (a special token's string in it is refused or split,
``data.special_tokens_in_text``) and gets the eos token. A prompt that is a list of messages goes through the chat
template with each response (text: one assistant turn; or a list of assistant messages), by the masking rule of
:mod:`rlvr.data.conversations`. A prompt too long for ``data.max_length`` loses its first tokens; a pair whose longer
response alone does not fit is dropped (counted) or refused (``data.overlong``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

from rlvr.config import DPODataConfig
from rlvr.data.conversations import MaskError, conversation_problem, tokenize_conversation
from rlvr.data.preferences import PreferenceGroup, Text, parse_rows
from rlvr.data.sft_examples import use_chat_template
from rlvr.data.sources import DataError, read_source
from rlvr.data.special_text import find_special, special_strings


@dataclass
class PairExample:
    """One preference pair, tokenized.

    Attributes:
        index: position in its split. group: index of its prompt among the split's prompts.
        row: the prompt's first row (what verifiers of a generation eval read).
        prompt_ids: the shared prompt. chosen_ids, rejected_ids: each response's ids after the prompt;
        chosen_mask, rejected_mask: 1 on the ids learned (all of a text response and its eos; of a conversation, the
            assistant turns without the template's glue).
    """

    index: int
    group: int
    row: dict[str, Any]
    prompt_ids: list[int]
    chosen_ids: list[int]
    chosen_mask: list[int]
    rejected_ids: list[int]
    rejected_mask: list[int]


@dataclass
class PairSplit:
    """Training and held-out pairs, and how many pairs were dropped as longer than ``data.max_length``."""

    train: list[PairExample]
    eval: list[PairExample]
    dropped: int = 0


def _response(tokenizer: PreTrainedTokenizerBase, prompt: Text, response: Text, cfg: DPODataConfig,
              eos_ids: list[int], specials: list[str], where: str) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, response ids, response mask) of one response to ``prompt``."""
    if isinstance(prompt, str):
        if not isinstance(response, str):
            raise DataError(f"{where}: a text prompt takes text responses; a list of messages needs the prompt as "
                            "messages too")
        found = find_special(response, specials)
        if found is not None and cfg.special_tokens_in_text == "refuse":
            raise DataError(f"{where}: a response holds {found!r}, the text of a special token of the tokenizer: "
                            "tokenized as is it would become that control token. Remove it, or set "
                            "data.special_tokens_in_text: split")
        p = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        r = list(tokenizer(response, add_special_tokens=False, split_special_tokens=found is not None)["input_ids"])
        r.append(int(tokenizer.eos_token_id))
        return p, r, [1] * len(r)
    problem = conversation_problem(prompt)
    if problem is None:
        problem = conversation_problem([{"role": "assistant", "content": response}] if isinstance(response, str)
                                       else response, completion=True)
    if problem is not None:
        raise DataError(f"{where}: {problem}")
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(f"{where}: a conversation needs a chat template, and the tokenizer has none: set "
                        "data.chat_template")
    messages = list(prompt) + ([{"role": "assistant", "content": response}] if isinstance(response, str)
                               else list(response))
    trained = [k for k, m in enumerate(messages) if k >= len(prompt) and m["role"] == "assistant"]
    tc = tokenize_conversation(tokenizer, messages, trained=trained, eos_ids=eos_ids,
                               special=cfg.special_tokens_in_text, specials=specials, where=where)
    n = tc.context_len
    return tc.ids[:n], tc.ids[n:], tc.mask[n:]


def _pairs_of(groups: list[PreferenceGroup], cfg: DPODataConfig, tokenizer: PreTrainedTokenizerBase,
              eos_ids: list[int], specials: list[str], where: str) -> tuple[list[PairExample], int]:
    out: list[PairExample] = []
    dropped = 0
    for g_index, g in enumerate(groups):
        at = f"{where} prompt {g_index + 1} ({str(g.prompt)[:50]!r})"
        tokenized = [_response(tokenizer, g.prompt, r, cfg, eos_ids, specials, at) for r in g.responses]
        prompt_ids = tokenized[0][0]
        if any(t[0] != prompt_ids for t in tokenized):
            raise MaskError(f"{at}: the chat template renders the prompt differently for different responses: the "
                            "pair has no shared prompt")
        longest = max(len(t[1]) for t in tokenized)
        if longest > cfg.max_length - 1:
            if cfg.overlong == "error":
                raise DataError(f"{at}: a response has {longest} tokens, more than data.max_length - 1 = "
                                f"{cfg.max_length - 1}; raise data.max_length or set data.overlong: drop")
            dropped += len(g.pairs)
            continue
        keep = cfg.max_length - longest
        prompt_ids = prompt_ids[-keep:]
        for c, r in g.pairs:
            out.append(PairExample(len(out), g_index, g.row, prompt_ids, tokenized[c][1], tokenized[c][2],
                                   tokenized[r][1], tokenized[r][2]))
    return out, dropped


def build_pair_examples(cfg: DPODataConfig, tokenizer: PreTrainedTokenizerBase, eos_ids: list[int],
                        seed: int) -> PairSplit:
    """Read, split (by prompt) and tokenize the recipe's preference rows (see the module docstring).

    Raises:
        DataError: unreadable data, a bad row, too few prompts for the held-out split, or no training pair left.
    """
    use_chat_template(tokenizer, cfg.chat_template)
    source_name = getattr(cfg.source, "path", None) or getattr(cfg.source, "name", "data.source")
    groups = parse_rows(read_source(cfg.source), str(source_name))
    if cfg.eval_source is not None:
        name = getattr(cfg.eval_source, "path", None) or getattr(cfg.eval_source, "name", "data.eval_source")
        train_groups, eval_groups = groups, parse_rows(read_source(cfg.eval_source, keep_origins=True), str(name))
    else:
        if cfg.eval_size and len(groups) <= cfg.eval_size:
            raise DataError(f"data.eval_size={cfg.eval_size} prompts held out needs more distinct prompts than the "
                            f"data has ({len(groups)}); lower it or give data.eval_source")
        order = list(range(len(groups)))
        random.Random(seed).shuffle(order)
        held = set(order[:cfg.eval_size])
        eval_groups = [g for i, g in enumerate(groups) if i in held]
        train_groups = [g for i, g in enumerate(groups) if i not in held]
    specials = special_strings(tokenizer)
    train, dropped = _pairs_of(train_groups, cfg, tokenizer, eos_ids, specials, str(source_name))
    held_out, dropped_eval = _pairs_of(eval_groups, cfg, tokenizer, eos_ids, specials, "held-out")
    if cfg.max_train_pairs is not None:
        train = train[:cfg.max_train_pairs]
    if not train:
        raise DataError(f"no training pair left (data.max_length={cfg.max_length} dropped {dropped})")
    return PairSplit(train, held_out, dropped + dropped_eval)
