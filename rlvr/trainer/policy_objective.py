"""The policy's per-micro-batch objective for :func:`rlvr.trainer.update_loop.run_update`, and its metrics.

Loss = policy-gradient term (the recipe's row of :data:`rlvr.algo.table.POLICY_LOSSES`: ``ppo_clip``/GSPO or
``cispo``, times the weights of the recipe's correction for stale and mismatched tokens, a row of
:data:`rlvr.algo.table.CORRECTIONS`)
+ ``beta * KL`` to the reference (``kl.placement: loss``) + ``-entropy_coef * entropy``, each aggregated by
``loss_agg`` with the mini-batch's global denominators, so the three add up to ``train/loss``.

A correction only weighs the policy-gradient term: the KL and entropy terms see every token. A token (or sample) it
masks stays in the denominators: they are the mini-batch's counts, fixed before its first micro-batch (as IcePop's
1/|y_i|, AReaL and prime-rl keep them), so masking many tokens shrinks the step instead of scaling up the few tokens
left, and the loss stays exactly the same under any split into micro-batches and ranks.

Vocabulary: R rows of a micro-batch, T_micro its longest response.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algo.kl import kl_per_token
from rlvr.algo.losses import PolicyLossInputs, aggregate_loss
from rlvr.algo.table import CORRECTIONS, POLICY_LOSSES
from rlvr.config import AlgorithmConfig
from rlvr.runtime.distributed import all_reduce_max, all_reduce_sum
from rlvr.runtime.quantiles import quantiles_over_ranks
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.update_loop import Accumulate, Denominators
from rlvr.trainer.workers import ModelWorker

SUMMED = ["loss", "pg_loss", "kl_loss", "entropy_loss", "tokens", "clip_low", "clip_high", "clip_dual", "ratio",
          "entropy", "entropy_tokens", "mismatch", "kl", "correction_tokens", "correction_masked"]
"""The statistics summed over micro-batches and ranks before they become ``train/*`` metrics."""


class PolicyObjective:
    """The recipe's policy loss on one micro-batch of ``worker`` (the policy).

    Args:
        worker: the policy worker (its forward gives log-probs and entropy (R, T_micro)).
        config: the recipe's ``algorithm`` section. kl_beta: the KL coefficient of this step.
        max_len: ``rollout.max_new_tokens`` (the ``seq-mean-token-sum-norm`` constant).
        loss_scale: multiplies the loss (dynamic sampling's unfilled steps, ``scale_unfilled``).
    """

    def __init__(self, worker: ModelWorker, config: AlgorithmConfig, kl_beta: float, max_len: int,
                 loss_scale: float = 1.0) -> None:
        self.worker = worker
        self.config = config
        self.kl_beta = kl_beta
        self.max_len = max_len
        self.loss_scale = loss_scale
        self.mismatch_max = 0.0  # largest |trainer - rollout| log-prob gap of the first pass (a max, not a sum)
        row = POLICY_LOSSES[config.policy_loss]
        self.policy_loss = row.loss_function()
        self.loss_settings: dict[str, Any] = {k: getattr(config, k) for k in row.settings}
        correction = CORRECTIONS[config.correction.type]
        self.correction = correction.weight_function() if correction.weights is not None else None
        self.correction_settings: dict[str, Any] = {k: getattr(config.correction, k) for k in correction.settings}
        self.is_ratios: list[torch.Tensor] = []  # behaviour ratios of each sample's tokens in the loss, seen once
        self._seen: set[int] = set()  # samples whose ratios are counted (the first pass over each of them)

    def __call__(self, batch: RolloutBatch, idx: list[int], denominators: Denominators, first_pass: bool,
                 add: Accumulate) -> torch.Tensor:
        a = self.config
        agg = dict(mode=a.loss_agg, max_len=self.max_len, num_tokens=denominators.tokens,
                   num_seqs=denominators.sequences)
        logp, entropy, t = self.worker.forward(batch, idx, entropy_grad=a.entropy_coef > 0)
        rows = batch.token_rows(idx, t, logp.device)
        old = rows("old_logprobs")
        inputs = PolicyLossInputs(logprobs=logp, old_logprobs=old if old is not None else logp.detach(),
                                  advantages=rows("advantages"), mask=rows("response_mask"))
        mask = inputs.mask
        out = self.policy_loss(inputs, **self.loss_settings)
        pg_tok = out.loss
        if self.correction is not None:
            pg_tok = pg_tok * self._correct(old, rows("rollout_logprobs"), mask, idx, add)
        # the loss's three terms, each aggregated like the whole (so they add up to train/loss)
        terms = {"pg_loss": aggregate_loss(pg_tok, mask, **agg)}
        if batch.ref_logprobs is not None:
            kl = kl_per_token(logp, rows("ref_logprobs"), a.kl.estimator)
            if a.kl.placement == "loss":
                terms["kl_loss"] = aggregate_loss(self.kl_beta * kl, mask, **agg)
            add("kl", float((kl.detach() * mask).sum()))
        if a.entropy_coef > 0:
            terms["entropy_loss"] = aggregate_loss(-a.entropy_coef * entropy, mask, **agg)
        loss = sum(terms.values()) * self.loss_scale
        ntok = float(mask.sum())
        for name, term in terms.items():
            add(name, float(term.detach()) * self.loss_scale)
        add("tokens", ntok)
        for side in ("low", "high", "dual"):
            add(f"clip_{side}", float(getattr(out, f"clipped_{side}").sum()))
        add("ratio", float(out.ratio.sum()))
        if first_pass:  # on-policy statistics: entropy and the rollout engine's log-prob mismatch
            add("entropy_tokens", ntok)
            add("entropy", float((entropy.detach() * mask).sum()))
            diff = (logp.detach() - rows("rollout_logprobs")).abs() * mask
            add("mismatch", float(diff.sum()))
            self.mismatch_max = max(self.mismatch_max, float(diff.max()) if ntok else 0.0)
        return loss

    def _correct(self, old: torch.Tensor | None, rollout: torch.Tensor | None, mask: torch.Tensor, idx: list[int],
                 add: Accumulate) -> torch.Tensor:
        """The correction's weights (R, T_micro) of a micro-batch; the first time a sample is seen, its tokens' ratios
        and masked count join the step's statistics (the ratio pi_old / pi_behav does not change during the update).

        Raises:
            ValueError: the batch lacks ``old_logprobs`` or ``rollout_logprobs``.
        """
        if old is None or rollout is None:
            missing = "old_logprobs" if old is None else "rollout_logprobs"
            raise ValueError(f"algorithm.correction.type={self.config.correction.type!r} weighs by pi_old / pi_behav "
                             f"and the batch has no {missing} (the trainer computes old log-probs when "
                             "rlvr.algo.table.needs says so; the rollout engine records the sampled tokens' log-probs)")
        corr = self.correction(old, rollout, mask, **self.correction_settings)
        new = [j for j, i in enumerate(idx) if i not in self._seen]
        if new:
            self._seen.update(idx[j] for j in new)
            m = mask[new] > 0
            self.is_ratios.append(corr.ratio[new][m].detach().cpu())
            add("correction_tokens", float(m.sum()))
            add("correction_masked", float((mask[new] - corr.kept[new]).sum()))
        return corr.weight

    def correction_metrics(self, tot: dict[str, float]) -> dict[str, float]:
        """``train/is_ratio_p05|p50|p95|max`` (the token ratio pi_old / pi_behav over every rank's response tokens in
        the loss; quantiles by :func:`rlvr.runtime.quantiles.quantiles_over_ranks`, exact up to 4,096 tokens a rank)
        and ``train/correction_masked_fraction`` (the share of those tokens the correction masked: 0 for a truncation).
        A collective: every rank must call it. NaN ratios when no rank had a token."""
        ratios = torch.cat(self.is_ratios) if self.is_ratios else torch.zeros(0, dtype=torch.float64)
        p05, p50, p95 = quantiles_over_ranks(ratios, (0.05, 0.5, 0.95))
        top = all_reduce_max(float(ratios.max()) if ratios.numel() else float("-inf"))
        return {"train/is_ratio_p05": p05, "train/is_ratio_p50": p50, "train/is_ratio_p95": p95,
                "train/is_ratio_max": top if top != float("-inf") else float("nan"),
                "train/correction_masked_fraction": tot["correction_masked"] / max(tot["correction_tokens"], 1.0)}

    def metrics(self, sums: dict[str, float], lr: float, has_reference: bool, kl_beta: float) -> dict[str, float]:
        """``train/*`` metrics of the update from this rank's ``sums`` (:func:`run_update`); every rank must call it
        (the sums are all-reduced). Losses are means over optimizer steps, fractions over all ranks' tokens."""
        a = self.config
        totals = all_reduce_sum(torch.tensor([sums.get(k, 0.0) for k in SUMMED], dtype=torch.float64))
        tot = dict(zip(SUMMED, totals.tolist(), strict=True))
        tokens = max(tot["tokens"], 1.0)
        ent_tokens = max(tot["entropy_tokens"], 1.0)
        opt_steps = max(sums.get("opt_steps", 1.0), 1.0)
        metrics = {
            "train/loss": tot["loss"] / opt_steps,
            "train/pg_loss": tot["pg_loss"] / opt_steps,
            "train/clip_fraction": (tot["clip_low"] + tot["clip_high"] + tot["clip_dual"]) / tokens,
            "train/clip_fraction_low": tot["clip_low"] / tokens,
            "train/clip_fraction_high": tot["clip_high"] / tokens,
            "train/clip_fraction_dual": tot["clip_dual"] / tokens,
            "train/ratio_mean": tot["ratio"] / tokens,
            "train/entropy": tot["entropy"] / ent_tokens,
            "train/rollout_logprob_diff_mean": tot["mismatch"] / ent_tokens,
            "train/rollout_logprob_diff_max": all_reduce_max(self.mismatch_max),
            "train/grad_norm": sums.get("grad_norm", 0.0) / opt_steps,
            "train/lr": lr,
            "train/optimizer_steps": sums.get("opt_steps", 0.0),
        }
        if a.entropy_coef > 0:
            metrics["train/entropy_loss"] = tot["entropy_loss"] / opt_steps
        if has_reference:
            if a.kl.placement == "loss":
                metrics["train/kl_loss"] = tot["kl_loss"] / opt_steps
            metrics["train/kl"] = tot["kl"] / tokens
            metrics["train/kl_beta"] = kl_beta
        if self.correction is not None:
            metrics.update(self.correction_metrics(tot))
        return metrics
