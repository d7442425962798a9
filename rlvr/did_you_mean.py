"""The closest valid name to a mistyped one, for "did you mean ...?" hints.

Distance is the optimal-string-alignment edit distance (Damerau's: an insertion, a deletion, a substitution or a swap
of two neighbouring characters costs 1), so a transposition such as ``gpro`` is one edit from ``grpo`` and two from
``gspo``. A name is suggested only when it is at most a third of the typed name's length away (at least 1), so an
unrelated word gets no hint. Ties go to the candidate most like the typed name by :mod:`difflib`'s ratio, then to the
earlier one.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def edit_distance(a: str, b: str) -> int:
    """Optimal-string-alignment distance between ``a`` and ``b`` (adjacent transpositions cost 1)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def closest(name: str, valid: Iterable[str], max_share: float = 1 / 3) -> str | None:
    """The valid name nearest to ``name`` (case-insensitive), or None when none is within ``max_share`` of its length
    (at least one edit)."""
    typed = str(name).lower()
    limit = max(1, int(len(typed) * max_share))
    best: tuple[int, float, int, str] | None = None
    for k, candidate in enumerate(valid):
        d = edit_distance(typed, candidate.lower())
        if d > limit:
            continue
        key = (d, -difflib.SequenceMatcher(None, typed, candidate.lower()).ratio(), k, candidate)
        if best is None or key < best:
            best = key
    return best[3] if best else None
