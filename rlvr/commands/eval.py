"""``rlvr eval``: held-out metrics of any model (a run's checkpoint, a folder, a hub name) on a recipe's eval split,
without DeepSpeed or an optimizer; with the recipe's tools and environment (``rollout.tools``,
``rollout.environment``) when it has them."""

from __future__ import annotations

from typing import Any

from rlvr.config import Recipe
from rlvr.preflight import CheckOptions
from rlvr.rollout.tool_sampler import build_tool_sampler, engine_eos_ids
from rlvr.runs.evaluation import run_eval
from rlvr.runs.recipe_inputs import load_sampling_engine, recipe_inputs
from rlvr.tools.loading import build_environment


def evaluate_recipe(recipe: Recipe, k: int | None = None) -> dict[str, Any]:
    """pass@1 (± standard error), pass@k, maj@k, mean length of ``recipe.model`` on the recipe's held-out prompts;
    with ``rollout.tools``, also the held-out tool use (``tools/*``: fraction of samples calling, calls and turns per
    sample, error rate).

    Raises:
        DataError, ModelLoadError, UnknownVerifierError, VerifierKwargsError, PreflightError: before the model is
        loaded. ValueError: an empty eval split, or a recipe without verifiers (pass@k needs one to say "solved").
    """
    if recipe.solved_verifier is None:
        raise ValueError("rlvr eval measures pass@k with the recipe's solved verifier, and the recipe lists no "
                         "verifiers: add one (optimise: false is enough under reward.source: reward_model)")
    with recipe_inputs(recipe, CheckOptions(training=False, command="eval")) as inputs:
        tokenizer, prompts = inputs.tokenizer, inputs.prompt_set.eval
        if not prompts:
            raise ValueError("the recipe's eval split is empty: set data.eval_size > 0")
        env = build_environment(recipe.rollout.tools_config(), tokenizer)  # a bad one fails before the model loads
        engine = load_sampling_engine(recipe, inputs.model_path, tokenizer)
        try:
            ev = recipe.eval
            tools = build_tool_sampler(engine, tokenizer, recipe, inputs.prompt_set.shots,
                                       engine_eos_ids(engine, tokenizer), env=env)
            result = run_eval(engine, tokenizer, prompts, inputs.reward_fn, recipe.solved_verifier, k=k or ev.k,
                              temperature=ev.temperature,
                              max_new_tokens=ev.max_new_tokens or recipe.rollout.max_new_tokens,
                              top_p=recipe.rollout.top_p, top_k=recipe.rollout.top_k, seed=ev.seed, tools=tools)
        finally:
            if hasattr(engine, "close"):  # the server engine stops the servers it started
                engine.close()
    return {"model": recipe.model.name, **result.as_dict()}
