"""The GRPO trainer: composes data, rollout engine, verifiers, advantages, losses and DeepSpeed."""
