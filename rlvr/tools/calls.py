"""The records a tool call leaves: the call as parsed from the model's text (:class:`ToolCall`) and what running it
gave (:class:`ToolResult`), and the :class:`Tool` protocol that runs a batch of calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

CallStatus = Literal["ok", "error", "timeout", "malformed"]
"""``ok``: ran and answered; ``error``: raised, crashed, printed past the limit or returned something unusable;
``timeout``: ran past its time limit; ``malformed``: not run (unparsable call, unknown tool, bad arguments)."""

MAX_ERROR_CHARS = 600
"""An error message shown to the model is cut to this many characters."""


@dataclass
class ToolCall:
    """One call the model wrote: ``name`` and ``arguments``; ``error`` set when it could not be parsed (then it is
    answered with that error and never run); ``text``: the call as written."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    text: str = ""


@dataclass
class ToolResult:
    """What a call gave: ``output`` is the text the model is shown (before the token cut), ``status`` how it ended
    (:data:`CallStatus`), ``seconds`` its wall-clock time."""

    output: str
    status: CallStatus = "ok"
    seconds: float = 0.0


class Tool(Protocol):
    """A tool: a name, the JSON schema the model is shown, and a batch runner.

    ``run_batch`` runs every call of one rollout round at once (the python tool sends them to the sandbox as one
    ``run_many``); ``sessions[i]`` is a dict private to the sample that made call ``i`` and to this tool, kept across
    that sample's turns (state between calls, e.g. a Python session), never shared between samples. It must not
    raise for a call's fault: a failing call is a :class:`ToolResult` with an error status.

    A tool that sets ``wants_row = True`` is called as ``run_batch(arguments, sessions, rows=rows)``: ``rows[i]`` is
    the dataset row of the sample that made call ``i`` (what the environment's ``reset`` got: without the gold fields
    unless the recipe says ``rollout.environment_sees_gold: true``).
    """

    name: str
    schema: dict[str, Any]

    def run_batch(self, arguments: list[dict[str, Any]], sessions: list[dict[str, Any]]) -> list[ToolResult]:
        ...


def short_error(text: str) -> str:
    """``text`` cut to :data:`MAX_ERROR_CHARS` (its head and tail kept)."""
    if len(text) <= MAX_ERROR_CHARS:
        return text
    half = MAX_ERROR_CHARS // 2
    return text[:half] + " [...] " + text[-half:]
