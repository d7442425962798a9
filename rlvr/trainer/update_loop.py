"""The update loop, written once: epochs x mini-batches x micro-batches with global denominators.

It runs any per-micro-batch objective on any trainable worker: the policy loss (:mod:`rlvr.trainer.policy_objective`)
and, for PPO, the critic's value loss. Per mini-batch, every rank learns the mini-batch's global token and sequence
counts (an all-reduce), so each micro-batch's loss, normalised by them, sums under gradient accumulation to exactly
the mini-batch loss whatever the split over ranks and micro-batches. Every rank runs as many optimizer steps (and, where
the passes are collectives, as many micro-batches: :meth:`ModelWorker.micro_batches`), even one with no samples.

Vocabulary: N samples of the rollout batch, T response tokens, R rows of a micro-batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from rlvr.algo.losses import count_sequences
from rlvr.runtime.distributed import all_reduce_sum
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.workers import ModelWorker

Accumulate = Callable[[str, float], None]


@dataclass(frozen=True)
class Denominators:
    """The current mini-batch's counts over all ranks: response tokens in the loss, and sequences with at least one
    such token (a fully masked sample is no sequence of a seq-mean); both at least 1."""

    tokens: float
    sequences: float


class MicroBatchObjective(Protocol):
    """One micro-batch's loss: ``objective(batch, idx, denominators, first_pass, add) -> loss`` (a scalar tensor with
    a graph, normalised by ``denominators``). ``first_pass`` is True in the first mini-batch of the first epoch
    (before any optimizer step: on-policy statistics); ``add(key, value)`` accumulates a statistic over the update."""

    def __call__(self, batch: RolloutBatch, idx: list[int], denominators: Denominators, first_pass: bool,
                 add: Accumulate) -> torch.Tensor: ...


def run_update(worker: ModelWorker, batch: RolloutBatch, objective: MicroBatchObjective, *, epochs: int,
               mini_batches: int, seed: int, world_size: int) -> dict[str, float]:
    """``epochs`` passes over ``batch``, ``mini_batches`` optimizer steps per pass, gradient accumulation over the
    worker's micro-batches.

    Args:
        worker: a trainable worker (a DeepSpeed engine with an optimizer).
        batch: the tensorized rollout batch (``response_mask`` (N, T) at least; N may be 0 on a rank).
        objective: the per-micro-batch loss.
        epochs, mini_batches: PPO's mu and the number of mini-batches per pass.
        seed: seeds the mini-batch shuffle (used only when epochs > 1 or mini_batches > 1, else samples stay in order).
        world_size: ranks; DeepSpeed averages gradients over them, and the loss is already globally normalised, so the
            loss is multiplied back by it.
    Returns:
        the sums accumulated by ``add`` on this rank, plus ``loss`` (the objective's values), ``grad_norm`` (summed
        over optimizer steps) and ``opt_steps``.
    """
    worker.train_mode()
    n = batch.num_samples
    sums: dict[str, float] = {}

    def add(key: str, value: float) -> None:
        sums[key] = sums.get(key, 0.0) + value

    gen = torch.Generator().manual_seed(seed)
    shuffle = epochs > 1 or mini_batches > 1
    for epoch in range(epochs):
        order = torch.randperm(n, generator=gen).tolist() if shuffle else list(range(n))
        size = math.ceil(n / mini_batches) if n else 0
        for mb_index in range(mini_batches):  # as many optimizer steps on every rank, even one with no samples
            mb = order[mb_index * size:(mb_index + 1) * size]
            mask_mb = batch.response_mask[mb] if mb else torch.zeros(0, 1)
            # global denominators; fully masked samples (mask_truncated, dropped) are no sequence of a seq-mean
            tokens, seqs = all_reduce_sum(torch.stack([mask_mb.sum(), count_sequences(mask_mb)]).double()).tolist()
            denominators = Denominators(tokens=max(tokens, 1.0), sequences=max(seqs, 1.0))
            for idx in worker.micro_batches(batch, mb, backward=True):
                if not idx:
                    worker.idle_pass(backward=True)
                    continue
                loss = objective(batch, idx, denominators, epoch == 0 and mb_index == 0, add)
                # DeepSpeed averages gradients over ranks; our normaliser is already global, so undo the mean
                worker.backward(loss * world_size)
                add("loss", float(loss.detach()))
            add("grad_norm", worker.step())
            add("opt_steps", 1.0)
    return sums
