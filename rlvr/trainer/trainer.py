"""The RL trainer, the driver of one loop: rollout -> reward -> advantages -> update -> sync -> log -> checkpoint.

Usage::

    from rlvr.config import load_recipe
    from rlvr.trainer.trainer import RLTrainer

    trainer = RLTrainer(load_recipe("recipes/demo.yaml"), run_dir=Path("runs/demo"))
    summary = trainer.train()          # evals before/after, checkpoints, metrics.jsonl, plots

The driver only sequences stages; each has its own module:

- models: :mod:`rlvr.trainer.workers` (policy, reference: one :class:`ModelWorker` each; DeepSpeed set-up in
  :mod:`rlvr.trainer.deepspeed_setup`; the critic in :mod:`rlvr.trainer.critic`; under ZeRO-3 the reference and the
  reward models are sharded too, :mod:`rlvr.trainer.sharded_inference`);
- rewards: :mod:`rlvr.trainer.reward_sources` (verifiers behind one ``score`` interface);
- rollouts and DAPO dynamic sampling: :mod:`rlvr.trainer.dynamic_sampling`; with ``rollout.tools``, multi-turn
  rollouts on the same engine (:mod:`rlvr.runs.tool_rollouts`), tool answers masked out of the loss;
- the algorithm (what it needs, advantages (N, T)): :mod:`rlvr.trainer.algorithms`;
- the update loop (epochs x mini-batches x micro-batches) and the policy loss: :mod:`rlvr.trainer.update_loop`,
  :mod:`rlvr.trainer.policy_objective`;
- metrics and sample dumps: :mod:`rlvr.trainer.step_metrics`; evals, the run loop and the summary:
  :mod:`rlvr.trainer.driver`.

The same code runs on one CPU process (gloo) and under ``torchrun``/``deepspeed`` on GPUs: each rank rolls out its
share of the step's prompts (whole groups, so group baselines need no communication) and DeepSpeed reduces gradients.
Vocabulary: B prompts per step, G samples per prompt, N = B x G samples, T response tokens.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.algo.kl import AdaptiveKLController
from rlvr.config import Recipe, check_resumed_recipe, dump_recipe
from rlvr.curriculum import Curriculum
from rlvr.curriculum.plot import plot_curriculum
from rlvr.models.loading import eos_token_ids, load_causal_lm
from rlvr.models.lora import apply_lora
from rlvr.models.precision import PrecisionChoice, announce_precision, choose_precision, matmul_shape
from rlvr.preflight import CheckOptions
from rlvr.rollout.choice import build_rollout_engine, with_chosen_engine
from rlvr.runs import checkpoint as ckpt
from rlvr.runs.atomic import atomic_write_text
from rlvr.runs.evaluation import EvalResult, run_eval
from rlvr.runs.metrics import MetricsLogger, check_metrics_before_resume, read_metrics
from rlvr.runs.plots import plot_curves, plot_tools
from rlvr.runs.recipe_inputs import open_recipe_inputs
from rlvr.runs.tool_rollouts import ToolSampler
from rlvr.tools.loading import build_tool_environment
from rlvr.trainer import step_metrics
from rlvr.trainer.algorithms import Algorithm, build_algorithm
from rlvr.trainer.batch import RolloutBatch, tensorize
from rlvr.trainer.critic import ValueObjective, build_critic, critic_metrics
from rlvr.trainer.deepspeed_setup import build_engine
from rlvr.trainer.distributed import DistInfo, all_reduce_sum, init_distributed
from rlvr.trainer.driver import RunDriver
from rlvr.trainer.dynamic_sampling import collect
from rlvr.trainer.policy_objective import PolicyObjective
from rlvr.trainer.progress import phase
from rlvr.trainer.reward_sources import RewardModelRewards, RewardSource, VerifierRewards
from rlvr.trainer.sharded_inference import build_inference_engine, shard_ensemble
from rlvr.trainer.stages import StageTimer
from rlvr.trainer.update_loop import run_update
from rlvr.trainer.workers import AdapterOffWorker, MicroBatchPlan, ModelWorker


class RLTrainer:
    """Policy optimisation on DeepSpeed with the recipe's algorithm (group-relative advantage estimator), loss
    aggregation, clipping, KL and entropy terms, against the recipe's reward source (verifiers).

    Args:
        recipe: a validated :class:`rlvr.config.Recipe`.
        run_dir: where metrics, samples, plots, checkpoints and the resolved recipe go.
        resume: continue from the newest checkpoint in ``run_dir`` (same metrics, step for step, on the same machine).
        rollout_engine: inject an engine (tests); default: built from ``rollout.engine``.
        resume_from: continue from this checkpoint of ``run_dir`` instead (``checkpoints/step-N``; implies
            ``resume``): metrics, TensorBoard events and checkpoints of later steps are dropped.
        allow_changed: recipe keys (or sections) that may differ from the run's ``recipe.resolved.yaml`` on resume.
    Raises:
        rlvr.config.RecipeError (resume with a changed recipe), rlvr.data.sources.DataError,
        rlvr.models.loading.ModelLoadError, KeyError (unknown verifier), FileNotFoundError (resume without checkpoint):
        all
        before the model is loaded.
    """

    def __init__(self, recipe: Recipe, run_dir: Path, resume: bool = False, rollout_engine: Any = None,
                 resume_from: str | Path | None = None, allow_changed: tuple[str, ...] | list[str] = ()) -> None:
        self.recipe = recipe
        self.run_dir = Path(run_dir)
        # the first DeepSpeed import on a machine builds its CPU communication op (~45 s, then cached)
        with phase("distributed set-up (DeepSpeed)", int(os.environ.get("RANK", "0")) == 0, quiet_below_s=5.0):
            self.dist: DistInfo = init_distributed()
        r = recipe
        self._seed_everything(r.seed + self.dist.rank)
        if r.rollout.prompts_per_step % self.dist.world_size:
            raise ValueError(f"rollout.prompts_per_step={r.rollout.prompts_per_step} must be divisible by the number "
                             f"of ranks ({self.dist.world_size}): each rank rolls out whole groups")
        self._resume_path: Path | None = None
        if resume_from is not None:
            self._resume_path = ckpt.find_checkpoint(self.run_dir, resume_from)
        elif resume:
            self._resume_path = ckpt.latest_checkpoint(self.run_dir)
            if self._resume_path is None:
                raise FileNotFoundError(f"--resume: no finished checkpoint in {self.run_dir / 'checkpoints'}")
        saved = self.run_dir / "recipe.resolved.yaml"
        if self._resume_path is not None and saved.is_file():
            check_resumed_recipe(saved.read_text(), r, allow_changed)
        if self._resume_path is not None:  # a torn last line dropped, any other bad line named, before the model loads
            check_metrics_before_resume(self.run_dir, self.dist.is_main)

        # cheap checks, verifier pool, tokenizer and prompt split first; the expensive model load comes last
        self.algorithm: Algorithm = build_algorithm(r.algorithm)
        needs = self.algorithm.needs
        inputs = open_recipe_inputs(r, CheckOptions(run_dir=self.run_dir))  # the disk check looks at the run's disk
        self.specs, self.reward_fn = inputs.specs, inputs.reward_fn
        self.tokenizer, self.prompt_set, model_path = inputs.tokenizer, inputs.prompt_set, inputs.model_path
        if rollout_engine is None:  # rollout.engine=auto: vLLM where it serves this model, else hf (printed once)
            r = self.recipe = with_chosen_engine(r, model_path, announce=self.dist.is_main)
        if (r.rollout.engine == "hf" and r.trainer.zero_stage == 3 and self.dist.world_size > 1
                and rollout_engine is None):
            # HF generate runs one forward per new token, and each rank stops when its own samples end: under ZeRO-3
            # every forward is a collective parameter gather, so the ranks would wait on each other forever
            self.reward_fn.close()
            raise ValueError("rollout.engine=hf with trainer.zero_stage=3 on several ranks would hang (ZeRO-3 gathers "
                             "parameters in every generation step, and ranks stop generating at different steps): use "
                             "rollout.engine=vllm, or trainer.zero_stage <= 2")
        self.labels = list(self._labels())
        # no verifiers (a reward model alone): no solved flag, so no solve rate and no pass@k eval
        self.solved_label = self.labels[[s.name for s in self.specs].index(r.solved_verifier)] \
            if r.solved_verifier is not None else None
        # tools are imported and checked before the model loads; the sampler needs the rollout engine, built last
        self.tool_env = build_tool_environment(r.rollout.tools_config(), self.tokenizer) if r.rollout.tools else None
        self.curriculum = Curriculum(r.curriculum, [p.row for p in self.prompt_set.train], seed=r.seed,
                                     max_new_tokens=r.rollout.max_new_tokens)
        self.sampler = self.curriculum.sampler
        with phase(f"loading the policy from {model_path} onto {self.dist.device}", self.dist.is_main):
            self.model = load_causal_lm(model_path, r.model).to(self.dist.device)
            if r.model.lora is not None:  # adapters train, the base weights stay frozen (rlvr.models.lora)
                self.model = apply_lora(self.model, r.model.lora, base_name=r.model.name).to(self.dist.device)
        self.eos_ids = eos_token_ids(self.model, self.tokenizer)
        self.precision = self._choose_precision()
        if self.dist.is_main:
            announce_precision(self.precision)
        self.autocast_dtype = self.precision.autocast_dtype
        self.reward_model = self._load_reward_model() if r.reward.source != "verifiers" else None
        self.rewards: RewardSource = self._reward_source()
        self.ref_model = None
        ref_engine = None
        if needs.reference and r.model.lora is None:  # LoRA: the reference is the policy with its adapters off
            with phase("loading the reference model", self.dist.is_main):
                self.ref_model = load_causal_lm(model_path, r.model).to(self.dist.device).eval()
            self.ref_model.requires_grad_(False)
            if self.sharded_frozen_models:
                with phase("sharding the reference model (ZeRO-3 inference)", self.dist.is_main):
                    ref_engine = build_inference_engine(self.ref_model, r.trainer)
        with phase(f"DeepSpeed engine (ZeRO-{r.trainer.zero_stage}, {self.dist.world_size} rank(s))",
                   self.dist.is_main):
            a = r.algorithm
            self.engine = build_engine(self.model, r.optim, r.trainer, r.trainer.steps * a.ppo_epochs * a.mini_batches)
        self.policy = self._worker(self.model, self.engine)
        self.reference: ModelWorker | None = self._worker(self.ref_model, ref_engine) \
            if self.ref_model is not None else None
        if needs.reference and r.model.lora is not None:
            self.reference = self._worker(self.model, self.engine, worker=AdapterOffWorker)
        self.critic = build_critic(r, model_path, self.dist, int(self.tokenizer.pad_token_id),
                                   self.autocast_dtype) if needs.critic else None
        with phase(f"rollout engine ({r.rollout.engine})",
                   self.dist.is_main and rollout_engine is None and r.rollout.engine != "hf"):  # hf: instant
            self.rollout_engine = rollout_engine or build_rollout_engine(
                r, self.model, self.tokenizer, self.eos_ids, self.precision.generation_dtype)
        self.tools: ToolSampler | None = None
        if self.tool_env is not None:  # rollout.tools: multi-turn rollouts on the same engine
            self.tools = ToolSampler(self.rollout_engine, self.tokenizer, self.tool_env, data=r.data,
                                     shots=self.prompt_set.shots, rollout=r.rollout, eos_ids=self.eos_ids)
        self.failure_reasons: dict[str, str | None] = {}
        self.kl_ctl = AdaptiveKLController(r.algorithm.kl.beta, r.algorithm.kl.target, r.algorithm.kl.horizon)
        self.step_done = 0
        self.tokens_generated = 0
        self.cpu_seconds = 0.0
        self.eval_before: dict[str, Any] | None = None
        self.step_eval: dict[str, Any] | None = None
        """The held-out eval of step ``step_eval["step"]`` (set by the driver), saved in that step's checkpoint: the
        best checkpoint by eval is kept beside the newest ``trainer.keep_checkpoints``."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.logger = MetricsLogger(self.run_dir, enabled=self.dist.is_main, wandb=r.logging.wandb,
                                    config=r.model_dump(mode="json") if r.logging.wandb is not None else None)
        if self.dist.is_main:
            atomic_write_text(self.run_dir / "recipe.resolved.yaml", dump_recipe(r))
        if self._resume_path is not None:
            self._resume(self._resume_path)

    # ------------------------------------------------------------------------------------------------ set-up
    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def _choose_precision(self) -> PrecisionChoice:
        """``trainer.precision`` resolved for this rank's device and the policy's shape. ``auto`` on CPU ranks is
        measured on rank 0 once and broadcast, so every rank trains and generates in the same precision."""
        r = self.recipe
        choose = partial(choose_precision, r.trainer.precision, self.dist.device, matmul_shape(self.model))
        if self.dist.world_size == 1 or self.dist.device.type != "cpu" or r.trainer.precision != "auto":
            return choose()
        box = [choose() if self.dist.is_main else None]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def _labels(self) -> Any:
        seen: dict[str, int] = {}
        for spec in self.specs:
            seen[spec.name] = seen.get(spec.name, 0) + 1
            yield spec.name if seen[spec.name] == 1 else f"{spec.name}#{seen[spec.name]}"

    def _worker(self, model: torch.nn.Module, engine: Any, worker: type[ModelWorker] = ModelWorker) -> ModelWorker:
        r = self.recipe
        return worker(model, engine, dist=self.dist, pad_id=int(self.tokenizer.pad_token_id),
                           plan=MicroBatchPlan(r.optim.micro_batch_size, r.optim.micro_batch_tokens,
                                               r.trainer.zero_stage),
                           temperature=r.rollout.temperature, autocast_dtype=self.autocast_dtype,
                           gradient_checkpointing=r.model.gradient_checkpointing)

    @property
    def sharded_frozen_models(self) -> bool:
        """Under ``trainer.zero_stage: 3`` the reference and the reward model(s) are ZeRO-3 inference engines,
        partitioned like the policy (:mod:`rlvr.trainer.sharded_inference`); below it, whole frozen copies."""
        return self.recipe.trainer.zero_stage == 3

    def _release(self) -> None:
        if self.critic is not None:
            self.critic.engine.destroy()
        if self.reference is not None and self.reference.engine not in (None, self.engine):  # LoRA: the policy's
            self.reference.engine.destroy()
        for member in getattr(self.reward_model, "members", []):
            if hasattr(member, "destroy"):
                member.destroy()

    def _reward_source(self) -> RewardSource:
        """The recipe's reward source (``reward.source``: verifiers, reward model, or both; see
        :mod:`rlvr.trainer.reward_sources`)."""
        r = self.recipe
        # recipe verifiers come first in the labels (the algorithm's own, e.g. overlong, after them)
        gold = [lbl for lbl, v in zip(self.labels, r.verifiers) if not v.optimise or r.reward.source == "reward_model"]
        verifiers = VerifierRewards(self.reward_fn, self.labels, self.solved_label,
                                    drop_failed=r.reward.failure_score is None, gold_labels=gold)
        if self.reward_model is None:
            return verifiers
        return RewardModelRewards(self.reward_model, verifiers, pad_id=int(self.tokenizer.pad_token_id),
                                  micro_batch_size=r.reward_model.micro_batch_size,
                                  autocast_dtype=self.autocast_dtype, add_verifiers=r.reward.source == "both",
                                  rm_weight=r.reward.rm_weight, collective=self.sharded_frozen_models)

    def _load_reward_model(self) -> Any:
        """The ``reward_model:`` section's model or ensemble, frozen, on this rank's device."""
        from rlvr.reward_model.ensemble import RewardModelEnsemble

        cfg = self.recipe.reward_model
        paths = cfg.paths or [cfg.path]
        with phase(f"loading the reward model ({', '.join(paths)})", self.dist.is_main):
            ensemble = RewardModelEnsemble.load(paths, cfg.aggregate, cfg.k)
        for member in ensemble.members:
            member.to(self.dist.device).eval().requires_grad_(False)
        if self.sharded_frozen_models:
            with phase("sharding the reward model(s) (ZeRO-3 inference)", self.dist.is_main):
                ensemble = shard_ensemble(ensemble, self.recipe.trainer)
        return ensemble

    @property
    def _idle_pass(self) -> Callable[[bool], None]:
        """The policy worker's idle pass (kept on the trainer so a test can count a rank's idle passes)."""
        return self.policy.idle_pass

    @_idle_pass.setter
    def _idle_pass(self, fn: Callable[[bool], None]) -> None:
        self.policy.idle_pass = fn  # type: ignore[method-assign]

    def _needs_old_logprobs(self) -> bool:
        return self.algorithm.needs.old_logprobs

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step_done, "curriculum": self.curriculum.state_dict(),
                "kl_ctl": self.kl_ctl.state_dict(), "tokens_generated": self.tokens_generated,
                "cpu_seconds": self.cpu_seconds, "eval_before": self.eval_before,
                "reward_normalizer": self.algorithm.normalizer.state_dict() if self.algorithm.normalizer else None,
                "eval": self.step_eval if self.step_eval and self.step_eval.get("step") == self.step_done else None}

    def _resume(self, path: Path) -> None:
        state = ckpt.load_checkpoint(path, self.engine, self.dist.rank,
                                     adapters_only=self.recipe.model.lora is not None)
        if self.critic is not None:
            ckpt.load_extra_engine(path, "critic", self.critic.engine)
        self.step_done = int(state["step"])
        self.curriculum.load_state_dict(state["curriculum"])
        self.kl_ctl.load_state_dict(state["kl_ctl"])
        if self.algorithm.normalizer is not None:
            self.algorithm.normalizer.load_state_dict(state["reward_normalizer"])
        self.tokens_generated = int(state.get("tokens_generated", 0))
        self.cpu_seconds = float(state.get("cpu_seconds", 0.0))
        self.eval_before = state.get("eval_before")
        self.rollout_engine.sync_weights(self.model)
        self.logger.truncate_after(self.step_done)
        dropped = ckpt.discard_checkpoints_after(self.run_dir, self.step_done, self.dist.rank)
        if self.dist.is_main:
            later = f" (deleted the later checkpoints {', '.join(p.name for p in dropped)})" if dropped else ""
            print(f"resumed from {path} at step {self.step_done}{later}")

    def save(self, final: bool = False) -> Path:
        """Checkpoint the current step (atomic), and refresh the plots. The HF ``model/`` folder is written in the
        ``final`` checkpoint and, with ``trainer.export_every_checkpoint``, in every one."""
        path = ckpt.save_checkpoint(self.run_dir, self.step_done, self.engine, self.model, self.tokenizer,
                                    self.state_dict(), keep=self.recipe.trainer.keep_checkpoints, rank=self.dist.rank,
                                    adapters_only=self.recipe.model.lora is not None,
                                    export=final or self.recipe.trainer.export_every_checkpoint,
                                    extra_engines={"critic": self.critic.engine} if self.critic is not None else None)
        self._plot()
        return path

    def train(self) -> dict[str, Any]:
        """Run the remaining steps with an eval before the first and after the last (:class:`RunDriver`); returns
        the summary."""
        return RunDriver(self).train()

    def _plot(self) -> None:
        if self.dist.is_main:
            records = read_metrics(self.run_dir)
            plot_curves(records, self.run_dir / "plots" / "curves.png",
                        title=f"{self.recipe.model.name} | {self.run_dir.name}")
            plot_curriculum(records, self.run_dir / "plots" / "curriculum.png",
                            title=f"{self.recipe.model.name} | {self.run_dir.name}")
            plot_tools(records, self.run_dir / "plots" / "tools.png",
                       title=f"{self.recipe.model.name} | {self.run_dir.name}")

    def _report_rollout_logprob_check(self, train_metrics: dict[str, float]) -> None:
        """First step: say how far the rollout engine's log-probs are from the trainer's on the same tokens (before
        any update, so only numerics differ). fp32 engines agree to ~1e-6; bf16 ones to ~1e-2 on average. A mean
        above 0.1 nats points at a bug (weights not loaded, another temperature, a different tokenizer or chat
        template); it is printed, the metrics ``train/rollout_logprob_diff_mean/max`` carry the same numbers."""
        mean = train_metrics.get("train/rollout_logprob_diff_mean")
        if mean is None or not self.dist.is_main:
            return
        peak = train_metrics.get("train/rollout_logprob_diff_max", float("nan"))
        verdict = "ok" if mean <= 0.1 else "WARNING: larger than numerics explain; check the engine's weights/sampling"
        print(f"rollout log-prob check ({self.recipe.rollout.engine} vs trainer, step 1): mean |diff| {mean:.2e}, "
              f"max {peak:.2e} nats/token: {verdict}")

    def evaluate(self, k: int | None = None) -> EvalResult | None:
        """Held-out pass@1 (with standard error), pass@k, maj@k and length on the eval split; None when it is empty.

        Sampling uses its own seeded RNG stream (the training RNG is saved and restored), so an eval never changes the
        training run's numbers.
        """
        ev = self.recipe.eval
        if not self.prompt_set.eval or self.solved_label is None:  # pass@k needs a verifier to say "solved"
            return None
        with torch.no_grad():
            return run_eval(self.rollout_engine, self.tokenizer, self.prompt_set.eval, self.reward_fn,
                            self.solved_label, k=k or ev.k, temperature=ev.temperature,
                            max_new_tokens=ev.max_new_tokens or self.recipe.rollout.max_new_tokens,
                            top_p=self.recipe.rollout.top_p, top_k=self.recipe.rollout.top_k, seed=ev.seed,
                            rank=self.dist.rank, world_size=self.dist.world_size, tools=self.tools)

    # ------------------------------------------------------------------------------------------------ stages
    def collect(self) -> tuple[RolloutBatch, dict[str, float], StageTimer]:
        """Rollout + verify, with DAPO dynamic sampling when enabled (:func:`rlvr.trainer.dynamic_sampling.collect`);
        with ``rollout.tools``, multi-turn rollouts (:class:`rlvr.runs.tool_rollouts.ToolSampler`)."""
        timer = StageTimer()
        budget = self.recipe.trainer.max_tokens_generated
        batch, info, generated = collect(
            self.rollout_engine, self.rewards, self.curriculum, self.prompt_set.train, self.tokenizer,
            step=self.step_done, config=self.recipe.rollout, ds=self.recipe.algorithm.dynamic_sampling, dist=self.dist,
            tokens_left=math.inf if budget is None else budget - self.tokens_generated, timer=timer, tools=self.tools)
        self.tokens_generated += generated
        return batch, info, timer

    def prepare(self, batch: RolloutBatch, timer: StageTimer) -> None:
        """Pad the batch into tensors, then the forwards the loss needs before any update: the policy's own
        log-probs (``old_logprobs`` stage: several optimizer steps per batch, TIS, KL in the reward) and the
        reference policy's (``ref_logprobs`` stage)."""
        needs = self.algorithm.needs
        if not batch.prompts:  # dynamic sampling dropped every group (or this rank got none): nothing to tensorize
            batch.response_mask = batch.advantages = torch.zeros(0, 1)
            if needs.old_logprobs:
                self.policy.join_logprobs()  # join the other ranks' ZeRO-3 parameter gathers
            if self.critic is not None:
                self.critic.join_logprobs()
                batch.values = batch.returns = torch.zeros(0, 1)
            return
        tensorize(batch, int(self.tokenizer.pad_token_id), self.recipe.algorithm.mask_truncated)
        if needs.old_logprobs:
            with timer("old_logprobs"):
                batch.old_logprobs = self.policy.logprobs(batch)
        if self.reference is not None:
            with timer("ref_logprobs"):
                batch.ref_logprobs = self.reference.logprobs(batch)
        if self.critic is not None:
            with timer("values"):
                batch.values = self.critic.values(batch)

    def compute_advantages(self, batch: RolloutBatch) -> None:
        """Advantages (N, T) of the prepared batch, by the recipe's algorithm (:mod:`rlvr.trainer.algorithms`).
        Every rank must call this (normalisation over the global batch is a collective)."""
        out = self.algorithm.advantages(batch, self.kl_ctl.beta, all_reduce_sum)
        if batch.prompts:
            batch.advantages = out.advantages
            if out.returns is not None:
                batch.returns = out.returns

    def update(self, batch: RolloutBatch, loss_scale: float = 1.0, timer: StageTimer | None = None
               ) -> dict[str, float]:
        """The policy update (:func:`rlvr.trainer.update_loop.run_update` with the policy loss); ``loss_scale``
        multiplies the loss (dynamic sampling's unfilled steps, see ``DynamicSamplingConfig.scale_unfilled``).
        Then, for PPO, the critic's update, timed by ``timer`` as its own stage ``update_critic``.
        Moves the adaptive KL coefficient after the update."""
        r, a = self.recipe, self.recipe.algorithm
        objective = PolicyObjective(self.policy, a, self.kl_ctl.beta, r.rollout.max_new_tokens, loss_scale)
        if self.critic is not None and self.step_done < a.critic.warmup_steps:
            metrics = {"train/critic_warmup": 1.0}  # the critic learns alone; the policy is not updated
        else:
            sums = run_update(self.policy, batch, objective, epochs=a.ppo_epochs, mini_batches=a.mini_batches,
                              seed=r.seed * 1_000_003 + self.step_done, world_size=self.dist.world_size)
            metrics = objective.metrics(sums, self.policy.lr(), self.reference is not None, self.kl_ctl.beta)
        if self.critic is not None:
            with (timer or StageTimer())("update_critic"):
                value = ValueObjective(self.critic, a, r.rollout.max_new_tokens)
                value_sums = run_update(self.critic, batch, value,
                                        epochs=a.ppo_epochs, mini_batches=a.mini_batches,
                                        seed=r.seed * 1_000_003 + self.step_done, world_size=self.dist.world_size)
            metrics.update(critic_metrics(value_sums, batch))
            metrics["train/sqrt_kl_from_init"] = step_metrics.sqrt_kl_from_init(batch)
        if self.reference is not None and "train/kl" in metrics:
            self.kl_ctl.update(metrics["train/kl"])
        return metrics

    # ------------------------------------------------------------------------------------------------ the step
    def step(self) -> dict[str, float]:
        """One training step: rollout -> reward -> advantages -> update -> sync; returns its metrics."""
        batch, info, timer = self.collect()
        self.prepare(batch, timer)
        with timer("advantages"):
            self.compute_advantages(batch)
        with timer("update"):
            # skipped on the global count (a rank without groups still joins the collective update)
            ds = self.recipe.algorithm.dynamic_sampling
            scale = info["rollout/batch_filled"] if ds.enabled and ds.scale_unfilled else 1.0
            train_metrics = self.update(batch, loss_scale=scale, timer=timer) if info["rollout/groups_kept"] \
                else {"train/skipped_empty_batch": 1.0}
        if self.step_done == 0:
            self._report_rollout_logprob_check(train_metrics)
        with timer("sync"):
            self.rollout_engine.sync_weights(self.model)
        curriculum = self.curriculum.end_step(self.step_done)
        self.step_done += 1
        for tag, values in curriculum.histograms.items():
            self.logger.histogram(tag, values, self.step_done)
        self._write_samples(self.step_done, batch)
        metrics = {**info, **self._rollout_metrics(batch, timer), **curriculum.metrics, **train_metrics}
        metrics.update({f"time/{k}_s": v for k, v in timer.seconds.items()})
        return metrics

    def _rollout_metrics(self, batch: RolloutBatch, timer: StageTimer) -> dict[str, float]:
        """``reward/*`` and ``rollout/*`` metrics of the step (:func:`rlvr.trainer.step_metrics.rollout_metrics`)."""
        self.failure_reasons = step_metrics.failure_reasons(batch, self.labels)
        metrics = step_metrics.rollout_metrics(batch, self.labels, timer.seconds.get("rollout", 0.0),
                                               self.tokens_generated)
        if self.solved_label is None:  # nothing decides "solved": a solve rate of 0 would be a made-up number
            for key in step_metrics.SOLVED_METRICS:
                metrics.pop(key, None)
        if self.tools is not None:
            metrics.update(step_metrics.tool_metrics(batch))
        gold = self.rewards.gold_labels
        if self.reward_model is not None or gold:
            metrics.update(step_metrics.reward_model_metrics(batch, gold, metrics) if self.reward_model is not None
                           else {f"reward/gold_{lbl}": metrics[f"reward/{lbl}"] for lbl in gold})
        return metrics

    def _write_samples(self, step: int, batch: RolloutBatch) -> None:
        """``samples/step-N.jsonl``: one line per sample of rank 0, every ``trainer.log_samples_every`` steps."""
        every = self.recipe.trainer.log_samples_every
        if self.dist.is_main and every and step % every == 0:
            path = self.run_dir / "samples" / f"step-{step}.jsonl"
            step_metrics.write_samples(path, batch, self.recipe.data.answer_field)
            if self.recipe.logging.wandb is not None:
                self.logger.table("samples", [json.loads(line) for line in path.read_text().splitlines()], step)
