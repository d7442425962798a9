"""What every command that runs a recipe's model opens before loading it (the trainer, ``rlvr eval``, ``rlvr filter``):
rows, verifiers, model path, reward pool, tokenizer and prompt split, with every input error raised first; and, for
the commands that only sample, the recipe's rollout engine."""

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
    specs: list[VerifierSpec]
    model_path: str
    tokenizer: Any
    prompt_set: PromptSet
    reward_fn: RewardFunction


def open_recipe_inputs(recipe: Recipe) -> RecipeInputs:
    """The cheap checks first (the rows of ``recipe.data``, its verifier specs, each looked up in the registry, its
    model's path: the embedded model is converted on first use), then ``trainer.num_threads``, the reward pool (forked
    before any model is loaded, so its workers stay small; the caller closes it) and the train/eval prompt split built
    with the model's tokenizer.

    Raises:
        DataError, UnknownVerifierError, ModelLoadError: nothing is loaded past the tokenizer then, and no pool is left
        running.
    """
    rows = load_rows(recipe.data)
    specs = verifier_specs(recipe)
    for spec in specs:
        get_verifier(spec.name)
    model_path = resolve_model_path(recipe.model.name)
    if recipe.trainer.num_threads:
        torch.set_num_threads(recipe.trainer.num_threads)
    reward_fn = RewardFunction(specs, num_workers=recipe.reward.num_workers, failure_score=recipe.reward.failure_score)
    try:
        tokenizer = load_tokenizer(model_path, recipe.model)
        prompt_set = build_prompt_set(rows, tokenizer, recipe.data, seed=recipe.seed)
    except BaseException:
        reward_fn.close()
        raise
    return RecipeInputs(specs, model_path, tokenizer, prompt_set, reward_fn)


@contextmanager
def recipe_inputs(recipe: Recipe) -> Iterator[RecipeInputs]:
    """:func:`open_recipe_inputs` with the reward pool closed on exit."""
    inputs = open_recipe_inputs(recipe)
    with inputs.reward_fn:
        yield inputs


def build_engine(recipe: Recipe, model_path: str, tokenizer: Any) -> Any:
    """The recipe's rollout engine (``rollout.engine``: auto, hf or vllm) on the model at ``model_path``, for sampling
    only; ``auto`` prints which engine it picked and why.

    Raises:
        ModelLoadError: the model does not load. ImportError: ``vllm`` asked for but not installed.
    """
    from rlvr.rollout.choice import with_chosen_engine

    recipe = with_chosen_engine(recipe, model_path)
    model = load_causal_lm(model_path, recipe.model).eval()
    eos = eos_token_ids(model, tokenizer)
    if recipe.rollout.engine == "hf":
        from rlvr.rollout.hf import HFRolloutEngine
        return HFRolloutEngine(model, tokenizer, eos, batch_size=recipe.rollout.generation_batch_size,
                               autocast_dtype=torch.bfloat16 if recipe.trainer.bf16 else None)
    from rlvr.rollout.vllm_engine import VLLMRolloutEngine  # optional dependency
    return VLLMRolloutEngine.from_recipe(recipe, model, tokenizer, eos)
