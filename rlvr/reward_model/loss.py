"""The Bradley-Terry reward-model loss, over every ranked pair of a batch scored with one forward pass per response.

Shapes: M responses scored in the batch, P pairs. ``chosen_index``/``rejected_index`` (P,) index into the (M,) scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor


@dataclass
class PairLoss:
    """Results of :func:`bradley_terry_loss`."""

    loss: Tensor
    """Scalar: the sum of per-pair losses divided by ``num_pairs`` (the step's global pair count)."""
    per_pair: Tensor
    """(P,) per-pair losses."""
    margin: Tensor
    """(P,) r_chosen - r_rejected, detached."""
    accuracy: Tensor
    """Scalar: share of pairs with r_chosen > r_rejected (a tie counts half), detached."""


def ranked_pairs(k: int) -> list[tuple[int, int]]:
    """All K(K-1)/2 (better, worse) index pairs of K responses ranked best first: (0, 1), (0, 2), ..., (K-2, K-1)."""
    if k < 2:
        raise ValueError(f"a ranking needs at least 2 responses, got {k}")
    return [(i, j) for i in range(k) for j in range(i + 1, k)]


def bradley_terry_loss(scores: Tensor, chosen_index: Tensor, rejected_index: Tensor, *, margin: float | Tensor = 0.0,
                       label_smoothing: float = 0.0, num_pairs: float | None = None) -> PairLoss:
    """Bradley-Terry loss ``-(1 - eps) log sigmoid(d) - eps log sigmoid(-d)``, ``d = r_chosen - r_rejected - m``.

    The pairwise logistic loss of InstructGPT (2203.02155 eq. 1) with the margin m of Llama 2 (2307.09288 eq. 2) and the
    conservative label smoothing eps of cDPO (Mitchell 2023; TRL's ``label_smoothing``). Pairs are gathered from one
    score per response, so a response in several pairs (K ranked responses give K(K-1)/2) is scored once.

    Args:
        scores: (M,) rewards, fp32, with grad. chosen_index, rejected_index: (P,) int64 into ``scores``.
        margin: float or (P,) tensor. label_smoothing: eps in [0, 0.5).
        num_pairs: the denominator (the mini-batch's pair count when micro-batches accumulate); default P.
    Raises:
        ValueError: index shapes differ, no pairs, an index out of range, or eps outside [0, 0.5).
    """
    if chosen_index.shape != rejected_index.shape or chosen_index.dim() != 1:
        raise ValueError(f"chosen_index {tuple(chosen_index.shape)} and rejected_index "
                         f"{tuple(rejected_index.shape)} must both be (P,)")
    if chosen_index.numel() == 0:
        raise ValueError("no pairs to compute a Bradley-Terry loss on")
    m = scores.shape[0]
    if int(max(chosen_index.max(), rejected_index.max())) >= m or int(min(chosen_index.min(),
                                                                         rejected_index.min())) < 0:
        raise ValueError(f"pair indices must lie in [0, {m}) (the scored responses)")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    diff = scores[chosen_index].float() - scores[rejected_index].float()
    logits = diff - margin
    per_pair = -(1.0 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)
    denom = float(num_pairs) if num_pairs is not None else float(per_pair.numel())
    d = diff.detach()
    accuracy = ((d > 0).float() + 0.5 * (d == 0).float()).mean()
    return PairLoss(loss=per_pair.sum() / denom, per_pair=per_pair, margin=d, accuracy=accuracy)
