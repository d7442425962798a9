"""The stages trained on fixed data: supervised fine-tuning (``rlvr sft``) and direct preference optimisation (``rlvr
dpo``: DPO, cDPO, IPO), on the RL trainer's run loop (:class:`rlvr.trainer.run.TrainingRun`: evaluations, budgets,
checkpoints, plots, the summary), model workers, update loop and checkpoint format. Only the step differs: a batch is
read from the data (:mod:`rlvr.trainer.stage_batches`) instead of sampled and scored, and the loss is the recipe's row
of :data:`rlvr.algo.table.OBJECTIVES` (:mod:`rlvr.trainer.stage_objectives`).

Usage::

    from rlvr.config import load_stage_recipe
    from rlvr.trainer.stage_trainer import StageTrainer

    trainer = StageTrainer(load_stage_recipe("recipes/sft_tool_demo.yaml", "sft"), run_dir=Path("runs/sft"))
    summary = trainer.train()          # held-out loss before/after, checkpoints, metrics.jsonl, plots

A step: the next ``examples_per_step`` examples (or ``pairs_per_step`` pairs) of a seeded epoch order, this rank's
share of them, one optimizer step over its micro-batches (``optim.micro_batch_size`` rows, ``optim.micro_batch_tokens``
packed tokens; a pair never split). DPO's reference log-probs are computed once before the first step, from the policy
as it starts (LoRA: the adapters off; or ``algorithm.reference``'s model, freed after), and stored in the run
(``reference_logprobs.pt``): no second model is resident while training. A resumed run continues the data order where
the checkpoint left it, so it gives the same numbers as one that never stopped.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.algo.table import OBJECTIVES
from rlvr.config import StageRecipe, dump_recipe
from rlvr.curriculum.epoch_sampler import EpochSampler
from rlvr.data.pair_examples import PairExample, PairSplit, build_pair_examples
from rlvr.data.prompts import Prompt
from rlvr.data.sft_examples import ExampleSplit, build_sft_examples
from rlvr.models.loading import (
    generation_eos_ids,
    load_causal_lm,
    load_tokenizer,
    resolve_model_path,
    use_fast_layers,
)
from rlvr.models.lora import apply_lora
from rlvr.models.precision import announce_precision
from rlvr.runs import checkpoint as ckpt
from rlvr.runs.evaluation import run_eval
from rlvr.runs.metrics import MetricsLogger
from rlvr.runs.plots import STAGE_PANELS
from rlvr.runtime.atomic import atomic_open, atomic_write_text, remove_leftovers
from rlvr.runtime.distributed import DistInfo, all_gather_objects, all_reduce_max, init_distributed
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.deepspeed_setup import build_engine
from rlvr.trainer.progress import phase
from rlvr.trainer.run import StepResult, TrainingRun
from rlvr.trainer.stage_batches import pair_batch, sft_batch
from rlvr.trainer.stage_objectives import PreferenceObjective, SFTObjective, both_fell
from rlvr.trainer.stages import StageTimer
from rlvr.trainer.trainer_base import TrainerBase
from rlvr.trainer.update_loop import Denominators, run_update
from rlvr.trainer.workers import AdapterOffWorker, ModelWorker

REFERENCE_FILE = "reference_logprobs.pt"
"""The run's stored reference log-probs (DPO): ``{"fingerprint", "train": (2P,), "eval": (2Q,)}`` float64."""
CHUNK = 64
"""Examples (or pairs) per batch of a pass without gradient (held-out loss, reference log-probs); the workers split
each into micro-batches."""
WARN_EVERY = 10
"""While the chosen and rejected log-probs both stay below the reference's, the warning repeats every this many
steps."""


@dataclass
class StageEval:
    """A held-out evaluation: the loss (SFT: token-mean NLL; DPO: the preference loss and its statistics, accuracy
    among them) and, with verifiers, the generation eval's pass@1 and the rest of :class:`EvalResult`."""

    values: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)


class StageTrainer(TrainerBase):
    """SFT or a preference loss on the recipe's data, in the RL trainer's loop (see the module docstring).

    Args:
        recipe: a validated :class:`rlvr.config.SFTRecipe` or :class:`rlvr.config.DPORecipe`.
        run_dir: where metrics, plots, checkpoints, the resolved recipe (and DPO's reference log-probs) go.
        resume, resume_from, allow_changed: as :class:`rlvr.trainer.trainer.RLTrainer`.
    Raises:
        RecipeError (resume with a changed recipe), DataError / MaskError (a row, named), ModelLoadError,
        FileNotFoundError (resume without checkpoint), ValueError (a batch that does not split over the ranks): all
        before the model is loaded.
    """

    def __init__(self, recipe: StageRecipe, run_dir: Path, resume: bool = False,
                 resume_from: str | Path | None = None, allow_changed: tuple[str, ...] | list[str] = ()) -> None:
        self.recipe, self.run_dir = recipe, Path(run_dir)
        r = recipe
        self.row = OBJECTIVES[r.algorithm.name]
        self.pairs = self.row.data == "pairs"
        with phase("distributed set-up (DeepSpeed)", int(os.environ.get("RANK", "0")) == 0, quiet_below_s=5.0):
            self.dist: DistInfo = init_distributed()
        self._seed_everything(r.seed + self.dist.rank)
        self.per_step = r.data.pairs_per_step if self.pairs else r.data.examples_per_step
        what = "data.pairs_per_step" if self.pairs else "data.examples_per_step"
        if self.per_step % self.dist.world_size:
            raise ValueError(f"{what}={self.per_step} must be divisible by the number of ranks "
                             f"({self.dist.world_size}): each rank trains on an equal share")
        if r.verifiers and r.eval.enabled and r.trainer.zero_stage == 3 and self.dist.world_size > 1:
            # the generation eval decodes with the hf engine, one forward per token, and ranks stop at different
            # steps: under ZeRO-3 every forward is a parameter gather, so they would wait on each other forever
            raise ValueError("the generation eval (verifiers) with trainer.zero_stage=3 on several ranks would hang: "
                             "remove verifiers (the held-out loss still runs) or use trainer.zero_stage <= 2; "
                             "evaluate the run afterwards with `rlvr eval RUN --recipe RL_RECIPE`")
        self._find_resume(resume, resume_from, allow_changed)

        # the data and its masks first (every bad row named), the model last
        if r.trainer.num_threads:
            torch.set_num_threads(r.trainer.num_threads)
        self.model_path = resolve_model_path(r.model.name)
        self.tokenizer = load_tokenizer(self.model_path, r.model)
        self.eos_ids = generation_eos_ids(self.model_path, self.tokenizer, r.model)
        with phase("tokenizing the data and its loss masks", self.dist.is_main, quiet_below_s=5.0):
            self.data: ExampleSplit | PairSplit = (
                build_pair_examples(r.data, self.tokenizer, self.eos_ids, r.seed) if self.pairs
                else build_sft_examples(r.data, self.tokenizer, self.eos_ids, r.seed))
        self._announce_data()
        self.reward_fn = self._reward_pool()
        try:
            self._build_models()
        except BaseException:
            if self.reward_fn is not None:
                self.reward_fn.close()
            raise
        self.sampler = EpochSampler(len(self.data.train), r.seed)
        self.step_done = 0
        self.tokens_generated = 0  # nothing is sampled in training; the run loop reads the count
        self.resumed_state: dict[str, Any] | None = None
        self._fell_since: int | None = None
        self._closed = False
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.dist.is_main:
            remove_leftovers(self.run_dir)
        self.logger = MetricsLogger(self.run_dir, enabled=self.dist.is_main, wandb=r.logging.wandb,
                                    config=r.model_dump(mode="json") if r.logging.wandb is not None else None)
        if self.dist.is_main:
            atomic_write_text(self.run_dir / "recipe.resolved.yaml", dump_recipe(r))
        if self.pairs:
            self.reference = self._reference_logprobs()
        if self._resume_path is not None:
            self._resume(self._resume_path)

    # ------------------------------------------------------------------------------------------------ set-up
    def _announce_data(self) -> None:
        d, r = self.data, self.recipe
        if not self.dist.is_main:
            return
        unit = "pairs" if self.pairs else "examples"
        dropped = f", {d.dropped} dropped as longer than data.max_length={r.data.max_length}" if d.dropped else ""
        epochs = r.trainer.steps * self.per_step / len(d.train)
        extra = ""
        if not self.pairs:
            learned = sum(e.trained_tokens for e in d.train)
            total = sum(len(e.ids) for e in d.train)
            extra = f"; {learned:,} of {total:,} training tokens are learned (the rest is prompt, tool and template)"
        print(f"{self.row.name}: {len(d.train)} training and {len(d.eval)} held-out {unit}{dropped}; "
              f"{r.trainer.steps} steps x {self.per_step} = {epochs:.2f} epochs{extra}", file=sys.stderr, flush=True)

    def _reward_pool(self) -> Any:
        """The verifiers of the generation eval (a worker pool), or None without verifiers."""
        r = self.recipe
        if not r.verifiers or not r.eval.enabled:
            return None
        from rlvr.runs.verifier_inputs import check_verifier_kwargs
        from rlvr.verifiers.registry import get_verifier
        from rlvr.verifiers.reward import RewardFunction, VerifierSpec

        specs = [VerifierSpec(name=v.name, weight=v.weight, kwargs=dict(v.kwargs), timeout_s=v.timeout_s,
                              memory_mb=v.memory_mb) for v in r.verifiers]
        for spec in specs:
            check_verifier_kwargs(spec.name, get_verifier(spec.name), spec.kwargs)
        return RewardFunction(specs, num_workers=min(2, os.cpu_count() or 1), failure_score=None)

    def _build_models(self) -> None:
        r = self.recipe
        with phase(f"loading the policy from {self.model_path} onto {self.dist.device}", self.dist.is_main):
            self.model = load_causal_lm(self.model_path, r.model).to(self.dist.device)
            if r.model.lora is not None:  # adapters train; the base weights stay frozen (and are the reference)
                self.model = apply_lora(self.model, r.model.lora, base_name=r.model.name).to(self.dist.device)
            use_fast_layers(self.model, self.dist.device)
        self.precision = self._choose_precision()
        if self.dist.is_main:
            announce_precision(self.precision)
        self.autocast_dtype = self.precision.autocast_dtype
        with phase(f"DeepSpeed engine (ZeRO-{r.trainer.zero_stage}, {self.dist.world_size} rank(s))",
                   self.dist.is_main):
            self.engine = build_engine(self.model, r.optim, r.trainer, r.trainer.steps)
        self.policy = self._worker(self.model, self.engine, unit=2 if self.pairs else 1, packed_cost=True)
        self.generator = None
        if self.reward_fn is not None:
            from rlvr.rollout.hf import HFRolloutEngine

            self.generator = HFRolloutEngine(self.model, self.tokenizer, self.eos_ids,
                                             autocast_dtype=self.precision.generation_dtype)

    # ------------------------------------------------------------------------------------------------ reference
    def _fingerprint(self) -> str:
        """What the stored reference log-probs depend on: the reference model and every pair's ids."""
        r = self.recipe
        h = hashlib.sha256(json.dumps([r.model.name, r.algorithm.reference, self.model_path]).encode())
        for split in (self.data.train, self.data.eval):
            for p in split:
                h.update(json.dumps([p.prompt_ids, p.chosen_ids, p.chosen_mask, p.rejected_ids,
                                     p.rejected_mask]).encode())
        return h.hexdigest()

    def _reference_logprobs(self) -> dict[str, torch.Tensor]:
        """The reference policy's summed log-probs of every response, ``{"train": (2P,), "eval": (2Q,)}`` float64:
        read from the run's file when it was computed for these pairs and this reference, else computed (each rank a
        share, then gathered) and written there."""
        path = self.run_dir / REFERENCE_FILE
        fingerprint = self._fingerprint()
        if path.is_file():
            saved = torch.load(path, weights_only=True)
            if saved.get("fingerprint") == fingerprint:
                return {"train": saved["train"], "eval": saved["eval"]}
        r = self.recipe
        source = r.algorithm.reference or (f"{r.model.name} as training starts" +
                                           (" (adapters off)" if r.model.lora is not None else ""))
        with phase(f"reference log-probs of {len(self.data.train) + len(self.data.eval)} pairs from {source}",
                   self.dist.is_main):
            if r.algorithm.reference is None:
                cls = AdapterOffWorker if r.model.lora is not None else ModelWorker
                worker = self._worker(self.model, None, worker=cls, unit=2, packed_cost=True)
                out = {s: self._sequence_logprobs(worker, getattr(self.data, s)) for s in ("train", "eval")}
            else:
                ref_cfg = r.model.model_copy(update={"lora": None, "gradient_checkpointing": False})
                ref = load_causal_lm(resolve_model_path(r.algorithm.reference), ref_cfg).to(self.dist.device).eval()
                ref.requires_grad_(False)
                use_fast_layers(ref, self.dist.device)
                worker = self._worker(ref, None, unit=2, packed_cost=True)
                out = {s: self._sequence_logprobs(worker, getattr(self.data, s)) for s in ("train", "eval")}
                del worker, ref
                gc.collect()
        if self.dist.is_main:
            with atomic_open(path, "wb") as fh:
                torch.save({"fingerprint": fingerprint, **out}, fh)
        return out

    def _sequence_logprobs(self, worker: ModelWorker, pairs: list[PairExample]) -> torch.Tensor:
        """(2 x len(pairs),) float64 summed log-probs of each response (chosen, rejected alternating) under
        ``worker``'s model, no gradient; each rank computes every world-size-th pair, then all ranks gather."""
        mine = list(range(self.dist.rank, len(pairs), self.dist.world_size))
        values: list[tuple[int, float, float]] = []
        for start in range(0, len(mine), CHUNK):
            chunk = mine[start:start + CHUNK]
            batch = pair_batch([pairs[i] for i in chunk], int(self.tokenizer.pad_token_id))
            seq = (worker.logprobs(batch).double() * batch.response_mask.double()).sum(1)
            values += [(i, float(seq[2 * k]), float(seq[2 * k + 1])) for k, i in enumerate(chunk)]
        out = torch.zeros(2 * len(pairs), dtype=torch.float64)
        for part in all_gather_objects(values):
            for i, c, rej in part:
                out[2 * i], out[2 * i + 1] = c, rej
        return out

    # ------------------------------------------------------------------------------------------------ the step
    def describe_step(self) -> str:
        """The start line's description of one step."""
        unit = "pairs" if self.pairs else "examples"
        return f"{self.row.name}: {self.recipe.trainer.steps - self.step_done} step(s) of {self.per_step} {unit}"

    def _my_share(self, indices: list[int]) -> list[int]:
        """This rank's contiguous share of a step's ``indices``."""
        n = len(indices) // self.dist.world_size
        return indices[self.dist.rank * n:(self.dist.rank + 1) * n]

    def step(self) -> StepResult:
        """One optimizer step on the next batch of the data; returns its metrics."""
        timer = StageTimer()
        r = self.recipe
        picked = self._my_share(self.sampler.sample(self.per_step))
        pad = int(self.tokenizer.pad_token_id)
        with timer("batch"):
            if self.pairs:
                batch = pair_batch([self.data.train[i] for i in picked], pad)
                objective = self._objective(self.reference["train"].view(-1, 2)[picked].reshape(-1))
            else:
                batch = sft_batch([self.data.train[i] for i in picked], pad)
                objective = self._objective(None)
        with timer("update"):
            sums = run_update(self.policy, batch, objective, epochs=1, mini_batches=1,
                              seed=r.seed * 1_000_003 + self.step_done, world_size=self.dist.world_size)
        self.step_done += 1
        metrics = objective.metrics(sums)
        opt_steps = max(sums.get("opt_steps", 1.0), 1.0)
        metrics.update({"train/grad_norm": sums.get("grad_norm", 0.0) / opt_steps, "train/lr": self.policy.lr(),
                        "train/epoch": self.step_done * self.per_step / len(self.data.train)})
        metrics.update({f"time/{k}_s": v for k, v in timer.seconds.items()})
        if self.pairs:
            self._warn_if_both_fell(metrics, "train", self.step_done)
        return StepResult(metrics)

    def _objective(self, ref_logps: torch.Tensor | None) -> SFTObjective | PreferenceObjective:
        """The recipe's objective on the policy; a preference loss against ``ref_logps`` (N,) of the batch's rows."""
        a = self.recipe.algorithm
        if not self.pairs:
            return SFTObjective(self.policy)
        return PreferenceObjective(self.policy, a.name, {k: getattr(a, k) for k in self.row.settings}, beta=a.beta,
                                   nll_weight=a.nll_weight, ref_logps=ref_logps)

    def _warn_if_both_fell(self, metrics: dict[str, float], prefix: str, step: int) -> None:
        """Print a warning when the chosen and the rejected responses' log-probs both fell below the reference's (at
        the first such step, then every :data:`WARN_EVERY` steps while it lasts; always for a held-out eval)."""
        fell = both_fell(metrics, prefix)
        metrics[f"{prefix}/both_logps_fell"] = float(fell)
        if not fell:
            if prefix == "train":
                self._fell_since = None
            return
        if prefix == "train":
            if self._fell_since is not None and (step - self._fell_since) % WARN_EVERY:
                return
            self._fell_since = self._fell_since if self._fell_since is not None else step
        if self.dist.is_main:
            dc = metrics[f"{prefix}/logps_chosen"] - metrics[f"{prefix}/ref_logps_chosen"]
            dr = metrics[f"{prefix}/logps_rejected"] - metrics[f"{prefix}/ref_logps_rejected"]
            where = "held-out" if prefix == "eval" else "training"
            print(f"warning: step {step}: on the {where} pairs the chosen responses' log-prob fell too ({dc:+.2f} nats "
                  f"per response against the reference), with the rejected ones' ({dr:+.2f}): the margin grows while "
                  "the policy moves probability off both onto text neither holds (a known DPO failure). A larger "
                  "algorithm.beta, a lower optim.lr or algorithm.nll_weight > 0 (RPO) keep the chosen responses up",
                  file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------------------------------ evaluation
    @property
    def can_evaluate(self) -> bool:
        """Whether there is a held-out split to evaluate on."""
        return bool(self.data.eval)

    @property
    def eval_size(self) -> int:
        return len(self.data.eval)

    def eval_description(self) -> str:
        unit = "pairs" if self.pairs else "examples"
        gen = f", generation of {len(self._eval_prompts())} prompts" if self.generator is not None else ""
        return f"{len(self.data.eval)} held-out {unit}{gen}"

    @torch.no_grad()
    def evaluate(self, k: int | None = None) -> StageEval | None:
        """The held-out loss (and DPO's preference statistics) over every held-out example, each rank a share, and
        with verifiers the generation eval (pass@1 of the held-out prompts); None without a held-out split. The
        training RNG is not touched."""
        if not self.data.eval:
            return None
        pad = int(self.tokenizer.pad_token_id)
        mine = list(range(self.dist.rank, len(self.data.eval), self.dist.world_size))
        sums: dict[str, float] = {}

        def add(key: str, value: float) -> None:
            sums[key] = sums.get(key, 0.0) + value

        chunks = [mine[i:i + CHUNK] for i in range(0, len(mine), CHUNK)]
        # ZeRO-3 over several ranks: every rank runs as many passes (an empty chunk joins the others' gathers)
        chunks += [[] for _ in range(_max_over_ranks(len(chunks)) - len(chunks))]
        objective = self._objective(torch.zeros(0))
        for chunk in chunks:
            if not chunk:
                self.policy.join_logprobs()
                continue
            if self.pairs:
                batch = pair_batch([self.data.eval[i] for i in chunk], pad)
                objective.ref_logps = self.reference["eval"].view(-1, 2)[chunk].reshape(-1)
            else:
                batch = sft_batch([self.data.eval[i] for i in chunk], pad)
            lp = self.policy.logprobs(batch)  # (N, T) with the idle passes other ranks need
            _eval_pass(objective, batch, lp, add)
        metrics = objective.metrics(sums, prefix="eval")
        if self.pairs:
            self._warn_if_both_fell(metrics, "eval", self.step_done)
        values = {key.removeprefix("eval/"): v for key, v in metrics.items()}
        if self.generator is not None:
            values.update(self._generation_eval(k))
        return StageEval(values)

    def _eval_prompts(self) -> list[Prompt]:
        """The held-out prompts of the generation eval: each held-out example's prompt before its last learned turn;
        each held-out prompt of the pairs once."""
        out: list[Prompt] = []
        if self.pairs:
            seen: set[int] = set()
            for p in self.data.eval:
                if p.group not in seen:
                    seen.add(p.group)
                    out.append(Prompt(len(out), p.row, self.tokenizer.decode(p.prompt_ids), p.prompt_ids))
        else:
            out = [Prompt(e.index, e.row, self.tokenizer.decode(e.prompt_ids), e.prompt_ids) for e in self.data.eval]
        limit = self.recipe.eval.max_prompts
        return out[:limit] if limit is not None else out

    def _generation_eval(self, k: int | None) -> dict[str, Any]:
        ev = self.recipe.eval
        self.generator.sync_weights(self.model)
        result = run_eval(self.generator, self.tokenizer, self._eval_prompts(), self.reward_fn,
                          self.recipe.solved_verifier, k=k or ev.k, temperature=ev.temperature,
                          max_new_tokens=ev.max_new_tokens, seed=ev.seed, rank=self.dist.rank,
                          world_size=self.dist.world_size)
        return result.as_dict()

    # ------------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The trainer's own state in a checkpoint: the step, the data order and the precision chosen."""
        return {"step": self.step_done, "sampler": self.sampler.state_dict(), "tokens_generated": 0,
                "precision": {"training": self.precision.name, "generation": self.precision.generation}}

    def _resume(self, path: Path) -> None:
        state = ckpt.load_checkpoint(path, self.engine, self.dist.rank,
                                     adapters_only=self.recipe.model.lora is not None)
        self.step_done = int(state["step"])
        self.sampler.load_state_dict(state["sampler"])
        self.resumed_state = state
        if self.generator is not None:
            self.generator.sync_weights(self.model)
        self.logger.truncate_after(self.step_done)
        dropped = ckpt.discard_checkpoints_after(self.run_dir, self.step_done, self.dist.rank)
        if self.dist.is_main:
            later = f" (deleted the later checkpoints {', '.join(p.name for p in dropped)})" if dropped else ""
            print(f"resumed from {path} at step {self.step_done}{later}")

    def save(self, run_state: dict[str, Any] | None = None, final: bool = False) -> Path:
        """Checkpoint the current step (atomic), as :meth:`rlvr.trainer.trainer.RLTrainer.save`: a later stage (``rlvr
        train``, ``rlvr dpo``) starts from its ``model/`` by naming the run folder."""
        state = {**self.state_dict(), **(run_state or {})}
        return ckpt.save_checkpoint(self.run_dir, self.step_done, self.engine, self.model, self.tokenizer, state,
                                    keep=self.recipe.trainer.keep_checkpoints, rank=self.dist.rank,
                                    adapters_only=self.recipe.model.lora is not None,
                                    export=final or self.recipe.trainer.export_every_checkpoint)

    @property
    def plot_panels(self) -> list[tuple[str, str, list[str]]]:
        """The panels of ``plots/curves.png``."""
        return STAGE_PANELS

    def train(self) -> dict[str, Any]:
        """Run the remaining steps with an eval before the first and after the last (:class:`TrainingRun`); returns
        the summary."""
        return TrainingRun(self).train()

    def close(self) -> None:
        """Close the metrics logger and the verifier pool (idempotent): the end of a run."""
        if self._closed:
            return
        self._closed = True
        self.logger.close()
        if self.reward_fn is not None:
            self.reward_fn.close()


def _max_over_ranks(n: int) -> int:
    """The largest ``n`` over ranks (a collective every rank calls)."""
    return int(all_reduce_max(float(n)))


def _eval_pass(objective: SFTObjective | PreferenceObjective, batch: RolloutBatch, logprobs: torch.Tensor,
               add: Any) -> None:
    """Accumulate an objective's statistics of a whole batch from its log-probs computed without gradient."""
    idx = list(range(batch.num_samples))
    mask = batch.response_mask
    objective.loss(batch, idx, logprobs, Denominators(tokens=max(float(mask.sum()), 1.0), sequences=float(len(idx))),
                   add)
