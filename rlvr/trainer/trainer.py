"""The RL trainer: the models of a run and one training step, rollout -> reward -> advantages -> update -> sync.

Usage::

    from rlvr.config import load_recipe
    from rlvr.trainer.trainer import RLTrainer

    trainer = RLTrainer(load_recipe("recipes/demo.yaml"), run_dir=Path("runs/demo"))
    summary = trainer.train()          # evals before/after, checkpoints, metrics.jsonl, plots

The step only sequences stages; each has its own module:

- models: :mod:`rlvr.trainer.workers` (policy, reference: one :class:`ModelWorker` each; DeepSpeed set-up in
  :mod:`rlvr.trainer.deepspeed_setup`; the critic in :mod:`rlvr.trainer.critic`; under ZeRO-3 the reference and the
  reward models are sharded too, :mod:`rlvr.trainer.sharded_inference`);
- rewards: :mod:`rlvr.trainer.reward_sources` (verifiers behind one ``score`` interface);
- rollouts and DAPO dynamic sampling: :mod:`rlvr.trainer.dynamic_sampling`; with ``rollout.tools`` or
  ``rollout.environment``, multi-turn rollouts on the same engine (:mod:`rlvr.rollout.tool_sampler`), tool and
  environment answers masked out of the loss, the environment's episode rewards beside the verifiers' (``env``); with
  ``rollout.max_off_policy_steps`` K >= 1, the same collection of the next steps in a background thread while the
  trainer updates (:mod:`rlvr.trainer.async_collector`), samples staler than K dropped (:mod:`rlvr.trainer.staleness`);
- the algorithm (what it needs, advantages (N, T)): :mod:`rlvr.trainer.algorithms`;
- the update loop (epochs x mini-batches x micro-batches) and the policy loss: :mod:`rlvr.trainer.update_loop`,
  :mod:`rlvr.trainer.policy_objective`;
- metrics and sample dumps: :mod:`rlvr.trainer.step_metrics`; the run around the steps (evaluations, the loop, the
  budgets, the failure streak, plots, the summary) and its state: :mod:`rlvr.trainer.run`.

The same code runs on one CPU process (gloo) and under ``torchrun``/``deepspeed`` on GPUs: each rank rolls out its
share of the step's prompts (whole groups, so group baselines need no communication) and DeepSpeed reduces gradients.
Vocabulary: B prompts per step, G samples per prompt, N = B x G samples, T response tokens.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.algo.kl import AdaptiveKLController
from rlvr.config import Recipe, dump_recipe
from rlvr.curriculum import Curriculum, StepReport
from rlvr.models.loading import eos_token_ids, load_causal_lm, use_fast_layers
from rlvr.models.lora import apply_lora
from rlvr.models.precision import announce_precision
from rlvr.preflight import CheckOptions
from rlvr.rollout.choice import build_rollout_engine, with_chosen_engine
from rlvr.rollout.environment_rewards import environment_is_gold, environment_weight
from rlvr.rollout.server_launch import start_fleet
from rlvr.rollout.tool_sampler import ToolSampler, build_tool_sampler
from rlvr.runs import checkpoint as ckpt
from rlvr.runs.evaluation import EvalResult, run_eval
from rlvr.runs.metrics import MetricsLogger
from rlvr.runs.recipe_inputs import open_recipe_inputs
from rlvr.runtime.atomic import atomic_write_text, remove_leftovers
from rlvr.runtime.distributed import DistInfo, all_reduce_sum, init_distributed, thread_process_group
from rlvr.tools.loading import build_environment
from rlvr.tools.spec import ENVIRONMENT_LABEL
from rlvr.trainer import step_metrics
from rlvr.trainer.algorithms import Algorithm, build_algorithm
from rlvr.trainer.async_collector import AsyncCollector
from rlvr.trainer.batch import RolloutBatch, tensorize
from rlvr.trainer.critic import ValueObjective, build_critic, critic_metrics
from rlvr.trainer.deepspeed_setup import build_engine
from rlvr.trainer.dynamic_sampling import collect
from rlvr.trainer.policy_objective import PolicyObjective
from rlvr.trainer.progress import phase
from rlvr.trainer.reward_sources import RewardModelRewards, RewardSource, VerifierRewards
from rlvr.trainer.run import StepResult, TrainingRun
from rlvr.trainer.sharded_inference import build_inference_engine, shard_ensemble
from rlvr.trainer.stages import StageTimer
from rlvr.trainer.staleness import StaleFilter, drop_stale_groups, stamp_versions
from rlvr.trainer.trainer_base import TrainerBase
from rlvr.trainer.update_loop import run_update
from rlvr.trainer.workers import AdapterOffWorker, ModelWorker


@dataclass
class CollectedStep:
    """A step's rollouts made by the asynchronous collector (``rollout.max_off_policy_steps`` >= 1), with what the
    producer thread saw while making them.

    Attributes:
        batch: the scored batch, every completion's ``policy_version`` set. info: the ``rollout/*`` counts of
            :func:`rlvr.trainer.dynamic_sampling.collect`. seconds: the producer's stage seconds (``rollout``,
            ``reward``, ``tools``), spent while the trainer worked. generated: tokens generated for the step.
        tokens_total: tokens generated by the run up to and including this batch.
        curriculum: the curriculum's report of the step. curriculum_state: the curriculum's state after the step's
            draws and observations (what a checkpoint of this step saves).
    """

    batch: RolloutBatch
    info: dict[str, float]
    seconds: dict[str, float]
    generated: int
    tokens_total: int
    curriculum: StepReport
    curriculum_state: dict[str, Any]


class RLTrainer(TrainerBase):
    """Policy optimisation on DeepSpeed with the recipe's algorithm (group-relative advantage estimator), loss
    aggregation, clipping, KL and entropy terms, against the recipe's reward source (verifiers).

    Args:
        recipe: a validated :class:`rlvr.config.Recipe`.
        run_dir: where metrics, samples, plots, checkpoints and the resolved recipe go.
        resume: continue from the newest checkpoint in ``run_dir`` (same metrics, step for step, on the same machine;
            with ``rollout.max_off_policy_steps`` >= 1 the batches that were in flight are generated again from the
            restored weights, so the samples differ).
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
        self._producer_group = None
        if r.rollout.max_off_policy_steps and self.dist.world_size > 1:
            # the producer thread's collectives (dynamic sampling's counts, the solve-rate table) run on a group of
            # their own: on the default one they would interleave with the update's
            self._producer_group = torch.distributed.new_group(backend="gloo")
        self._find_resume(resume, resume_from, allow_changed)

        # cheap checks, verifier pool, tokenizer and prompt split first; the expensive model load comes last
        self.algorithm: Algorithm = build_algorithm(r.algorithm)
        needs = self.algorithm.needs
        inputs = open_recipe_inputs(r, CheckOptions(run_dir=self.run_dir))  # the disk check looks at the run's disk
        self.specs, self.reward_fn = inputs.specs, inputs.reward_fn
        self.tokenizer, self.prompt_set, model_path = inputs.tokenizer, inputs.prompt_set, inputs.model_path
        if rollout_engine is None:  # rollout.engine=auto: vLLM where it serves this model, else hf (printed once)
            r = self.recipe = with_chosen_engine(r, model_path, announce=self.dist.is_main)
        # rollout.engine=server: servers rlvr starts load while the policy does (waited for when the engine is built)
        self.servers = start_fleet(r, model_path, self.run_dir / "servers") if rollout_engine is None else None
        if (r.rollout.engine == "hf" and r.trainer.zero_stage == 3 and self.dist.world_size > 1
                and rollout_engine is None):
            # HF generate runs one forward per new token, and each rank stops when its own samples end: under ZeRO-3
            # every forward is a collective parameter gather, so the ranks would wait on each other forever
            self.reward_fn.close()
            raise ValueError("rollout.engine=hf with trainer.zero_stage=3 on several ranks would hang (ZeRO-3 gathers "
                             "parameters in every generation step, and ranks stop generating at different steps): use "
                             "rollout.engine=vllm, or trainer.zero_stage <= 2")
        self.labels = list(self._labels())  # the verifiers', then the environment's reward (``env``) if any
        # no verifiers (a reward model alone): no solved flag, so no solve rate and no pass@k eval
        self.solved_label = r.solved_verifier if r.solved_verifier in (None, ENVIRONMENT_LABEL) else \
            self.labels[[s.name for s in self.specs].index(r.solved_verifier)]
        # tools and the environment are imported and checked before the model loads; the sampler needs the rollout
        # engine, built last
        try:
            self.tool_env = build_environment(r.rollout.tools_config(), self.tokenizer)
        except BaseException:
            self.reward_fn.close()
            raise
        self.curriculum = Curriculum(r.curriculum, [p.row for p in self.prompt_set.train], seed=r.seed,
                                     max_new_tokens=r.rollout.max_new_tokens)
        with phase(f"loading the policy from {model_path} onto {self.dist.device}", self.dist.is_main):
            self.model = load_causal_lm(model_path, r.model).to(self.dist.device)
            if r.model.lora is not None:  # adapters train, the base weights stay frozen (rlvr.models.lora)
                self.model = apply_lora(self.model, r.model.lora, base_name=r.model.name).to(self.dist.device)
            use_fast_layers(self.model, self.dist.device)  # before the engines and the rollout engine share it
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
            use_fast_layers(self.ref_model, self.dist.device)
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
                r, self.model, self.tokenizer, self.eos_ids, self.precision.generation_dtype, servers=self.servers)
        self._closes_rollout_engine = rollout_engine is None and r.rollout.engine == "server"
        self.tools: ToolSampler | None = None
        if self.tool_env is not None:  # rollout.tools / rollout.environment: multi-turn rollouts on the same engine
            self.tools = build_tool_sampler(self.rollout_engine, self.tokenizer, r, self.prompt_set.shots,
                                            self.eos_ids, env=self.tool_env)
        self.kl_ctl = AdaptiveKLController(r.algorithm.kl.beta, r.algorithm.kl.target, r.algorithm.kl.horizon)
        self.step_done = 0
        self.tokens_generated = 0
        self.resumed_state: dict[str, Any] | None = None
        """The resumed checkpoint's ``trainer_state.json`` (None for a fresh run): the run's own fields in it
        (:class:`rlvr.trainer.run.RunState`) are read by the run."""
        self.collector: AsyncCollector[CollectedStep] | None = None
        """K >= 1: the producer of the next steps' rollouts, started by the first :meth:`collect` (None before, and
        always with K = 0)."""
        self._collected: CollectedStep | None = None  # K >= 1: the batch of the step under way
        self._stale: StaleFilter | None = None  # K >= 1: its staleness
        self._tokens_produced = 0  # K >= 1: tokens the producer generated, batches not yet trained on included
        self._closed = False
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.dist.is_main:  # a killed writer's temporary files (a metrics rewrite, a checkpoint) are not kept
            remove_leftovers(self.run_dir)
        self.logger = MetricsLogger(self.run_dir, enabled=self.dist.is_main, wandb=r.logging.wandb,
                                    config=r.model_dump(mode="json") if r.logging.wandb is not None else None)
        if self.dist.is_main:
            atomic_write_text(self.run_dir / "recipe.resolved.yaml", dump_recipe(r))
        if self._resume_path is not None:
            self._resume(self._resume_path)

    # ------------------------------------------------------------------------------------------------ set-up
    def _labels(self) -> Any:
        seen: dict[str, int] = {}
        for spec in self.specs:
            seen[spec.name] = seen.get(spec.name, 0) + 1
            yield spec.name if seen[spec.name] == 1 else f"{spec.name}#{seen[spec.name]}"
        if self.recipe.rollout.environment is not None:
            yield ENVIRONMENT_LABEL

    @property
    def sharded_frozen_models(self) -> bool:
        """Under ``trainer.zero_stage: 3`` the reference and the reward model(s) are ZeRO-3 inference engines,
        partitioned like the policy (:mod:`rlvr.trainer.sharded_inference`); below it, whole frozen copies."""
        return self.recipe.trainer.zero_stage == 3

    def close(self) -> None:
        """Close the metrics logger and the reward source and destroy the engines besides the policy's (idempotent):
        the end of a run."""
        if self._closed:
            return
        self._closed = True
        if self.collector is not None:
            self.collector.close()
        self.logger.close()
        self.rewards.close()
        if self._closes_rollout_engine:  # a server engine built here: its servers and transfer folder go with the run
            self.rollout_engine.close()
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
        gold = [lbl for lbl, v in zip(self.labels, r.verifiers)
                if not v.optimise or r.reward.source == "reward_model" or r.reward.control != "none"]
        gold += [ENVIRONMENT_LABEL] if environment_is_gold(r) else []
        verifiers = VerifierRewards(self.reward_fn, self.labels, self.solved_label,
                                    drop_failed=r.reward.failure_score is None, gold_labels=gold,
                                    environment_weight=environment_weight(r), failure_score=r.reward.failure_score)
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

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The trainer's own state in a checkpoint: the step, the data order, the KL controller, the tokens generated,
        the running reward normaliser and the precision chosen (the run adds its own:
        :meth:`rlvr.trainer.run.RunState.checkpoint_fields`)."""
        # K >= 1: the producer's curriculum is ahead by the batches in flight; the state after this step's batch is
        # saved, and a resumed run draws the in-flight batches' prompts again
        curriculum = self._collected.curriculum_state if self._collected is not None else self.curriculum.state_dict()
        return {"step": self.step_done, "curriculum": curriculum,
                "kl_ctl": self.kl_ctl.state_dict(), "tokens_generated": self.tokens_generated,
                "reward_normalizer": self.algorithm.normalizer.state_dict() if self.algorithm.normalizer else None,
                "precision": {"training": self.precision.name, "generation": self.precision.generation}}

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
        self.resumed_state = state
        self._sync_rollout_weights(version=self.step_done)
        self.logger.truncate_after(self.step_done)
        dropped = ckpt.discard_checkpoints_after(self.run_dir, self.step_done, self.dist.rank)
        if self.dist.is_main:
            later = f" (deleted the later checkpoints {', '.join(p.name for p in dropped)})" if dropped else ""
            print(f"resumed from {path} at step {self.step_done}{later}")

    def save(self, run_state: dict[str, Any] | None = None, final: bool = False) -> Path:
        """Checkpoint the current step (atomic) with the trainer's state and ``run_state`` (the run's fields,
        :meth:`rlvr.trainer.run.RunState.checkpoint_fields`). The HF ``model/`` folder is written in the ``final``
        checkpoint and, with ``trainer.export_every_checkpoint``, in every one."""
        state = {**self.state_dict(), **(run_state or {})}
        return ckpt.save_checkpoint(self.run_dir, self.step_done, self.engine, self.model, self.tokenizer, state,
                                    keep=self.recipe.trainer.keep_checkpoints, rank=self.dist.rank,
                                    adapters_only=self.recipe.model.lora is not None,
                                    export=final or self.recipe.trainer.export_every_checkpoint,
                                    extra_engines={"critic": self.critic.engine} if self.critic is not None else None)

    def train(self) -> dict[str, Any]:
        """Run the remaining steps with an eval before the first and after the last (:class:`TrainingRun`);
        returns the summary."""
        return TrainingRun(self).train()

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

    @property
    def can_evaluate(self) -> bool:
        """Whether held-out evaluation means anything: a verifier says what is solved (pass@k needs it)."""
        return self.solved_label is not None

    @property
    def eval_size(self) -> int:
        """Held-out prompts."""
        return len(self.prompt_set.eval)

    def evaluate(self, k: int | None = None) -> EvalResult | None:
        """Held-out pass@1 (with standard error), pass@k, maj@k and length on the eval split; None when it is empty.

        Sampling uses its own seeded RNG stream (the training RNG is saved and restored), so an eval never changes the
        training run's numbers.
        """
        ev = self.recipe.eval
        if not self.prompt_set.eval or self.solved_label is None:  # pass@k needs a verifier to say "solved"
            return None
        # K >= 1: the producer shares the engine, the verifier pool and the tools: it waits during the eval
        with torch.no_grad(), self.collector.paused() if self.collector is not None else contextlib.nullcontext():
            return run_eval(self.rollout_engine, self.tokenizer, self.prompt_set.eval, self.reward_fn,
                            self.solved_label, k=k or ev.k, temperature=ev.temperature,
                            max_new_tokens=ev.max_new_tokens or self.recipe.rollout.max_new_tokens,
                            top_p=self.recipe.rollout.top_p, top_k=self.recipe.rollout.top_k, seed=ev.seed,
                            rank=self.dist.rank, world_size=self.dist.world_size, tools=self.tools)

    # ------------------------------------------------------------------------------------------------ stages
    def collect(self) -> tuple[RolloutBatch, dict[str, float], StageTimer]:
        """Rollout + verify, with DAPO dynamic sampling when enabled (:func:`rlvr.trainer.dynamic_sampling.collect`);
        with ``rollout.tools`` or ``rollout.environment``, multi-turn rollouts
        (:class:`rlvr.rollout.tool_sampler.ToolSampler`). With ``rollout.max_off_policy_steps`` >= 1, the batch the
        background collector made (:meth:`_collect_off_policy`)."""
        if self.recipe.rollout.max_off_policy_steps:
            return self._collect_off_policy()
        timer = StageTimer()
        budget = self.recipe.trainer.max_tokens_generated
        batch, info, generated = collect(
            self.rollout_engine, self.rewards, self.curriculum, self.prompt_set.train, self.tokenizer,
            step=self.step_done, config=self.recipe.rollout, ds=self.recipe.algorithm.dynamic_sampling, dist=self.dist,
            tokens_left=math.inf if budget is None else budget - self.tokens_generated, timer=timer, tools=self.tools)
        self.tokens_generated += generated
        return batch, info, timer

    def _sync_rollout_weights(self, version: int) -> None:
        """The trainer's weights into the rollout engine. An engine that labels its weights (``server``: samples carry
        the version that made them) is given ``version``, the optimizer steps those weights hold, so that a sample's
        version and the trainer's step count agree, after a resume too."""
        if getattr(self.rollout_engine, "policy_version", None) is not None:
            self.rollout_engine.sync_weights(self.model, version=version)
        else:
            self.rollout_engine.sync_weights(self.model)

    def _produce(self, step: int, version: int) -> CollectedStep:
        """The batch of ``step`` (0-based), started at policy ``version``: the synchronous path's
        :func:`rlvr.trainer.dynamic_sampling.collect`, in the collector's thread.

        While the collector runs, that thread alone uses the curriculum, the reward source, the tool sampler and the
        engine's ``generate`` (the trainer's thread calls only ``sync_weights``, and pauses the producer for an eval);
        the trainer reads the curriculum's report and state from the :class:`CollectedStep`.
        """
        timer = StageTimer()
        budget = self.recipe.trainer.max_tokens_generated
        with thread_process_group(self._producer_group):
            batch, info, generated = collect(
                self.rollout_engine, self.rewards, self.curriculum, self.prompt_set.train, self.tokenizer,
                step=step, config=self.recipe.rollout, ds=self.recipe.algorithm.dynamic_sampling, dist=self.dist,
                tokens_left=math.inf if budget is None else budget - self._tokens_produced, timer=timer,
                tools=self.tools)
            stamp_versions(batch, version)
            self._tokens_produced += generated
            report = self.curriculum.end_step(step)
        return CollectedStep(batch, info, dict(timer.seconds), generated, self._tokens_produced, report,
                             copy.deepcopy(self.curriculum.state_dict()))

    def _start_collector(self) -> AsyncCollector[CollectedStep]:
        """The collector of the steps from ``step_done`` on, at the weights the engine holds (synced after the last
        update, or by the resume)."""
        budget = self.recipe.trainer.max_tokens_generated
        self._tokens_produced = self.tokens_generated
        collector = AsyncCollector(self._produce, first_step=self.step_done, version=self.step_done,
                                   max_off_policy_steps=self.recipe.rollout.max_off_policy_steps,
                                   last_step=self.recipe.trainer.steps - 1,
                                   is_last=lambda item: budget is not None and item.tokens_total >= budget)
        collector.start()
        return collector

    def _collect_off_policy(self) -> tuple[RolloutBatch, dict[str, float], StageTimer]:
        """The collector's batch of this step, its groups with a sample staler than K dropped
        (:func:`rlvr.trainer.staleness.drop_stale_groups`). The step's timer holds ``rollout_wait``, the seconds the
        trainer waited for the batch; the producer's own stage seconds are the metrics ``rollout/collector_<stage>_s``.
        The producer's exception is raised here (the collector is closed first)."""
        if self.collector is None:
            self.collector = self._start_collector()
        timer = StageTimer()
        try:
            with timer("rollout_wait"):
                produced = self.collector.take(self.step_done)
        except BaseException:
            self.collector.close()
            raise
        self._collected = produced
        self.tokens_generated += produced.generated
        self._stale = drop_stale_groups(produced.batch, self.step_done, self.recipe.rollout.max_off_policy_steps)
        info = {**produced.info, **self._stale.metrics()}
        info["rollout/groups_kept"] -= self._stale.dropped_groups
        info["rollout/batch_filled"] = info["rollout/groups_kept"] / self.recipe.rollout.prompts_per_step
        info.update({f"rollout/collector_{stage}_s": seconds for stage, seconds in produced.seconds.items()})
        return self._stale.batch, info, timer

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
    def step(self) -> StepResult:
        """One training step: rollout -> reward -> advantages -> update -> sync; returns its metrics and the
        verifiers' first machinery failures."""
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
            self._sync_rollout_weights(version=self.step_done + 1)
        # K >= 1: the producer ended the curriculum's step when it made the batch
        curriculum = self.curriculum.end_step(self.step_done) if self._collected is None else self._collected.curriculum
        self.step_done += 1
        if self.collector is not None:
            self.collector.synced(self.step_done)  # admits the batch of step step_done + K
            self.logger.histogram("rollout/staleness", self._stale.staleness, self.step_done)
        for tag, values in curriculum.histograms.items():
            self.logger.histogram(tag, values, self.step_done)
        self._write_samples(self.step_done, batch)
        metrics = {**info, **self._rollout_metrics(batch, timer, info.get("rollout/tokens_generated")),
                   **curriculum.metrics, **train_metrics}
        metrics.update({f"time/{k}_s": v for k, v in timer.seconds.items()})
        return StepResult(metrics, step_metrics.failure_reasons(batch, self.labels))

    def _rollout_metrics(self, batch: RolloutBatch, timer: StageTimer,
                         tokens_generated: float | None = None) -> dict[str, float]:
        """``reward/*`` and ``rollout/*`` metrics of the step (:func:`rlvr.trainer.step_metrics.rollout_metrics`)."""
        seconds = timer.seconds if self._collected is None else self._collected.seconds  # K >= 1: the producer's
        metrics = step_metrics.rollout_metrics(batch, self.labels, seconds.get("rollout", 0.0), self.tokens_generated,
                                               tokens_generated)
        if self.solved_label is None:  # nothing decides "solved": a solve rate of 0 would be a made-up number
            for key in step_metrics.SOLVED_METRICS:
                metrics.pop(key, None)
        if self.tools is not None:
            metrics.update(step_metrics.tool_metrics(batch))
        failed = getattr(self.rollout_engine, "requests_failed", None)  # server engine: resent after a restart or fatal
        if failed is not None:
            metrics["rollout/server_requests_failed"] = float(failed)
        services = self._service_verifiers()
        if services:
            fallbacks = {lbl for lbl, spec in zip(self.labels, self.specs) if spec.fallback_for is not None}
            metrics.update(step_metrics.service_metrics(batch, services, self.solved_label, fallbacks))
        gold = self.rewards.gold_labels
        if self.reward_model is not None or gold:
            metrics.update(step_metrics.reward_model_metrics(batch, gold, metrics) if self.reward_model is not None
                           else {f"reward/gold_{lbl}": metrics[f"reward/{lbl}"] for lbl in gold})
        return metrics

    def _service_verifiers(self) -> dict[str, tuple[str, ...]]:
        """Labels of the verifiers that call a service (a judge), with the numeric fields they report per sample."""
        fn_of = getattr(self.reward_fn, "verifier_fn", None)
        if fn_of is None:
            return {}
        return {lbl: fn_of(lbl).service_metrics for lbl in self.labels
                if lbl != ENVIRONMENT_LABEL and getattr(fn_of(lbl), "service_metrics", None) is not None}

    def _write_samples(self, step: int, batch: RolloutBatch) -> None:
        """``samples/step-N.jsonl``: one line per sample of rank 0, every ``trainer.log_samples_every`` steps."""
        every = self.recipe.trainer.log_samples_every
        if self.dist.is_main and every and step % every == 0:
            path = self.run_dir / "samples" / f"step-{step}.jsonl"
            step_metrics.write_samples(path, batch, self.recipe.data.answer_field)
            if self.recipe.logging.wandb is not None:
                self.logger.table("samples", [json.loads(line) for line in path.read_text().splitlines()], step)
