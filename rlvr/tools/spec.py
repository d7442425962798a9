"""What a recipe writes about tools and environments (``rollout.tools``, ``rollout.environment``, ``rollout.max_turns``,
...): pydantic models the config schema imports. No torch, no tool or environment code is imported here: the names
are resolved when the rollout is built (:func:`rlvr.tools.loading.build_environment`).

.. code-block:: yaml

    rollout:
      tools:
        - {name: python}                                  # built in: runs the model's code in the sandbox
        - {name: my_tools:lookup, kwargs: {table: x.csv}} # any typed Python function (schema from its signature)
      max_turns: 4                 # assistant turns per sample
      max_tool_output_tokens: 256  # longer outputs are cut in the middle, marked as cut
      call_format: auto            # fenced (```python -> ```output) | hermes (<tool_call> JSON) | auto
      turn_scheduling: auto        # continuous (vllm, server: a sample goes on once answered) | rounds
      environment: my_envs:Game    # an Environment subclass that answers the turns (and may end with a reward)
      environment_kwargs: {max_guesses: 4}
      environment_sees_gold: false # reset(row) and the tools get the row without its gold fields
      environment_reward_weight: 1.0
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

BUILTIN_TOOLS = ("python",)
ENVIRONMENT_LABEL = "env"
"""The label of an environment's reward among the verifiers' (``reward/env``, ``scores["env"]`` in the samples,
``reward.solved_verifier: env``)."""


class ToolSpec(BaseModel):
    """One tool: ``python`` (built in) or ``package.module:function``; ``kwargs`` are bound to it (for ``python``:
    the keyword arguments of :class:`rlvr.tools.python_tool.PythonTool`, e.g. ``time_s``, ``session``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="``python`` (built in) or ``package.module:function`` (a typed Python function).")
    kwargs: dict[str, Any] = Field(default_factory=dict, description=(
        "Keyword arguments bound to the tool and hidden from the model (for ``python``: ``time_s``, ``memory_mb``, "
        "``output_kb``, ``session``, ``backend``)."))

    @field_validator("name")
    @classmethod
    def _known_or_importable(cls, name: str) -> str:
        if name not in BUILTIN_TOOLS and ":" not in name:
            raise ValueError(f"tool {name!r} is neither a built-in tool ({', '.join(BUILTIN_TOOLS)}) nor "
                             "'package.module:function'")
        return name


class ToolsConfig(BaseModel):
    """Tool use and environments in rollouts. No ``tools`` and no ``environment`` = single-turn generation (the
    default). The one declaration of these keys: the recipe's ``rollout`` section
    (:class:`rlvr.config.schema.RolloutConfig`) inherits them."""

    model_config = ConfigDict(extra="forbid")

    tools: list[ToolSpec] = Field(default_factory=list, description=(
        "Tools the model may call during a rollout: ``{name: python}`` (built in: runs the model's code in the "
        "sandbox) or ``{name: package.module:function, kwargs: {...}}`` (a typed Python function; ``kwargs`` are "
        "bound to it). Empty (the default): single-turn generation. See docs/tools.md."))
    max_turns: int = Field(4, ge=1, description=(
        "With tools or an environment: assistant turns per sample (one turn = what the model writes until eos or a "
        "call; a closed code block that is no call costs no turn)."))
    max_tool_output_tokens: int = Field(256, ge=8, description=(
        "With tools: a tool answer longer than this many tokens is cut in the middle, with a marker saying how much "
        "was cut."))
    call_format: Literal["auto", "fenced", "hermes"] = Field("auto", description=(
        "With tools: ``fenced`` (a fenced code block named after the tool, answered by an ``output`` block inside "
        "the assistant's turn; any model), ``hermes`` (the chat template's ``<tool_call>`` JSON answered by a tool "
        "message), or ``auto`` (hermes where the chat template mentions ``<tool_call>``, else fenced)."))

    turn_scheduling: Literal["auto", "rounds", "continuous"] = Field("auto", description=(
        "How multi-turn samples meet the engine. ``rounds``: every unfinished sample is generated together, the "
        "environment answers the round's paused samples at once, and the next round waits for the slowest sample "
        "of the last. ``continuous``: each sample is a request of its own on the engine's continuous batching "
        "(``vllm``, ``server``): a sample whose answer is in goes on while the others still decode, and the "
        "environment answers on a worker thread while the engine decodes. ``auto``: continuous where the engine "
        "has it, rounds on ``hf``. Seeds are per sample and turn under ``continuous``; the make-up of the engine's "
        "batches then depends on timing, so the same seed may give samples that differ where the logits differ in "
        "the last bits; ``rounds`` repeats a seeded run exactly."))
    environment: str | None = Field(None, description=(
        "An environment that answers the model between its turns, as ``package.module:ClassName`` (a subclass of "
        "``rlvr.tools.Environment``, imported like a verifier's path; a module next to the recipe is found): its "
        "``reset(row)`` gives a sample's conversation, its ``step`` answers each turn and may end the episode with a "
        "reward (``Reply(done=True, reward=x)``, logged as ``reward/env``). With ``tools`` too it must subclass "
        "``rlvr.tools.ToolEnvironment``, which receives them. ``None``: the tools alone (or single-turn generation). "
        "See docs/tools.md, section Environments."))
    environment_kwargs: dict[str, Any] = Field(default_factory=dict, description=(
        "Keyword arguments of the environment's constructor (checked against its signature before the model loads)."))
    environment_sees_gold: bool = Field(False, description=(
        "``false``: the row that ``reset(row)`` and the tools receive lacks the gold fields (``data.answer_field``, "
        "``data.shot_field``, a verifier's ``answer_field``, the ``code`` verifier's ``tests``); ``true``: the whole "
        "row (an environment that must know the answer to reply, e.g. a guessing game's secret)."))
    environment_reward_weight: float = Field(1.0, allow_inf_nan=False, description=(
        "Multiplies the environment's end-of-episode reward in the sum of rewards (as a verifier's ``weight``)."))

    @field_validator("tools")
    @classmethod
    def _unique_names(cls, tools: list[ToolSpec]) -> list[ToolSpec]:
        return unique_tool_names(tools)

    @field_validator("environment")
    @classmethod
    def _class_path(cls, path: str | None) -> str | None:
        if path is not None and (path.count(":") != 1 or not all(path.split(":"))):
            raise ValueError(f"environment {path!r}: expected 'package.module:ClassName'")
        return path

    @model_validator(mode="after")
    def _environment_keys_need_an_environment(self) -> ToolsConfig:
        if self.environment is None:
            if self.environment_kwargs:
                raise ValueError("rollout.environment_kwargs is set but rollout.environment is not: name the "
                                 "environment ('package.module:ClassName') or remove the kwargs")
            if self.environment_reward_weight != 1.0:
                raise ValueError("rollout.environment_reward_weight is set but rollout.environment is not: only an "
                                 "environment gives an episode reward")
            if self.environment_sees_gold and not self.tools:
                raise ValueError("rollout.environment_sees_gold is true but there is neither an environment nor a "
                                 "tool to see the row")
        return self


def unique_tool_names(tools: list[ToolSpec]) -> list[ToolSpec]:
    """``tools`` unchanged when no two share a name (the function name of ``package.module:function``).

    Raises:
        ValueError: naming the repeated names.
    """
    names = [t.name.rsplit(":", 1)[-1] for t in tools]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"tool names must be unique, repeated: {', '.join(repeated)}")
    return tools
