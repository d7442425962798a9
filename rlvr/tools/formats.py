"""How a tool call is written and answered, chosen per model (``rollout.call_format``).

- ``fenced`` (ToRL's convention; any model, any template or none): the model writes a fenced block named after the
  tool, ```` ```python ```` with code for the python tool, ```` ```lookup ```` with a JSON object of arguments for a
  function tool. Generation pauses at the closing fence (stop string ``"\\n```\\n"``, or ``"```output"`` where the
  model opens the answer block itself); the answer is an ```` ```output ```` block appended *inside* the assistant's
  turn, and the model goes on in the same turn. Blocks in other languages are not calls (the model goes on).
- ``hermes`` (the chat template's own format where it has one: Qwen2.5's ``<tool_call>`` JSON): the model writes
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``; generation pauses at ``</tool_call>``; each
  answer is a ``{"role": "tool"}`` message rendered by the chat template (``<tool_response>`` for Qwen2.5), after
  which a new assistant turn starts. Tools are shown to the model through the template's ``tools=``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from rlvr.tools.calls import ToolCall

FENCE_STOPS = ("\n```\n", "```output")
HERMES_STOPS = ("</tool_call>",)
_FENCED = re.compile(r"```([A-Za-z_][\w.\-]*)[ \t]*\n(.*?)\n?```", re.S)
_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_LANGUAGE_ALIASES = {"py": "python", "python3": "python"}


@dataclass(frozen=True)
class CallFormat:
    """One convention for writing calls and answers (see the module docstring)."""

    name: Literal["fenced", "hermes"]

    @property
    def stop(self) -> tuple[str, ...]:
        """Stop strings that pause generation at a closed call."""
        return FENCE_STOPS if self.name == "fenced" else HERMES_STOPS

    @property
    def inline(self) -> bool:
        """Answers go inside the assistant's turn (text), not as chat messages."""
        return self.name == "fenced"

    def parse(self, text: str, tool_names: set[str]) -> list[ToolCall]:
        """The calls closed in one turn's ``text`` (the stretch sampled since the last answer); [] = no call.
        A call that cannot be parsed comes back with ``error`` set (answered, never run)."""
        return _parse_fenced(text, tool_names) if self.name == "fenced" else _parse_hermes(text)

    def answer_text(self, turn_text: str, outputs: list[str]) -> str:
        """fenced: the ```output block(s) appended after ``turn_text`` (which ended at the stop string)."""
        body = "\n".join(outputs)
        if not body.endswith("\n"):
            body += "\n"
        opened = turn_text.rstrip(" \t").endswith("```output")
        return ("\n" if opened else "```output\n") + body + "```\n"

    def answer_messages(self, calls: list[ToolCall], outputs: list[str]) -> list[dict[str, Any]]:
        """hermes: one ``tool`` message per call, in call order."""
        return [{"role": "tool", "name": c.name, "content": out} for c, out in zip(calls, outputs, strict=True)]

    def instructions(self, schemas: list[dict[str, Any]]) -> str:
        """A system-prompt paragraph describing the fenced convention and the tools (hermes needs none: the chat
        template shows ``tools=`` itself)."""
        lines = ["You can use tools. To call one, write a fenced block named after it and stop; its result comes back "
                 "in an ```output block, then you go on."]
        for schema in schemas:
            fn = schema["function"]
            if fn["name"] == "python":
                lines.append("- python: write Python code in a ```python block; you see what it prints.")
            else:
                lines.append(f"- {fn['name']}: {fn.get('description', '')} Write a ```{fn['name']} block holding a "
                             f"JSON object of its arguments: {json.dumps(fn['parameters'].get('properties', {}))}")
        return "\n".join(lines)


def choose_format(name: str, chat_template: str | None) -> CallFormat:
    """``auto`` -> ``hermes`` where the chat template mentions ``<tool_call>``, else ``fenced``.

    Raises:
        ValueError: an unknown name, or ``hermes`` for a tokenizer without a chat template.
    """
    if name == "auto":
        name = "hermes" if chat_template and "<tool_call>" in chat_template else "fenced"
    if name not in ("fenced", "hermes"):
        raise ValueError(f"unknown call_format {name!r}; valid: auto, fenced, hermes")
    if name == "hermes" and not chat_template:
        raise ValueError("call_format hermes needs a chat template (the tokenizer has none): use fenced")
    return CallFormat(name)  # type: ignore[arg-type]


def _parse_fenced(text: str, tool_names: set[str]) -> list[ToolCall]:
    match = None
    for m in _FENCED.finditer(text):
        language = _LANGUAGE_ALIASES.get(m.group(1).lower(), m.group(1))
        if language in tool_names:
            match = (m, language)
    if match is None:
        return []
    m, name = match
    body = m.group(2)
    if name == "python":
        return [ToolCall("python", {"code": body}, text=m.group(0))]
    try:
        args = json.loads(body) if body.strip() else {}
    except ValueError as e:
        return [ToolCall(name, error=f"Error: the {name} block must hold a JSON object of arguments ({e}).",
                         text=m.group(0))]
    if not isinstance(args, dict):
        return [ToolCall(name, error=f"Error: the {name} block must hold a JSON object of arguments.",
                         text=m.group(0))]
    return [ToolCall(name, args, text=m.group(0))]


def _parse_hermes(text: str) -> list[ToolCall]:
    calls = []
    for m in _HERMES.finditer(text):
        body = m.group(1).strip()
        try:
            data = json.loads(body)
        except ValueError as e:
            calls.append(ToolCall("", error=f"Error: the tool call is not valid JSON ({e}).", text=m.group(0)))
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            calls.append(ToolCall("", error='Error: a tool call must be {"name": ..., "arguments": {...}}.',
                                  text=m.group(0)))
            continue
        args = data.get("arguments", data.get("parameters", {}))
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json.loads(args)
            except ValueError:
                pass
        if not isinstance(args, dict):
            calls.append(ToolCall(data["name"], error="Error: the tool call's arguments must be a JSON object.",
                                  text=m.group(0)))
            continue
        calls.append(ToolCall(data["name"], args, text=m.group(0)))
    return calls
