"""Batches of the stages trained on fixed data, in the form the model workers read (:class:`RolloutBatch`): an SFT
example is a group of one (its prompt: the ids before the first learned turn; its response: the rest, masked by the
loss mask), a preference pair a group of two (the shared prompt, then the chosen and the rejected response).

So the packed forward (:func:`rlvr.models.logprobs.shared_prefix_logprobs`) runs each example as its own segments:
every token attends to its own example only, and a pair's prompt is run once for both responses. No log-probs were
sampled: ``rollout_logprobs`` stays 0.
"""

from __future__ import annotations

import torch

from rlvr.data.pair_examples import PairExample
from rlvr.data.prompts import Prompt
from rlvr.data.sft_examples import Example
from rlvr.rollout.base import Completion
from rlvr.trainer.batch import RolloutBatch, tensorize


def _completion(ids: list[int]) -> Completion:
    return Completion(list(ids), [0.0] * len(ids), "stop")


def sft_batch(examples: list[Example], pad_id: int) -> RolloutBatch:
    """The tensorized batch of ``examples`` (N = len(examples), group size 1; ``response_mask`` = the loss mask after
    each example's prompt)."""
    prompts = [Prompt(e.index, e.row, "", e.ids[:e.context_len]) for e in examples]
    batch = RolloutBatch(prompts=prompts, completions=[_completion(e.ids[e.context_len:]) for e in examples],
                         group_size=1, sampled_masks=[e.mask[e.context_len:] for e in examples])
    if examples:
        tensorize(batch, pad_id, mask_truncated=False)
    else:
        batch.response_mask = torch.zeros(0, 1)
    return batch


def pair_batch(pairs: list[PairExample], pad_id: int) -> RolloutBatch:
    """The tensorized batch of ``pairs`` (N = 2 x len(pairs), group size 2: rows 2p and 2p + 1 are pair p's chosen
    and rejected responses)."""
    prompts = [Prompt(p.index, p.row, "", p.prompt_ids) for p in pairs]
    completions = [_completion(ids) for p in pairs for ids in (p.chosen_ids, p.rejected_ids)]
    masks = [m for p in pairs for m in (p.chosen_mask, p.rejected_mask)]
    batch = RolloutBatch(prompts=prompts, completions=completions, group_size=2, sampled_masks=masks)
    if pairs:
        tensorize(batch, pad_id, mask_truncated=False)
    else:
        batch.response_mask = torch.zeros(0, 1)
    return batch
