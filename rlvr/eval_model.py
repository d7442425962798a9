"""``rlvr eval``: held-out metrics of any model (a run's checkpoint, a folder, a hub name) on a recipe's eval split,
without DeepSpeed or an optimizer."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.config import Recipe
from rlvr.data.prompts import build_prompt_set
from rlvr.data.sources import load_rows
from rlvr.models import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path
from rlvr.rollout.hf import HFRolloutEngine
from rlvr.trainer.grpo import run_eval, verifier_specs
from verifiers.registry import get_verifier
from verifiers.reward import RewardFunction


def evaluate_recipe(recipe: Recipe, k: int | None = None) -> dict[str, Any]:
    """pass@1 (± standard error), pass@k, maj@k, mean length of ``recipe.model`` on the recipe's held-out prompts.

    Raises:
        DataError, ModelLoadError, UnknownVerifierError: before the model is loaded.
    """
    rows = load_rows(recipe.data)
    specs = verifier_specs(recipe)
    for spec in specs:
        get_verifier(spec.name)
    path = resolve_model_path(recipe.model.name)
    if recipe.trainer.num_threads:
        torch.set_num_threads(recipe.trainer.num_threads)
    with RewardFunction(specs, num_workers=recipe.reward.num_workers,
                        failure_score=recipe.reward.failure_score) as reward_fn:
        tokenizer = load_tokenizer(path, recipe.model)
        prompts = build_prompt_set(rows, tokenizer, recipe.data, seed=recipe.seed).eval
        if not prompts:
            raise ValueError("the recipe's eval split is empty: set data.eval_size > 0")
        model = load_causal_lm(path, recipe.model).eval()
        engine = HFRolloutEngine(model, tokenizer, eos_token_ids(model, tokenizer),
                                 batch_size=recipe.rollout.generation_batch_size,
                                 autocast_dtype=torch.bfloat16 if recipe.trainer.bf16 else None)
        ev = recipe.eval
        result = run_eval(engine, tokenizer, prompts, reward_fn, recipe.solved_verifier, k=k or ev.k,
                          temperature=ev.temperature, max_new_tokens=ev.max_new_tokens or recipe.rollout.max_new_tokens,
                          top_p=recipe.rollout.top_p, seed=ev.seed)
    return {"model": recipe.model.name, **result.as_dict()}
