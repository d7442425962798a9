"""Per-group statistics of a scored rollout batch that respect dropped samples (``reward.failure_score: null``).

Shapes: B groups, G samples per group. ``valid`` (B, G) bool is False for a dropped sample: it counts in no mean,
no variance and no solve rate.
"""

from __future__ import annotations

import torch
from torch import Tensor


def zero_variance_groups(values: Tensor, valid: Tensor | None = None, tol: float = 1e-9) -> Tensor:
    """(B,) bool: groups whose valid samples all have the same value (within ``tol``), or fewer than 2 valid
    samples. Such a group has zero advantage everywhere, so DAPO's dynamic sampling drops it.

    Args:
        values: (B, G) rewards, or the solved flags as floats. valid: (B, G) bool or None (all valid).
    """
    if values.ndim != 2:
        raise ValueError(f"values must be (B, G), got shape {tuple(values.shape)}")
    valid = torch.ones_like(values, dtype=torch.bool) if valid is None else valid.bool()
    big = torch.finfo(values.dtype).max
    high = torch.where(valid, values, -big).max(dim=1).values
    low = torch.where(valid, values, big).min(dim=1).values
    return ((high - low) < tol) | (valid.sum(dim=1) < 2)


def solve_counts(solved: Tensor, valid: Tensor | None = None) -> list[tuple[int, int]]:
    """Per group ``(solved valid samples, valid samples)``; solved and valid are (B, G) bool."""
    solved = solved.bool()
    valid = torch.ones_like(solved) if valid is None else valid.bool()
    return [(int(s), int(n)) for s, n in zip((solved & valid).sum(dim=1).tolist(), valid.sum(dim=1).tolist(),
                                             strict=True)]
