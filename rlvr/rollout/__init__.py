"""Rollout engines: ``hf`` (transformers generate, any device) and ``vllm`` (colocated vLLM, optional)."""

from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams

__all__ = ["Completion", "RolloutEngine", "SamplingParams"]
