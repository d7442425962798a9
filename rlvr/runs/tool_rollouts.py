"""A recipe's prompts through the tool-use rollout (``rollout.tools``): the one sampler that training, ``rlvr eval``
and ``rlvr filter`` share when a recipe has tools.

Each prompt starts from the conversation its dataset row renders to (:func:`rlvr.data.templates.prompt_messages`,
with the few-shot examples; the plain prompt text for the ``r1`` template or a tokenizer without a chat template);
the tool environment may add to it (the fenced format's instructions), so every prompt comes back with the ids the
rollout actually used. :func:`rlvr.rollout.multi_turn.multi_turn_generate` does the turns.

Vocabulary: B prompts, G samples per prompt, N = B x G samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.config import DataConfig, RolloutConfig
from rlvr.data.prompts import Prompt
from rlvr.data.templates import prompt_messages
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.rollout.multi_turn import MultiTurnRollout, multi_turn_generate
from rlvr.runs.verifier_inputs import sample_dict
from rlvr.tools.environment import Environment


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
    """

    prompts: list[Prompt]
    completions: list[Completion]
    masks: list[list[int]]
    texts: list[str]
    trajectories: list[list[dict[str, Any]]]
    rollout: MultiTurnRollout

    @property
    def sampled_tokens(self) -> int:
        """Tokens the policy sampled over all samples (tool answers not counted)."""
        return sum(sum(m) for m in self.masks)


class ToolSampler:
    """Samples G multi-turn responses per prompt with ``engine`` and the tool environment ``env``.

    Args:
        engine: any rollout engine that honours ``SamplingParams.stop`` (hf, vLLM).
        tokenizer: the policy's tokenizer. env: the environment (:func:`rlvr.tools.loading.build_tool_environment`).
        data: the recipe's ``data`` section (how a row becomes a conversation). shots: the few-shot rows.
        rollout: the recipe's ``rollout`` section (``max_turns``, the response cap). eos_ids: ids that end a turn.
    """

    def __init__(self, engine: RolloutEngine, tokenizer: Any, env: Environment, *, data: DataConfig,
                 shots: Sequence[dict[str, Any]], rollout: RolloutConfig, eos_ids: Sequence[int]) -> None:
        self.engine, self.tokenizer, self.env = engine, tokenizer, env
        self.data, self.shots = data, list(shots)
        self.max_turns, self.max_response_tokens = rollout.max_turns, rollout.response_token_cap()
        self.eos_ids = list(eos_ids)

    def start_row(self, prompt: Prompt) -> dict[str, Any]:
        """What the environment's ``reset`` gets for ``prompt``: its row with ``messages`` (the rendered
        conversation) or, without a chat template or with the ``r1`` template, ``prompt`` (the prompt text)."""
        if self.data.template != "r1" and getattr(self.tokenizer, "chat_template", None):
            return {**prompt.row, "messages": prompt_messages(prompt.row, self.data, self.shots)}
        row = {k: v for k, v in prompt.row.items() if k != "messages"}
        return {**row, "prompt": prompt.text}

    def generate(self, prompts: Sequence[Prompt], n: int, sampling: SamplingParams) -> ToolSamples:
        """G = ``n`` samples of every prompt; ``sampling.max_new_tokens`` counts a sample's sampled tokens over all
        its turns."""
        out = multi_turn_generate(self.engine, self.tokenizer, self.env, [self.start_row(p) for p in prompts], n,
                                  sampling, max_turns=self.max_turns, eos_ids=self.eos_ids,
                                  max_response_tokens=self.max_response_tokens)
        started = []
        for prompt, group in zip(prompts, out.groups, strict=True):
            ids = group[0].prompt_ids if group else prompt.token_ids
            text = prompt.text if ids == prompt.token_ids else self.tokenizer.decode(ids, skip_special_tokens=False)
            started.append(dataclasses.replace(prompt, text=text, token_ids=list(ids)))
        samples = [s for g in out.groups for s in g]
        return ToolSamples(prompts=started, completions=[s.to_completion() for s in samples],
                           masks=[list(s.response_mask) for s in samples], texts=[s.final_text for s in samples],
                           trajectories=[s.trajectory() for s in samples], rollout=out)


def build_tool_sampler(engine: RolloutEngine, tokenizer: Any, rollout: RolloutConfig, data: DataConfig,
                       shots: Sequence[dict[str, Any]], eos_ids: Sequence[int]) -> ToolSampler | None:
    """The recipe's tool sampler, built once (its tools imported and instantiated), or None without
    ``rollout.tools``.

    Raises:
        ValueError: a tool function that cannot be imported, or ``kwargs`` that are not its parameters.
        rlvr.tools.schema.ToolSchemaError: a tool parameter without a JSON-typeable annotation.
    """
    if not rollout.tools:
        return None
    from rlvr.tools.loading import build_tool_environment

    env = build_tool_environment(rollout.tools_config(), tokenizer)
    return ToolSampler(engine, tokenizer, env, data=data, shots=shots, rollout=rollout, eos_ids=eos_ids)


def verifier_samples(samples: ToolSamples, n: int, max_new_tokens: int) -> list[dict[str, Any]]:
    """What a verifier sees of each of the N samples (:func:`rlvr.runs.verifier_inputs.sample_dict` of the prompt the
    rollout started from), with ``completion_tokens`` the sampled tokens and ``trajectory`` the turns, calls and
    outputs."""
    out = []
    for i, (c, mask, traj) in enumerate(zip(samples.completions, samples.masks, samples.trajectories, strict=True)):
        sample = sample_dict(samples.prompts[i // n], c, max_new_tokens)
        sample["completion_tokens"] = sum(mask)
        sample["trajectory"] = traj
        out.append(sample)
    return out


def engine_eos_ids(engine: Any, tokenizer: Any) -> list[int]:
    """The ids that end a turn: the engine's own (``eos_ids`` of the hf and vLLM engines), else the tokenizer's eos."""
    ids = getattr(engine, "eos_ids", None)
    return [int(i) for i in ids] if ids else [int(tokenizer.eos_token_id)]
