"""Reward-model eval metrics: pairwise accuracy, expected calibration error, reward-length correlation.

Inputs are (P,) score differences ``r_chosen - r_rejected`` of held-out pairs, or (M,) rewards with lengths.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def pairwise_accuracy(diff: Tensor) -> float:
    """Share of pairs the model orders right (``diff > 0``); a tie counts half. Raises ValueError with no pairs."""
    if diff.numel() == 0:
        raise ValueError("pairwise_accuracy needs at least one pair")
    return float(((diff > 0).float() + 0.5 * (diff == 0).float()).mean())


def expected_calibration_error(diff: Tensor, bins: int = 10) -> float:
    """ECE of the Bradley-Terry probability p = sigmoid(r_chosen - r_rejected) (Guo et al. 1706.04599, sec. 2).

    Each pair is a prediction with confidence max(p, 1 - p) that is right when p > 0.5 (a tie, p = 0.5, is right
    half the time). Pairs go into ``bins`` equal-width confidence bins over [0.5, 1];
    ``ECE = sum_b (n_b / n) |accuracy_b - mean confidence_b|``. 0 is perfectly calibrated.

    Raises:
        ValueError: no pairs, or ``bins < 1``.
    """
    if diff.numel() == 0:
        raise ValueError("expected_calibration_error needs at least one pair")
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    p = torch.sigmoid(diff.double().flatten())
    confidence = torch.maximum(p, 1 - p)
    correct = (p > 0.5).double() + 0.5 * (p == 0.5).double()
    # bin b holds confidences in (0.5 + b w, 0.5 + (b + 1) w]; 0.5 itself goes into the first bin
    which = ((confidence - 0.5) / (0.5 / bins)).ceil().long().clamp(1, bins) - 1
    ece = 0.0
    for b in range(bins):
        in_bin = which == b
        if in_bin.any():
            ece += float(in_bin.double().mean() * (correct[in_bin].mean() - confidence[in_bin].mean()).abs())
    return ece


def pearson(x: Tensor, y: Tensor) -> float | None:
    """Pearson correlation of two (M,) tensors; ``None`` when either is constant or M < 2 (undefined).

    Raises:
        ValueError: the shapes differ.
    """
    if x.shape != y.shape:
        raise ValueError(f"pearson: shapes differ, {tuple(x.shape)} vs {tuple(y.shape)}")
    if x.numel() < 2:
        return None
    x, y = x.double().flatten(), y.double().flatten()
    xc, yc = x - x.mean(), y - y.mean()
    denom = math.sqrt(float((xc * xc).sum()) * float((yc * yc).sum()))
    return float((xc * yc).sum()) / denom if denom > 0 else None
