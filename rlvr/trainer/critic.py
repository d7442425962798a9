"""The critic of an algorithm with one (a row with ``baseline: critic``: ``algorithm.name: ppo``): a value model, its
worker and its value-loss objective.

The value model is a scalar head on a causal-LM trunk (:class:`rlvr.reward_model.model.RewardModel`'s layout), built
from the reward model (trunk and trained head: ``algorithm.critic.init: reward_model``, the default with a reward
model) or from the policy's weights with a new head (``init: policy``), read at *every* position: the value of
response token t, V(s_t), is the head on the hidden state of the position that predicts token t (the one before it),
as TRL and OpenRLHF read it. The critic is trained by
the same update loop as the policy (:func:`rlvr.trainer.update_loop.run_update`) with PPO's clipped value loss
(:func:`rlvr.algo.value_loss.clipped_value_loss`).

Vocabulary: N samples, T response tokens, R rows of a micro-batch, T_micro its longest response, L padded length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.algo.losses import aggregate_loss
from rlvr.algo.value_loss import clipped_value_loss
from rlvr.config import AlgorithmConfig, LoraConfig, Recipe
from rlvr.models.loading import use_fast_layers
from rlvr.models.logprobs import position_ids_from_mask
from rlvr.reward_model.model import RewardModel
from rlvr.runtime.distributed import DistInfo, all_reduce_sum
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.deepspeed_setup import build_engine
from rlvr.trainer.progress import phase
from rlvr.trainer.update_loop import Accumulate, Denominators
from rlvr.trainer.workers import MicroBatchPlan, ModelWorker


class ValueModel(torch.nn.Module):
    """Per-position values (N, L) fp32 from a reward-model-shaped module (trunk + scalar head).

    Args:
        rm: the trunk and head: :meth:`RewardModel.load` of the reward model (its trained head), or
            :meth:`RewardModel.from_backbone` on the policy's folder (head init normal(0, 1/sqrt(d + 1)), zero bias).
    """

    def __init__(self, rm: RewardModel) -> None:
        super().__init__()
        self.rm = rm

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        hidden = self.rm.backbone(input_ids=input_ids, attention_mask=attention_mask,
                                  position_ids=position_ids_from_mask(attention_mask),
                                  use_cache=False).last_hidden_state  # (N, L, d)
        with torch.autocast(device_type=hidden.device.type, enabled=False):  # the head in fp32
            return self.rm.head(hidden.float()).squeeze(-1)  # (N, L)


class CriticWorker(ModelWorker):
    """A :class:`ModelWorker` whose forward gives values (R, T_micro) instead of log-probs."""

    def forward(self, batch: RolloutBatch, idx: list[int],
                entropy_grad: bool = False) -> tuple[Tensor, Tensor | None, int]:
        """Values V(s_t) (R, T_micro) of the micro-batch ``idx``; returns them, None and T_micro."""
        ids, am, t = self._trim(batch, idx)  # (R, L): left-padded prompt, right-padded response
        with torch.autocast(device_type=ids.device.type, dtype=self.autocast_dtype or torch.float32,
                            enabled=self.autocast_dtype is not None):
            values = self.runner(ids, am)  # (R, L)
        width = ids.shape[1]
        return values[:, width - t - 1:width - 1].float(), None, t  # the position before each response token

    def idle_pass(self, backward: bool) -> None:
        """A zero-loss two-token pass through the engine (joins other ranks' ZeRO collectives)."""
        one = torch.full((1, 2), self.pad_id, dtype=torch.long, device=self.dist.device)
        with torch.set_grad_enabled(backward):
            out = self.runner(one, torch.ones_like(one))
            if backward:
                self.backward(out.sum() * 0.0)

    @torch.no_grad()
    def values(self, batch: RolloutBatch) -> Tensor:
        """(N, T) fp32 values of every response token of the tensorized ``batch``, 0 on padding."""
        return self.per_token_outputs(batch) * batch.response_mask


class ValueObjective:
    """``vf_coef`` x PPO's clipped value loss on one micro-batch, aggregated like the policy loss (``loss_agg``)."""

    def __init__(self, worker: CriticWorker, config: AlgorithmConfig, max_len: int) -> None:
        self.worker, self.config, self.max_len = worker, config, max_len

    def __call__(self, batch: RolloutBatch, idx: list[int], denominators: Denominators, first_pass: bool,
                 add: Accumulate) -> Tensor:
        c = self.config.critic
        values, _, t = self.worker.forward(batch, idx)
        rows = batch.token_rows(idx, t, values.device)
        mask = rows("response_mask")
        out = clipped_value_loss(values, rows("values"), rows("returns"), mask, value_clip=c.value_clip)
        loss = c.vf_coef * aggregate_loss(out.loss, mask, self.config.loss_agg, max_len=self.max_len,
                                          num_tokens=denominators.tokens, num_seqs=denominators.sequences)
        add("value_loss", float(loss.detach()))
        add("value_clipped", float(out.clipped.sum()))
        add("tokens", float(mask.sum()))
        return loss


def critic_metrics(sums: dict[str, float], batch: RolloutBatch) -> dict[str, float]:
    """``critic/value_loss`` (mean over optimizer steps), ``critic/value_clip_fraction`` (over tokens) and
    ``critic/explained_variance`` (of the rollout-time values against the returns, over all ranks' tokens:
    1 - Var[R - V] / Var[R]). Every rank must call it."""
    m = batch.response_mask.double() if batch.prompts else torch.zeros(0, 1, dtype=torch.float64)
    r = batch.returns.double() * m if batch.prompts else m
    e = (batch.returns.double() - batch.values.double()) * m if batch.prompts else m
    stats = all_reduce_sum(torch.tensor([sums.get("value_loss", 0.0), sums.get("value_clipped", 0.0),
                                         sums.get("tokens", 0.0), float(m.sum()), float(r.sum()),
                                         float((r * r).sum()), float(e.sum()), float((e * e).sum())],
                                        dtype=torch.float64)).tolist()
    loss, clipped, tokens, n, rs, rsq, es, esq = stats
    opt_steps = max(sums.get("opt_steps", 1.0), 1.0)
    var_r = rsq / max(n, 1.0) - (rs / max(n, 1.0)) ** 2
    var_e = esq / max(n, 1.0) - (es / max(n, 1.0)) ** 2
    return {"critic/value_loss": loss / opt_steps,
            "critic/value_clip_fraction": clipped / max(tokens, 1.0),
            "critic/explained_variance": 1.0 - var_e / var_r if var_r > 0 else float("nan"),
            "critic/grad_norm": sums.get("grad_norm", 0.0) / opt_steps}


def critic_source(recipe: Recipe, model_path: str) -> tuple[str, str]:
    """``(init, folder)`` the critic is built from: ``("reward_model", reward_model.path or the first of
    reward_model.paths)`` or ``("policy", model_path)`` (``algorithm.critic.init``, resolved by the recipe).

    Raises:
        ValueError: ``init: reward_model`` without a ``reward_model:`` section (the recipe refuses it already).
    """
    init = recipe.algorithm.critic.init or ("reward_model" if recipe.reward_model is not None else "policy")
    if init == "policy":
        return init, model_path
    rm = recipe.reward_model
    if rm is None:
        raise ValueError("algorithm.critic.init='reward_model' needs a reward_model: section")
    return init, str(rm.path or rm.paths[0])


def critic_lora(recipe: Recipe) -> LoraConfig | None:
    """The critic's adapters (``algorithm.critic.lora``; ``policy``: the policy's ``model.lora``), or ``None`` for a
    critic whose every weight trains."""
    lora = recipe.algorithm.critic.lora
    return recipe.model.lora if lora == "policy" else lora


def build_value_model(recipe: Recipe, model_path: str) -> ValueModel:
    """The critic's module before DeepSpeed: a copy of the reward model, trunk and trained head (``init:
    reward_model``; the RM's score of a prefix is a sensible first value, as InstructGPT, TRL's PPO scripts and
    OpenRLHF start the critic), or the policy's trunk (``model_path``) with a head drawn with ``recipe.seed``; with
    :func:`critic_lora`, adapters on the trunk and the head trained whole."""
    init, folder = critic_source(recipe, model_path)
    rm = RewardModel.load(folder) if init == "reward_model" else RewardModel.from_backbone(folder, seed=recipe.seed)
    lora = critic_lora(recipe)
    if lora is not None:
        rm.add_lora(lora)
    return ValueModel(rm)


def build_critic(recipe: Recipe, model_path: str, dist: DistInfo, pad_id: int,
                 autocast_dtype: torch.dtype | None) -> CriticWorker:
    """The PPO critic (:func:`build_value_model`) on its own DeepSpeed engine and optimizer
    (``algorithm.critic.lr``, the policy's schedule and ZeRO stage)."""
    r, a = recipe, recipe.algorithm
    init, folder = critic_source(recipe, model_path)
    what = f"copy of the reward model {folder}" if init == "reward_model" else "value head on the policy's trunk"
    lora = critic_lora(r)
    what += f", LoRA rank {lora.rank} on the trunk" if lora is not None else ""
    with phase(f"critic ({what})", dist.is_main):
        module = build_value_model(r, model_path).to(dist.device)
        use_fast_layers(module, dist.device)
        engine = build_engine(module, r.optim.model_copy(update={"lr": a.critic.lr}), r.trainer,
                              r.trainer.steps * a.ppo_epochs * a.mini_batches)
    return CriticWorker(module, engine, dist=dist, pad_id=pad_id,
                        plan=MicroBatchPlan(r.optim.micro_batch_size, r.optim.micro_batch_tokens, r.trainer.zero_stage),
                        temperature=r.rollout.temperature, autocast_dtype=autocast_dtype,
                        gradient_checkpointing=r.model.gradient_checkpointing)
