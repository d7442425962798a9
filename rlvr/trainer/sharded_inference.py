"""Frozen models sharded like the policy: the reference and the reward model(s) as DeepSpeed ZeRO-3 inference engines.

With ``trainer.zero_stage: 3`` the policy's parameters are partitioned over the ranks; an unsharded frozen copy of the
reference and of each reward model on every rank would then take more memory than the policy itself. Here each is
wrapped in ``deepspeed.initialize`` with no optimizer at stage 3 (DeepSpeed's ZeRO-3 inference,
``DeepSpeedZeRoOffload``): its parameters are partitioned, and every forward all-gathers them layer by layer. Every
forward is therefore a collective: a rank with fewer micro-batches runs idle passes (the reference through
:class:`rlvr.trainer.workers.ModelWorker`, the reward model through :class:`ShardedRewardModel.idle_pass`), or the
other ranks wait forever.

Vocabulary: N sequences, L padded length.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rlvr.config import TrainerConfig
from rlvr.reward_model.model import pad_sequences, score_at_last_token


def build_inference_engine(module: torch.nn.Module, trainer: TrainerConfig) -> Any:
    """``deepspeed.initialize`` of a frozen ``module`` at ZeRO stage 3 with no optimizer: its parameters partitioned
    over the ranks. ``trainer.deepspeed_config``'s ``zero_optimization`` keys (e.g.
    ``stage3_param_persistence_threshold``) apply, except those of an optimizer. Returns the engine (call ``destroy()``
    at the end)."""
    import deepspeed

    module.requires_grad_(False)
    extra = dict(trainer.deepspeed_config.get("zero_optimization", {}))
    for key in ("stage", "offload_optimizer"):
        extra.pop(key, None)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": 3, **extra}, "steps_per_print": 10**9, "wall_clock_breakdown": False}
    engine, _, _, _ = deepspeed.initialize(model=module, config=config)
    engine.eval()
    return engine


class _LastTokenScore(torch.nn.Module):
    """A reward model's forward over its HF module alone, so each parameterised submodule is in the engine's module
    tree once (:class:`rlvr.reward_model.model.RewardModel` also holds ``backbone`` and ``head`` as direct children,
    which would register ZeRO-3's gather hooks on them twice)."""

    def __init__(self, hf: torch.nn.Module, head: torch.nn.Module) -> None:
        super().__init__()
        self.hf = hf
        self._head_name = next(name for name, m in hf.named_children() if m is head)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        backbone = getattr(self.hf, self.hf.base_model_prefix)
        return score_at_last_token(backbone, getattr(self.hf, self._head_name), input_ids, attention_mask)


class ShardedRewardModel:
    """One reward model as a ZeRO-3 inference engine, scoring like :meth:`RewardModel.score` (a member of
    :class:`rlvr.reward_model.ensemble.RewardModelEnsemble`).

    Args:
        rm: a loaded :class:`rlvr.reward_model.model.RewardModel` (its parameters are partitioned in place).
        trainer: the recipe's ``trainer`` section (``deepspeed_config``).
    """

    def __init__(self, rm: Any, trainer: TrainerConfig) -> None:
        self.module = _LastTokenScore(rm.hf, rm.head)
        self.engine = build_inference_engine(self.module, trainer)

    @torch.no_grad()
    def score(self, sequences: list[list[int]], pad_id: int, micro_batch_size: int = 16,
              autocast_dtype: torch.dtype | None = None) -> Tensor:
        """(M,) fp32 rewards of token-id sequences, ``micro_batch_size`` per forward (each forward is a collective: the
        caller keeps the forward count equal over ranks)."""
        out = []
        for start in range(0, len(sequences), micro_batch_size):
            ids, mask = pad_sequences(sequences[start:start + micro_batch_size], pad_id)
            device = self.engine.device
            with torch.autocast(device_type=device.type, dtype=autocast_dtype or torch.float32,
                                enabled=autocast_dtype is not None):
                out.append(self.engine(ids.to(device), mask.to(device)).float().cpu())
        return torch.cat(out) if out else torch.zeros(0)

    def destroy(self) -> None:
        self.engine.destroy()


def shard_ensemble(ensemble: Any, trainer: TrainerConfig) -> Any:
    """The same ensemble (aggregate, k) with every member a :class:`ShardedRewardModel`."""
    from rlvr.reward_model.ensemble import RewardModelEnsemble

    return RewardModelEnsemble([ShardedRewardModel(m, trainer) for m in ensemble.members], ensemble.how, ensemble.k)
