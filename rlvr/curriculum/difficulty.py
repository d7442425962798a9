"""Reading a dataset's difficulty field (MATH ``level``, reasoning-gym ``metadata.difficulty...``) as numbers."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


class CurriculumError(ValueError):
    """The curriculum cannot run on this data: a missing or unreadable difficulty, a stage with no prompts, a weight
    for a difficulty no prompt has."""


def difficulty_of(row: dict[str, Any], field: str) -> float:
    """The difficulty of one row: ``field`` is a dotted path (``metadata.level``); the value is a number or a string
    holding one (``"Level 3"`` -> 3.0).

    Raises:
        CurriculumError: the field is missing, or holds no number (the message names the field and the value).
    """
    node: Any = row
    for part in field.split("."):
        if not isinstance(node, dict) or part not in node:
            have = sorted(node) if isinstance(node, dict) else type(node).__name__
            raise CurriculumError(f"curriculum.difficulty.field={field!r}: no {part!r} in the row (it has {have})")
        node = node[part]
    if isinstance(node, bool) or node is None:
        raise CurriculumError(f"curriculum.difficulty.field={field!r} holds {node!r}, not a number")
    if isinstance(node, (int, float)):
        value = float(node)
    else:
        match = _NUMBER.search(str(node))
        if match is None:
            raise CurriculumError(f"curriculum.difficulty.field={field!r} holds {node!r}, which has no number in it")
        value = float(match.group())
    if not math.isfinite(value):
        raise CurriculumError(f"curriculum.difficulty.field={field!r} holds {node!r}, not a finite number")
    return value


def difficulties(rows: Sequence[dict[str, Any]], field: str) -> np.ndarray:
    """(len(rows),) float64 difficulties. Raises CurriculumError naming the first bad row."""
    out = np.empty(len(rows), dtype=np.float64)
    for i, row in enumerate(rows):
        try:
            out[i] = difficulty_of(row, field)
        except CurriculumError as exc:
            raise CurriculumError(f"training row {i}: {exc}") from None
    return out
