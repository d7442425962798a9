"""A recipe's prompts through the multi-turn rollout (``rollout.tools``, ``rollout.environment``): the one sampler
that training, ``rlvr eval`` and ``rlvr filter`` share when a recipe has tools or an environment.

Each prompt starts from the conversation its dataset row renders to (:func:`rlvr.data.templates.prompt_messages`,
with the few-shot examples; the plain prompt text for the ``r1`` template or a tokenizer without a chat template);
the environment may add to it (the fenced format's instructions) or replace it, so every prompt comes back with the
ids the rollout actually used. The row the environment's ``reset`` and the tools receive (:meth:`ToolSampler.
start_row`) is the dataset row without its gold fields (:func:`gold_fields`) unless the recipe says
``rollout.environment_sees_gold: true``: a tool or an environment the policy talks to must not hand it the answer.
:func:`rlvr.rollout.multi_turn.multi_turn_generate` does the turns; the tools and the environment are
:mod:`rlvr.tools`'s (built by :func:`rlvr.tools.loading.build_environment`); what a verifier sees of a tool sample is
:func:`rlvr.runs.verifier_inputs.tool_verifier_samples`, and the environment's episode rewards join the verifiers'
in :mod:`rlvr.rollout.environment_rewards`.

Vocabulary: B prompts, G samples per prompt, N = B x G samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.config import DataConfig, Recipe, RolloutConfig
from rlvr.data.prompts import Prompt
from rlvr.data.templates import prompt_messages
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.rollout.multi_turn import MultiTurnRollout, multi_turn_generate
from rlvr.tools.environment import Environment, EpisodeReward

PROMPT_INDEX = "prompt_index"
"""The key of the prompt's index in the row the environment and the tools receive (its stable index within its
split, as ``samples/step-N.jsonl`` names it)."""
CODE_TESTS_FIELD = "tests"
"""The field the ``code`` verifier reads its (hidden) unit tests from."""


@dataclass
class ToolSamples:
    """The samples of one tool-use rollout, flattened in group order (sample i belongs to prompt i // G).

    Attributes:
        prompts: B prompts, each with the ids (and text) the rollout started from.
        completions: N responses: every id after the prompt (sampled turns, tool answers, template glue), with the
            sampled tokens' log-probs (0.0 elsewhere); ``length`` when truncated, else ``stop``.
        masks: N lists as long as the responses: 1 on the ids the policy sampled, 0 on the rest.
        texts: N final texts (the last turn, after the last tool answer): what the verifiers score.
        trajectories: N lists of turns (:meth:`rlvr.rollout.multi_turn.MultiTurnSample.trajectory`).
        rollout: the rollout itself (``metrics()``: ``tools/*``; timings).
        episode_rewards: N environment rewards or errors (:attr:`rlvr.rollout.multi_turn.MultiTurnSample.
            episode_reward`).
    """

    prompts: list[Prompt]
    completions: list[Completion]
    masks: list[list[int]]
    texts: list[str]
    trajectories: list[list[dict[str, Any]]]
    rollout: MultiTurnRollout
    episode_rewards: list[EpisodeReward]

    @property
    def sampled_tokens(self) -> int:
        """Tokens the policy sampled over all samples (tool answers not counted)."""
        return sum(sum(m) for m in self.masks)


class ToolSampler:
    """Samples G multi-turn responses per prompt with ``engine`` and the environment ``env``.

    Args:
        engine: any rollout engine that honours ``SamplingParams.stop`` (hf, vLLM).
        tokenizer: the policy's tokenizer. env: the environment (:func:`rlvr.tools.loading.build_environment`).
        data: the recipe's ``data`` section (how a row becomes a conversation). shots: the few-shot rows.
        rollout: the recipe's ``rollout`` section (``max_turns``, the response cap, ``turn_scheduling``). eos_ids:
            ids that end a turn.
        hidden_fields: row fields the environment and the tools never see (:func:`gold_fields`).
        reward_weight: the weight of the environment's episode rewards in the reward sum
            (:func:`rlvr.rollout.environment_rewards.environment_weight`); None: it gives none.
        failure_score: what an environment's failure scores (``reward.failure_score``; None: the sample is left out).
    """

    def __init__(self, engine: RolloutEngine, tokenizer: Any, env: Environment, *, data: DataConfig,
                 shots: Sequence[dict[str, Any]], rollout: RolloutConfig, eos_ids: Sequence[int],
                 hidden_fields: frozenset[str] = frozenset(), reward_weight: float | None = None,
                 failure_score: float | None = None) -> None:
        self.engine, self.tokenizer, self.env = engine, tokenizer, env
        self.data, self.shots = data, list(shots)
        self.max_turns, self.max_response_tokens = rollout.max_turns, rollout.response_token_cap()
        self.scheduling = rollout.turn_scheduling
        self.eos_ids = list(eos_ids)
        self.hidden_fields = frozenset(hidden_fields)
        self.reward_weight, self.failure_score = reward_weight, failure_score

    def start_row(self, prompt: Prompt) -> dict[str, Any]:
        """What the environment's ``reset`` (and a tool that asks for the row) gets for ``prompt``: its row less
        :attr:`hidden_fields`, with ``prompt_index`` (the prompt's index in its split) and ``messages`` (the rendered
        conversation) or, without a chat template or with the ``r1`` template, ``prompt`` (the prompt text)."""
        row = {k: v for k, v in prompt.row.items() if k not in self.hidden_fields}
        row[PROMPT_INDEX] = prompt.index
        if self.data.template != "r1" and getattr(self.tokenizer, "chat_template", None):
            return {**row, "messages": prompt_messages(prompt.row, self.data, self.shots)}
        row.pop("messages", None)
        return {**row, "prompt": prompt.text}

    def generate(self, prompts: Sequence[Prompt], n: int, sampling: SamplingParams) -> ToolSamples:
        """G = ``n`` samples of every prompt; ``sampling.max_new_tokens`` counts a sample's sampled tokens over all
        its turns."""
        out = multi_turn_generate(self.engine, self.tokenizer, self.env, [self.start_row(p) for p in prompts], n,
                                  sampling, max_turns=self.max_turns, eos_ids=self.eos_ids,
                                  max_response_tokens=self.max_response_tokens, scheduling=self.scheduling)
        started = []
        for prompt, group in zip(prompts, out.groups, strict=True):
            ids = group[0].prompt_ids if group and group[0].prompt_ids else prompt.token_ids  # (a failed reset: none)
            text = prompt.text if ids == prompt.token_ids else self.tokenizer.decode(ids, skip_special_tokens=False)
            started.append(dataclasses.replace(prompt, text=text, token_ids=list(ids)))
        samples = [s for g in out.groups for s in g]
        return ToolSamples(prompts=started, completions=[s.to_completion() for s in samples],
                           masks=[list(s.response_mask) for s in samples], texts=[s.final_text for s in samples],
                           trajectories=[s.trajectory() for s in samples], rollout=out,
                           episode_rewards=[s.episode_reward for s in samples])

    def add_episode_rewards(self, results: list[Any], samples: ToolSamples) -> None:
        """Add the environment's episode rewards of ``samples`` to the verifiers' ``results`` of them, in place
        (:func:`rlvr.rollout.environment_rewards.add_episode_rewards`; nothing when the environment gives none)."""
        from rlvr.rollout.environment_rewards import add_episode_rewards

        if self.reward_weight is not None:
            add_episode_rewards(results, samples.episode_rewards, self.reward_weight, self.failure_score)


def gold_fields(recipe: Recipe) -> frozenset[str]:
    """The row fields that hold the answer, which the environment and the tools do not see unless
    ``rollout.environment_sees_gold``: ``data.answer_field``, ``data.shot_field`` (a worked solution), every
    verifier's ``answer_field`` kwarg, and ``tests`` when the ``code`` verifier is listed (its hidden tests)."""
    fields = {recipe.data.answer_field, recipe.data.shot_field}
    fields |= {v.kwargs.get("answer_field") for v in recipe.verifiers}
    if any(v.name == "code" for v in recipe.verifiers):
        fields.add(CODE_TESTS_FIELD)
    return frozenset(f for f in fields if isinstance(f, str))


def build_tool_sampler(engine: RolloutEngine, tokenizer: Any, recipe: Recipe, shots: Sequence[dict[str, Any]],
                       eos_ids: Sequence[int], env: Environment | None = None) -> ToolSampler | None:
    """The recipe's multi-turn sampler, or None without ``rollout.tools`` and ``rollout.environment``.

    Args:
        env: the environment, when already built (:func:`rlvr.tools.loading.build_environment`, which the trainer
            calls before loading the model); default: built here.
    Raises:
        ValueError: a tool function that cannot be imported, or ``kwargs`` that are not its parameters;
            rlvr.import_paths.ImportPathError or rlvr.tools.loading.EnvironmentLoadError for the environment.
        rlvr.tools.schema.ToolSchemaError: a tool parameter without a JSON-typeable annotation.
    """
    from rlvr.rollout.environment_rewards import environment_weight
    from rlvr.tools.loading import build_environment

    if env is None:
        env = build_environment(recipe.rollout.tools_config(), tokenizer)
    if env is None:
        return None
    hidden = frozenset() if recipe.rollout.environment_sees_gold else gold_fields(recipe)
    return ToolSampler(engine, tokenizer, env, data=recipe.data, shots=shots, rollout=recipe.rollout,
                       eos_ids=eos_ids, hidden_fields=hidden, reward_weight=environment_weight(recipe),
                       failure_score=recipe.reward.failure_score)


def engine_eos_ids(engine: Any, tokenizer: Any) -> list[int]:
    """The ids that end a turn: the engine's own (``eos_ids`` of the hf and vLLM engines), else the tokenizer's eos."""
    ids = getattr(engine, "eos_ids", None)
    return [int(i) for i in ids] if ids else [int(tokenizer.eos_token_id)]
