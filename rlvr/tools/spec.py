"""What a recipe writes about tools (``rollout.tools``, ``rollout.max_turns``, ...): pydantic models the config schema
imports. No torch, no tool code is imported here: the names are resolved when the rollout is built
(:func:`rlvr.tools.loading.build_tools`).

.. code-block:: yaml

    rollout:
      tools:
        - {name: python}                                  # built in: runs the model's code in the sandbox
        - {name: my_tools:lookup, kwargs: {table: x.csv}} # any typed Python function (schema from its signature)
      max_turns: 4                 # assistant turns per sample
      max_tool_output_tokens: 256  # longer outputs are cut in the middle, marked as cut
      call_format: auto            # fenced (```python -> ```output) | hermes (<tool_call> JSON) | auto
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

BUILTIN_TOOLS = ("python",)


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
    """Tool use in rollouts. ``tools`` empty = single-turn generation (the default)."""

    model_config = ConfigDict(extra="forbid")

    tools: list[ToolSpec] = Field(default_factory=list)
    max_turns: int = Field(4, ge=1)
    """Assistant turns per sample (one turn = one stretch of sampled tokens)."""
    max_tool_output_tokens: int = Field(256, ge=8)
    """A tool answer longer than this (in tokens) is cut in the middle, with a marker saying how much was cut."""
    call_format: Literal["auto", "fenced", "hermes"] = "auto"
    """``fenced``: ```python blocks answered by an ```output block inside the assistant turn (any model);
    ``hermes``: the chat template's ``<tool_call>`` JSON answered by a tool message (Qwen2.5-style templates);
    ``auto``: hermes where the chat template mentions ``<tool_call>``, else fenced."""

    @field_validator("tools")
    @classmethod
    def _unique_names(cls, tools: list[ToolSpec]) -> list[ToolSpec]:
        return unique_tool_names(tools)


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
