"""Environments: what answers the model between its turns. One interface for every kind:

- ``reset(row) -> messages``: the conversation a sample starts from (chat messages; or plain text for a model
  without a chat template).
- ``step(episode, assistant_message) -> messages | Reply | None``: the answer to the turn the model just ended
  (its text since the last answer): chat messages to append (a tool result, a checker's feedback, a game's move, a
  simulated user), or None when the episode is over.

A tool list is the simplest such environment (:class:`ToolEnvironment`): it answers a closed call with the tool's
output and is done when a turn has no call. Environments that answer a whole round at once (the tool environment
batches all paused samples' calls into one sandbox ``run_many``) override ``step_many``.

Example: a checker that gives the model a second try::

    class SecondChance(Environment):
        def reset(self, row):
            return [{"role": "user", "content": row["question"]}]

        def step(self, episode, assistant_message):
            if episode.turns >= 2 or episode.row["answer"] in assistant_message:
                return None                                   # done: rewards see this last answer
            return [{"role": "user", "content": "That is not right. Check your work and answer again."}]

Example: tools::

    env = ToolEnvironment([PythonTool(), FunctionTool(lookup, kwargs={"table": "x.csv"})],
                          choose_format("auto", tokenizer.chat_template), tokenizer)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.tools.calls import Tool, ToolCall, ToolResult
from rlvr.tools.formats import CallFormat
from rlvr.tools.truncate import cut_middle

Message = dict[str, Any]


@dataclass
class Reply:
    """An environment's answer to one turn: chat ``messages`` (rendered through the chat template, then a new
    assistant turn), or ``text`` appended inside the assistant's own turn (the fenced ```output block), or
    ``done``. ``calls`` records the tool calls it ran (trace and metrics)."""

    messages: list[Message] = field(default_factory=list)
    text: str | None = None
    done: bool = False
    calls: list[CallRecord] = field(default_factory=list)


@dataclass
class CallRecord:
    """One tool call as the trace keeps it."""

    name: str
    arguments: dict[str, Any]
    output: str
    """What the model was shown (after the token cut)."""
    status: str
    seconds: float
    truncated: bool = False
    text: str = ""
    """The call as the model wrote it."""


@dataclass
class Episode:
    """One sample's state across its turns: its dataset ``row``, the conversation so far (``messages``; the current
    assistant turn is the last message while it is open), ``turns`` ended so far, and ``data``: a dict private to this
    sample for the environment (tool sessions live under ``data["sessions"][tool]``)."""

    row: dict[str, Any]
    messages: list[Message] | str
    turns: int = 0
    data: dict[str, Any] = field(default_factory=dict)


class Environment:
    """Base class (see the module docstring). ``stop``: stop strings that end a turn besides eos (a closed tool call);
    ``tool_schemas``: the tools passed to the chat template's ``tools=`` (None: none)."""

    stop: tuple[str, ...] = ()
    tool_schemas: list[dict[str, Any]] | None = None

    def reset(self, row: dict[str, Any]) -> list[Message] | str:
        """The conversation a sample of ``row`` starts from (default: ``row["messages"]``, or ``row["prompt"]``)."""
        return row["messages"] if "messages" in row else row["prompt"]

    def step(self, episode: Episode, assistant_message: str) -> list[Message] | Reply | None:
        """The answer to the turn that just ended (default: none, the episode ends after one turn)."""
        return None

    def step_many(self, episodes: Sequence[Episode], assistant_messages: Sequence[str],
                  ended_by_stop: Sequence[bool]) -> list[Reply]:
        """:meth:`step` for a round of samples (override to batch); ``ended_by_stop[i]``: the turn ended at one of
        :attr:`stop` (else with eos)."""
        return [as_reply(self.step(e, m)) for e, m in zip(episodes, assistant_messages, strict=True)]


def as_reply(answer: list[Message] | Reply | None) -> Reply:
    """A ``step`` result as a :class:`Reply` (None = done; a list = chat messages)."""
    if answer is None:
        return Reply(done=True)
    if isinstance(answer, Reply):
        return answer
    return Reply(messages=list(answer))


class ToolEnvironment(Environment):
    """Tools as an environment: a turn that ends at a closed call is answered with the call's result; a turn that
    ends without one (eos) ends the episode.

    Args:
        tools: the tools (names unique).
        call_format: how calls are written and answered (:func:`rlvr.tools.formats.choose_format`).
        tokenizer: counts tokens for the output cut.
        max_tool_output_tokens: an answer longer than this is cut in the middle (marked).
        instructions: for the fenced format, add a system paragraph that describes the convention and the tools
            (to the first system message, or as a new one).
    Raises:
        ValueError: two tools with one name.
    """

    def __init__(self, tools: Sequence[Tool], call_format: CallFormat, tokenizer: Any,
                 max_tool_output_tokens: int = 256, instructions: bool = True) -> None:
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique, got {names}")
        self.tools = {t.name: t for t in tools}
        self.format = call_format
        self.tokenizer = tokenizer
        self.max_tool_output_tokens = max_tool_output_tokens
        self.instructions = instructions
        self.stop = call_format.stop
        schemas = [t.schema for t in tools]
        self.tool_schemas = schemas if call_format.name == "hermes" else None

    def reset(self, row: dict[str, Any]) -> list[Message] | str:
        start = super().reset(row)
        if not self.instructions or self.format.name != "fenced":
            return start
        text = self.format.instructions([t.schema for t in self.tools.values()])
        if isinstance(start, str):
            return text + "\n\n" + start
        messages = [dict(m) for m in start]
        if messages and messages[0]["role"] == "system":
            messages[0]["content"] = f"{messages[0]['content']}\n\n{text}"
        else:
            messages.insert(0, {"role": "system", "content": text})
        return messages

    def step_many(self, episodes: Sequence[Episode], assistant_messages: Sequence[str],
                  ended_by_stop: Sequence[bool]) -> list[Reply]:
        replies: list[Reply] = []
        pending: list[tuple[int, int, ToolCall]] = []  # (sample, call index, call) to run
        per_sample: list[list[ToolCall]] = []
        for i, (text, stopped) in enumerate(zip(assistant_messages, ended_by_stop, strict=True)):
            calls = self.format.parse(text, set(self.tools)) if stopped else []
            if stopped and not calls and self.format.name == "hermes":
                calls = [ToolCall("", error="Error: a tool call must be <tool_call>{...}</tool_call>.", text=text)]
            calls = calls[-1:] if self.format.inline else calls  # fenced: the block the turn closed
            per_sample.append(calls)
            replies.append(Reply(done=not stopped))  # eos ends the episode; a stop with no call goes on
            for j, call in enumerate(calls):
                if call.error is None and call.name not in self.tools:
                    call.error = f"Error: unknown tool {call.name!r}; tools: {', '.join(self.tools)}."
                if call.error is None:
                    pending.append((i, j, call))
        results: dict[tuple[int, int], ToolResult] = {}
        for name, tool in self.tools.items():
            batch = [(i, j, c) for i, j, c in pending if c.name == name]
            if not batch:
                continue
            sessions = [episodes[i].data.setdefault("sessions", {}).setdefault(name, {}) for i, _, _ in batch]
            start = time.perf_counter()
            try:
                outs = tool.run_batch([c.arguments for _, _, c in batch], sessions)
            except Exception as e:  # noqa: BLE001 - a tool that breaks its contract still never fails the step
                seconds = (time.perf_counter() - start) / len(batch)
                message = f"Error: {name} failed: {type(e).__name__}: {e}"[:600]
                outs = [ToolResult(message, "error", seconds)] * len(batch)
            for (i, j, _), out in zip(batch, outs, strict=True):
                results[(i, j)] = out
        for i, calls in enumerate(per_sample):
            if not calls:
                continue
            outputs, records = [], []
            for j, call in enumerate(calls):
                result = results.get((i, j)) or ToolResult(call.error or "Error: the call did not run.", "malformed")
                shown, cut = cut_middle(result.output, self.max_tool_output_tokens, self.tokenizer)
                outputs.append(shown)
                records.append(CallRecord(call.name, call.arguments, shown, result.status, result.seconds, cut,
                                          call.text))
            if self.format.inline:
                replies[i] = Reply(text=self.format.answer_text(assistant_messages[i], outputs), calls=records)
            else:
                replies[i] = Reply(messages=self.format.answer_messages(calls, outputs), calls=records)
        return replies
