"""The per-micro-batch objectives of the stages trained on fixed data, for :func:`rlvr.trainer.update_loop.run_update`:
supervised fine-tuning (:class:`SFTObjective`) and the preference losses (:class:`PreferenceObjective`: the rows of
:data:`rlvr.algo.table.OBJECTIVES` whose stage is ``dpo``), and their ``train/*`` (or held-out ``eval/*``) metrics.

Both read the policy worker's log-probs of the batch's responses (the tokens after each row's prompt) at temperature
1, masked by ``response_mask`` (1 on the tokens learned). SFT's loss is normalised by the step's trained tokens over
all ranks (:class:`rlvr.trainer.update_loop.Denominators`), a preference loss by the step's pairs (half the sequences),
so gradient accumulation over micro-batches gives exactly the step's mean.

Vocabulary: R rows of a micro-batch, T_micro its longest response, P pairs (rows 2p and 2p + 1: chosen, rejected).
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algo.preference import PreferenceInputs, chosen_nll, preference_accuracy
from rlvr.algo.sft import sft_loss
from rlvr.algo.table import OBJECTIVES
from rlvr.runtime.distributed import all_reduce_sum
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.update_loop import Accumulate, Denominators
from rlvr.trainer.workers import ModelWorker


def _totals(sums: dict[str, float], keys: list[str]) -> dict[str, float]:
    """``sums`` of ``keys`` added up over ranks (a collective: every rank calls it)."""
    values = all_reduce_sum(torch.tensor([sums.get(k, 0.0) for k in keys], dtype=torch.float64)).tolist()
    return dict(zip(keys, values, strict=True))


class SFTObjective:
    """Token-mean negative log-likelihood of the learned tokens of a micro-batch (:func:`rlvr.algo.sft.sft_loss`).

    Args:
        worker: the policy worker.
    """

    SUMMED = ["nll", "tokens", "sequences"]

    def __init__(self, worker: ModelWorker) -> None:
        self.worker = worker

    def __call__(self, batch: RolloutBatch, idx: list[int], denominators: Denominators, first_pass: bool,
                 add: Accumulate) -> torch.Tensor:
        logp, _, t = self.worker.forward(batch, idx)
        return self.loss(batch, idx, logp, denominators, add)

    def loss(self, batch: RolloutBatch, idx: list[int], logp: torch.Tensor, denominators: Denominators,
             add: Accumulate) -> torch.Tensor:
        """The loss of rows ``idx`` from their log-probs ``logp`` (R, T_micro), with its statistics added."""
        mask = batch.token_rows(idx, logp.shape[1], logp.device)("response_mask")
        loss = sft_loss(logp, mask, denominators.tokens)
        add("nll", float(-(logp.detach() * mask).sum()))
        add("tokens", float(mask.sum()))
        add("sequences", float(len(idx)))
        return loss

    def metrics(self, sums: dict[str, float], prefix: str = "train") -> dict[str, float]:
        """``{prefix}/loss`` (token-mean NLL over all ranks), ``{prefix}/tokens`` and ``{prefix}/examples`` of the
        step, from this rank's ``sums``; every rank must call it (the sums are all-reduced)."""
        tot = _totals(sums, self.SUMMED)
        return {f"{prefix}/loss": tot["nll"] / max(tot["tokens"], 1.0), f"{prefix}/tokens": tot["tokens"],
                f"{prefix}/examples": tot["sequences"]}


class PreferenceObjective:
    """The recipe's preference loss (a row of :data:`rlvr.algo.table.OBJECTIVES`) on the pairs of a micro-batch, plus
    ``nll_weight`` times the chosen responses' per-token NLL.

    Args:
        worker: the policy worker. name: the objective's row. settings: the recipe's values of the row's settings
            (``beta``, ``label_smoothing``). beta: the implicit rewards' beta. nll_weight: the NLL term's weight.
        ref_logps: (N,) the reference policy's summed log-probs of every row of the batch (computed before training).
    """

    SUMMED = ["pair_loss", "pairs", "accuracy", "rewards_chosen", "rewards_rejected", "margin", "logps_chosen",
              "logps_rejected", "ref_logps_chosen", "ref_logps_rejected", "nll"]

    def __init__(self, worker: ModelWorker, name: str, settings: dict[str, Any], *, beta: float, nll_weight: float,
                 ref_logps: torch.Tensor) -> None:
        self.worker = worker
        self.loss_fn = OBJECTIVES[name].loss_function()
        self.settings = settings
        self.beta = beta
        self.nll_weight = nll_weight
        self.ref_logps = ref_logps

    def __call__(self, batch: RolloutBatch, idx: list[int], denominators: Denominators, first_pass: bool,
                 add: Accumulate) -> torch.Tensor:
        if len(idx) % 2 or any(i % 2 for i in idx[::2]):
            raise ValueError(f"a micro-batch of a preference step must hold whole pairs, got rows {idx}")
        logp, _, t = self.worker.forward(batch, idx)
        return self.loss(batch, idx, logp, denominators, add)

    def loss(self, batch: RolloutBatch, idx: list[int], logp: torch.Tensor, denominators: Denominators,
             add: Accumulate) -> torch.Tensor:
        """The loss of the pairs of rows ``idx`` from their log-probs ``logp`` (R, T_micro), statistics added."""
        mask = batch.token_rows(idx, logp.shape[1], logp.device)("response_mask")
        seq = (logp * mask).sum(1)  # (R,) summed log-probs of each response
        tokens = mask.sum(1)
        ref = self.ref_logps[idx].to(seq)
        inputs = PreferenceInputs(seq[0::2], seq[1::2], ref[0::2], ref[1::2], tokens[0::2], tokens[1::2])
        out = self.loss_fn(inputs, **self.settings)
        per_pair = out.losses
        nll = chosen_nll(inputs.chosen_logps, inputs.chosen_tokens)
        if self.nll_weight:
            per_pair = per_pair + self.nll_weight * nll
        pairs = denominators.sequences / 2.0  # every response has a learned token (its eos at least)
        loss = per_pair.sum() / pairs
        rewards_c, rewards_r = self.beta * inputs.chosen_logratios.detach(), \
            self.beta * inputs.rejected_logratios.detach()
        for key, value in (("pair_loss", per_pair.detach()), ("accuracy", preference_accuracy(rewards_c, rewards_r)),
                           ("rewards_chosen", rewards_c), ("rewards_rejected", rewards_r),
                           ("margin", rewards_c - rewards_r), ("logps_chosen", inputs.chosen_logps.detach()),
                           ("logps_rejected", inputs.rejected_logps.detach()), ("ref_logps_chosen", ref[0::2]),
                           ("ref_logps_rejected", ref[1::2]), ("nll", nll.detach())):
            add(key, float(value.sum()))
        add("pairs", float(len(idx) // 2))
        return loss

    def metrics(self, sums: dict[str, float], prefix: str = "train") -> dict[str, float]:
        """Means over the step's pairs (all ranks) of the loss, the preference accuracy, the chosen and rejected
        implicit rewards and their margin, the summed log-probs of each response (and the reference's), the chosen
        NLL per token; from this rank's ``sums``, every rank must call it."""
        tot = _totals(sums, self.SUMMED)
        pairs = max(tot.pop("pairs"), 1.0)
        tot["loss"] = tot.pop("pair_loss")  # (run_update's own "loss" sum is the micro-batches' normalised losses)
        return {f"{prefix}/{k}": v / pairs for k, v in tot.items()} | {f"{prefix}/pairs": pairs}


def both_fell(metrics: dict[str, float], prefix: str = "train", tolerance: float = 0.0) -> bool:
    """Whether the chosen and the rejected responses' mean log-probs both fell below the reference's (by more than
    ``tolerance`` nats per sequence): the known DPO failure where the margin grows while the policy moves its mass
    off both responses, onto text neither holds."""
    keys = [f"{prefix}/logps_{s}" for s in ("chosen", "rejected")] + \
        [f"{prefix}/ref_logps_{s}" for s in ("chosen", "rejected")]
    if not all(k in metrics for k in keys):
        return False
    lc, lr, rc, rr = (metrics[k] for k in keys)
    return lc < rc - tolerance and lr < rr - tolerance
