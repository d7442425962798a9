"""What the trainers share: the run's resume point and its checks, seeding, the precision choice (replayed on
resume) and how a model worker is built. :class:`rlvr.trainer.trainer.RLTrainer` (rollouts, rewards) and
:class:`rlvr.trainer.stage_trainer.StageTrainer` (SFT, DPO: batches read from data) are both this plus their step.
"""

from __future__ import annotations

import json
import random
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.config import check_resumed_recipe
from rlvr.models.precision import PrecisionChoice, choose_precision, matmul_shape
from rlvr.runs import checkpoint as ckpt
from rlvr.runs.metrics import check_metrics_before_resume
from rlvr.runtime.distributed import DistInfo
from rlvr.trainer.workers import MicroBatchPlan, ModelWorker


class TrainerBase:
    """The parts of a trainer that do not depend on where its batches come from. A subclass sets ``recipe``,
    ``run_dir`` and ``dist`` before calling :meth:`_find_resume`, and ``model``, ``tokenizer`` and
    ``autocast_dtype`` before :meth:`_worker`."""

    recipe: Any
    run_dir: Path
    dist: DistInfo
    model: torch.nn.Module
    tokenizer: Any
    autocast_dtype: torch.dtype | None
    _resume_path: Path | None = None

    def _find_resume(self, resume: bool, resume_from: str | Path | None,
                     allow_changed: tuple[str, ...] | list[str]) -> None:
        """Set ``_resume_path`` (``resume_from``'s checkpoint, the newest with ``resume``, else None) and check, before
        any model loads, that the recipe is the run's own (but for ``allow_changed``), that ``metrics.jsonl`` reads
        (a torn last line dropped) and that the checkpoint is whole.

        Raises:
            FileNotFoundError: ``resume`` without a finished checkpoint. RecipeError: a changed recipe.
        """
        self._resume_path = None
        if resume_from is not None:
            self._resume_path = ckpt.find_checkpoint(self.run_dir, resume_from)
        elif resume:
            self._resume_path = ckpt.latest_checkpoint(self.run_dir)
            if self._resume_path is None:
                raise FileNotFoundError(f"--resume: {self.run_dir} has no finished checkpoint (the run stopped before "
                                        f"its first one): start it again with --overwrite")
        saved = self.run_dir / "recipe.resolved.yaml"
        if self._resume_path is not None and saved.is_file():
            check_resumed_recipe(saved.read_text(), self.recipe, allow_changed)
        elif self._resume_path is not None and self.dist.is_main:
            print(f"warning: {self.run_dir} has no recipe.resolved.yaml, so the recipe given cannot be checked against "
                  f"the run's: resuming with it (and saving it as the run's recipe)", file=sys.stderr)
        if self._resume_path is not None:  # a torn last line dropped, any other bad line named, before the model loads
            check_metrics_before_resume(self.run_dir, self.dist.is_main)
            ckpt.check_checkpoint(self._resume_path, self.run_dir)  # every file there and of its size

    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def _choose_precision(self) -> PrecisionChoice:
        """``trainer.precision`` resolved for this rank's device and the policy's shape. ``auto`` on CPU ranks is
        measured on rank 0 once and broadcast, so every rank trains and generates in the same precision."""
        r = self.recipe
        replayed = self._precision_of_the_run()
        if replayed is not None:
            return replayed
        choose = partial(choose_precision, r.trainer.precision, self.dist.device, matmul_shape(self.model))
        if self.dist.world_size == 1 or self.dist.device.type != "cpu" or r.trainer.precision != "auto":
            return choose()
        box = [choose() if self.dist.is_main else None]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def _precision_of_the_run(self) -> PrecisionChoice | None:
        """On resume with ``trainer.precision: auto``, the precision the run measured and chose at its start (saved in
        each checkpoint), not a new measurement: a measured choice must not change the numbers the run gives."""
        if self._resume_path is None or self.recipe.trainer.precision != "auto":
            return None
        try:
            saved = json.loads((self._resume_path / "trainer_state.json").read_text()).get("precision")
        except (OSError, ValueError):
            return None
        if not (isinstance(saved, dict) and saved.get("training") in ("bf16", "fp32")
                and saved.get("generation") in ("bf16", "fp32")):
            return None
        return PrecisionChoice(saved["training"], f"precision auto: training {saved['training']}, generation "
                               f"{saved['generation']}, as the run chose at its start ({self._resume_path.name})",
                               saved["generation"])

    @property
    def sampling_temperature(self) -> float:
        """The temperature log-probs are taken at: the rollouts' (RL), 1 for data (SFT, DPO)."""
        rollout = getattr(self.recipe, "rollout", None)
        return rollout.temperature if rollout is not None else 1.0

    def _worker(self, model: torch.nn.Module, engine: Any, worker: type[ModelWorker] = ModelWorker,
                unit: int = 1, packed_cost: bool = False) -> ModelWorker:
        """A worker of ``model`` with the recipe's micro-batch plan (``unit`` rows that stay together: a preference
        pair; ``packed_cost``: a token budget counts the packed tokens, not rows x longest)."""
        r = self.recipe
        return worker(model, engine, dist=self.dist, pad_id=int(self.tokenizer.pad_token_id),
                      plan=MicroBatchPlan(r.optim.micro_batch_size, r.optim.micro_batch_tokens, r.trainer.zero_stage,
                                          unit=unit, packed_cost=packed_cost),
                      temperature=self.sampling_temperature, autocast_dtype=self.autocast_dtype,
                      gradient_checkpointing=r.model.gradient_checkpointing)
