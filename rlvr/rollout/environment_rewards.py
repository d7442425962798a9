"""An environment's episode rewards in the sum of rewards: each sample's ``Reply(done=True, reward=x)`` enters its
:class:`rlvr.verifiers.reward.RewardResult` like a verifier's score, under the label ``env`` (``reward/env``), with
weight ``rollout.environment_reward_weight``, and under the same machinery-failure rule: an environment that raised
on a sample is a failure (``failures["env"]``), never a score, so with ``reward.failure_score: null`` (the default)
the sample is left out of its group's statistics and of the loss, and counted in ``reward/infra_failures/env``. One
function for training (:class:`rlvr.trainer.reward_sources.VerifierRewards`), ``rlvr eval`` and ``rlvr filter``
(:meth:`rlvr.rollout.tool_sampler.ToolSampler.add_episode_rewards`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlvr.config import Recipe
from rlvr.tools.environment import EpisodeReward
from rlvr.tools.spec import ENVIRONMENT_LABEL


def environment_is_gold(recipe: Recipe) -> bool:
    """The recipe's rule scores are only logged (``reward.source: reward_model``, a control run's ``reward.control``),
    so the environment's reward is too: as gold (``reward/gold_env``), weighing 0."""
    return recipe.rollout.environment is not None and (recipe.reward.source == "reward_model"
                                                       or recipe.reward.control != "none")


def environment_weight(recipe: Recipe) -> float | None:
    """The weight of the environment's reward in the optimised sum: ``rollout.environment_reward_weight``, 0 where it
    is gold (:func:`environment_is_gold`), None without ``rollout.environment``."""
    if recipe.rollout.environment is None:
        return None
    return 0.0 if environment_is_gold(recipe) else recipe.rollout.environment_reward_weight


def add_episode_rewards(results: Sequence[Any], episodes: Sequence[EpisodeReward], weight: float,
                        failure_score: float | None, label: str = ENVIRONMENT_LABEL) -> None:
    """Add each sample's episode reward to its reward result, in place.

    Per sample: a reward ``x`` sets ``scores[label] = x`` and adds ``weight * x`` to ``total``; an error sets
    ``scores[label] = None`` and ``failures[label] = "error: <message>"`` and adds ``weight * failure_score`` (nothing
    when ``failure_score`` is None); no reward sets ``scores[label] = None`` and adds nothing (a verifier that skips).

    Args:
        results: N :class:`rlvr.verifiers.reward.RewardResult`. episodes: their N episode rewards.
    Raises:
        ValueError: the two lists differ in length.
    """
    if len(results) != len(episodes):
        raise ValueError(f"{len(results)} reward results but {len(episodes)} episode rewards; expected one each")
    for result, episode in zip(results, episodes, strict=True):
        if episode.error is not None:
            result.scores[label] = None
            result.failures[label] = f"error: {episode.error}"
            if failure_score is not None:
                result.total += weight * failure_score
        else:
            result.scores[label] = episode.reward
            if episode.reward is not None:
                result.total += weight * episode.reward
