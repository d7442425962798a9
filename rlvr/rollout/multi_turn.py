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

Continuous batching across turns (``scheduling="continuous"``, the default on the vLLM and server engines): the same
rules per sample, without the rounds: every sample's turn is a request of its own on the engine's scheduler, a
sample whose call is answered goes on at once instead of waiting for the slowest sample of its round, and the
environment answers on a worker thread while the engine decodes (:func:`multi_turn_generate`).

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
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

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
    """Seconds in the engine (under ``continuous`` scheduling: in its polls, while the environment may be answering
    too)."""
    tool_seconds: float = 0.0
    """Seconds the environment took to answer, summed over its batches (``tools/seconds``)."""
    tool_wait_seconds: float = 0.0
    """Seconds the rollout waited for the environment with nothing decoding: all of ``tool_seconds`` in rounds; under
    ``continuous`` scheduling only the waits when every unfinished sample was waiting for an answer."""
    rounds: int = 0
    """Generation rounds (``rounds`` scheduling) or the environment's batches (``continuous``)."""

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


Scheduling = Literal["auto", "rounds", "continuous"]
"""How a multi-turn rollout's requests meet the engine (:func:`multi_turn_generate`'s ``scheduling``)."""


def multi_turn_generate(engine: RolloutEngine, tokenizer: Any, env: Environment, rows: Sequence[dict[str, Any]],
                        n: int, sampling: SamplingParams, *, max_turns: int, eos_ids: Sequence[int],
                        max_response_tokens: int | None = None, scheduling: Scheduling = "auto") -> MultiTurnRollout:
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
        scheduling: ``rounds``: every unfinished sample is generated together, then the environment answers the
            round's paused samples at once, and the next round waits for the slowest of them (any engine).
            ``continuous``: each sample is a request of its own on the engine's continuous batching
            (``engine.open_stream()``, a :class:`~rlvr.rollout.base.TurnStream`: vLLM, the rollout servers): a sample
            that paused is answered while the others decode and is sent on as soon as its answer is in; the
            environment's ``step_many`` runs on a worker thread, one batch at a time (the samples that paused while a
            batch ran form the next). Each request's seed comes from one draw of torch's RNG, the sample and its turn,
            so the draws do not depend on the order in which samples come back (the logits may still differ in the
            last bits with the make-up of the engine's batch). ``auto``: ``continuous`` where the engine has
            ``open_stream``, else ``rounds`` (the ``hf`` engine decodes a fixed batch).
    Raises:
        ValueError: ``max_turns`` < 1; an environment answering with chat messages where there is no chat template;
            ``scheduling="continuous"`` on an engine without ``open_stream``.
        TemplateNotAppendOnlyError: see :func:`answer_ids`.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    if max_response_tokens is not None and max_response_tokens < 1:
        raise ValueError(f"max_response_tokens must be >= 1, got {max_response_tokens}")
    open_stream = getattr(engine, "open_stream", None)
    if scheduling == "continuous" and open_stream is None:
        raise ValueError(f"scheduling='continuous' needs an engine with continuous batching (open_stream: vllm, "
                         f"server); {type(engine).__name__} has none: use scheduling 'rounds' or 'auto'")
    if scheduling not in ("auto", "rounds", "continuous"):
        raise ValueError(f"scheduling must be 'auto', 'rounds' or 'continuous', got {scheduling!r}")
    run = _Episodes(tokenizer, env, rows, n, sampling, max_turns, eos_ids, max_response_tokens)
    if scheduling == "rounds" or open_stream is None:
        _run_rounds(engine, run)
    else:
        _run_continuous(open_stream, run)
    return run.finish()


TurnOutcome = Literal["answer", "resume", "done"]
"""What follows a sample's stretch of sampled tokens: the environment answers it, it goes on as it is, or it ended."""


class _Episodes:
    """The samples of one multi-turn rollout and the rules of a turn, which both schedulers apply: :meth:`take` a
    stretch the engine sampled, :meth:`ask` the environment, :meth:`answer` with its reply, :meth:`context` to go on.
    Sample ``i`` is the ``i % n``-th of row ``i // n``."""

    def __init__(self, tokenizer: Any, env: Environment, rows: Sequence[dict[str, Any]], n: int,
                 sampling: SamplingParams, max_turns: int, eos_ids: Sequence[int],
                 max_response_tokens: int | None) -> None:
        self.tokenizer, self.env, self.n, self.max_turns = tokenizer, env, n, max_turns
        self.cap = max_response_tokens if max_response_tokens is not None else sys.maxsize
        self.eos = set(eos_ids)
        self.stops = tuple(dict.fromkeys((*sampling.stop, *env.stop)))
        self.sampling = dataclasses.replace(sampling, stop=self.stops)
        self.budget = sampling.max_new_tokens
        starts: list[list[Message] | str] = []
        reset_errors: dict[int, str] = {}  # row -> why its reset failed: its samples are never generated
        for k, row in enumerate(rows):
            try:
                starts.append(env.reset(row))
            except Exception as e:  # noqa: BLE001 - the environment's bug costs this row's samples, never the step
                reset_errors[k] = failure_text("reset", e)
                starts.append("")
        self.prompts = [_prompt_ids(tokenizer, start, env.tool_schemas) if k not in reset_errors else []
                        for k, start in enumerate(starts)]
        self.episodes = [Episode(row, copy.deepcopy(start)) for row, start in zip(rows, starts) for _ in range(n)]
        self.samples = [MultiTurnSample(prompt_ids=list(self.prompts[i // n])) for i in range(len(self.episodes))]
        for i, sample in enumerate(self.samples):
            if i // n in reset_errors:
                sample.episode_reward = EpisodeReward(error=reset_errors[i // n])
        count = len(self.episodes)
        self.open_turn = [""] * count  # the text of each sample's current assistant turn (sampled and inline answers)
        self.open_msg: list[Message | None] = [None] * count  # that turn's message in the conversation, once added
        self.same_turn = [False] * count  # the next stretch goes on the last turn (it paused at a block, no call)
        self.last_turn = [False] * count  # the turn being answered is the last one max_turns allows
        self.rows = len(rows)
        self.started = [k for k in range(len(rows)) if k not in reset_errors]
        self.first = [k * n + j for k in self.started for j in range(n)]
        """The samples to generate (those of rows whose reset succeeded)."""
        self.result = MultiTurnRollout([])

    def remaining(self, i: int) -> int:
        """Tokens sample ``i`` may still sample: the rest of its budget, within the response cap."""
        sample = self.samples[i]
        return min(self.budget - sample.sampled_tokens, self.cap - len(sample.token_ids))

    def context(self, i: int) -> list[int]:
        """The ids sample ``i`` goes on from: its prompt and response so far."""
        return self.samples[i].prompt_ids + self.samples[i].token_ids

    def take(self, i: int, c: Completion) -> TurnOutcome:
        """Append the stretch ``c`` the engine sampled for sample ``i`` and say what follows it."""
        sample, episode = self.samples[i], self.episodes[i]
        remaining = self.remaining(i)
        ids, lps, reason = list(c.token_ids), list(c.logprobs), c.finish_reason
        if len(ids) > remaining:  # the request ran to a longer budget than this sample's; it ends here
            ids, lps, reason = ids[:remaining], lps[:remaining], "length"
        begin = len(sample.token_ids)
        sample.token_ids += ids
        sample.logprobs += [float(x) for x in lps]
        sample.response_mask += [1] * len(ids)
        text_ids = ids[:-1] if reason == "stop" and ids and ids[-1] in self.eos else ids
        text = self.tokenizer.decode(text_ids, skip_special_tokens=False)
        self.open_turn[i] += text
        if self.same_turn[i]:  # the turn paused at a block that was no call: this stretch goes on the same turn
            turn = sample.turns[-1]
            turn.sampled, turn.text, turn.finish_reason = (turn.sampled[0], len(sample.token_ids)), \
                turn.text + text, reason
            self.same_turn[i] = False
        else:
            episode.turns += 1
            sample.turns.append(Turn((begin, len(sample.token_ids)), text, reason))
        full = sample.sampled_tokens >= self.budget or len(sample.token_ids) >= self.cap
        if reason == "length" or full and reason != "stop":
            sample.finish_reason = "length"
            return "done"
        if reason == "stop_sequence" and ids:
            try:
                waits = self.env.awaits_answer(episode, sample.turns[-1].text)
            except Exception as e:  # noqa: BLE001 - the environment's bug ends this sample, as failed
                sample.episode_reward = EpisodeReward(error=failure_text("awaits_answer", e))
                return "done"
            if not waits:
                self.same_turn[i] = True  # a closed block that is no call: not answered, costs no turn
                return "resume"
        if episode.turns >= self.max_turns and reason != "stop":
            sample.finish_reason = "max_turns"  # a call the turn budget leaves unanswered
            return "done"
        self.last_turn[i] = episode.turns >= self.max_turns  # a last turn ended with eos is shown too: it may score
        return "answer"

    def prepare(self, indices: Sequence[int]) -> None:
        """Before :meth:`ask`: the conversations of ``indices`` end with their open assistant turn."""
        _set_open_turn(self.episodes, self.open_turn, self.open_msg, indices)

    def ask(self, indices: Sequence[int]) -> list[Reply]:
        """The environment's replies to the turns of ``indices`` (one ``step_many``; after :meth:`prepare`)."""
        return _step_round(self.env, [self.episodes[i] for i in indices],
                           [self.samples[i].turns[-1].text for i in indices],
                           [self.samples[i].turns[-1].finish_reason == "stop_sequence" for i in indices])

    def answer(self, i: int, reply: Reply, seconds: float) -> bool:
        """Append the environment's ``reply`` to sample ``i``'s last turn (answered in ``seconds``); whether the sample
        goes on."""
        sample, turn = self.samples[i], self.samples[i].turns[-1]
        turn.calls, turn.tool_seconds = list(reply.calls), seconds
        if reply.done or reply.error is not None or reply.reward is not None or self.last_turn[i]:
            sample.finish_reason = "stop"  # an answer to the last allowed turn is dropped: no turn is left
            sample.episode_reward = episode_reward(reply)  # (a reward that does not end the episode: an error)
            return False
        if reply.text is None and not reply.messages and not reply.calls:  # nothing to answer: the same turn
            self.same_turn[i] = True
            self.episodes[i].turns -= 1
            return True
        if reply.text is None and not reply.messages:
            reply = dataclasses.replace(reply, text="")
        ids = _reply_ids(self.tokenizer, self.env, self.episodes[i], reply, sample, turn, self.eos)
        ids = ids[:self.cap - len(sample.token_ids)]  # an answer that does not fit is cut at the cap; the sample ends
        begin = len(sample.token_ids)
        sample.token_ids += ids
        sample.logprobs += [0.0] * len(ids)
        sample.response_mask += [0] * len(ids)
        turn.answer = (begin, len(sample.token_ids))
        if reply.text is not None:
            self.open_turn[i] += reply.text
            turn.answer_text = reply.text
        else:
            msgs = self.episodes[i].messages
            assert isinstance(msgs, list)
            msgs.extend(copy.deepcopy(reply.messages))  # the assistant's turn is closed
            self.open_turn[i], self.open_msg[i] = "", None
            turn.answer_text = self.tokenizer.decode(ids, skip_special_tokens=False)
        if len(sample.token_ids) >= self.cap or sample.sampled_tokens >= self.budget:
            sample.finish_reason = "length"
            return False
        return True

    def finish(self) -> MultiTurnRollout:
        """The rollout: every conversation closed, the samples in groups of ``n`` in row order."""
        _set_open_turn(self.episodes, self.open_turn, self.open_msg, range(len(self.episodes)), allow_empty=False)
        for sample, episode in zip(self.samples, self.episodes):
            sample.messages = episode.messages
        self.result.groups = [self.samples[k * self.n:(k + 1) * self.n] for k in range(self.rows)]
        return self.result


def _run_rounds(engine: RolloutEngine, run: _Episodes) -> None:
    """The ``rounds`` schedule: generate every unfinished sample together, then answer the round's paused samples."""
    result, n = run.result, run.n
    active = list(run.first)
    start = time.perf_counter()
    first = dataclasses.replace(run.sampling, max_new_tokens=min(run.budget, run.cap))
    groups = engine.generate([run.prompts[k] for k in run.started], n, first) if active else []
    result.generate_seconds += time.perf_counter() - start
    completions = {k * n + j: group[j] for k, group in zip(run.started, groups, strict=True) for j in range(n)}
    while active:
        result.rounds += 1
        to_step: list[int] = []
        next_active: list[int] = []  # samples that go on (those that need no answer first)
        for i in active:
            outcome = run.take(i, completions[i])
            if outcome == "answer":
                to_step.append(i)
            elif outcome == "resume":
                next_active.append(i)
        if to_step:
            run.prepare(to_step)
            start = time.perf_counter()
            replies = run.ask(to_step)
            seconds = time.perf_counter() - start
            result.tool_seconds += seconds
            result.tool_wait_seconds += seconds
            next_active += [i for i, reply in zip(to_step, replies, strict=True) if run.answer(i, reply, seconds)]
        active = next_active
        if active:
            longest = max(run.remaining(i) for i in active)
            start = time.perf_counter()
            outs = engine.generate([run.context(i) for i in active], 1,
                                   dataclasses.replace(run.sampling, max_new_tokens=longest))
            result.generate_seconds += time.perf_counter() - start
            completions = {i: g[0] for i, g in zip(active, outs, strict=True)}


def request_seed(base: int, sample: int, request: int) -> int:
    """The seed of a sample's ``request``-th request in a ``continuous`` rollout: a fixed mix of one draw of torch's
    RNG (``base``), the sample and the request, in [0, 2**31 - 1), so a sample's draws do not depend on when it came
    back."""
    return (base * 1_000_003 + sample * 7_919 + request * 104_729) % (2**31 - 1)


def _run_continuous(open_stream: Any, run: _Episodes) -> None:
    """The ``continuous`` schedule (see :func:`multi_turn_generate`): one request per sample and turn on the engine's
    stream; the environment answers on a worker thread, one batch at a time, while the engine decodes."""
    result = run.result
    base = int(torch.randint(0, 2**31 - 1, (1,)).item())
    sent = [0] * len(run.samples)  # requests per sample: their seeds
    waiting: list[int] = []  # samples paused for an answer, not yet given to the environment
    batch: list[int] = []
    asked: Future | None = None
    asked_at = 0.0
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlvr-environment")
    try:
        with open_stream() as stream:
            def send(i: int, max_new_tokens: int) -> None:
                stream.submit(i, run.context(i), dataclasses.replace(run.sampling, max_new_tokens=max_new_tokens),
                              request_seed(base, i, sent[i]))
                sent[i] += 1

            for i in run.first:
                send(i, min(run.budget, run.cap))
            while stream.pending() or waiting or asked is not None:
                if asked is not None and asked.done():
                    seconds = time.perf_counter() - asked_at
                    result.tool_seconds += seconds
                    for i, reply in zip(batch, asked.result(), strict=True):
                        if run.answer(i, reply, seconds):
                            send(i, run.remaining(i))
                    asked = None
                if asked is None and waiting:
                    batch, waiting = waiting, []
                    run.prepare(batch)
                    result.rounds += 1
                    asked_at, asked = time.perf_counter(), worker.submit(run.ask, batch)
                if stream.pending():
                    start = time.perf_counter()
                    done = stream.poll(STREAM_POLL_S)
                    result.generate_seconds += time.perf_counter() - start
                    for i, c in done:
                        outcome = run.take(i, c)
                        if outcome == "answer":
                            waiting.append(i)
                        elif outcome == "resume":
                            send(i, run.remaining(i))
                elif asked is not None:  # every unfinished sample waits for the environment
                    start = time.perf_counter()
                    wait([asked])
                    result.tool_wait_seconds += time.perf_counter() - start
    finally:
        worker.shutdown(wait=False, cancel_futures=True)


STREAM_POLL_S = 0.05
"""How long a ``continuous`` rollout waits on the engine before it looks at the environment's batch again (s)."""


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
