"""Model workers: one object per model of a training step (policy, reference; later critic, reward model).

A worker owns a DeepSpeed engine (trainable, or ZeRO-3 sharded for inference) or a plain frozen module, and the
machinery every model shares: the micro-batch plan (rows and a padded-token budget), the idle passes a rank without
samples runs so that the other ranks' ZeRO collectives do not hang, the log-prob forward on the exact sampled ids, and
backward/step. The trainer's step (:mod:`rlvr.trainer.trainer`) only sequences stages; the update loop
(:mod:`rlvr.trainer.update_loop`) calls these verbs.

Vocabulary: N samples, T response tokens (T_micro: the longest response of a micro-batch), R rows of a micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlvr.models.logprobs import packed_layers, response_logprobs, shared_prefix_logprobs
from rlvr.runtime.distributed import DistInfo, all_reduce_max
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.micro_batches import micro_batches_are_collective, plan_micro_batches


@dataclass(frozen=True)
class MicroBatchPlan:
    """How a worker splits samples: ``max_rows`` rows (``optim.micro_batch_size``) and at most ``max_tokens`` padded
    tokens (``optim.micro_batch_tokens``, None = rows only) per forward; ``zero_stage`` decides which passes are
    collectives that every rank must run equally often. ``unit`` consecutive samples stay in one micro-batch (a
    preference pair); ``packed_cost``: the budget counts each row's own tokens (packed rows, SFT and DPO) instead of
    rows x the longest."""

    max_rows: int
    max_tokens: int | None
    zero_stage: int
    unit: int = 1
    packed_cost: bool = False


class ModelWorker:
    """One causal LM behind a DeepSpeed engine or as a frozen module, with log-prob forwards at the sampling
    temperature.

    A worker changes nothing of its model: rlvr's faster layers are put in where the model is prepared
    (:func:`rlvr.models.loading.use_fast_layers`), before the rollout engine shares it.

    Args:
        model: the HF module (its parameters are what a checkpoint saves and what the rollout engine syncs).
        engine: the DeepSpeed engine wrapping ``model`` (trainable, or ZeRO-3 sharded inference); ``None`` for a
            frozen unsharded module, whose forwards are local (no collectives, no idle passes).
        dist: this process's rank/world/device. plan: the micro-batch plan.
        pad_id: the tokenizer's pad id (prompt padding and idle passes). temperature: logits are divided by it.
        autocast_dtype: autocast dtype of the forwards (None = fp32). gradient_checkpointing: the model recomputes
            activations (HF's KV cache is then off, so prompts are not shared between a group's rows).
    """

    def __init__(self, model: torch.nn.Module, engine: Any, *, dist: DistInfo, plan: MicroBatchPlan, pad_id: int,
                 temperature: float, autocast_dtype: torch.dtype | None, gradient_checkpointing: bool) -> None:
        self.model = model
        self.engine = engine
        self.dist = dist
        self.plan = plan
        self.pad_id = pad_id
        self.temperature = temperature
        self.autocast_dtype = autocast_dtype
        self.gradient_checkpointing = gradient_checkpointing

    @property
    def runner(self) -> Any:
        """What forwards run through: the engine (ZeRO gathers, hooks) or the frozen module."""
        return self.engine if self.engine is not None else self.model

    @property
    def packed_rows(self) -> bool:
        """Whether forwards may use packed rows: not where they are collectives (ZeRO-3 over several ranks), since
        packed rows fall back to two forwards for long responses and every rank must make as many."""
        return not (self.dist.world_size > 1 and self.synced and self.plan.zero_stage == 3)

    @property
    def synced(self) -> bool:
        """Whether forwards go through DeepSpeed (and so may be collectives: ZeRO-3 parameter gathers)."""
        return self.engine is not None

    # ------------------------------------------------------------------------------------------------ planning
    def micro_batches(self, batch: RolloutBatch | None, indices: list[int], backward: bool = False) -> list[list[int]]:
        """Micro-batches of ``indices`` by rows and padded tokens, padded with empty ones to the largest count over
        ranks when the passes are collectives (ranks can hold different sample counts, e.g. after dynamic sampling,
        and a token budget splits them differently): under ZeRO-3 every engine forward gathers parameters, and under
        ZeRO-2 and 3 every backward reduces gradients. An empty micro-batch means: run :meth:`idle_pass`."""
        lengths = [len(batch.prompt_of(i).token_ids) + len(batch.completions[i].token_ids) for i in indices]
        plan = plan_micro_batches(indices, lengths, self.plan.max_rows, self.plan.max_tokens, unit=self.plan.unit,
                                  packed=self.plan.packed_cost and self.packed_rows and packed_layers(self.model) > 0)
        if self.dist.world_size > 1 and self.synced and micro_batches_are_collective(self.plan.zero_stage, backward):
            plan += [[] for _ in range(all_reduce_max(len(plan)) - len(plan))]
        return plan

    def idle_pass(self, backward: bool) -> None:
        """A zero-loss pass of a one-token prompt and response through the engine, by the same path as
        :meth:`forward` (so with as many engine forwards): joins the ZeRO-3 parameter gathers, forward and backward,
        of a micro-batch this rank does not have."""
        dev = self.dist.device
        one = torch.full((1, 1), self.pad_id, dtype=torch.long, device=dev)
        mask = torch.ones_like(one)
        kw = dict(temperature=self.temperature, autocast_dtype=self.autocast_dtype)
        with torch.set_grad_enabled(backward):
            if self.gradient_checkpointing:
                lp, _ = response_logprobs(self.runner, torch.cat([one, one], 1), torch.cat([mask, mask], 1), 1, **kw)
            else:
                lp, _ = shared_prefix_logprobs(self.runner, one, mask, torch.zeros(1, dtype=torch.long, device=dev),
                                               one, mask, packed=self.packed_rows, **kw)
            if backward:
                self.backward(lp.sum() * 0.0)

    # ------------------------------------------------------------------------------------------------ forwards
    def forward(self, batch: RolloutBatch, idx: list[int],
                entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Log-probs and entropy (R, T_micro) of the micro-batch ``idx``; returns them with T_micro.

        Each distinct prompt of the micro-batch is run once and shared by its group's rows, in one packed row without
        padding or through a KV cache (:func:`rlvr.models.logprobs.shared_prefix_logprobs`): with prompts much longer
        than answers this divides the forward/backward cost by up to G. Gradient checkpointing disables HF's KV cache,
        so it uses one padded row per sample.
        """
        kw = dict(temperature=self.temperature, autocast_dtype=self.autocast_dtype, entropy_grad=entropy_grad)
        if self.gradient_checkpointing:
            ids, am, t = self._trim(batch, idx)
            return (*response_logprobs(self.runner, ids, am, t, **kw), t)
        dev = self.dist.device
        t = max(max(len(batch.completions[i].token_ids) for i in idx), 1)
        groups = sorted({i // batch.group_size for i in idx})
        slot = {g: k for k, g in enumerate(groups)}
        prompts = [batch.prompts[g].token_ids for g in groups]
        width = max(len(x) for x in prompts)
        p_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        p_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for k, x in enumerate(prompts):  # left padding
            p_ids[k, width - len(x):] = torch.tensor(x)
            p_mask[k, width - len(x):] = 1
        p = batch.input_ids.shape[1] - batch.response_mask.shape[1]
        row_prompt = torch.tensor([slot[i // batch.group_size] for i in idx], device=dev)
        lp, ent = shared_prefix_logprobs(self.runner, p_ids.to(dev), p_mask.to(dev), row_prompt,
                                         batch.input_ids[idx, p:p + t].to(dev),
                                         batch.attention_mask[idx, p:p + t].to(dev), packed=self.packed_rows, **kw)
        return lp, ent, t

    def _trim(self, batch: RolloutBatch, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The micro-batch's rows with all-padding columns cut off: leading prompt padding and trailing response
        padding (the response part keeps its own max length T_micro)."""
        am = batch.attention_mask[idx]
        p = batch.input_ids.shape[1] - batch.response_mask.shape[1]
        t = max(int(batch.response_mask[idx].sum(1).max().item()),
                max(len(batch.completions[i].token_ids) for i in idx), 1)
        first = int(am[:, :p].sum(0).nonzero()[0].item()) if am[:, :p].any() else 0
        dev = self.dist.device
        return batch.input_ids[idx, first:p + t].to(dev), am[:, first:p + t].to(dev), t

    @torch.no_grad()
    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """(N, T) fp32 log-probs of every sampled token of the tensorized ``batch`` (0 on padding), no gradient."""
        return self.per_token_outputs(batch)

    @torch.no_grad()
    def per_token_outputs(self, batch: RolloutBatch) -> torch.Tensor:
        """(N, T) fp32 per-token output of :meth:`forward` (log-probs here; a subclass's forward may return values)
        over every sample of ``batch``, micro-batch by micro-batch, with the idle passes the other ranks need."""
        out = torch.zeros_like(batch.response_mask)
        for idx in self.micro_batches(batch, list(range(batch.num_samples))):
            if not idx:
                self.idle_pass(backward=False)
                continue
            lp, _, t = self.forward(batch, idx)
            out[idx, :t] = lp.float().cpu()
        return out

    def join_logprobs(self) -> None:
        """What a rank without samples runs instead of :meth:`logprobs`: the idle passes that match the other ranks'
        ZeRO-3 parameter gathers."""
        for _ in self.micro_batches(None, []):
            self.idle_pass(backward=False)

    # ------------------------------------------------------------------------------------------------ training
    def train_mode(self) -> None:
        """Before an update: the engine in train mode, the module in eval mode (dropout off, see
        :func:`rlvr.models.loading.load_causal_lm`) except with gradient checkpointing, which HF only applies in train
        mode;
        dropout is 0 there anyway (``load_causal_lm`` zeroes every dropout probability)."""
        self.engine.train()
        self.model.train(self.gradient_checkpointing)

    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate gradients of ``loss`` (already normalised by the mini-batch's global count: DeepSpeed must not
        rescale it by gradient accumulation steps)."""
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self) -> float:
        """One optimizer step (clipping, LR schedule); returns the global gradient norm (NaN where unknown)."""
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def lr(self) -> float:
        return float(self.engine.get_lr()[0])


class AdapterOffWorker(ModelWorker):
    """The reference policy of a LoRA run: the policy's own module and engine with its adapters switched off
    (``peft``'s ``disable_adapter()``), which is exactly the frozen base model, so no second copy is loaded. Only
    forwards without gradient; its log-probs are the base model's (N, T), fp32."""

    @torch.no_grad()
    def per_token_outputs(self, batch: RolloutBatch) -> torch.Tensor:
        """(N, T) fp32 log-probs of the base model (adapters off) over every sample of ``batch``."""
        with self.model.disable_adapter():
            return super().per_token_outputs(batch)

    def join_logprobs(self) -> None:
        """The idle passes of a rank without samples, with the adapters off like the other ranks' forwards."""
        with self.model.disable_adapter():
            super().join_logprobs()
