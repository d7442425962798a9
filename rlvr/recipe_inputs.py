"""What a command that samples from a recipe's model without training (``rlvr eval``, ``rlvr filter``) opens first:
rows, verifiers, model path, tokenizer, prompt split, reward function (every error raised before a model is loaded), then
the recipe's rollout engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.config import Recipe
from rlvr.data.prompts import PromptSet, build_prompt_set
from rlvr.data.sources import load_rows
from rlvr.models import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path
from rlvr.verifier_inputs import verifier_specs
from verifiers.registry import get_verifier
from verifiers.reward import RewardFunction, VerifierSpec


@dataclass
class RecipeInputs:
    model_path: str
    tokenizer: Any
    prompt_set: PromptSet
    reward_fn: RewardFunction


def check_recipe(recipe: Recipe) -> tuple[list[dict[str, Any]], list[VerifierSpec], str]:
    """The cheap checks, before any model loads: the rows of ``recipe.data``, its verifier specs (each one looked up
    in the registry) and its model's path (the embedded model is converted on first use).

    Raises:
        DataError, UnknownVerifierError, ModelLoadError.
    """
    rows = load_rows(recipe.data)
    specs = verifier_specs(recipe)
    for spec in specs:
        get_verifier(spec.name)
    return rows, specs, resolve_model_path(recipe.model.name)


@contextmanager
def recipe_inputs(recipe: Recipe) -> Iterator[RecipeInputs]:
    """Load ``recipe``'s rows, check its verifiers exist, resolve its model, set ``trainer.num_threads``, open its
    reward pool (closed on exit) and build the train/eval prompt split with the model's tokenizer.

    Raises:
        DataError, ModelLoadError, UnknownVerifierError: nothing is loaded past the tokenizer then.
    """
    rows, specs, model_path = check_recipe(recipe)
    if recipe.trainer.num_threads:
        torch.set_num_threads(recipe.trainer.num_threads)
    with RewardFunction(specs, num_workers=recipe.reward.num_workers,
                        failure_score=recipe.reward.failure_score) as reward_fn:
        tokenizer = load_tokenizer(model_path, recipe.model)
        yield RecipeInputs(model_path, tokenizer, build_prompt_set(rows, tokenizer, recipe.data, seed=recipe.seed),
                           reward_fn)


def build_engine(recipe: Recipe, model_path: str, tokenizer: Any) -> Any:
    """The recipe's rollout engine (``rollout.engine``: hf or vllm) on the model at ``model_path``, for sampling only.

    Raises:
        ModelLoadError: the model does not load. ImportError: ``vllm`` asked for but not installed.
    """
    model = load_causal_lm(model_path, recipe.model).eval()
    eos = eos_token_ids(model, tokenizer)
    if recipe.rollout.engine == "hf":
        from rlvr.rollout.hf import HFRolloutEngine
        return HFRolloutEngine(model, tokenizer, eos, batch_size=recipe.rollout.generation_batch_size,
                               autocast_dtype=torch.bfloat16 if recipe.trainer.bf16 else None)
    from rlvr.rollout.vllm_engine import VLLMRolloutEngine  # optional dependency
    return VLLMRolloutEngine.from_recipe(recipe, model, tokenizer, eos)
