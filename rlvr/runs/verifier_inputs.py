"""What the verifiers of a recipe are (with those its algorithm adds), where their modules are imported from, whether
their recipe ``kwargs`` fit their signatures, and what each of them sees of a sample (a tool-use sample too)."""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.config import Recipe
from rlvr.data.prompts import Prompt
from rlvr.did_you_mean import closest
from rlvr.rollout.base import Completion
from rlvr.verifiers.reward import VerifierSpec

if TYPE_CHECKING:
    from rlvr.rollout.tool_sampler import ToolSamples


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
    unless ``num_workers``, at most 16 a core: the pre-flight refuses more, and must not fork them to say so), or
    :class:`NoVerifiers` when there are none. The caller closes it."""
    from rlvr.verifiers.reward import RewardFunction

    if not specs:
        return NoVerifiers()
    most = 16 * (os.cpu_count() or 1)
    return RewardFunction(specs, num_workers=min(num_workers or recipe.reward.num_workers, most),
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
            close = closest(key, valid)
            hint = f" Did you mean {close!r}?" if close else ""
            raise VerifierKwargsError(
                f"verifier {label!r}: kwargs has {key!r}, which the function does not take.{hint} Its keyword "
                f"arguments: {', '.join(valid) or '(none)'}")
    missing = [p.name for p in named if p.default is inspect.Parameter.empty and p.name not in kwargs]
    if missing:
        raise VerifierKwargsError(f"verifier {label!r}: kwargs lacks the required argument(s) {', '.join(missing)}")


def control_spec(recipe: Recipe) -> VerifierSpec | None:
    """The control reward of ``reward.control`` (:mod:`rlvr.verifiers.controls`), or None for a real run."""
    control = recipe.reward.control
    if control == "random":
        return VerifierSpec(name="random_reward", kwargs={"seed": recipe.seed})
    if control == "format":
        return VerifierSpec(name="format" if recipe.data.template == "r1" else "boxed_format")
    return None


def verifier_specs(recipe: Recipe) -> list[VerifierSpec]:
    """The recipe's verifiers plus the ones its algorithm adds (DAPO soft overlong punishment), and a control run's
    control reward (``reward.control``: the recipe's verifiers are then gold)."""
    # a gold verifier (optimise: false) is scored and logged but adds nothing to the total
    control = control_spec(recipe)
    specs = [VerifierSpec(name=v.name, weight=v.weight if v.optimise and control is None else 0.0,
                          kwargs=dict(v.kwargs), timeout_s=v.timeout_s, memory_mb=v.memory_mb,
                          fallback_for=v.fallback_for)
             for v in recipe.verifiers]
    if control is not None:
        specs.append(control)
    ov = recipe.algorithm.overlong
    if ov.enabled:
        specs.append(VerifierSpec(name="overlong", weight=1.0,
                                  kwargs={"buffer_tokens": ov.buffer_tokens, "penalty": ov.penalty}))
    return specs


def sample_dict(prompt: Prompt, completion: Completion, max_new_tokens: int) -> dict[str, Any]:
    """What a verifier sees: the dataset row, the prompt text and the completion's token facts."""
    return {**prompt.row, "prompt": prompt.text, "completion_tokens": len(completion.token_ids),
            "max_new_tokens": max_new_tokens, "finish_reason": completion.finish_reason}


def tool_verifier_samples(samples: ToolSamples, n: int, max_new_tokens: int) -> list[dict[str, Any]]:
    """What a verifier sees of each of the N samples (:func:`sample_dict` of the prompt the
    rollout started from), with ``completion_tokens`` the sampled tokens and ``trajectory`` the turns, calls and
    outputs."""
    out = []
    for i, (c, mask, traj) in enumerate(zip(samples.completions, samples.masks, samples.trajectories, strict=True)):
        sample = sample_dict(samples.prompts[i // n], c, max_new_tokens)
        sample["completion_tokens"] = sum(mask)
        sample["trajectory"] = traj
        out.append(sample)
    return out
