"""The GRPO trainer: one training step is rollout -> verify -> advantages -> update -> sync -> log -> checkpoint.

Usage::

    from rlvr.config import load_recipe
    from rlvr.trainer.grpo import GRPOTrainer

    trainer = GRPOTrainer(load_recipe("recipes/demo.yaml"), run_dir=Path("runs/demo"))
    summary = trainer.train()          # evals before/after, checkpoints, metrics.jsonl, plots

The same code runs on one CPU process (gloo) and under ``torchrun``/``deepspeed`` on GPUs: each rank rolls out its
share of the step's prompts (whole groups, so group baselines need no communication) and DeepSpeed reduces gradients.
Vocabulary: B prompts per step, G samples per prompt, N = B x G samples, T response tokens.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from rlvr import checkpoint as ckpt
from rlvr.advantages import NORMALISATION, broadcast_to_tokens, get_estimator, subtract_kl_from_returns, whiten
from rlvr.config import Recipe, _deep_merge, check_resumed_recipe, dump_recipe
from rlvr.curriculum import Curriculum
from rlvr.curriculum.plot import plot_curriculum
from rlvr.evaluation import EvalResult, run_eval
from rlvr.kl import AdaptiveKLController, kl_per_token
from rlvr.logprobs import response_logprobs, shared_prefix_logprobs
from rlvr.losses import aggregate_loss, cispo_loss, count_sequences, ppo_clip_loss
from rlvr.metrics import MetricsLogger, read_metrics
from rlvr.models import eos_token_ids, load_causal_lm
from rlvr.plots import plot_curves
from rlvr.precision import announce_precision, choose_precision
from rlvr.recipe_inputs import open_recipe_inputs
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.choice import with_chosen_engine
from rlvr.trainer.batch import RolloutBatch, tensorize
from rlvr.trainer.distributed import (DistInfo, all_gather_objects, all_reduce_max, all_reduce_sum,
                                     init_distributed, record_grad_norm_without_zero)
from rlvr.trainer.groups import solve_counts, zero_variance_groups
from rlvr.trainer.micro_batches import micro_batches_are_collective, plan_micro_batches
from rlvr.trainer.progress import TrainProgress, phase
from rlvr.verifier_inputs import sample_dict

STAGES = ("rollout", "reward", "old_logprobs", "ref_logprobs", "advantages", "update", "sync", "checkpoint")


class StageTimer:
    """Wall-clock seconds per stage of one step (``time/<stage>_s`` metrics)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start


class GRPOTrainer:
    """Group-relative policy optimisation on DeepSpeed, with the recipe's advantage estimator, loss aggregation,
    clipping, KL and entropy terms.

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
        rlvr.models.ModelLoadError, KeyError (unknown verifier), VerifierKwargsError, rlvr.preflight.PreflightError
        (a failed pre-flight check), FileNotFoundError (resume without checkpoint): all
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

        # cheap checks, verifier pool, tokenizer and prompt split first; the expensive model load comes last
        inputs = open_recipe_inputs(r)
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
        self.solved_label = self.labels[[s.name for s in self.specs].index(r.solved_verifier)]
        self.curriculum = Curriculum(r.curriculum, [p.row for p in self.prompt_set.train], seed=r.seed,
                                     max_new_tokens=r.rollout.max_new_tokens)
        self.sampler = self.curriculum.sampler
        with phase(f"loading the policy from {model_path} onto {self.dist.device}", self.dist.is_main):
            self.model = load_causal_lm(model_path, r.model).to(self.dist.device)
        self.eos_ids = eos_token_ids(self.model, self.tokenizer)
        self.precision = choose_precision(r.trainer.precision, self.dist.device)
        if self.dist.is_main:
            announce_precision(self.precision)
        self.autocast_dtype = self.precision.autocast_dtype
        self.ref_model = None
        if r.algorithm.kl.beta > 0:
            with phase("loading the reference model", self.dist.is_main):
                self.ref_model = load_causal_lm(model_path, r.model).to(self.dist.device).eval()
            self.ref_model.requires_grad_(False)
        with phase(f"DeepSpeed engine (ZeRO-{r.trainer.zero_stage}, {self.dist.world_size} rank(s))",
                   self.dist.is_main):
            self.engine = self._init_deepspeed()
        with phase(f"rollout engine ({r.rollout.engine})",
                   self.dist.is_main and rollout_engine is None and r.rollout.engine != "hf"):  # hf: instant
            self.rollout_engine = rollout_engine or self._build_rollout_engine()
        self.failure_reasons: dict[str, str | None] = {}
        self.kl_ctl = AdaptiveKLController(r.algorithm.kl.beta, r.algorithm.kl.target, r.algorithm.kl.horizon)
        self.step_done = 0
        self.tokens_generated = 0
        self.eval_before: dict[str, Any] | None = None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.logger = MetricsLogger(self.run_dir, enabled=self.dist.is_main)
        if self.dist.is_main:
            (self.run_dir / "recipe.resolved.yaml").write_text(dump_recipe(r))
        if self._resume_path is not None:
            self._resume(self._resume_path)

    # ------------------------------------------------------------------------------------------------ set-up
    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def _labels(self) -> Iterator[str]:
        seen: dict[str, int] = {}
        for spec in self.specs:
            seen[spec.name] = seen.get(spec.name, 0) + 1
            yield spec.name if seen[spec.name] == 1 else f"{spec.name}#{seen[spec.name]}"

    def _optimizer_steps(self) -> int:
        a = self.recipe.algorithm
        return self.recipe.trainer.steps * a.ppo_epochs * a.mini_batches

    def _lr_lambda(self, opt_step: int) -> float:
        o = self.recipe.optim
        if o.warmup_steps and opt_step < o.warmup_steps:
            return (opt_step + 1) / o.warmup_steps
        total = max(self._optimizer_steps() - o.warmup_steps, 1)
        progress = min(max(opt_step - o.warmup_steps, 0) / total, 1.0)
        if o.schedule == "linear":
            return 1.0 - progress
        if o.schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    def _init_deepspeed(self) -> Any:
        import deepspeed

        r = self.recipe
        params = [p for p in self.model.parameters() if p.requires_grad]
        if r.trainer.offload_optimizer:
            from deepspeed.ops.adam import DeepSpeedCPUAdam
            optimizer = DeepSpeedCPUAdam(params, lr=r.optim.lr, betas=r.optim.betas, weight_decay=r.optim.weight_decay)
        else:
            # fused: one kernel over all parameters; on CPU ~7x faster than the default per-tensor loop (SmolLM2-135M,
            # 1 thread: 0.42 s vs 2.84 s a step, benchmarks/RESULTS.md)
            fused = all(p.device.type in ("cpu", "cuda") for p in params)
            optimizer = torch.optim.AdamW(params, lr=r.optim.lr, betas=r.optim.betas,
                                          weight_decay=r.optim.weight_decay, fused=fused)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, self._lr_lambda)
        zero: dict[str, Any] = {"stage": r.trainer.zero_stage}
        if r.trainer.offload_optimizer:
            zero["offload_optimizer"] = {"device": "cpu"}
        ds_config = {
            "train_micro_batch_size_per_gpu": r.optim.micro_batch_size,
            "gradient_accumulation_steps": 1,
            # we call backward() once per micro-batch with loss already normalised by the mini-batch's global token/
            # sample count, then step() once per mini-batch: DeepSpeed must not rescale or step on its own
            "managed_gradient_accumulation": False,
            # inf at stage 0 without clipping: DeepSpeed then still computes the norm that train/grad_norm reports
            "gradient_clipping": r.optim.grad_clip or (float("inf") if r.trainer.zero_stage == 0 else 0.0),
            "zero_optimization": zero,
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }
        ds_config = _deep_merge(ds_config, r.trainer.deepspeed_config)
        engine, _, _, _ = deepspeed.initialize(model=self.model, optimizer=optimizer, lr_scheduler=scheduler,
                                               config=ds_config)
        if r.trainer.zero_stage == 0:
            record_grad_norm_without_zero(engine)
        return engine

    def _build_rollout_engine(self) -> Any:
        r = self.recipe
        if r.rollout.engine == "hf":
            from rlvr.rollout.hf import HFRolloutEngine
            return HFRolloutEngine(self.model, self.tokenizer, self.eos_ids, batch_size=r.rollout.generation_batch_size,
                                   autocast_dtype=self.autocast_dtype)
        from rlvr.rollout.vllm_engine import VLLMRolloutEngine  # optional dependency
        return VLLMRolloutEngine.from_recipe(r, self.model, self.tokenizer, self.eos_ids)

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step_done, "curriculum": self.curriculum.state_dict(),
                "kl_ctl": self.kl_ctl.state_dict(), "tokens_generated": self.tokens_generated,
                "eval_before": self.eval_before}

    def _resume(self, path: Path) -> None:
        state = ckpt.load_checkpoint(path, self.engine, self.dist.rank)
        self.step_done = int(state["step"])
        self.curriculum.load_state_dict(state["curriculum"])
        self.kl_ctl.load_state_dict(state["kl_ctl"])
        self.tokens_generated = int(state.get("tokens_generated", 0))
        self.eval_before = state.get("eval_before")
        self.rollout_engine.sync_weights(self.model)
        self.logger.truncate_after(self.step_done)
        dropped = ckpt.discard_checkpoints_after(self.run_dir, self.step_done, self.dist.rank)
        if self.dist.is_main:
            later = f" (deleted the later checkpoints {', '.join(p.name for p in dropped)})" if dropped else ""
            print(f"resumed from {path} at step {self.step_done}{later}")

    def save(self) -> Path:
        """Checkpoint the current step (atomic), and refresh the plots."""
        path = ckpt.save_checkpoint(self.run_dir, self.step_done, self.engine, self.model, self.tokenizer,
                                    self.state_dict(), keep=self.recipe.trainer.keep_checkpoints, rank=self.dist.rank)
        self._plot()
        return path

    def _plot(self) -> None:
        if self.dist.is_main:
            records = read_metrics(self.run_dir)
            plot_curves(records, self.run_dir / "plots" / "curves.png",
                        title=f"{self.recipe.model.name} | {self.run_dir.name}")
            plot_curriculum(records, self.run_dir / "plots" / "curriculum.png",
                            title=f"{self.recipe.model.name} | {self.run_dir.name}")

    # ------------------------------------------------------------------------------------------------ stages
    def _my_share(self, items: list[Any]) -> list[Any]:
        return items[self.dist.rank::self.dist.world_size]

    def _sampling(self) -> SamplingParams:
        ro = self.recipe.rollout
        return SamplingParams(temperature=ro.temperature, top_p=ro.top_p, top_k=ro.top_k,
                              max_new_tokens=self.curriculum.max_new_tokens(self.step_done))

    def rollout(self, num_prompts: int) -> RolloutBatch:
        """Draw ``num_prompts`` training prompts (this rank's share) and sample G completions for each."""
        g = self.recipe.rollout.group_size
        indices = self._my_share(self.curriculum.sample(num_prompts, self.step_done))
        prompts = [self.prompt_set.train[i] for i in indices]
        # a dynamic-sampling refill smaller than the number of ranks leaves some ranks without prompts
        groups = self.rollout_engine.generate([p.token_ids for p in prompts], g, self._sampling()) if prompts else []
        completions = [c for group in groups for c in group]
        # batch_decode([]) returns [''] (one empty text), not []
        texts = self.tokenizer.batch_decode([c.token_ids for c in completions], skip_special_tokens=True) \
            if completions else []
        return RolloutBatch(prompts=prompts, completions=completions, group_size=g, texts=texts)

    def verify(self, batch: RolloutBatch) -> None:
        """Score every completion with the recipe's verifiers (in the worker pool; failures cost one sample)."""
        max_new = self.curriculum.max_new_tokens(self.step_done)  # the stage's limit (overlong shaping uses it)
        samples = [sample_dict(batch.prompt_of(i), c, max_new) for i, c in enumerate(batch.completions)]
        batch.reward_results = self.reward_fn.score(batch.texts, samples)
        batch.rewards = torch.tensor([r.total for r in batch.reward_results], dtype=torch.float32)
        # dtype spelled out: a rank without prompts has empty lists, and torch.tensor([]) is float
        batch.solved = torch.tensor([(r.scores.get(self.solved_label) or 0.0) >= 1.0 - 1e-9
                                     for r in batch.reward_results], dtype=torch.bool)
        drop_failed = self.recipe.reward.failure_score is None
        batch.valid = torch.tensor([not (drop_failed and r.failures) for r in batch.reward_results], dtype=torch.bool)

    def collect(self) -> tuple[RolloutBatch, dict[str, float], StageTimer]:
        """Rollout + verify, with DAPO dynamic sampling (2503.14476, section 3.2) when enabled: groups whose rewards
        are all equal carry no gradient and are dropped, and more prompts are drawn until B groups remain or
        ``max_rounds`` generation rounds are done or ``trainer.max_tokens_generated`` is spent. When the cap is hit
        the step trains on what it has (possibly nothing: then the update is skipped), never aborts, and says so in
        ``rollout/max_rounds_hit``.

        Every group generated, kept or not, updates the per-prompt solve rates (``self.curriculum.observe``)."""
        r = self.recipe
        timer = StageTimer()
        want = r.rollout.prompts_per_step
        ds = r.algorithm.dynamic_sampling
        kept: list[RolloutBatch] = []
        have, rounds, zero_var_before, groups_seen, generated = 0, 0, 0, 0, 0
        while True:
            rounds += 1
            with timer("rollout"):
                part = self.rollout(want - have if ds.enabled else want)
            with timer("reward"):
                self.verify(part)
            g = part.group_size
            valid = part.valid.view(-1, g)  # (B_part, G)
            filtered = part.solved.float() if ds.filter_on == "solved" else part.rewards
            zero_var = zero_variance_groups(filtered.view(-1, g), valid)  # (B_part,)
            counts_per_group = solve_counts(part.solved.view(-1, g), valid)
            # dropped samples are not evidence about a prompt: the table sees only valid ones
            mine = [(p.index, k, n) for p, (k, n) in zip(part.prompts, counts_per_group, strict=True) if n]
            for groups in all_gather_objects(mine):  # every rank keeps the same solve-rate table
                self.curriculum.observe(groups)
            counts = all_reduce_sum(torch.tensor([float(zero_var.sum()), float(len(part.prompts)),
                                                  float(sum(len(c.token_ids) for c in part.completions))],
                                                 dtype=torch.float64)).tolist()
            zero_var_before += int(counts[0])
            groups_seen += int(counts[1])
            generated += int(counts[2])
            if ds.enabled:
                part = _select_groups(part, ~zero_var)
            kept.append(part)
            have += int(all_reduce_sum(torch.tensor([len(part.prompts)]))[0])
            if not ds.enabled or have >= want or rounds >= ds.max_rounds \
                    or self._budget_spent(self.tokens_generated + generated):
                break
        batch = _concat(kept)
        zero_var_after = 0.0
        if batch.prompts:
            kept = (batch.solved.float() if ds.filter_on == "solved" else batch.rewards).view(-1, batch.group_size)
            zero_var_after = float(zero_variance_groups(kept, batch.valid.view(-1, batch.group_size)).sum())
        self.tokens_generated += generated
        info = {"rollout/rounds": float(rounds),
                "rollout/groups_generated": float(groups_seen),
                "rollout/groups_kept": float(have),
                "rollout/zero_var_groups_before_filter": zero_var_before / max(groups_seen, 1),
                "rollout/zero_var_groups_after_filter": float(all_reduce_sum(torch.tensor([zero_var_after]))[0])
                / max(have, 1),
                "rollout/batch_filled": have / want,
                "rollout/max_rounds_hit": float(ds.enabled and have < want),
                "rollout/tokens_generated": float(generated)}
        return batch, info, timer

    def prepare(self, batch: RolloutBatch, timer: StageTimer) -> None:
        """Pad the batch into tensors, then the forwards the loss needs before any update: the policy's own
        log-probs (``old_logprobs`` stage: several optimizer steps per batch, TIS, KL in the reward) and the
        reference policy's (``ref_logprobs`` stage)."""
        a = self.recipe.algorithm
        if not batch.prompts:  # dynamic sampling dropped every group (or this rank got none): nothing to tensorize
            batch.response_mask = batch.advantages = torch.zeros(0, 1)
            self._join_empty_forwards()
            return
        tensorize(batch, int(self.tokenizer.pad_token_id), a.mask_truncated)
        if self._needs_old_logprobs():
            with timer("old_logprobs"):
                batch.old_logprobs = self._logprobs(self.engine, batch)
        if self.ref_model is not None:
            with timer("ref_logprobs"):
                batch.ref_logprobs = self._logprobs(self.ref_model, batch)

    def _needs_old_logprobs(self) -> bool:
        a = self.recipe.algorithm
        return a.ppo_epochs > 1 or a.mini_batches > 1 or a.tis_cap is not None or (
            self.ref_model is not None and a.kl.placement == "reward")

    def _join_empty_forwards(self) -> None:
        """A rank without samples still joins the other ranks' ZeRO-3 parameter gathers of the old-log-prob pass."""
        if self._needs_old_logprobs():
            for _ in self._micro_batches(None, [], synced=True):
                self._idle_pass(backward=False)

    def compute_advantages(self, batch: RolloutBatch) -> None:
        """Advantages (N, T) of the prepared batch (:meth:`prepare`): the estimator per group over valid samples,
        broadcast to tokens; with KL in the reward, ``-beta * KL`` (the recipe's estimator, pre-update log-probs) summed
        into each token's return; batch-normalised estimators (``reinforce_pp``) are then whitened over all ranks'
        tokens. Every rank must call this (the whitening is a collective)."""
        a = self.recipe.algorithm
        batch_norm = NORMALISATION[a.advantage.type] == "batch"
        if not batch.prompts:
            if batch_norm:
                whiten(torch.zeros(0, 1), torch.zeros(0, 1), all_reduce_sum=all_reduce_sum)  # join the collective
            return
        estimator = get_estimator(a.advantage.type)
        g = batch.group_size
        rewards = batch.rewards.view(-1, g)  # (B, G)
        valid = batch.valid.view(-1, g) if batch.valid is not None else None
        adv = estimator(rewards, valid=valid, std_normalize=a.advantage.std_normalize,
                        eps=a.advantage.eps).reshape(-1)  # (N,)
        token_adv = broadcast_to_tokens(adv, batch.response_mask)  # (N, T)
        if self.ref_model is not None and a.kl.placement == "reward":
            kl = kl_per_token(batch.old_logprobs, batch.ref_logprobs, a.kl.estimator)
            token_adv = subtract_kl_from_returns(token_adv, kl, batch.response_mask, self.kl_ctl.beta)
        if batch_norm:
            token_adv = whiten(token_adv, batch.response_mask, std_normalize=a.advantage.std_normalize,
                               eps=a.advantage.eps, all_reduce_sum=all_reduce_sum)
        batch.advantages = token_adv

    @torch.no_grad()
    def _logprobs(self, model: Any, batch: RolloutBatch) -> torch.Tensor:
        out = torch.zeros_like(batch.response_mask)
        for idx in self._micro_batches(batch, list(range(batch.num_samples)), synced=model is self.engine):
            if not idx:
                self._idle_pass(backward=False)
                continue
            lp, _, t = self._forward(model, batch, idx)
            out[idx, :t] = lp.float().cpu()
        return out

    def _micro_batches(self, batch: RolloutBatch | None, indices: list[int], synced: bool = True,
                       backward: bool = False) -> list[list[int]]:
        """Micro-batches by rows and padded tokens (``optim.micro_batch_size``/``micro_batch_tokens``), padded with
        empty ones to the largest count over ranks when the passes are collectives (ranks can hold different sample
        counts, e.g. after dynamic sampling, and a token budget splits them differently): under ZeRO-3 every forward
        of the engine (``synced``) gathers parameters, and under ZeRO-2 and 3 every backward reduces gradients."""
        o = self.recipe.optim
        lengths = [len(batch.prompt_of(i).token_ids) + len(batch.completions[i].token_ids) for i in indices]
        plan = plan_micro_batches(indices, lengths, o.micro_batch_size, o.micro_batch_tokens)
        if self.dist.world_size > 1 and synced and micro_batches_are_collective(self.recipe.trainer.zero_stage,
                                                                                backward):
            plan += [[] for _ in range(all_reduce_max(len(plan)) - len(plan))]
        return plan

    def _idle_pass(self, backward: bool) -> None:
        """A zero-loss pass of a one-token prompt and response through the DeepSpeed engine, by the same path as
        :meth:`_forward` (so with as many engine forwards): joins the ZeRO-3 parameter gathers, forward and backward,
        of a micro-batch this rank does not have."""
        dev = self.dist.device
        one = torch.full((1, 1), int(self.tokenizer.pad_token_id), dtype=torch.long, device=dev)
        mask = torch.ones_like(one)
        kw = dict(temperature=self.recipe.rollout.temperature, autocast_dtype=self.autocast_dtype)
        with torch.set_grad_enabled(backward):
            if self.recipe.model.gradient_checkpointing:
                lp, _ = response_logprobs(self.engine, torch.cat([one, one], 1), torch.cat([mask, mask], 1), 1, **kw)
            else:
                lp, _ = shared_prefix_logprobs(self.engine, one, mask, torch.zeros(1, dtype=torch.long, device=dev),
                                               one, mask, **kw)
            if backward:
                self.engine.backward(lp.sum() * 0.0, scale_wrt_gas=False)

    def _forward(self, model: Any, batch: RolloutBatch, idx: list[int],
                 entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Log-probs and entropy (R, T_micro) of the micro-batch ``idx``; returns them with T_micro.

        Each distinct prompt of the micro-batch is run once and its KV cache shared by its group's rows
        (:func:`rlvr.logprobs.shared_prefix_logprobs`): with prompts much longer than answers this divides the
        forward/backward cost by up to G. Gradient checkpointing disables HF's KV cache, so it uses one row per prompt.
        """
        kw = dict(temperature=self.recipe.rollout.temperature, autocast_dtype=self.autocast_dtype,
                  entropy_grad=entropy_grad)
        if self.recipe.model.gradient_checkpointing:
            ids, am, t = self._trim(batch, idx)
            return (*response_logprobs(model, ids, am, t, **kw), t)
        dev = self.dist.device
        t = max(max(len(batch.completions[i].token_ids) for i in idx), 1)
        groups = sorted({i // batch.group_size for i in idx})
        slot = {g: k for k, g in enumerate(groups)}
        prompts = [batch.prompts[g].token_ids for g in groups]
        width = max(len(x) for x in prompts)
        p_ids = torch.full((len(prompts), width), int(self.tokenizer.pad_token_id), dtype=torch.long)
        p_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for k, x in enumerate(prompts):  # left padding
            p_ids[k, width - len(x):] = torch.tensor(x)
            p_mask[k, width - len(x):] = 1
        p = batch.input_ids.shape[1] - batch.response_mask.shape[1]
        row_prompt = torch.tensor([slot[i // batch.group_size] for i in idx], device=dev)
        lp, ent = shared_prefix_logprobs(model, p_ids.to(dev), p_mask.to(dev), row_prompt,
                                         batch.input_ids[idx, p:p + t].to(dev),
                                         batch.attention_mask[idx, p:p + t].to(dev), **kw)
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

    def update(self, batch: RolloutBatch, loss_scale: float = 1.0) -> dict[str, float]:
        """``ppo_epochs`` passes over the batch, ``mini_batches`` optimizer steps per pass, gradient accumulation over
        micro-batches. Each micro-batch's loss is normalised by the whole mini-batch's (all ranks') token/sample count,
        so accumulation gives exactly the mini-batch loss; ``loss_scale`` multiplies it (dynamic sampling's unfilled
        steps, see ``DynamicSamplingConfig.scale_unfilled``)."""
        r, a = self.recipe, self.recipe.algorithm
        self.engine.train()
        # eval mode: dropout off (see rlvr.models.load_causal_lm), except with gradient checkpointing, which HF only
        # applies in train mode; dropout is 0 there anyway (load_causal_lm zeroes every dropout probability)
        self.model.train(r.model.gradient_checkpointing)
        n = batch.num_samples
        world = self.dist.world_size
        sums: dict[str, float] = {}

        def add(key: str, value: float) -> None:
            sums[key] = sums.get(key, 0.0) + value

        gen = torch.Generator().manual_seed(r.seed * 1_000_003 + self.step_done)
        agg = dict(mode=a.loss_agg, max_len=r.rollout.max_new_tokens)
        for epoch in range(a.ppo_epochs):
            order = torch.randperm(n, generator=gen).tolist() if (a.ppo_epochs > 1 or a.mini_batches > 1) \
                else list(range(n))
            size = math.ceil(n / a.mini_batches) if n else 0
            for mb_index in range(a.mini_batches):  # as many optimizer steps on every rank, even one with no samples
                mb = order[mb_index * size:(mb_index + 1) * size]
                mask_mb = batch.response_mask[mb] if mb else torch.zeros(0, 1)
                # global denominators; fully masked samples (mask_truncated, dropped) are no sequence of a seq-mean
                global_tokens, global_seqs = all_reduce_sum(
                    torch.stack([mask_mb.sum(), count_sequences(mask_mb)]).double()).tolist()
                agg.update(num_tokens=max(global_tokens, 1.0), num_seqs=max(global_seqs, 1.0))
                for idx in self._micro_batches(batch, mb, backward=True):
                    if not idx:
                        self._idle_pass(backward=True)
                        continue
                    logp, entropy, t = self._forward(self.engine, batch, idx, entropy_grad=a.entropy_coef > 0)
                    mask = batch.response_mask[idx, :t].to(logp.device)
                    old = (batch.old_logprobs[idx, :t].to(logp.device) if batch.old_logprobs is not None
                           else logp.detach())
                    adv = batch.advantages[idx, :t].to(logp.device)
                    out = self._policy_loss(logp, old, adv, mask)
                    pg_tok = out.loss
                    if a.tis_cap is not None:
                        rollout_lp = batch.rollout_logprobs[idx, :t].to(logp.device)
                        pg_tok = pg_tok * torch.exp(old - rollout_lp).clamp(max=a.tis_cap).detach()
                    # the loss's three terms, each aggregated like the whole (so they add up to train/loss)
                    terms = {"pg_loss": aggregate_loss(pg_tok, mask, **agg)}
                    if batch.ref_logprobs is not None:
                        kl = kl_per_token(logp, batch.ref_logprobs[idx, :t].to(logp.device), a.kl.estimator)
                        if a.kl.placement == "loss":
                            terms["kl_loss"] = aggregate_loss(self.kl_ctl.beta * kl, mask, **agg)
                        add("kl", float((kl.detach() * mask).sum()))
                    if a.entropy_coef > 0:
                        terms["entropy_loss"] = aggregate_loss(-a.entropy_coef * entropy, mask, **agg)
                    loss = sum(terms.values()) * loss_scale
                    # DeepSpeed averages gradients over ranks; our normaliser is already global, so undo the mean
                    self.engine.backward(loss * world, scale_wrt_gas=False)
                    ntok = float(mask.sum())
                    add("loss", float(loss.detach()))
                    for name, term in terms.items():
                        add(name, float(term.detach()) * loss_scale)
                    add("tokens", ntok)
                    for side in ("low", "high", "dual"):
                        add(f"clip_{side}", float(getattr(out, f"clipped_{side}").sum()))
                    add("ratio", float(out.ratio.sum()))
                    if epoch == 0 and mb_index == 0 or a.ppo_epochs == 1 and a.mini_batches == 1:
                        add("entropy_tokens", ntok)
                        add("entropy", float((entropy.detach() * mask).sum()))
                        rollout_lp = batch.rollout_logprobs[idx, :t].to(logp.device)
                        diff = ((logp.detach() - rollout_lp).abs() * mask)
                        add("mismatch", float(diff.sum()))
                        sums["mismatch_max"] = max(sums.get("mismatch_max", 0.0), float(diff.max()) if ntok else 0.0)
                self.engine.step()
                norm = self.engine.get_global_grad_norm()
                add("grad_norm", float(norm) if norm is not None else float("nan"))
                add("opt_steps", 1.0)
        keys = ["loss", "pg_loss", "kl_loss", "entropy_loss", "tokens", "clip_low", "clip_high", "clip_dual", "ratio",
                "entropy", "entropy_tokens", "mismatch", "kl"]
        totals = all_reduce_sum(torch.tensor([sums.get(k, 0.0) for k in keys], dtype=torch.float64))
        tot = dict(zip(keys, totals.tolist(), strict=True))
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
            "train/rollout_logprob_diff_max": all_reduce_max(sums.get("mismatch_max", 0.0)),
            "train/grad_norm": sums.get("grad_norm", 0.0) / opt_steps,
            "train/lr": float(self.engine.get_lr()[0]),
            "train/optimizer_steps": sums.get("opt_steps", 0.0),
        }
        if a.entropy_coef > 0:
            metrics["train/entropy_loss"] = tot["entropy_loss"] / opt_steps
        if self.ref_model is not None:
            if a.kl.placement == "loss":
                metrics["train/kl_loss"] = tot["kl_loss"] / opt_steps
            metrics["train/kl"] = tot["kl"] / tokens
            metrics["train/kl_beta"] = self.kl_ctl.beta
            self.kl_ctl.update(metrics["train/kl"])
        return metrics

    def _policy_loss(self, logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor) -> Any:
        """The recipe's per-token policy objective (``algorithm.policy_loss``, ``importance_sampling_level``)."""
        a = self.recipe.algorithm
        if a.policy_loss == "cispo":
            return cispo_loss(logp, old, adv, mask, clip_low=a.clip_low, clip_high=a.clip_high)
        return ppo_clip_loss(logp, old, adv, mask, clip_low=a.clip_low, clip_high=a.clip_high,
                             clip_ratio_c=a.clip_ratio_c, importance_sampling_level=a.importance_sampling_level)

    # ------------------------------------------------------------------------------------------------ the step
    def step(self) -> dict[str, float]:
        """One training step: rollout -> verify -> advantages -> update -> sync; returns its metrics."""
        batch, info, timer = self.collect()
        self.prepare(batch, timer)
        with timer("advantages"):
            self.compute_advantages(batch)
        with timer("update"):
            # skipped on the global count (a rank without groups still joins the collective update)
            ds = self.recipe.algorithm.dynamic_sampling
            scale = info["rollout/batch_filled"] if ds.enabled and ds.scale_unfilled else 1.0
            train_metrics = self.update(batch, loss_scale=scale) if info["rollout/groups_kept"] \
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

    def _rollout_metrics(self, batch: RolloutBatch, timer: StageTimer) -> dict[str, float]:
        """Reward/solve-rate/length statistics of the step, summed over ranks. Reward and solve-rate statistics leave
        dropped samples out (``reward.failure_score: null``); lengths count every sample."""
        lengths = torch.tensor([float(len(c.token_ids)) for c in batch.completions])
        valid = batch.valid.float() if batch.valid is not None else torch.ones(len(lengths))
        solved = batch.solved.float() * valid if batch.solved is not None else torch.zeros(0)
        truncated = torch.tensor([float(c.finish_reason == "length") for c in batch.completions])
        rewards = batch.rewards * valid if batch.rewards is not None else torch.zeros(0)
        per_label = [[(res.scores.get(lbl) if res.scores.get(lbl) is not None else float("nan"))
                      for lbl in self.labels] for res in batch.reward_results]
        vals = torch.tensor(per_label, dtype=torch.float64).reshape(-1, len(self.labels))
        judged = ~torch.isnan(vals)
        zero_var = 0.0
        if batch.prompts:
            zero_var = float(zero_variance_groups(rewards.view(-1, batch.group_size),
                                                  valid.bool().view(-1, batch.group_size)).sum())
        # failed calls per verifier (and one reason each, from this rank, for the step line's warning)
        fails = [float(sum(lbl in res.failures for res in batch.reward_results)) for lbl in self.labels]
        self.failure_reasons = {lbl: next((res.failures[lbl] for res in batch.reward_results if lbl in res.failures),
                                          None) for lbl in self.labels}
        stats = torch.cat([torch.tensor([
            float(len(lengths)), float(rewards.sum()), float((rewards.double() ** 2).sum()), float(solved.sum()),
            float(lengths.sum()), float((lengths * solved).sum()), float(truncated.sum()), zero_var,
            float(len(batch.prompts)), float(valid.sum())], dtype=torch.float64),
            torch.where(judged, vals, 0.0).sum(0), judged.double().sum(0), torch.tensor(fails, dtype=torch.float64)])
        s = all_reduce_sum(stats).tolist()
        n, rsum, rsq, nsolved, lsum, lsolved, ntrunc, zvar, ngroups, nvalid = s[:10]
        k = len(self.labels)
        vsum, vcount, vfail = s[10:10 + k], s[10 + k:10 + 2 * k], s[10 + 2 * k:10 + 3 * k]
        samples = n
        n, nvalid = max(n, 1.0), max(nvalid, 1.0)
        out = {
            "reward/mean": rsum / nvalid,
            "reward/std": math.sqrt(max(rsq / nvalid - (rsum / nvalid) ** 2, 0.0)),
            "reward/solve_rate": nsolved / nvalid,
            "reward/zero_var_groups": zvar / max(ngroups, 1.0),
            "reward/samples": samples,
            "reward/verifier_failures": float(sum(vfail)),
            "rollout/response_length": lsum / n,
            "rollout/response_length_correct": lsolved / nsolved if nsolved else float("nan"),
            "rollout/response_length_incorrect": (lsum - lsolved) / (n - nsolved) if n > nsolved else float("nan"),
            "rollout/truncated": ntrunc / n,
            "rollout/tokens": lsum,
            "rollout/tokens_per_s": lsum / max(timer.seconds.get("rollout", 0.0), 1e-9),
            "rollout/tokens_generated_total": float(self.tokens_generated),
        }
        for lbl, vs, vc, vf in zip(self.labels, vsum, vcount, vfail, strict=True):
            out[f"reward/{lbl}"] = vs / vc if vc else float("nan")
            out[f"reward/verifier_failures/{lbl}"] = vf
        return out

    def _write_samples(self, step: int, batch: RolloutBatch) -> None:
        """``samples/step-N.jsonl``: one line per sample of rank 0 (prompt, completion, rewards per verifier)."""
        every = self.recipe.trainer.log_samples_every
        if not (self.dist.is_main and every and step % every == 0):
            return
        out = self.run_dir / "samples" / f"step-{step}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w") as fh:
            for i, (comp, text, res) in enumerate(zip(batch.completions, batch.texts, batch.reward_results,
                                                      strict=True)):
                prompt = batch.prompt_of(i)
                fh.write(json.dumps({
                    "prompt_index": prompt.index, "group": i // batch.group_size, "prompt": prompt.text,
                    "answer": prompt.row.get(self.recipe.data.answer_field) if self.recipe.data.answer_field else None,
                    "completion": text, "reward": res.total, "scores": res.scores, "extras": res.extras,
                    "failures": res.failures, "tokens": len(comp.token_ids), "finish_reason": comp.finish_reason,
                    "advantage": float(batch.advantages[i, 0]) if batch.advantages is not None and
                    batch.advantages.shape[1] else None}, default=str) + "\n")

    # ------------------------------------------------------------------------------------------------ eval
    @torch.no_grad()
    def evaluate(self, k: int | None = None) -> EvalResult | None:
        """Held-out pass@1 (with standard error), pass@k, maj@k and length on the eval split; None when it is empty.

        Sampling uses its own seeded RNG stream (the training RNG is saved and restored), so an eval never changes the
        training run's numbers.
        """
        ev = self.recipe.eval
        if not self.prompt_set.eval:
            return None
        return run_eval(self.rollout_engine, self.tokenizer, self.prompt_set.eval, self.reward_fn, self.solved_label,
                        k=k or ev.k, temperature=ev.temperature,
                        max_new_tokens=ev.max_new_tokens or self.recipe.rollout.max_new_tokens,
                        top_p=self.recipe.rollout.top_p, top_k=self.recipe.rollout.top_k, seed=ev.seed,
                        rank=self.dist.rank, world_size=self.dist.world_size)

    def _budget_spent(self, tokens: int) -> bool:
        budget = self.recipe.trainer.max_tokens_generated
        return budget is not None and tokens >= budget

    def _finished(self) -> bool:
        """``trainer.steps`` done, or the generated-token budget spent (same on every rank: the count is reduced)."""
        return self.step_done >= self.recipe.trainer.steps or self._budget_spent(self.tokens_generated)

    # ------------------------------------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """Run the remaining steps with an eval before the first and after the last; returns the summary."""
        r = self.recipe
        start_time = time.perf_counter()
        if r.eval.enabled and self.eval_before is None:
            k_eval = 1 if r.eval.temperature == 0 else r.eval.k
            with phase(f"eval before training: {len(self.prompt_set.eval)} prompts x {k_eval}", self.dist.is_main):
                result = self.evaluate()
            self.eval_before = result.as_dict() if result else None
            if self.eval_before:
                self.logger.log(0, {f"eval/{k}": v for k, v in self.eval_before.items()})
        progress = TrainProgress(total=r.trainer.steps, done=self.step_done, enabled=self.dist.is_main,
                                 token_budget=r.trainer.max_tokens_generated)
        if self.dist.is_main and not self._finished():
            print(f"training: {r.trainer.steps - self.step_done} step(s) of {r.rollout.prompts_per_step} prompts x "
                  f"{r.rollout.group_size} samples; the first step line comes after step {self.step_done + 1}'s "
                  f"rollout, verify and update", file=sys.stderr, flush=True)
        with progress:
            while not self._finished():
                metrics = self.step()
                step, last = self.step_done, self._finished()
                if r.eval.enabled and r.eval.every and step % r.eval.every == 0 and not last:
                    res = self.evaluate()
                    if res:
                        metrics.update({f"eval/{k}": v for k, v in res.as_dict().items()})
                self.logger.log(step, metrics)
                progress.update(step, metrics, self.failure_reasons)
                if r.trainer.save_every and step % r.trainer.save_every == 0 and not last:
                    self.save()
        if self.step_done < r.trainer.steps and self.dist.is_main:
            print(f"token budget spent ({self.tokens_generated:,} of trainer.max_tokens_generated="
                  f"{r.trainer.max_tokens_generated:,} tokens generated): stopping after step {self.step_done}")
        eval_after = None
        if r.eval.enabled:
            with phase(f"eval after training: {len(self.prompt_set.eval)} prompts x "
                       f"{1 if r.eval.temperature == 0 else r.eval.k}", self.dist.is_main):
                res = self.evaluate()
            eval_after = res.as_dict() if res else None
            if eval_after:
                self.logger.log(self.step_done, {f"eval/{k}": v for k, v in eval_after.items()})
        final = self.save()
        summary = self._summary(eval_after, time.perf_counter() - start_time, final)
        self.logger.close()
        self.reward_fn.close()
        return summary

    def _summary(self, eval_after: dict | None, seconds: float, final: Path) -> dict[str, Any]:
        summary: dict[str, Any] = {"steps": self.step_done, "wall_time_s": round(seconds, 1),
                                   "tokens_generated": self.tokens_generated, "final_checkpoint": str(final),
                                   "model": str(final / "model"), "eval_before": self.eval_before,
                                   "eval_after": eval_after}
        b, a = self.eval_before, eval_after
        if b and a:
            diff = a["pass_at_1"] - b["pass_at_1"]
            se = math.sqrt(a["pass_at_1_se"] ** 2 + b["pass_at_1_se"] ** 2)
            summary.update(pass_at_1_change=diff, pass_at_1_change_se=se,
                           pass_at_1_change_z=diff / se if se > 0 else float("nan"))
        if self.dist.is_main:
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
            self._plot()
        return summary


def _select_groups(batch: RolloutBatch, keep: torch.Tensor) -> RolloutBatch:
    """The batch restricted to the groups where ``keep`` (B,) is True."""
    g = batch.group_size
    groups = [i for i, k in enumerate(keep.tolist()) if k]
    rows = [i * g + j for i in groups for j in range(g)]
    return RolloutBatch(prompts=[batch.prompts[i] for i in groups], completions=[batch.completions[i] for i in rows],
                        group_size=g, texts=[batch.texts[i] for i in rows],
                        reward_results=[batch.reward_results[i] for i in rows], rewards=batch.rewards[rows],
                        solved=batch.solved[rows], valid=batch.valid[rows])


def _concat(parts: list[RolloutBatch]) -> RolloutBatch:
    g = parts[0].group_size
    return RolloutBatch(
        prompts=[p for b in parts for p in b.prompts], completions=[c for b in parts for c in b.completions],
        group_size=g, texts=[t for b in parts for t in b.texts],
        reward_results=[x for b in parts for x in b.reward_results],
        rewards=torch.cat([b.rewards for b in parts]), solved=torch.cat([b.solved for b in parts]),
        valid=torch.cat([b.valid for b in parts]))
