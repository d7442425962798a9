"""Solve-rate bins shared by the training metrics, the TensorBoard plot and ``rlvr filter``'s printout.

The two end bins hold exactly 0 and exactly 1: with binary rewards those are the groups with no gradient.
"""

from __future__ import annotations

from collections.abc import Iterable

BIN_LABELS: tuple[str, ...] = ("0", "0-20", "20-40", "40-60", "60-80", "80-100", "100")
"""Percent ranges: ``0`` = exactly 0; ``0-20`` = (0, 0.2); ``20-40`` = [0.2, 0.4); ...; ``80-100`` = [0.8, 1);
``100`` = exactly 1."""


def bin_index(rate: float) -> int:
    """Index into :data:`BIN_LABELS` of a solve rate in [0, 1]. Raises ValueError outside [0, 1]."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"a solve rate must be in [0, 1], got {rate}")
    if rate == 0.0:
        return 0
    if rate == 1.0:
        return len(BIN_LABELS) - 1
    return 1 + min(int(rate * 5), 4)


def histogram(rates: Iterable[float]) -> list[int]:
    """Counts per bin of :data:`BIN_LABELS`."""
    counts = [0] * len(BIN_LABELS)
    for r in rates:
        counts[bin_index(r)] += 1
    return counts


def format_histogram(rates: list[float], width: int = 40) -> str:
    """A text histogram, one line per bin: ``label  count  share  bar``."""
    counts = histogram(rates)
    total = max(sum(counts), 1)
    top = max(max(counts), 1)
    lines = [f"{'solve rate %':>12}  {'prompts':>7}  {'share':>6}"]
    for label, c in zip(BIN_LABELS, counts, strict=True):
        lines.append(f"{label:>12}  {c:>7}  {c / total:>6.1%}  {'#' * round(width * c / top)}")
    return "\n".join(lines)
