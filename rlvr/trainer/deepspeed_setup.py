"""Building a DeepSpeed engine for a trainable model: optimizer, LR schedule and the ZeRO config.

Every trainable worker (the policy; later the critic) gets its engine from :func:`build_engine`, so they share one set
of
DeepSpeed conventions: we call ``backward()`` once per micro-batch on a loss already normalised by the mini-batch's
global count and ``step()`` once per mini-batch, so DeepSpeed must neither rescale nor step on its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from rlvr.config import OptimConfig, TrainerConfig
from rlvr.config.loading import deep_merge


def lr_lambda(optim: OptimConfig, total_optimizer_steps: int) -> Callable[[int], float]:
    """The LR multiplier per optimizer step: linear warm-up over ``optim.warmup_steps``, then ``optim.schedule``
    (``linear`` to 0, ``cosine`` to 0, or constant) over the remaining ``total_optimizer_steps``."""

    def multiplier(opt_step: int) -> float:
        if optim.warmup_steps and opt_step < optim.warmup_steps:
            return (opt_step + 1) / optim.warmup_steps
        total = max(total_optimizer_steps - optim.warmup_steps, 1)
        progress = min(max(opt_step - optim.warmup_steps, 0) / total, 1.0)
        if optim.schedule == "linear":
            return 1.0 - progress
        if optim.schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return multiplier


def build_engine(model: torch.nn.Module, optim: OptimConfig, trainer: TrainerConfig,
                 total_optimizer_steps: int) -> Any:
    """``deepspeed.initialize`` on ``model`` with a torch AdamW (or DeepSpeed's CPU Adam with
    ``trainer.offload_optimizer``: a config ``AdamW`` would compile an extension for ~40 s), the LR schedule of
    :func:`lr_lambda`, and ``trainer.deepspeed_config`` merged over our defaults. Returns the engine."""
    import deepspeed

    params = [p for p in model.parameters() if p.requires_grad]
    if trainer.offload_optimizer:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        optimizer = DeepSpeedCPUAdam(params, lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay)
    else:
        # fused: one kernel over all parameters; on CPU ~7x faster than the default per-tensor loop (SmolLM2-135M,
        # 1 thread: 0.42 s vs 2.84 s a step, benchmarks/RESULTS.md)
        fused = all(p.device.type in ("cpu", "cuda") for p in params)
        optimizer = torch.optim.AdamW(params, lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay,
                                      fused=fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(optim, total_optimizer_steps))
    zero: dict[str, Any] = {"stage": trainer.zero_stage}
    if trainer.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    ds_config = {
        "train_micro_batch_size_per_gpu": optim.micro_batch_size,
        "gradient_accumulation_steps": 1,
        # we call backward() once per micro-batch with loss already normalised by the mini-batch's global token/
        # sample count, then step() once per mini-batch: DeepSpeed must not rescale or step on its own
        "managed_gradient_accumulation": False,
        # inf at stage 0 without clipping: DeepSpeed then still computes the norm that train/grad_norm reports
        "gradient_clipping": optim.grad_clip or (float("inf") if trainer.zero_stage == 0 else 0.0),
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    ds_config = deep_merge(ds_config, trainer.deepspeed_config)
    forget_stale_deepspeed_groups()
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
    if trainer.zero_stage == 0:
        record_grad_norm_without_zero(engine)
        if engine.dp_world_size == 1:
            # one rank has nothing to average, but DeepSpeed's step still flattens every gradient into one buffer,
            # all-reduces it over the 1-rank group and copies it back (SmolLM2-135M, AMD EPYC, 2 threads: the step
            # 0.9-1.2 s with it, 0.12-0.18 s without)
            engine.enable_backward_allreduce = False
    return engine


def forget_stale_deepspeed_groups() -> None:
    """Drop the process groups DeepSpeed cached (module globals of ``deepspeed.utils.groups``) that torch.distributed
    no longer knows.

    A ``vllm.LLM`` dropped in this process destroys torch.distributed's default group, and the next one creates a new
    one; a DeepSpeed engine built after that would reuse the groups cached by an earlier engine, which belong to the
    destroyed world, and fail with "Group ... is not registered". Groups still registered are kept, so nothing changes
    for a process with one world.
    """
    import torch.distributed as dist
    from deepspeed.utils import groups

    if not dist.is_available() or not dist.is_initialized():
        return
    registered = dist.distributed_c10d._world.pg_group_ranks
    for name, value in list(vars(groups).items()):
        if isinstance(value, dist.ProcessGroup) and value not in registered:
            setattr(groups, name, None)


def record_grad_norm_without_zero(engine: object) -> None:
    """Make ``engine.get_global_grad_norm()`` answer at ZeRO stage 0, where DeepSpeed computes the norm while clipping
    but does not keep it (``DeepSpeedEngine.clip_fp32_gradients``); with ZeRO 1-3 its optimizer keeps it already.

    Needs ``gradient_clipping > 0`` in the DeepSpeed config (use ``inf`` to measure without clipping). The norm is of
    the gradients after the reduction over ranks, so it is the same on every rank and equal to a 1-rank run's.
    """
    from deepspeed.runtime.utils import clip_grad_norm_

    def clip_and_record() -> None:
        norm = clip_grad_norm_(parameters=engine.module.parameters(), max_norm=engine.gradient_clipping(),
                               mpu=engine.mpu)
        engine._global_grad_norm = float(norm)

    engine.clip_fp32_gradients = clip_and_record
