"""What a command that samples from a recipe's model without training (``rlvr eval``, ``rlvr filter``) opens first:
rows, verifiers, model path, tokenizer, prompt split and the reward function, with every error raised before a model
is loaded."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.config import Recipe
from rlvr.data.prompts import PromptSet, build_prompt_set
from rlvr.data.sources import load_rows
from rlvr.models import load_tokenizer, resolve_model_path
from rlvr.trainer.grpo import verifier_specs
from verifiers.registry import get_verifier
from verifiers.reward import RewardFunction


@dataclass
class RecipeInputs:
    model_path: str
    tokenizer: Any
    prompt_set: PromptSet
    reward_fn: RewardFunction


@contextmanager
def recipe_inputs(recipe: Recipe) -> Iterator[RecipeInputs]:
    """Load ``recipe``'s rows, check its verifiers exist, resolve its model, set ``trainer.num_threads``, open its
    reward pool (closed on exit) and build the train/eval prompt split with the model's tokenizer.

    Raises:
        DataError, ModelLoadError, UnknownVerifierError: nothing is loaded past the tokenizer then.
    """
    rows = load_rows(recipe.data)
    specs = verifier_specs(recipe)
    for spec in specs:
        get_verifier(spec.name)
    model_path = resolve_model_path(recipe.model.name)
    if recipe.trainer.num_threads:
        torch.set_num_threads(recipe.trainer.num_threads)
    with RewardFunction(specs, num_workers=recipe.reward.num_workers,
                        failure_score=recipe.reward.failure_score) as reward_fn:
        tokenizer = load_tokenizer(model_path, recipe.model)
        yield RecipeInputs(model_path, tokenizer, build_prompt_set(rows, tokenizer, recipe.data, seed=recipe.seed),
                           reward_fn)
