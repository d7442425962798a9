"""The typed rollout batch handed from stage to stage of a training step (no string-keyed dicts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from rlvr.data.prompts import Prompt
from rlvr.rollout.base import Completion


@dataclass
class RolloutBatch:
    """B prompts x G completions, flattened in group order (sample i belongs to prompt i // G).

    Tensors (filled by :func:`tensorize`): N = B * G rows, P prompt columns (left-padded), T response columns
    (right-padded). Rewards and advantages are filled by the verify and advantage stages.
    """

    prompts: list[Prompt] = field(metadata={"per": "group"})
    completions: list[Completion]
    group_size: int = field(metadata={"per": "batch"})
    texts: list[str] = field(default_factory=list)
    sampled_masks: list[list[int]] = field(default_factory=list)
    """Per sample with tools (``rollout.tools``): 1 on the response ids the policy sampled, 0 on tool answers and
    template glue (as long as the sample's ``token_ids``); empty without tools (every response id was sampled)."""
    trajectories: list[list[dict[str, Any]]] = field(default_factory=list)
    """Per sample with tools: its turns, calls and outputs (``MultiTurnSample.trajectory``); empty without tools."""
    episode_rewards: list[Any] = field(default_factory=list)
    """Per sample with tools or an environment: the environment's episode reward or error
    (:class:`rlvr.tools.environment.EpisodeReward`); empty without them."""
    reward_results: list[Any] = field(default_factory=list)
    rewards: Tensor | None = None            # (N,) total reward
    solved: Tensor | None = None             # (N,) bool: the solved-verifier scored 1
    valid: Tensor | None = None              # (N,) bool: False when a verifier failed and failure_score is None
    rm_scores: Tensor | None = None          # (N,) the reward model's score (reward.source reward_model / both)
    input_ids: Tensor | None = None          # (N, P + T)
    attention_mask: Tensor | None = None     # (N, P + T)
    response_mask: Tensor | None = None      # (N, T) 1 on response tokens that enter the loss
    rollout_logprobs: Tensor | None = None   # (N, T) from the rollout engine
    old_logprobs: Tensor | None = None       # (N, T) trainer's log-probs before the update (if computed)
    ref_logprobs: Tensor | None = None       # (N, T) reference policy (if beta > 0)
    advantages: Tensor | None = None         # (N, T)
    values: Tensor | None = None             # (N, T) critic values at rollout time (PPO)
    returns: Tensor | None = None            # (N, T) GAE returns, the critic's targets (PPO)

    @property
    def num_samples(self) -> int:
        return len(self.completions)

    def prompt_of(self, i: int) -> Prompt:
        return self.prompts[i // self.group_size]

    def token_rows(self, idx: list[int], t: int, device: torch.device | str) -> Callable[[str], Tensor | None]:
        """A reader of the micro-batch ``idx``: ``rows(name)`` is the (N, T) tensor field ``name`` (``advantages``,
        ``old_logprobs``, ...) at rows ``idx`` and its first ``t`` columns (R, t), on ``device``; None where the field
        is not filled."""
        def rows(name: str) -> Tensor | None:
            value = getattr(self, name)
            return value[idx, :t].to(device) if value is not None else None
        return rows

    def sampled_length(self, i: int) -> int:
        """Response tokens of sample ``i`` that the policy sampled (all of them without tools)."""
        return sum(self.sampled_masks[i]) if self.sampled_masks else len(self.completions[i].token_ids)

    def select_groups(self, groups: list[int]) -> RolloutBatch:
        """The batch restricted to the groups ``groups`` (indices into ``prompts``, kept in that order).

        Every dataclass field is carried over (a field added later cannot be silently dropped): per-group fields are
        indexed by group, per-sample ones (lists or tensors with N rows) by the groups' rows, unfilled ones (``None``
        or an empty list) stay unfilled.

        Raises:
            ValueError: a group index out of range, or a filled field whose length is neither N nor B.
        """
        b, g = len(self.prompts), self.group_size
        if any(not 0 <= i < b for i in groups):
            raise ValueError(f"group indices {groups} out of range for a batch of {b} groups")
        rows = [i * g + j for i in groups for j in range(g)]
        values: dict[str, Any] = {}
        for f in fields(self):
            value, per = getattr(self, f.name), f.metadata.get("per", "sample")
            if per == "batch":
                values[f.name] = value
            elif value is None or (isinstance(value, list) and not value):
                values[f.name] = None if value is None else []
            else:
                picks, expected = (groups, b) if per == "group" else (rows, self.num_samples)
                if len(value) != expected:
                    raise ValueError(f"RolloutBatch.{f.name} has {len(value)} entries, expected {expected} "
                                     f"(one per {per})")
                values[f.name] = (value[torch.as_tensor(picks, dtype=torch.long)] if isinstance(value, Tensor)
                                  else [value[i] for i in picks])
        return RolloutBatch(**values)

    @staticmethod
    def concat(parts: list[RolloutBatch]) -> RolloutBatch:
        """The batches ``parts`` one after the other (groups in order); every dataclass field is concatenated.

        Raises:
            ValueError: no parts, different group sizes, or a field filled in some parts and not in others.
        """
        if not parts:
            raise ValueError("RolloutBatch.concat needs at least one batch")
        sizes = {p.group_size for p in parts}
        if len(sizes) != 1:
            raise ValueError(f"RolloutBatch.concat: parts have different group sizes {sorted(sizes)}")
        values: dict[str, Any] = {}
        for f in fields(RolloutBatch):
            items = [getattr(p, f.name) for p in parts]
            if f.metadata.get("per") == "batch":
                values[f.name] = items[0]
            elif all(x is None for x in items):
                values[f.name] = None
            elif any(x is None for x in items):
                raise ValueError(f"RolloutBatch.concat: field {f.name} is filled in some parts and None in others")
            elif isinstance(items[0], Tensor):
                values[f.name] = torch.cat(items)
            else:
                values[f.name] = [x for item in items for x in item]
        return RolloutBatch(**values)


def tensorize(batch: RolloutBatch, pad_id: int, mask_truncated: bool) -> None:
    """Build the padded (N, P + T) inputs from the exact sampled token ids (never re-tokenized).

    ``mask_truncated`` drops samples cut at max_new_tokens from the response mask (DAPO overlong filtering). With
    tools, each sample's ``sampled_masks`` row is ANDed in: tool answers and template glue get no loss, no KL, no
    entropy term and no GAE step, and do not count in token-mean denominators.
    """
    n = batch.num_samples
    prompt_ids = [batch.prompt_of(i).token_ids for i in range(n)]
    p = max(len(x) for x in prompt_ids)
    t = max(max(len(c.token_ids) for c in batch.completions), 1)
    input_ids = torch.full((n, p + t), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, p + t), dtype=torch.long)
    response_mask = torch.zeros((n, t), dtype=torch.float32)
    rollout_lp = torch.zeros((n, t), dtype=torch.float32)
    for i, (ids, comp) in enumerate(zip(prompt_ids, batch.completions, strict=True)):
        k = len(comp.token_ids)
        input_ids[i, p - len(ids):p] = torch.tensor(ids)
        attention_mask[i, p - len(ids):p + k] = 1
        input_ids[i, p:p + k] = torch.tensor(comp.token_ids, dtype=torch.long)
        rollout_lp[i, :k] = torch.tensor(comp.logprobs, dtype=torch.float32)
        if not (mask_truncated and comp.finish_reason == "length"):
            response_mask[i, :k] = 1.0
        if batch.sampled_masks:
            response_mask[i, :k] *= torch.tensor(batch.sampled_masks[i], dtype=torch.float32)
    if batch.valid is not None:
        response_mask *= batch.valid.float().unsqueeze(1)
    batch.input_ids, batch.attention_mask, batch.response_mask = input_ids, attention_mask, response_mask
    batch.rollout_logprobs = rollout_lp
