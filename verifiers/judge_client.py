"""A client for an OpenAI-compatible chat endpoint (vLLM's server, ``rlvr judge serve``, any hosted API): one
``chat`` call per question, with a per-request timeout and retries.

Transient failures are retried with doubling backoff (honouring ``Retry-After``): a connection that is refused, reset
or times out, HTTP 408, 429 and 5xx, and a 200 whose body is not a chat completion. Anything else (a 400 for an unknown
model, a 401) fails at once. What is left failing raises :class:`JudgeServiceError`, which the ``judge`` verifier
reports as a failure of the machinery (the sample is left out, never scored 0).
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0


class JudgeServiceError(RuntimeError):
    """The chat endpoint did not give an answer (down, timed out, refused the request, or answered garbage)."""


@dataclass(frozen=True)
class ChatReply:
    """One chat completion.

    Attributes:
        text: the reply's content ("" when the server sent none).
        finish_reason: ``stop``, ``length``, ``content_filter``, ... as the server says.
        refusal: the server's refusal text (OpenAI's ``message.refusal``), or None.
        first_token_top: the first generated token's candidates, ``token -> logprob`` (only when asked for).
        requests: HTTP requests it took (1 without retries). latency_s: seconds from the first request to the answer.
    """

    text: str
    finish_reason: str | None
    refusal: str | None
    first_token_top: dict[str, float] | None
    requests: int
    latency_s: float


def endpoint_of(url: str) -> str:
    """The chat-completions URL of a base URL (``http://host:8000/v1`` -> ``.../v1/chat/completions``); a URL that
    already ends in ``/chat/completions`` is kept. Raises ValueError for one that is not http(s)."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"judge url {url!r} must start with http:// or https://")
    return url if url.endswith("/chat/completions") else url + "/chat/completions"


class ChatClient:
    """Talks to one chat endpoint; thread-safe (one connection pool), so a batch of questions can go concurrently.

    Args:
        url: base URL of the OpenAI-compatible API (see :func:`endpoint_of`).
        api_key: sent as ``Authorization: Bearer`` when given.
        timeout_s: limit of one request (connect, send, wait, read), seconds.
        retries: further tries after a transient failure. backoff_s: wait before the first retry, doubled after each.
        max_connections: connections kept open to the server (the batch's concurrency).
    Raises ValueError for a bad URL or non-positive limits.
    """

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 60.0, retries: int = 3,
                 backoff_s: float = 1.0, max_connections: int = 8) -> None:
        import httpx

        if not timeout_s > 0 or retries < 0 or backoff_s < 0 or max_connections < 1:
            raise ValueError("timeout_s must be > 0, retries and backoff_s >= 0, max_connections >= 1")
        self.endpoint = endpoint_of(url)
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(headers=headers, timeout=timeout_s,
                                  limits=httpx.Limits(max_connections=max_connections))

    def chat(self, model: str, messages: list[dict[str, str]], *, max_tokens: int, temperature: float,
             top_logprobs: int | None = None) -> ChatReply:
        """Ask for one completion of ``messages``; ``top_logprobs``: also the first token's candidates.

        Raises:
            JudgeServiceError: no usable answer after the retries, or a request the server refuses (4xx).
        """
        import httpx

        body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": temperature, "n": 1}
        if top_logprobs:
            body.update(logprobs=True, top_logprobs=top_logprobs)
        start = time.monotonic()
        errors: list[str] = []
        for attempt in range(self.retries + 1):
            wait = self.backoff_s * (2 ** attempt) * (1.0 + 0.25 * random.random())
            try:
                response = self._http.post(self.endpoint, json=body)
            except httpx.TimeoutException:
                errors.append(f"no answer within {self.timeout_s:g} s")
            except httpx.HTTPError as e:
                errors.append(f"{type(e).__name__}: {e}")
            else:
                if response.status_code == 200:
                    try:
                        return _reply(response.json(), attempt + 1, time.monotonic() - start)
                    except (ValueError, KeyError, TypeError, IndexError) as e:
                        errors.append(f"an answer that is not a chat completion ({e}): {response.text[:200]!r}")
                elif response.status_code in RETRY_STATUS:
                    errors.append(f"HTTP {response.status_code}: {response.text[:200]}")
                    wait = max(wait, _retry_after(response))
                else:
                    raise JudgeServiceError(f"the judge endpoint {self.endpoint} refused the request (HTTP "
                                            f"{response.status_code}): {response.text[:300]}")
            if attempt < self.retries:
                time.sleep(wait)
        raise JudgeServiceError(f"the judge endpoint {self.endpoint} gave no answer in {len(errors)} tries: "
                                + "; ".join(errors)[:800])

    def close(self) -> None:
        """Close the connections (idempotent)."""
        self._http.close()


def _retry_after(response: Any) -> float:
    value = response.headers.get("Retry-After", "")
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:
        return 0.0


def _reply(data: Any, requests: int, latency_s: float) -> ChatReply:
    """A ChatReply from an OpenAI chat-completion body; raises ValueError/KeyError/TypeError for another shape."""
    choice = data["choices"][0]
    message = choice["message"]
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise ValueError("message.content is not a string")
    top = None
    content = (choice.get("logprobs") or {}).get("content")
    if content:
        top = {str(c["token"]): float(c["logprob"]) for c in content[0].get("top_logprobs") or []}
        top.setdefault(str(content[0]["token"]), float(content[0]["logprob"]))
    return ChatReply(text=text, finish_reason=choice.get("finish_reason"), refusal=message.get("refusal"),
                     first_token_top=top, requests=requests, latency_s=latency_s)


_clients: dict[tuple, ChatClient] = {}
_clients_lock = threading.Lock()


def shared_client(url: str, *, api_key: str | None, timeout_s: float, retries: int, backoff_s: float,
                  max_connections: int) -> ChatClient:
    """One :class:`ChatClient` per process and settings (its connections are reused from step to step; a forked
    verifier worker starts with none of its parent's)."""
    key = (endpoint_of(url), api_key, timeout_s, retries, backoff_s, max_connections)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = ChatClient(url, api_key=api_key, timeout_s=timeout_s, retries=retries,
                                       backoff_s=backoff_s, max_connections=max_connections)
        return _clients[key]


def _forget_parent_clients() -> None:
    """In a forked child: the parent's connections are not ours to use (two processes on one socket)."""
    global _clients_lock
    _clients_lock = threading.Lock()
    _clients.clear()


os.register_at_fork(after_in_child=_forget_parent_clients)
