"""The policy's per-micro-batch objective for :func:`rlvr.trainer.update_loop.run_update`, and its metrics.

Loss = policy-gradient term (``ppo_clip``/GSPO or ``cispo``, optionally times truncated importance weights)
+ ``beta * KL`` to the reference (``kl.placement: loss``) + ``-entropy_coef * entropy``, each aggregated by
``loss_agg`` with the mini-batch's global denominators, so the three add up to ``train/loss``.

Vocabulary: R rows of a micro-batch, T_micro its longest response.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.algo.kl import kl_per_token
from rlvr.algo.losses import aggregate_loss, cispo_loss, ppo_clip_loss
from rlvr.config import AlgorithmConfig
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.distributed import all_reduce_max, all_reduce_sum
from rlvr.trainer.update_loop import Accumulate, Denominators
from rlvr.trainer.workers import ModelWorker

SUMMED = ["loss", "pg_loss", "kl_loss", "entropy_loss", "tokens", "clip_low", "clip_high", "clip_dual", "ratio",
          "entropy", "entropy_tokens", "mismatch", "kl"]
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

    def _pg_objective(self, logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor) -> Any:
        """The recipe's per-token policy objective (``algorithm.policy_loss``, ``importance_sampling_level``)."""
        a = self.config
        if a.policy_loss == "cispo":
            return cispo_loss(logp, old, adv, mask, clip_low=a.clip_low, clip_high=a.clip_high)
        return ppo_clip_loss(logp, old, adv, mask, clip_low=a.clip_low, clip_high=a.clip_high,
                             clip_ratio_c=a.clip_ratio_c, importance_sampling_level=a.importance_sampling_level)

    def __call__(self, batch: RolloutBatch, idx: list[int], denominators: Denominators, first_pass: bool,
                 add: Accumulate) -> torch.Tensor:
        a = self.config
        agg = dict(mode=a.loss_agg, max_len=self.max_len, num_tokens=denominators.tokens,
                   num_seqs=denominators.sequences)
        logp, entropy, t = self.worker.forward(batch, idx, entropy_grad=a.entropy_coef > 0)
        mask = batch.response_mask[idx, :t].to(logp.device)
        old = batch.old_logprobs[idx, :t].to(logp.device) if batch.old_logprobs is not None else logp.detach()
        adv = batch.advantages[idx, :t].to(logp.device)
        out = self._pg_objective(logp, old, adv, mask)
        pg_tok = out.loss
        if a.tis_cap is not None:
            rollout_lp = batch.rollout_logprobs[idx, :t].to(logp.device)
            pg_tok = pg_tok * torch.exp(old - rollout_lp).clamp(max=a.tis_cap).detach()
        # the loss's three terms, each aggregated like the whole (so they add up to train/loss)
        terms = {"pg_loss": aggregate_loss(pg_tok, mask, **agg)}
        if batch.ref_logprobs is not None:
            kl = kl_per_token(logp, batch.ref_logprobs[idx, :t].to(logp.device), a.kl.estimator)
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
            rollout_lp = batch.rollout_logprobs[idx, :t].to(logp.device)
            diff = (logp.detach() - rollout_lp).abs() * mask
            add("mismatch", float(diff.sum()))
            self.mismatch_max = max(self.mismatch_max, float(diff.max()) if ntok else 0.0)
        return loss

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
        return metrics
