"""What the verifiers of a recipe are (with those its algorithm adds), where their modules are imported from, whether
their recipe ``kwargs`` fit their signatures, and what each of them sees of a sample."""

from __future__ import annotations

import difflib
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.config import Recipe
from rlvr.data.prompts import Prompt
from rlvr.rollout.base import Completion
from rlvr.verifiers.reward import VerifierSpec


class NoVerifiers:
    """The reward pool of a recipe with no verifiers at all (``reward.source: reward_model`` and ``verifiers: []``):
    the interface of :class:`rlvr.verifiers.reward.RewardFunction` without worker processes; every completion gets
    total 0 and no per-verifier scores (the reward model's score is the reward)."""

    specs: list[VerifierSpec] = []
    labels: list[str] = []

    def score(self, completions: list[str], samples: list[dict], on_progress: Any = None) -> list[Any]:
        """One empty :class:`rlvr.verifiers.reward.RewardResult` per completion. Raises ValueError when the lists
        differ."""
        from rlvr.verifiers.reward import RewardResult

        if len(completions) != len(samples):
            raise ValueError(f"got {len(completions)} completions but {len(samples)} samples; expected one each")
        return [RewardResult(total=0.0, scores={}, extras={}, failures={}) for _ in completions]

    def counters(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        """Nothing to stop."""

    def __enter__(self) -> "NoVerifiers":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_reward_pool(recipe: Recipe, specs: list[VerifierSpec], num_workers: int | None = None) -> Any:
    """The verifier pool of ``specs`` (:class:`rlvr.verifiers.reward.RewardFunction`, ``reward.num_workers`` processes
    unless ``num_workers``), or :class:`NoVerifiers` when there are none. The caller closes it."""
    from rlvr.verifiers.reward import RewardFunction

    if not specs:
        return NoVerifiers()
    return RewardFunction(specs, num_workers=num_workers or recipe.reward.num_workers,
                          failure_score=recipe.reward.failure_score)


class VerifierKwargsError(ValueError):
    """A verifier's recipe ``kwargs`` do not fit its signature (an unknown name or a missing required one)."""


def add_recipe_import_paths(recipe_path: str | Path) -> list[str]:
    """Put the recipe's folder and the working directory on ``sys.path`` (after what is there), so a verifier named
    ``my_rewards:fn`` imports from a ``my_rewards.py`` saved next to the recipe, or in the folder the command runs
    in, without ``PYTHONPATH=.``. Forked verifier workers inherit the path. Returns the folders added.
    """
    added = []
    for folder in (Path(recipe_path).resolve().parent, Path(os.getcwd()).resolve()):
        text = str(folder)
        if text not in sys.path and text not in added:
            sys.path.append(text)
            added.append(text)
    return added


def check_verifier_kwargs(label: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Check the recipe's ``kwargs`` for verifier ``label`` against ``fn(completion, sample, **kwargs)``'s signature.

    A function that takes ``**kwargs`` accepts any name and is not checked.

    Raises:
        VerifierKwargsError: a kwarg the function has no parameter for (naming the closest one and the valid ones),
            or a required parameter (no default) the recipe does not give.
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    positional = [p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                                  inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    named = [p for p in params[len(positional[:2]):]
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    valid = [p.name for p in named]
    for key in kwargs:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise VerifierKwargsError(
                f"verifier {label!r}: kwargs has {key!r}, which the function does not take.{hint} Its keyword "
                f"arguments: {', '.join(valid) or '(none)'}")
    missing = [p.name for p in named if p.default is inspect.Parameter.empty and p.name not in kwargs]
    if missing:
        raise VerifierKwargsError(f"verifier {label!r}: kwargs lacks the required argument(s) {', '.join(missing)}")


def verifier_specs(recipe: Recipe) -> list[VerifierSpec]:
    """The recipe's verifiers plus the ones its algorithm adds (DAPO soft overlong punishment)."""
    # a gold verifier (optimise: false) is scored and logged but adds nothing to the total
    specs = [VerifierSpec(name=v.name, weight=v.weight if v.optimise else 0.0, kwargs=dict(v.kwargs),
                          timeout_s=v.timeout_s) for v in recipe.verifiers]
    ov = recipe.algorithm.overlong
    if ov.enabled:
        specs.append(VerifierSpec(name="overlong", weight=1.0,
                                  kwargs={"buffer_tokens": ov.buffer_tokens, "penalty": ov.penalty}))
    return specs


def sample_dict(prompt: Prompt, completion: Completion, max_new_tokens: int) -> dict[str, Any]:
    """What a verifier sees: the dataset row, the prompt text and the completion's token facts."""
    return {**prompt.row, "prompt": prompt.text, "completion_tokens": len(completion.token_ids),
            "max_new_tokens": max_new_tokens, "finish_reason": completion.finish_reason}
