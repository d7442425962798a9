"""How completions are sampled: the rollout engines, ``hf`` (rlvr's decode loop over a transformers model, any device)
and ``vllm`` (colocated vLLM, optional), their choice and builder (:mod:`.choice`), and multi-turn rollouts with tools
(:mod:`.multi_turn`, the turn loop; :mod:`.tool_sampler`, a recipe's prompts through it)."""

from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams

__all__ = ["Completion", "RolloutEngine", "SamplingParams"]
