"""Direct preference losses on (chosen, rejected) pairs: DPO (sigmoid), conservative DPO (label smoothing) and IPO
(per-token normalised log-ratios), each a row of :data:`rlvr.algo.table.OBJECTIVES`.

Shapes: P pairs. Every loss reads one :class:`PreferenceInputs` (sequence log-probs of the chosen and rejected responses
under the policy and under the reference policy, and their token counts) and its settings as keyword arguments, and
returns a :class:`PreferenceLossOutput` of per-pair losses; the caller averages them over the step's pairs.

- DPO (Rafailov et al. 2305.18290, eq. 7): ``-log sigmoid(beta * ((lc - rc) - (lr - rr)))``, with ``lc``/``lr`` the
  policy's summed log-probs of the chosen/rejected response and ``rc``/``rr`` the reference's.
- cDPO (Mitchell 2023, "A note on DPO with noisy preferences"; OpenRLHF's and TRL's former ``label_smoothing``): the
  label is right with probability ``1 - eps``: ``-(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h)``.
- IPO (Azar et al. 2310.12036, eq. 17) as TRL and AReaL compute it: the log-ratios divided by each response's token
  count, ``((lc - rc) / nc - (lr - rr) / nr - 1 / (2 beta))^2`` (beta is the paper's tau).

The implicit rewards ``beta * (policy - reference)`` of both responses are returned (detached) for the metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class PreferenceInputs:
    """What a preference loss reads of P pairs, all (P,) fp32 on one device.

    Attributes:
        chosen_logps, rejected_logps: the policy's summed log-probs of each response (with the graph).
        ref_chosen_logps, ref_rejected_logps: the reference policy's (no graph).
        chosen_tokens, rejected_tokens: tokens in each response (the counts the sums ran over), >= 1.
    Raises:
        ValueError: tensors that are not 1-D of one length.
    """

    chosen_logps: Tensor
    rejected_logps: Tensor
    ref_chosen_logps: Tensor
    ref_rejected_logps: Tensor
    chosen_tokens: Tensor
    rejected_tokens: Tensor

    def __post_init__(self) -> None:
        shapes = {tuple(t.shape) for t in (self.chosen_logps, self.rejected_logps, self.ref_chosen_logps,
                                           self.ref_rejected_logps, self.chosen_tokens, self.rejected_tokens)}
        if len(shapes) != 1 or len(next(iter(shapes))) != 1:
            raise ValueError(f"preference inputs must all be (P,) tensors of one length, got shapes {sorted(shapes)}")

    @property
    def chosen_logratios(self) -> Tensor:
        return self.chosen_logps - self.ref_chosen_logps

    @property
    def rejected_logratios(self) -> Tensor:
        return self.rejected_logps - self.ref_rejected_logps


@dataclass
class PreferenceLossOutput:
    """Per-pair results, all (P,) fp32.

    Attributes:
        losses: the objective of each pair (average them over the step's pairs).
        chosen_rewards, rejected_rewards: the implicit rewards ``beta * (policy - reference)`` summed log-probs,
            detached.
    """

    losses: Tensor
    chosen_rewards: Tensor
    rejected_rewards: Tensor


def _rewards(inputs: PreferenceInputs, beta: float) -> tuple[Tensor, Tensor]:
    return beta * inputs.chosen_logratios.detach(), beta * inputs.rejected_logratios.detach()


def _check_beta(beta: float) -> None:
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")


def dpo_loss(inputs: PreferenceInputs, *, beta: float) -> PreferenceLossOutput:
    """DPO's sigmoid loss, ``-log sigmoid(beta * h)`` with ``h = (lc - rc) - (lr - rr)``. Raises ValueError for
    ``beta <= 0``."""
    return cdpo_loss(inputs, beta=beta, label_smoothing=0.0)


def cdpo_loss(inputs: PreferenceInputs, *, beta: float, label_smoothing: float) -> PreferenceLossOutput:
    """Conservative DPO: ``-(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h)``; eps = 0 is DPO.

    Raises:
        ValueError: ``beta <= 0`` or ``label_smoothing`` outside [0, 0.5).
    """
    _check_beta(beta)
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    h = inputs.chosen_logratios - inputs.rejected_logratios
    losses = -(1.0 - label_smoothing) * F.logsigmoid(beta * h)
    if label_smoothing:
        losses = losses - label_smoothing * F.logsigmoid(-beta * h)
    return PreferenceLossOutput(losses, *_rewards(inputs, beta))


def ipo_loss(inputs: PreferenceInputs, *, beta: float) -> PreferenceLossOutput:
    """IPO with per-token normalised log-ratios: ``((lc - rc) / nc - (lr - rr) / nr - 1 / (2 beta))^2``.

    Raises:
        ValueError: ``beta <= 0``.
    """
    _check_beta(beta)
    nc = inputs.chosen_tokens.to(inputs.chosen_logps.dtype).clamp(min=1.0)
    nr = inputs.rejected_tokens.to(inputs.rejected_logps.dtype).clamp(min=1.0)
    delta = inputs.chosen_logratios / nc - inputs.rejected_logratios / nr
    return PreferenceLossOutput((delta - 1.0 / (2.0 * beta)) ** 2, *_rewards(inputs, beta))


def chosen_nll(chosen_logps: Tensor, chosen_tokens: Tensor) -> Tensor:
    """(P,) the chosen response's negative log-likelihood per token, ``-lc / nc`` (RPO, Pang et al. 2404.19733: the
    NLL term added to a preference loss, normalised by the response's length)."""
    return -chosen_logps / chosen_tokens.to(chosen_logps.dtype).clamp(min=1.0)


def preference_accuracy(chosen_rewards: Tensor, rejected_rewards: Tensor) -> Tensor:
    """(P,) 1.0 where the chosen response's implicit reward is above the rejected one's (a tie counts 0)."""
    return (chosen_rewards > rejected_rewards).to(torch.float32)
