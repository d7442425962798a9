"""Quantiles of values spread over ranks (each rank holds some of a step's token ratios): every rank sends a sorted
summary of its values, at most ``max_values`` long, and every rank merges all of them into the same quantiles.

A rank with at most ``max_values`` values sends them all, each weighing 1, so with one rank (or small batches) the
quantiles are exact. A rank with more sends ``max_values`` of its sorted values at evenly spaced ranks, each weighing
``n / max_values``: a merged quantile is then off by at most about ``1 / max_values`` of that rank's values in rank
(with the default 4,096, under 0.03 % of a rank's tokens), at a cost of 16 KiB a rank whatever the batch.

The quantile is the inverted empirical CDF (numpy's ``inverted_cdf``): the smallest value whose cumulative weight
reaches ``q`` of the total, a value that occurred, never an interpolation between two.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.runtime.distributed import all_gather_objects

MAX_VALUES = 4096
"""Values a rank sends at most (:func:`summarise`)."""


def summarise(values: Tensor, max_values: int = MAX_VALUES) -> tuple[Tensor, float]:
    """This rank's summary: ``(sorted values (k,) fp64 on the CPU, weight of each)``, ``k = min(n, max_values)``; all
    ``n`` values at weight 1 when ``n <= max_values``, else the sorted values at the ``max_values`` evenly spaced
    ranks ``round(j (n - 1) / (max_values - 1))`` at weight ``n / max_values``. ``values``: any shape, flattened.

    Raises:
        ValueError: ``max_values < 2``.
    """
    if max_values < 2:
        raise ValueError(f"max_values must be at least 2, got {max_values}")
    flat = values.detach().reshape(-1).to("cpu", torch.float64).sort().values
    n = flat.numel()
    if n <= max_values:
        return flat, 1.0
    picks = torch.linspace(0, n - 1, max_values, dtype=torch.float64).round().long()
    return flat[picks], n / max_values


def merged_quantiles(summaries: list[tuple[Tensor, float]], qs: tuple[float, ...]) -> list[float]:
    """The quantiles ``qs`` (each in (0, 1]) of the weighted union of ``summaries`` (:func:`summarise`'s results);
    NaN for each when there are no values at all.

    Raises:
        ValueError: a ``q`` outside (0, 1].
    """
    if any(not 0 < q <= 1 for q in qs):
        raise ValueError(f"quantiles must lie in (0, 1], got {qs}")
    filled = [(v, w) for v, w in summaries if v.numel()]
    if not filled:
        return [float("nan")] * len(qs)
    values = torch.cat([v for v, _ in filled])
    weights = torch.cat([torch.full((v.numel(),), w, dtype=torch.float64) for v, w in filled])
    order = values.argsort(stable=True)
    values, cumulative = values[order], weights[order].cumsum(0)
    total = float(cumulative[-1])
    # the first value whose cumulative weight reaches q of the total (a relative tolerance absorbs the rounding of
    # the cumulative sum: q * total for q = 1 must find the last value)
    targets = torch.tensor([q * total * (1 - 1e-12) for q in qs], dtype=torch.float64)
    idx = torch.searchsorted(cumulative, targets).clamp(max=values.numel() - 1)
    return [float(values[i]) for i in idx]


def quantiles_over_ranks(values: Tensor, qs: tuple[float, ...], max_values: int = MAX_VALUES) -> list[float]:
    """The quantiles ``qs`` of every rank's ``values`` together; every rank must call it (a gather) and gets the same
    result. With one process, the exact quantiles when ``values`` holds at most ``max_values``."""
    gathered = all_gather_objects(summarise(values, max_values))
    return merged_quantiles([(v, w) for v, w in gathered], qs)  # type: ignore[misc]
