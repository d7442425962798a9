"""Multi-turn rollouts over any rollout engine: the model's turns alternate with an environment's answers (tool
results, feedback), token in, token out.

The loop, in rounds: every unfinished sample is generated (at the first turn ``n`` per prompt, sharing the prefill;
later rounds one per sample, each continuing its own ids) with the environment's stop strings, so a row pauses
when it closes a tool call while the other rows of the call keep decoding. A turn that pauses at a stop string
holding no call (a closed code fence in another language:
:meth:`~rlvr.tools.environment.Environment.awaits_answer` says no) is not answered and goes on as the same turn: it
costs no turn. Then the environment answers every
paused row at once (:meth:`~rlvr.tools.environment.Environment.step_many`: the tool environment sends all of the
round's python calls to the sandbox as one ``run_many``), each answer is appended, and the next round resumes those
rows. A row is done when its turn ends with eos and the environment has nothing to add, when its sampled tokens reach
``max_new_tokens`` (summed over all its turns) or its response ids reach ``max_response_tokens`` (never more: a
round samples at most the room left, an answer that does not fit is cut there) or when it has had ``max_turns``
turns. A sample whose last turn closed a call that ``max_turns`` leaves unanswered ends as ``max_turns`` and is
handed on as truncated (:meth:`MultiTurnSample.to_completion`), never as a normal stop. A last allowed turn that ends
with eos is still shown to the environment, which may end the episode there with a reward; an answer it gives to
that turn is dropped (no turn is left for it).

Token in, token out: the ids the model sampled are kept verbatim (never decoded and re-encoded). An answer's ids are
``template(prefix + messages) - template(prefix)`` (``prefix``: the conversation with the assistant's turn still
open, ``continue_final_message``), after checking that ``template(prefix)``'s ids are a prefix of the longer one
(else :class:`TemplateNotAppendOnlyError`); where the model ended its turn with an eos the template also writes, that
id is not repeated. An answer inside the assistant's turn (the fenced ```output block) has no template: its ids are
its text's tokens.

Loss mask: ``response_mask`` is 1 on the tokens the policy sampled and 0 on everything else (tool output, template
glue); ``logprobs`` holds the sampled tokens' log-probs and 0.0 under mask 0.

Episode rewards and failures: the reply that ends an episode may carry a reward (``Reply(done=True, reward=x)``),
kept in :attr:`MultiTurnSample.episode_reward` for the reward sum. An environment whose ``reset``, ``awaits_answer``
or ``step`` raises ends the samples it was handling there (a ``reset`` that raises: its row's samples are never
generated), with the error in ``episode_reward.error``: a failure of the machinery, never a score; the other samples
go on.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rlvr.data.special_text import find_special, special_strings, tokenize_split, with_placeholders
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.tools.environment import (
    CallRecord,
    Environment,
    Episode,
    EpisodeReward,
    Message,
    Reply,
    as_reply,
    episode_reward,
    failure_text,
)


class TemplateNotAppendOnlyError(ValueError):
    """The chat template rendered the conversation's prefix differently once messages were appended (it rewrites
    earlier turns), so an answer's ids cannot be the difference of two renderings."""


@dataclass
class Turn:
    """One assistant turn and what answered it. Offsets index the sample's response ids."""

    sampled: tuple[int, int]
    """[start, end) of the ids the policy sampled in this turn (mask 1)."""
    text: str
    """Those ids decoded (without a final eos)."""
    finish_reason: str
    """How the stretch ended: ``stop`` (eos), ``stop_sequence`` (a stop string, e.g. a closed call), ``length``."""
    answer: tuple[int, int] | None = None
    """[start, end) of the environment's ids after this turn (mask 0), or None."""
    answer_text: str | None = None
    calls: list[CallRecord] = field(default_factory=list)
    tool_seconds: float = 0.0
    """Wall-clock seconds of the environment round that answered this turn (shared by the round's samples)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class MultiTurnSample:
    """One sample: ``token_ids`` are the response (everything after ``prompt_ids``: sampled turns, answers and glue),
    ``logprobs`` and ``response_mask`` of the same length."""

    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    finish_reason: Literal["stop", "length", "max_turns"] = "stop"
    """``stop``: the last turn ended with eos (or the environment ended the episode); ``length``: the sampled-token
    budget (or ``max_response_tokens``) ran out, truncated; ``max_turns``: the last turn closed a call that the turn
    budget left unanswered."""
    turns: list[Turn] = field(default_factory=list)
    messages: list[Message] | str = field(default_factory=list)
    """The whole conversation (the final assistant turn included)."""
    episode_reward: EpisodeReward = field(default_factory=EpisodeReward)
    """The environment's reward for the episode (the reply that ended it), or its error; empty when the environment
    gave none (the turn or token budget ended the episode first, or it ended it without a reward)."""

    @property
    def final_text(self) -> str:
        """The last turn's text: what the model answered after its last tool result (what rewards see)."""
        return self.turns[-1].text if self.turns else ""

    @property
    def sampled_tokens(self) -> int:
        return sum(self.response_mask)

    @property
    def calls(self) -> list[CallRecord]:
        return [c for t in self.turns for c in t.calls]

    def trajectory(self) -> list[dict[str, Any]]:
        """The turns, their calls and outputs, as plain data (for a verifier that asks for it, and samples/*.jsonl)."""
        return [t.to_dict() for t in self.turns]

    def to_completion(self) -> Completion:
        """As an engine :class:`Completion` (ids and log-probs of the whole response; ``length`` when truncated, at
        a token cap or at ``max_turns`` with a call unanswered: rewards and the trainer treat it as cut, e.g.
        ``algorithm.mask_truncated`` drops it from the loss; else ``stop``); the mask is not in it: read
        ``response_mask``."""
        return Completion(list(self.token_ids), list(self.logprobs), "stop" if self.finish_reason == "stop"
                          else "length")


@dataclass
class MultiTurnRollout:
    """The samples (groups in prompt order, ``n`` each) and where the time went."""

    groups: list[list[MultiTurnSample]]
    generate_seconds: float = 0.0
    tool_seconds: float = 0.0
    rounds: int = 0

    def metrics(self) -> dict[str, float]:
        """``tools/*`` metrics of this rollout."""
        samples = [s for g in self.groups for s in g]
        calls = [c for s in samples for c in s.calls]
        n = max(len(samples), 1)
        return {
            "tools/calls_per_sample": len(calls) / n,
            "tools/error_rate": sum(c.status != "ok" for c in calls) / len(calls) if calls else 0.0,
            "tools/timeouts": float(sum(c.status == "timeout" for c in calls)),
            "tools/truncated_outputs": float(sum(c.truncated for c in calls)),
            "tools/turns_per_sample": sum(len(s.turns) for s in samples) / n,
            "tools/fraction_of_samples_calling": sum(bool(s.calls) for s in samples) / n,
            "tools/seconds": self.tool_seconds,
            "tools/generate_seconds": self.generate_seconds,
        }


def template_ids(tokenizer: Any, messages: list[Message], tools: list[dict] | None = None, **kwargs: Any) -> list[int]:
    """The chat template's ids of ``messages`` (rendered, then tokenized without added special tokens, as
    ``apply_chat_template(tokenize=True)`` does).

    Message text never becomes a control token: a message whose content holds a special token's string (a tool
    printing ``<|im_end|>``, a question quoting one) is rendered with a placeholder there, and its text tokenized
    with special tokens split (:func:`rlvr.data.special_text.tokenize_split`); the template's own control tokens
    stay. Messages without such strings are tokenized as the whole rendering at once.

    Raises:
        ValueError: the template dropped a message's content that had to be split.
    """
    specials = special_strings(tokenizer)
    split = [i for i, m in enumerate(messages)
             if isinstance(m.get("content"), str) and find_special(m["content"], specials) is not None]
    if not split:
        text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    marks, texts = with_placeholders([messages[i]["content"] for i in split])
    shown = [dict(m) for m in messages]
    for i, mark in zip(split, marks, strict=True):
        shown[i]["content"] = mark
    rendered = tokenizer.apply_chat_template(shown, tools=tools, tokenize=False, **kwargs)
    return tokenize_split(tokenizer, rendered, texts)


def answer_ids(tokenizer: Any, prefix: list[Message], answer: list[Message], tools: list[dict] | None = None,
               sampled_last: int | None = None) -> list[int]:
    """The ids of ``answer`` appended to ``prefix``, whose last message is the assistant's open turn:
    ``template(prefix + answer) - template(prefix)``.

    Args:
        sampled_last: the turn's last sampled id when the turn ended with eos: dropped from the front of the answer
            where the template writes it too (the policy already sampled it).
    Raises:
        TemplateNotAppendOnlyError: the longer rendering does not start with the shorter one's ids.
    """
    before = template_ids(tokenizer, prefix, tools, continue_final_message=True)
    after = template_ids(tokenizer, prefix + answer, tools, add_generation_prompt=True)
    if after[:len(before)] != before:
        at = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
        raise TemplateNotAppendOnlyError(
            f"the chat template changed the conversation's first {len(before)} ids when {len(answer)} message(s) "
            f"were appended (first difference at id {at}): answers cannot be appended token by token with this "
            "template; use call_format fenced or a template that only appends")
    ids = after[len(before):]
    if sampled_last is not None and ids[:1] == [sampled_last]:
        ids = ids[1:]
    return ids


def multi_turn_generate(engine: RolloutEngine, tokenizer: Any, env: Environment, rows: Sequence[dict[str, Any]],
                        n: int, sampling: SamplingParams, *, max_turns: int, eos_ids: Sequence[int],
                        max_response_tokens: int | None = None) -> MultiTurnRollout:
    """Sample ``n`` multi-turn responses per row (see the module docstring).

    Args:
        engine: any :class:`~rlvr.rollout.base.RolloutEngine` that honours ``SamplingParams.stop``.
        tokenizer: the policy's tokenizer (chat template, decoding a turn's text).
        env: answers between turns; ``env.reset(row)`` gives each prompt, ``env.stop`` pauses turns.
        sampling: ``max_new_tokens`` counts the sampled tokens of a sample over all its turns; ``stop`` is extended
            with ``env.stop``.
        max_turns: assistant turns per sample.
        eos_ids: ids that end a turn.
        max_response_tokens: optional cap on a response's ids (sampled and answers: the context a sample may use
            beyond its prompt), never exceeded; a sample reaching it ends as ``length``.
    Raises:
        ValueError: ``max_turns`` < 1; an environment answering with chat messages where there is no chat template.
        TemplateNotAppendOnlyError: see :func:`answer_ids`.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    if max_response_tokens is not None and max_response_tokens < 1:
        raise ValueError(f"max_response_tokens must be >= 1, got {max_response_tokens}")
    cap = max_response_tokens if max_response_tokens is not None else sys.maxsize
    eos = set(eos_ids)
    stops = tuple(dict.fromkeys((*sampling.stop, *env.stop)))
    starts: list[list[Message] | str] = []
    reset_errors: dict[int, str] = {}  # row -> why its reset failed: its samples are never generated
    for k, row in enumerate(rows):
        try:
            starts.append(env.reset(row))
        except Exception as e:  # noqa: BLE001 - the environment's bug costs this row's samples, never the step
            reset_errors[k] = failure_text("reset", e)
            starts.append("")
    prompts = [_prompt_ids(tokenizer, start, env.tool_schemas) if k not in reset_errors else []
               for k, start in enumerate(starts)]
    episodes = [Episode(row, copy.deepcopy(start)) for row, start in zip(rows, starts) for _ in range(n)]
    samples = [MultiTurnSample(prompt_ids=list(prompts[i // n])) for i in range(len(episodes))]
    for i, sample in enumerate(samples):
        if i // n in reset_errors:
            sample.episode_reward = EpisodeReward(error=reset_errors[i // n])
    open_turn = [""] * len(episodes)  # the text of each sample's current assistant turn (sampled and inline answers)
    open_msg: list[Message | None] = [None] * len(episodes)  # that turn's message in the conversation, once added
    same_turn = [False] * len(episodes)  # the next stretch goes on the last turn (it paused at a block, no call)
    last_turn = [False] * len(episodes)  # the turn being answered is the last one max_turns allows
    result = MultiTurnRollout([])
    budget = sampling.max_new_tokens

    started = [k for k in range(len(rows)) if k not in reset_errors]
    active = [k * n + j for k in started for j in range(n)]
    start = time.perf_counter()
    first = min(budget, cap)
    groups = engine.generate([prompts[k] for k in started], n,
                             dataclasses.replace(sampling, stop=stops, max_new_tokens=first)) if active else []
    result.generate_seconds += time.perf_counter() - start
    completions = {k * n + j: group[j] for k, group in zip(started, groups, strict=True) for j in range(n)}
    while active:
        result.rounds += 1
        to_step: list[int] = []
        goes_on: list[int] = []  # rows that continue without an answer
        for i in active:
            sample, episode, c = samples[i], episodes[i], completions[i]
            remaining = min(budget - sample.sampled_tokens, cap - len(sample.token_ids))
            ids, lps, reason = list(c.token_ids), list(c.logprobs), c.finish_reason
            if len(ids) > remaining:  # the round ran to the longest remaining budget; this row's ends here
                ids, lps, reason = ids[:remaining], lps[:remaining], "length"
            begin = len(sample.token_ids)
            sample.token_ids += ids
            sample.logprobs += [float(x) for x in lps]
            sample.response_mask += [1] * len(ids)
            text_ids = ids[:-1] if reason == "stop" and ids and ids[-1] in eos else ids
            text = tokenizer.decode(text_ids, skip_special_tokens=False)
            open_turn[i] += text
            if same_turn[i]:  # the turn paused at a block that was no call: this stretch goes on the same turn
                turn = sample.turns[-1]
                turn.sampled, turn.text, turn.finish_reason = (turn.sampled[0], len(sample.token_ids)), \
                    turn.text + text, reason
                same_turn[i] = False
            else:
                episode.turns += 1
                sample.turns.append(Turn((begin, len(sample.token_ids)), text, reason))
            full = sample.sampled_tokens >= budget or len(sample.token_ids) >= cap
            if reason == "length" or full and reason != "stop":
                sample.finish_reason = "length"
                continue
            if reason == "stop_sequence" and ids:
                try:
                    waits = env.awaits_answer(episode, sample.turns[-1].text)
                except Exception as e:  # noqa: BLE001 - the environment's bug ends this sample, as failed
                    sample.episode_reward = EpisodeReward(error=failure_text("awaits_answer", e))
                    continue
                if not waits:
                    same_turn[i] = True  # a closed block that is no call: not answered, costs no turn
                    goes_on.append(i)
                    continue
            if episode.turns >= max_turns and reason != "stop":
                sample.finish_reason = "max_turns"  # a call the turn budget leaves unanswered
                continue
            to_step.append(i)  # the last allowed turn, ended with eos, is shown too: the environment may reward it
            last_turn[i] = episode.turns >= max_turns
        replies: list[Reply] = []
        if to_step:
            _set_open_turn(episodes, open_turn, open_msg, to_step)
            start = time.perf_counter()
            replies = _step_round(env, [episodes[i] for i in to_step], [samples[i].turns[-1].text for i in to_step],
                                  [samples[i].turns[-1].finish_reason == "stop_sequence" for i in to_step])
            seconds = time.perf_counter() - start
            result.tool_seconds += seconds
        next_active = list(goes_on)
        for i, reply in zip(to_step, replies, strict=True):
            sample, turn = samples[i], samples[i].turns[-1]
            turn.calls, turn.tool_seconds = list(reply.calls), seconds
            if reply.done or reply.error is not None or reply.reward is not None or last_turn[i]:
                sample.finish_reason = "stop"  # an answer to the last allowed turn is dropped: no turn is left
                sample.episode_reward = episode_reward(reply)  # (a reward that does not end the episode: an error)
                continue
            if reply.text is None and not reply.messages and not reply.calls:  # nothing to answer: the same turn
                same_turn[i] = True
                episodes[i].turns -= 1
                next_active.append(i)
                continue
            if reply.text is None and not reply.messages:
                reply = dataclasses.replace(reply, text="")
            ids = _reply_ids(tokenizer, env, episodes[i], reply, sample, turn, eos)
            ids = ids[:cap - len(sample.token_ids)]  # an answer that does not fit is cut at the cap; the sample ends
            begin = len(sample.token_ids)
            sample.token_ids += ids
            sample.logprobs += [0.0] * len(ids)
            sample.response_mask += [0] * len(ids)
            turn.answer = (begin, len(sample.token_ids))
            if reply.text is not None:
                open_turn[i] += reply.text
                turn.answer_text = reply.text
            else:
                msgs = episodes[i].messages
                assert isinstance(msgs, list)
                msgs.extend(copy.deepcopy(reply.messages))  # the assistant's turn is closed
                open_turn[i], open_msg[i] = "", None
                turn.answer_text = tokenizer.decode(ids, skip_special_tokens=False)
            if len(sample.token_ids) >= cap:
                sample.finish_reason = "length"
            elif sample.sampled_tokens >= budget:
                sample.finish_reason = "length"
            else:
                next_active.append(i)
        active = next_active
        if active:
            remaining = max(min(budget - samples[i].sampled_tokens, cap - len(samples[i].token_ids)) for i in active)
            start = time.perf_counter()
            outs = engine.generate([samples[i].prompt_ids + samples[i].token_ids for i in active], 1,
                                   dataclasses.replace(sampling, stop=stops, max_new_tokens=remaining))
            result.generate_seconds += time.perf_counter() - start
            completions = {i: g[0] for i, g in zip(active, outs, strict=True)}
    _set_open_turn(episodes, open_turn, open_msg, range(len(episodes)), allow_empty=False)
    for sample, episode in zip(samples, episodes):
        sample.messages = episode.messages
    result.groups = [samples[k * n:(k + 1) * n] for k in range(len(rows))]
    return result


def _step_round(env: Environment, episodes: list[Episode], messages: list[str], stopped: list[bool]) -> list[Reply]:
    """``env.step_many`` on one round, each answer as a :class:`Reply`; a ``step_many`` that raises (or returns the
    wrong number of answers) fails the round's samples, an answer that is no reply fails its own sample."""
    try:
        answers = env.step_many(episodes, messages, stopped)
        if len(answers) != len(episodes):
            raise ValueError(f"step_many returned {len(answers)} replies for {len(episodes)} turns")
    except Exception as e:  # noqa: BLE001 - the environment's bug costs the samples it was answering
        return [Reply(done=True, error=failure_text("step_many", e)) for _ in episodes]
    replies = []
    for answer in answers:
        try:
            replies.append(as_reply(answer))
        except TypeError as e:
            replies.append(Reply(done=True, error=failure_text("step_many", e)))
    return replies


def _prompt_ids(tokenizer: Any, start: list[Message] | str, tools: list[dict] | None) -> list[int]:
    if isinstance(start, str):
        return tokenizer(start, add_special_tokens=False)["input_ids"]
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the environment starts from chat messages but the tokenizer has no chat template: start "
                         "from a plain-text prompt (a str) instead")
    return template_ids(tokenizer, start, tools, add_generation_prompt=True)


def _set_open_turn(episodes: list[Episode], open_turn: list[str], open_msg: list[Message | None], indices: Any,
                   allow_empty: bool = True) -> None:
    """Make each episode's conversation end with its open assistant turn, holding the turn's text so far (a plain-text
    episode is left as it is)."""
    for i in indices:
        msgs = episodes[i].messages
        if isinstance(msgs, str):
            continue
        if open_msg[i] is None:
            if not (open_turn[i] or allow_empty):
                continue
            open_msg[i] = {"role": "assistant", "content": ""}
            msgs.append(open_msg[i])
        open_msg[i]["content"] = open_turn[i]


def _reply_ids(tokenizer: Any, env: Environment, episode: Episode, reply: Reply, sample: MultiTurnSample,
               turn: Turn, eos: set[int]) -> list[int]:
    if reply.text is not None:  # text inside the assistant's turn (a tool's output): never a control token
        return tokenizer(reply.text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    if isinstance(episode.messages, str):
        raise ValueError("the environment answered with chat messages, but the sample is plain text (no chat "
                         "template): answer with Reply(text=...) instead")
    last = sample.token_ids[turn.sampled[1] - 1] if turn.finish_reason == "stop" and turn.sampled[1] > \
        turn.sampled[0] else None
    return answer_ids(tokenizer, list(episode.messages), list(reply.messages), env.tool_schemas,
                      sampled_last=last if last in eos else None)
