"""Stop strings at token level: which sampled token completed a stop string.

A row of sampled ids stops at the first token after which the decoded response contains one of the stop strings
(the token that completed it is kept, nothing after it is sampled). Only the response is searched, never the prompt.
Each check decodes a window of the row's last ids (the longest stop string's length in characters, plus a margin for
tokens that decode to nothing alone, e.g. part of a UTF-8 character), so it costs the same at every step; a row is
checked after every token, so a stop string is found at the token that completes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

WINDOW_MARGIN = 8
"""Extra tokens decoded beyond the longest stop string's length in characters (each token is >= 1 character except
pieces of a multi-byte character)."""


class StopStrings:
    """Finds the stop string a row of response ids has just completed.

    Args:
        tokenizer: decodes ids (``tokenizer.decode(ids, skip_special_tokens=False)``).
        stops: the stop strings (non-empty strings).
    Raises:
        ValueError: an empty stop string.
    """

    def __init__(self, tokenizer: Any, stops: Sequence[str]) -> None:
        if any(not isinstance(s, str) or not s for s in stops):
            raise ValueError(f"stop strings must be non-empty strings, got {list(stops)!r}")
        self.tokenizer = tokenizer
        self.stops = tuple(stops)
        self.window = max((len(s) for s in self.stops), default=0) + WINDOW_MARGIN

    def __bool__(self) -> bool:
        return bool(self.stops)

    def matched(self, response_ids: Sequence[int]) -> str | None:
        """The stop string (the first in ``stops`` order) that the decoded tail of ``response_ids`` contains, or None.

        Called after each new token on a row that has not stopped yet, so a hit was completed by the last token.
        """
        if not self.stops or not response_ids:
            return None
        text = self.tokenizer.decode(list(response_ids[-self.window:]), skip_special_tokens=False)
        return next((s for s in self.stops if s in text), None)

    def first_stop(self, response_ids: Sequence[int]) -> tuple[int, str] | None:
        """``(end, stop)``: the shortest prefix ``response_ids[:end]`` that contains a stop string, or None (used where
        an engine returns more ids than the stop needs)."""
        for end in range(1, len(response_ids) + 1):
            hit = self.matched(response_ids[:end])
            if hit is not None:
                return end, hit
        return None
