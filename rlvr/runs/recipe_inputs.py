"""What every command that runs a recipe's model opens before loading it (the trainer, ``rlvr eval``, ``rlvr filter``):
rows, verifiers, model path, reward pool, tokenizer and prompt split, with every input error raised first, then the
pre-flight checks of :mod:`rlvr.preflight` (an error stops the command before any model is loaded); and, for the
commands that only sample, the recipe's rollout engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.config import Recipe
from rlvr.data.prompts import PromptSet, build_prompt_set
from rlvr.data.sources import load_rows
from rlvr.models.loading import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path
from rlvr.models.precision import announce_precision, choose_precision, matmul_shape
from rlvr.preflight import CheckOptions, print_run_findings, run_checks
from rlvr.runs.verifier_inputs import check_verifier_kwargs, open_reward_pool, verifier_specs
from rlvr.verifiers.registry import get_verifier
from rlvr.verifiers.reward import RewardFunction, VerifierSpec


@dataclass
class RecipeInputs:
    specs: list[VerifierSpec]
    model_path: str
    tokenizer: Any
    prompt_set: PromptSet
    reward_fn: RewardFunction  # or verifier_inputs.NoVerifiers (same interface) for a recipe without verifiers


def open_recipe_inputs(recipe: Recipe, checks: CheckOptions | None = None) -> RecipeInputs:
    """The cheap checks first (the rows of ``recipe.data``, its verifier specs, each looked up in the registry and its
    kwargs matched with its signature, its model's path: the embedded model is converted on first use), then
    ``trainer.num_threads``, the reward pool (forked before any model is loaded, so its workers stay small; the caller
    closes it), the train/eval prompt split built with the model's tokenizer, and the pre-flight checks (``checks``;
    default: those of ``rlvr train``), whose warnings are printed.

    Raises:
        DataError, UnknownVerifierError, VerifierKwargsError, ModelLoadError, PreflightError: nothing is loaded past
        the tokenizer then, and no pool is left running.
    """
    checks = checks or CheckOptions()
    rows = load_rows(recipe.data)
    specs = verifier_specs(recipe)
    for spec in specs:
        check_verifier_kwargs(spec.name, get_verifier(spec.name), spec.kwargs)
    model_path = resolve_model_path(recipe.model.name)
    if recipe.trainer.num_threads:
        torch.set_num_threads(recipe.trainer.num_threads)
    reward_fn = open_reward_pool(recipe, specs)  # no verifiers (a reward model alone): a stand-in without workers
    try:
        tokenizer = load_tokenizer(model_path, recipe.model)
        prompt_set = build_prompt_set(rows, tokenizer, recipe.data, seed=recipe.seed)
        report = run_checks(recipe, specs, checks, rows=rows, tokenizer=tokenizer, prompt_set=prompt_set,
                            reward_fn=reward_fn, model_path=model_path)
        print_run_findings(report, checks.command)
        report.raise_for_errors()
    except BaseException:
        reward_fn.close()
        raise
    return RecipeInputs(specs, model_path, tokenizer, prompt_set, reward_fn)


@contextmanager
def recipe_inputs(recipe: Recipe, checks: CheckOptions | None = None) -> Iterator[RecipeInputs]:
    """:func:`open_recipe_inputs` with the reward pool closed on exit."""
    inputs = open_recipe_inputs(recipe, checks)
    with inputs.reward_fn:
        yield inputs


def load_sampling_engine(recipe: Recipe, model_path: str, tokenizer: Any) -> Any:
    """The recipe's rollout engine (``rollout.engine``: auto, hf, vllm or server) on the model at ``model_path``, for
    sampling only; ``auto`` prints which engine it picked and why. ``server``: servers rlvr starts load
    ``model_path``; servers given by URL are sent its weights. Close the engine when done (``close``, where it has
    one: it stops the servers it started).

    Raises:
        ModelLoadError: the model does not load. ImportError: ``vllm`` asked for but not installed.
    """
    from rlvr.rollout.choice import build_rollout_engine, with_chosen_engine
    from rlvr.rollout.server_launch import start_fleet

    recipe = with_chosen_engine(recipe, model_path)
    servers = start_fleet(recipe, model_path)  # rollout.engine=server: they load while the model does
    model = load_causal_lm(model_path, recipe.model).eval()
    eos = eos_token_ids(model, tokenizer)
    generation_dtype = None
    if recipe.rollout.engine == "hf":  # vLLM picks its own dtype from the same choice
        precision = choose_precision(recipe.trainer.precision, next(model.parameters()).device, matmul_shape(model))
        announce_precision(precision)
        generation_dtype = precision.generation_dtype  # sampling only: the generation stage's dtype
    return build_rollout_engine(recipe, model, tokenizer, eos, generation_dtype, servers=servers)
