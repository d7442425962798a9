"""Environments: what answers the model between its turns. One interface for every kind:

- ``reset(row) -> messages``: the conversation a sample starts from (chat messages; or plain text for a model
  without a chat template). ``row`` is the sample's dataset row: its ``prompt_index`` and fields, without the gold
  fields unless the recipe says ``rollout.environment_sees_gold: true`` (:mod:`rlvr.rollout.tool_sampler`), with
  ``messages`` (the rendered conversation) or ``prompt`` (the prompt text).
- ``step(episode, assistant_message) -> messages | Reply | None``: the answer to the turn the model just ended
  (its text since the last answer): chat messages to append (a tool result, a checker's feedback, a game's move, a
  simulated user), or None when the episode is over, or ``Reply(done=True, reward=x)``: over, with a reward that
  enters the sample's reward sum beside the verifiers' (``rollout.environment_reward_weight`` x ``x``, logged as
  ``reward/env``).

A tool list is the simplest such environment (:class:`ToolEnvironment`): it answers a closed call with the tool's
output and is done when a turn has no call. Environments that answer a whole round at once (the tool environment
batches all paused samples' calls into one sandbox ``run_many``) override ``step_many``.

An environment that raises (its own bug, not the policy's) costs the sample it was answering, never the step: the
sample ends there and is a failure of the machinery, like a verifier that raised (left out of the loss and counted,
``reward.failure_score``). A ``step_many`` that raises costs the samples of its round.

Example: a checker that gives the model a second try (it reads the gold: ``environment_sees_gold: true``)::

    class SecondChance(Environment):
        def reset(self, row):
            return [{"role": "user", "content": row["question"]}]

        def step(self, episode, assistant_message):
            if episode.row["answer"] in assistant_message:
                return Reply(done=True, reward=1.0 if episode.turns == 1 else 0.5)
            if episode.turns >= 2:
                return Reply(done=True, reward=0.0)
            return [{"role": "user", "content": "That is not right. Check your work and answer again."}]

Example: tools::

    env = ToolEnvironment([PythonTool(), FunctionTool(lookup, kwargs={"table": "x.csv"})],
                          choose_format("auto", tokenizer.chat_template), tokenizer)

A recipe names an environment as ``rollout.environment: package.module:ClassName``
(:func:`rlvr.tools.loading.build_environment`); the number-guessing game
:class:`rlvr.tools.envs.number_guessing.NumberGuessing` is a worked example.
"""

from __future__ import annotations

import math
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
    reward: float | None = None
    """With ``done``: the episode's reward (a finite number), added to the sample's reward sum with weight
    ``rollout.environment_reward_weight``. None: the environment gives none (it adds nothing). A reward on a reply
    that does not end the episode is an error of the environment."""
    error: str | None = None
    """Set (with ``done``) when the environment failed on this sample: a failure of the machinery, never a score (the
    base :meth:`Environment.step_many` sets it when ``step`` raises; an overriding ``step_many`` may set it for one
    sample instead of raising for the round)."""


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


@dataclass(frozen=True)
class EpisodeReward:
    """How an episode ended for the rewards: the environment's ``reward`` (None: it gave none, e.g. the turn or token
    budget ended the episode first) or its ``error`` (it raised: the sample failed for the machinery)."""

    reward: float | None = None
    error: str | None = None


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

    def awaits_answer(self, episode: Episode, assistant_message: str) -> bool:
        """Whether a turn that paused at one of :attr:`stop` waits for an answer (default: yes). No: the turn goes on
        unanswered and costs no turn (a closed code fence that is no tool call)."""
        return True

    def step_many(self, episodes: Sequence[Episode], assistant_messages: Sequence[str],
                  ended_by_stop: Sequence[bool]) -> list[Reply]:
        """:meth:`step` for a round of samples (override to batch); ``ended_by_stop[i]``: the turn ended at one of
        :attr:`stop` (else with eos). A ``step`` that raises ends its own sample as failed (``Reply.error``)."""
        replies = []
        for episode, message in zip(episodes, assistant_messages, strict=True):
            try:
                replies.append(as_reply(self.step(episode, message)))
            except Exception as e:  # noqa: BLE001 - the environment's bug costs this sample, never the round
                replies.append(Reply(done=True, error=failure_text("step", e)))
        return replies


def as_reply(answer: list[Message] | Reply | None) -> Reply:
    """A ``step`` result as a :class:`Reply` (None = done; a list = chat messages).

    Raises:
        TypeError: something else.
    """
    if answer is None:
        return Reply(done=True)
    if isinstance(answer, Reply):
        return answer
    if isinstance(answer, (list, tuple)):
        return Reply(messages=list(answer))
    raise TypeError(f"step returned a {type(answer).__name__}; expected a list of chat messages, a Reply or None")


def failure_text(where: str, error: BaseException) -> str:
    """One line saying that the environment's ``where`` (``reset``, ``step``, ...) raised ``error``."""
    return f"the environment's {where} raised {type(error).__name__}: {error}"[:600]


def episode_reward(reply: Reply) -> EpisodeReward:
    """What ``reply`` (the last of an episode, or one that failed) gives the rewards; a reward that is not a finite
    number, or one on a reply that does not end the episode, is the environment's error."""
    if reply.error is not None:
        return EpisodeReward(error=reply.error)
    if reply.reward is None:
        return EpisodeReward()
    if not reply.done:
        return EpisodeReward(error=f"the environment gave a reward ({reply.reward!r}) on a reply that does not end "
                                   "the episode (Reply(done=True, reward=...) ends it)")
    if isinstance(reply.reward, bool) or not isinstance(reply.reward, (int, float)) or \
            not math.isfinite(reply.reward):
        return EpisodeReward(error=f"the environment's reward {reply.reward!r} is not a finite number")
    return EpisodeReward(reward=float(reply.reward))


class ToolEnvironment(Environment):
    """Tools as an environment: a turn that ends at a closed call is answered with the call's result; a turn that
    ends without one (eos) ends the episode. A tool whose ``wants_row`` is true gets each call's sample row
    (``run_batch(..., rows=)``: the row ``reset`` got).

    A recipe's environment that also has ``rollout.tools`` subclasses this class: it is built with the tools, the
    call format, the tokenizer and ``max_tool_output_tokens`` (then its own ``environment_kwargs``), and extends
    :meth:`step_many` (e.g. ends the episode with a reward where the tools' answer is done).

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

    def awaits_answer(self, episode: Episode, assistant_message: str) -> bool:
        """hermes: always (a closed ``<tool_call>``, malformed or not, is answered); fenced: when the text closes a
        block named after a tool."""
        return self.format.name == "hermes" or bool(self.format.parse(assistant_message, set(self.tools)))

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
            arguments = [c.arguments for _, _, c in batch]
            start = time.perf_counter()
            try:
                if getattr(tool, "wants_row", False):  # the tool declared a parameter for its sample's row
                    outs = tool.run_batch(arguments, sessions, rows=[episodes[i].row for i, _, _ in batch])
                else:
                    outs = tool.run_batch(arguments, sessions)
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
