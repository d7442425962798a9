"""What the verifiers of a recipe are (with those its algorithm adds) and what each of them sees of a sample."""

from __future__ import annotations

from typing import Any

from rlvr.config import Recipe
from rlvr.data.prompts import Prompt
from rlvr.rollout.base import Completion
from verifiers.reward import VerifierSpec


def verifier_specs(recipe: Recipe) -> list[VerifierSpec]:
    """The recipe's verifiers plus the ones its algorithm adds (DAPO soft overlong punishment)."""
    specs = [VerifierSpec(name=v.name, weight=v.weight, kwargs=dict(v.kwargs), timeout_s=v.timeout_s)
             for v in recipe.verifiers]
    ov = recipe.algorithm.overlong
    if ov.enabled:
        specs.append(VerifierSpec(name="overlong", weight=1.0,
                                  kwargs={"buffer_tokens": ov.buffer_tokens, "penalty": ov.penalty}))
    return specs


def sample_dict(prompt: Prompt, completion: Completion, max_new_tokens: int) -> dict[str, Any]:
    """What a verifier sees: the dataset row, the prompt text and the completion's token facts."""
    return {**prompt.row, "prompt": prompt.text, "completion_tokens": len(completion.token_ids),
            "max_new_tokens": max_new_tokens, "finish_reason": completion.finish_reason}
