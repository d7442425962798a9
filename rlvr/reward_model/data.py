"""Preference data for a reward model: the rows of :mod:`rlvr.data.preferences` (grouped by prompt) tokenized.

Errors: :class:`rlvr.data.sources.DataError` naming the file, the line and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlvr.data.preferences import PreferenceGroup, load_preference_groups, parse_rows, split_groups
from rlvr.data.sources import DataError

__all__ = ["PreferenceGroup", "TokenizedGroup", "load_preference_groups", "parse_rows", "split_groups",
           "tokenize_groups"]


@dataclass
class TokenizedGroup:
    """A :class:`PreferenceGroup` as token ids: each response is ``prompt_ids + response_ids`` (eos appended)."""

    prompt_ids: list[int]
    response_ids: list[list[int]]
    pairs: list[tuple[int, int]]

    @property
    def sequences(self) -> list[list[int]]:
        return [self.prompt_ids + r for r in self.response_ids]


def tokenize_groups(groups: list[PreferenceGroup], tokenizer: Any, max_length: int, append_eos: bool = True
                    ) -> list[TokenizedGroup]:
    """Token ids of every group (``add_special_tokens=False``: prompts carry their chat template already).

    A prompt too long for ``max_length`` loses its first tokens; responses are never cut.

    Raises:
        DataError: a response alone (plus eos) longer than ``max_length - 1``.
    """
    eos = [int(tokenizer.eos_token_id)] if append_eos else []
    out = []
    for g in groups:
        if not isinstance(g.prompt, str) or not all(isinstance(r, str) for r in g.responses):
            raise DataError(f"prompt {str(g.prompt)[:60]!r}: a reward model reads text prompts and responses (the "
                            "rendered chat prompt, as `rlvr rm pairs` writes it), not lists of messages")
        prompt_ids = list(tokenizer(g.prompt, add_special_tokens=False)["input_ids"])
        responses = [list(ids) + eos for ids in tokenizer(g.responses, add_special_tokens=False)["input_ids"]]
        longest = max(len(r) for r in responses)
        if longest > max_length - 1:
            raise DataError(f"a response to prompt {g.prompt[:60]!r} has {longest} tokens, more than "
                            f"data.max_length - 1 = {max_length - 1}; raise data.max_length")
        keep = max_length - longest
        out.append(TokenizedGroup(prompt_ids[-keep:] if prompt_ids else [], responses, list(g.pairs)))
    return out
