"""The rollout engine contract: prompts in as token ids, groups of sampled completions out, with their logprobs.

The trainer trains on exactly these token ids (it never decodes and re-encodes them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` means greedy. ``max_new_tokens`` counts response tokens (eos included).

    ``stop``: strings that end a response at the token that completes one (that token is kept: the ids stay exactly
    the sampled ones); only the response is searched, not the prompt. Empty (the default): only eos ends a response.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()


@dataclass
class Completion:
    """One sampled response."""

    token_ids: list[int]
    """Response token ids, ending with the eos id when ``finish_reason == "stop"``."""
    logprobs: list[float]
    """fp32 log-prob (nats) of each token under the sampling distribution (logits / temperature), before top-p/k."""
    finish_reason: Literal["stop", "length", "stop_sequence"]
    """``stop``: ended with eos; ``length``: cut at max_new_tokens (truncated); ``stop_sequence``: ended at the token
    that completed one of ``SamplingParams.stop`` (named in ``stop_sequence``; e.g. a closed tool call)."""
    stop_sequence: str | None = None
    """The stop string that ended the response when ``finish_reason == "stop_sequence"``, else None."""
    policy_version: int | None = None
    """Optimizer steps applied to the weights that sampled the response's first token (a response that straddles a
    weight update keeps its first token's version), counted as the trainer counts its steps. Set by engines that serve
    while the trainer updates (``server``); ``None`` where sampling and training take turns (``hf``, ``vllm``: the
    asynchronous collector then sets the version at which the batch was started)."""


def check_prompts(prompt_token_ids: list[list[int]], n: int, max_new_tokens: int, max_model_len: int | None,
                  engine: str) -> None:
    """The checks every engine makes before it samples: ``n >= 1``, no empty prompt, and each prompt plus
    ``max_new_tokens`` within ``max_model_len`` (``None``: no limit).

    Raises:
        ValueError: naming the bad value, the prompt by index and length, and ``engine`` (e.g. ``"the vLLM engine's
            max_model_len=2048 (rollout.vllm_max_model_len)"``: the engine's limit and where it is set).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    for i, p in enumerate(prompt_token_ids):
        if not p:
            raise ValueError(f"prompt {i} is empty: every prompt needs at least one token")
        if max_model_len is not None and len(p) + max_new_tokens > max_model_len:
            raise ValueError(f"prompt {i} has {len(p)} tokens; with max_new_tokens={max_new_tokens} it exceeds "
                             f"{engine}")


class RolloutEngine(Protocol):
    """Generates G completions per prompt; picks up new policy weights after each optimizer step."""

    def generate(self, prompt_token_ids: list[list[int]], n: int,
                 sampling: SamplingParams) -> list[list[Completion]]:
        """``len(prompt_token_ids)`` groups of ``n`` completions, in prompt order."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load the trainer's current weights (a no-op for engines that share the training model)."""
        ...


class TurnStream(Protocol):
    """An engine's continuous batching, as a multi-turn rollout uses it (``scheduling: continuous``,
    :func:`rlvr.rollout.multi_turn.multi_turn_generate`): requests join while others decode, each comes back as soon
    as it ends. An engine that has one offers it as ``engine.open_stream()``, a context manager that aborts what is
    still in flight when it exits."""

    def submit(self, key: int, prompt_token_ids: list[int], sampling: SamplingParams, seed: int) -> None:
        """Start one request (one sample of ``prompt_token_ids``) under ``key``, sampled with ``seed``.

        Raises:
            ValueError: an empty prompt, or one that does not fit the engine with ``sampling.max_new_tokens``.
        """
        ...

    def poll(self, timeout_s: float) -> list[tuple[int, Completion]]:
        """Let the engine work for a while (one decode step, or up to ``timeout_s`` seconds) and return the requests
        that ended since the last call, as ``(key, completion)``."""
        ...

    def pending(self) -> int:
        """Requests submitted and not yet returned by :meth:`poll`."""
        ...
