"""The ``judge`` verifier: a model behind an OpenAI-compatible chat endpoint scores a response (RLAIF, a generative
reward model), for what rules cannot check.

A recipe::

    verifiers:
      - name: math
      - name: judge
        fallback_for: math          # only where the math verifier cannot read the answer (optional)
        timeout_s: 120              # per sample; a step's samples go to the judge in one call of n x timeout_s
        kwargs: {url: "http://judge-host:8000/v1", model: "Qwen/Qwen2.5-7B-Instruct", verdict: score_line,
                 score_range: [0, 10]}

What the judge sees: a prompt made from ``template`` (a built-in, ``default``, or text with ``{question}``,
``{gold}``, ``{response}``, ``{low}``, ``{high}``) with the sample's question (``question_field``, else the rendered
prompt), its gold answer (``answer_field``; the template's gold part is left out where there is none) and the
response, whose reasoning (``<think>...</think>``) is stripped first (``strip_reasoning``). Chat control markers in
all three are broken up (:func:`rlvr.verifiers.judge_verdict.defuse_markers`): a response cannot close the judge's
turn. The verdict is read as ``verdict`` says (:mod:`rlvr.verifiers.judge_verdict`) and mapped from ``score_range``
to [0, 1].

Returns ``{"score", "judge_score" (on the judge's own scale), "raw" (the judge's reply, or its first-token
candidates), "latency_s", "requests"}``. A judge that times out, is down, refuses, or answers something that holds no
verdict makes the sample a failure of the machinery: it raises :class:`JudgeError`, whose message keeps the raw reply
(``RewardResult.failures``), and the trainer leaves the sample out of its group, never scoring it 0.

Throughput: the registry's batch hook sends all of a step's samples to one worker call, which asks the judge
``concurrency`` questions at a time on one connection pool, retrying transient failures
(:mod:`rlvr.verifiers.judge_client`). Cache: the verifier's ``cache_key`` is (model, verdict, score range, the
rendered prompt: template + question + gold + stripped response, generation settings), so a
:class:`rlvr.verifiers.reward.RewardFunction` asks the judge once per distinct question in a batch and across steps;
failures are not cached. Per step the trainer logs ``reward/calls/judge``, ``reward/cache_hits/judge``,
``reward/latency_s/judge``, ``reward/requests/judge``, ``reward/infra_failures/judge`` and, where the solved verifier
also scored, ``reward/agreement/judge`` and ``reward/accepts_wrong/judge``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlvr.verifiers.judge_client import JudgeServiceError, shared_client
from rlvr.verifiers.judge_verdict import (
    VERDICTS,
    VerdictError,
    check_range,
    defuse_markers,
    normalized,
    read_json_score,
    read_score_line,
    strip_reasoning,
    yes_probability,
)
from rlvr.verifiers.registry import verifier

RAW_CHARS = 2000
"""Most characters of the judge's reply kept with a sample (in its extras, or its failure message)."""
TOP_LOGPROBS = 20

_ASK = {
    "score_line": 'End your reply with one line "Score: N", where N is a number from {low} (wrong) to {high} (right).',
    "json": 'End your reply with a JSON object {"score": N}, where N is a number from {low} (wrong) to {high} (right).',
    "yes_no_logprob": "Answer with one word: yes or no.",
}
_WITH_GOLD = ("You are grading a response to a problem against the reference answer.\n\n"
              "Problem:\n{question}\n\nReference answer:\n{gold}\n\nResponse:\n{response}\n\n"
              "Is the response's final answer equivalent to the reference answer? Judge the final answer only. ")
_WITHOUT_GOLD = ("You are grading a response to a problem.\n\nProblem:\n{question}\n\nResponse:\n{response}\n\n"
                 "Is the response a correct and complete answer to the problem? ")
TEMPLATES = ("default",)
_PLACEHOLDER = re.compile(r"\{(question|gold|response|low|high)\}")


class JudgeError(RuntimeError):
    """The judge could not score a sample (service down or timed out, a refusal, no readable verdict): a failure of
    the machinery. The message says why and keeps the judge's raw reply where there was one."""


def judge_prompt(template: str, verdict: str, question: str, gold: str | None, response: str,
                 score_range: tuple[float, float]) -> str:
    """The user message for one sample: ``template`` (``default``, or text with placeholders) filled in. The built-in
    uses the gold where there is one and asks for the verdict in ``verdict``'s form. Raises ValueError for a template
    without ``{response}``."""
    low, high = (f"{v:g}" for v in score_range)
    if template == "default":
        text = (_WITH_GOLD if gold is not None else _WITHOUT_GOLD) + _ASK[verdict]
    else:
        if "{response}" not in template:
            raise ValueError("judge template must contain {response} (and may use {question}, {gold}, {low}, {high}); "
                             f"or name a built-in: {', '.join(TEMPLATES)}")
        text = template
    values = {"question": question, "gold": gold if gold is not None else "", "response": response,
              "low": low, "high": high}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


class _Settings:
    """The judge verifier's keyword arguments, checked (ValueError names the bad one)."""

    def __init__(self, *, url: str, model: str, template: str = "default", verdict: str = "score_line",
                 score_range: Any = (0, 10), system: str | None = None, question_field: str = "question",
                 answer_field: str | None = "answer", strip_reasoning: bool = True, max_tokens: int = 512,
                 temperature: float = 0.0, request_timeout_s: float = 60.0, retries: int = 3,
                 backoff_s: float = 1.0, concurrency: int = 8, api_key_env: str | None = "OPENAI_API_KEY") -> None:
        if not isinstance(url, str) or not isinstance(model, str) or not model:
            raise ValueError("judge verifier needs url (the OpenAI-compatible base URL) and model (a name it serves)")
        if verdict not in VERDICTS:
            raise ValueError(f"judge verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
        if not isinstance(template, str):
            raise ValueError(f"judge template must be a string, got {type(template).__name__}")
        if concurrency < 1 or max_tokens < 1 or not request_timeout_s > 0:
            raise ValueError("judge concurrency and max_tokens must be >= 1 and request_timeout_s > 0")
        self.url, self.model, self.template, self.verdict, self.system = url, model, template, verdict, system
        self.score_range = (0.0, 1.0) if verdict == "yes_no_logprob" else check_range(score_range)
        self.question_field, self.answer_field, self.strip = question_field, answer_field, strip_reasoning
        self.max_tokens = 1 if verdict == "yes_no_logprob" else max_tokens
        self.temperature, self.concurrency = temperature, concurrency
        self.timeout_s, self.retries, self.backoff_s = request_timeout_s, retries, backoff_s
        self.api_key = os.environ.get(api_key_env) if api_key_env else None

    def messages(self, completion: str, sample: dict) -> list[dict[str, str]]:
        question = sample.get(self.question_field)
        if not isinstance(question, str):
            question = str(sample.get("prompt", ""))
        gold = sample.get(self.answer_field) if self.answer_field else None
        response = strip_reasoning(completion) if self.strip else completion
        user = judge_prompt(self.template, self.verdict, defuse_markers(question),
                            None if gold is None else defuse_markers(str(gold)), defuse_markers(response),
                            self.score_range)
        return ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": user}]


def judge_rewards_batch(completions: list[str], samples: list[dict], **kwargs: Any) -> list[Any]:
    """The registry's batch hook for ``judge``: every sample's result in order, ``concurrency`` questions at a time;
    a sample the judge could not score is its :class:`JudgeError` (that sample's failure). Raises ValueError for bad
    settings."""
    settings = _Settings(**kwargs)
    client = shared_client(settings.url, api_key=settings.api_key, timeout_s=settings.timeout_s,
                           retries=settings.retries, backoff_s=settings.backoff_s,
                           max_connections=settings.concurrency)

    def one(pair: tuple[str, dict]) -> Any:
        try:
            return _judge_one(client, settings, *pair)
        except JudgeError as e:
            return e

    with ThreadPoolExecutor(max_workers=min(settings.concurrency, max(len(completions), 1))) as pool:
        return list(pool.map(one, zip(completions, samples, strict=True)))


def _judge_one(client: Any, settings: _Settings, completion: str, sample: dict) -> dict[str, Any]:
    try:
        reply = client.chat(settings.model, settings.messages(completion, sample), max_tokens=settings.max_tokens,
                            temperature=settings.temperature,
                            top_logprobs=TOP_LOGPROBS if settings.verdict == "yes_no_logprob" else None)
    except JudgeServiceError as e:
        raise JudgeError(str(e)) from None
    raw = reply.text
    try:
        if reply.refusal or reply.finish_reason == "content_filter":
            raise VerdictError(f"the judge refused: {reply.refusal or 'content filter'}")
        if settings.verdict == "yes_no_logprob":
            if not reply.first_token_top:
                raise VerdictError("the endpoint sent no logprobs for the first token (does it support top_logprobs?)")
            raw = " ".join(f"{t!r}:{lp:.3f}" for t, lp in sorted(reply.first_token_top.items(), key=lambda kv: -kv[1]))
            value = yes_probability(reply.first_token_top)
        elif settings.verdict == "json":
            value = read_json_score(reply.text, settings.score_range)
        else:
            value = read_score_line(reply.text, settings.score_range)
    except VerdictError as e:
        cut = " (it stopped at max_tokens)" if reply.finish_reason == "length" else ""
        raise JudgeError(f"{e}{cut}; the judge's reply: {raw[-RAW_CHARS:]!r}") from None
    return {"score": normalized(value, settings.score_range), "judge_score": value, "raw": raw[-RAW_CHARS:],
            "latency_s": round(reply.latency_s, 4), "requests": reply.requests}


def _cache_key(completion: str, sample: dict, **kwargs: Any) -> Hashable:
    s = _Settings(**kwargs)
    return (s.url, s.model, s.verdict, s.score_range, s.max_tokens, s.temperature,
            tuple((m["role"], m["content"]) for m in s.messages(completion, sample)))


@verifier("judge", batch=judge_rewards_batch, cache_key=_cache_key, score_range=(0.0, 1.0),
          service_metrics=("latency_s", "requests"))
def judge_reward(completion: str, sample: dict, *, url: str, model: str, template: str = "default",
                 verdict: str = "score_line", score_range: Any = (0, 10), system: str | None = None,
                 question_field: str = "question", answer_field: str | None = "answer", strip_reasoning: bool = True,
                 max_tokens: int = 512, temperature: float = 0.0, request_timeout_s: float = 60.0, retries: int = 3,
                 backoff_s: float = 1.0, concurrency: int = 8,
                 api_key_env: str | None = "OPENAI_API_KEY") -> dict[str, Any]:
    """Score ``completion`` with a judge model (see the module docstring).

    Args:
        url: base URL of an OpenAI-compatible API (``http://host:8000/v1``). model: the model name it serves.
        template: ``default`` or prompt text with ``{response}`` (and ``{question}``, ``{gold}``, ``{low}``,
            ``{high}``). verdict: ``score_line``, ``json`` or ``yes_no_logprob``. score_range: the judge's scale
            ``[low, high]`` (not used by ``yes_no_logprob``, which is a probability). system: an optional system message.
        question_field, answer_field: the sample's question and gold (``answer_field: null``: judge without a gold).
        strip_reasoning: drop ``<think>...</think>`` from the response first. max_tokens, temperature: the judge's
            generation. request_timeout_s, retries, backoff_s: per request, and transient failures' retries.
        concurrency: questions in flight at once. api_key_env: the environment variable holding the API key.
    Raises:
        JudgeError: the judge did not give a readable verdict (a failure of the machinery).
        ValueError: bad settings.
    """
    result = judge_rewards_batch([completion], [sample], url=url, model=model, template=template, verdict=verdict,
                                 score_range=score_range, system=system, question_field=question_field,
                                 answer_field=answer_field, strip_reasoning=strip_reasoning, max_tokens=max_tokens,
                                 temperature=temperature, request_timeout_s=request_timeout_s, retries=retries,
                                 backoff_s=backoff_s, concurrency=concurrency, api_key_env=api_key_env)[0]
    if isinstance(result, BaseException):
        raise result
    return result
