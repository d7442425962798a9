"""The trainer's former home, kept so that ``from rlvr.trainer.grpo import GRPOTrainer`` keeps working.

GRPO is one configuration of the one trainer loop (:class:`rlvr.trainer.trainer.RLTrainer`): a group-relative
advantage estimator, no critic. The loop's parts live in modules named after them (see :mod:`rlvr.trainer.trainer`).
"""

from __future__ import annotations

from rlvr.trainer.stages import STAGES, StageTimer
from rlvr.trainer.trainer import RLTrainer

GRPOTrainer = RLTrainer

__all__ = ["GRPOTrainer", "RLTrainer", "STAGES", "StageTimer"]
