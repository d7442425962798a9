"""A causal LM answering chat requests through rlvr's own ``hf`` rollout engine, batched: requests that arrive
together (with the same generation settings) share one ``generate`` call.

The prompt is the model's chat template over the messages (with the generation prompt), tokenized without added
special tokens; the messages' own text has its special tokens split, so no message can hold a control token. Top
log-probs, when asked for, come from one forward over prompt + response (log-softmax of the raw logits at each
response position).
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.rollout.base import SamplingParams

MAX_TOP_LOGPROBS = 20


@dataclass
class ChatRequest:
    """One request: ``messages`` (``role``/``content`` dicts), the most new tokens, the temperature, and how many top
    log-probs to return per token (0: none)."""

    messages: list[dict[str, str]]
    max_tokens: int = 256
    temperature: float = 0.0
    top_logprobs: int = 0
    future: Future = field(default_factory=Future)

    def key(self) -> tuple:
        """Requests with equal keys can share a generate call."""
        return (self.max_tokens, self.temperature, self.top_logprobs > 0)


@dataclass(frozen=True)
class ChatResult:
    """What the model answered: the text, why it stopped (``stop`` or ``length``), token counts, and per response
    token ``(token, logprob, [(token, logprob), ...])`` when top log-probs were asked for."""

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    logprobs: list[tuple[str, float, list[tuple[str, float]]]] | None


class ChatModel:
    """Loads ``name`` (a hub name, a folder or ``embedded:smollm2-135m-instruct``) and answers :class:`ChatRequest` s
    from a worker thread, up to ``max_batch`` at a time. ``precision``: ``auto``, ``bf16`` or ``fp32`` (as
    ``trainer.precision``). Raises ``rlvr.models.loading.ModelLoadError`` for a model that cannot be loaded."""

    def __init__(self, name: str, *, max_batch: int = 16, precision: str = "auto", seed: int = 0) -> None:
        from rlvr.config import ModelConfig
        from rlvr.models.loading import eos_token_ids, load_causal_lm, load_tokenizer, resolve_model_path
        from rlvr.models.precision import choose_precision, matmul_shape
        from rlvr.rollout.hf import HFRolloutEngine

        cfg = ModelConfig(name=name)
        path = resolve_model_path(name)
        self.name = name
        self.tokenizer = load_tokenizer(path, cfg)
        self.model = load_causal_lm(path, cfg).eval()
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 4096))
        self.precision = choose_precision(precision, "cpu" if not torch.cuda.is_available() else "cuda",  # type: ignore[arg-type]
                                          matmul_shape(self.model))
        if torch.cuda.is_available():
            self.model.to("cuda")
        self.engine = HFRolloutEngine(self.model, self.tokenizer, eos_token_ids(self.model, self.tokenizer),
                                      batch_size=max_batch, autocast_dtype=self.precision.generation_dtype)
        self.max_batch = max_batch
        torch.manual_seed(seed)
        self._queue: queue.Queue[ChatRequest] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The prompt's token ids: the chat template over ``messages`` with the generation prompt, the messages' text
        tokenized with special tokens split (a ``<|im_end|>`` in a message is the ordinary tokens of its characters,
        never a control token: :mod:`rlvr.data.special_text`). Raises ValueError for messages the template refuses."""
        from rlvr.data.special_text import tokenize_split, with_placeholders

        marks, texts = with_placeholders([m["content"] for m in messages])
        try:
            text = self.tokenizer.apply_chat_template([{"role": m["role"], "content": mark}
                                                       for m, mark in zip(messages, marks, strict=True)],
                                                      tokenize=False, add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - jinja errors (a role the template does not know, ...)
            raise ValueError(f"the chat template refused the messages: {e}") from None
        return tokenize_split(self.tokenizer, text, texts)

    def submit(self, request: ChatRequest) -> Future:
        """Queue ``request``; its future gets a :class:`ChatResult` (or the exception that stopped it)."""
        self._queue.put(request)
        return request.future

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            batch = [first]
            deadline = time.monotonic() + 0.005  # requests sent together arrive within a few ms
            held = []
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get(timeout=max(deadline - time.monotonic(), 0))
                except queue.Empty:
                    break
                (batch if nxt.key() == first.key() else held).append(nxt)
            for other in held:
                self._queue.put(other)
            try:
                for request, result in zip(batch, self._answer(batch), strict=True):
                    request.future.set_result(result)
            except Exception as e:  # noqa: BLE001 - every waiting request hears why
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(e)

    @torch.no_grad()
    def _answer(self, batch: list[ChatRequest]) -> list[ChatResult]:
        first = batch[0]
        prompts = [self.prompt_ids(r.messages) for r in batch]
        for ids in prompts:
            if len(ids) + first.max_tokens > self.max_context:
                raise ValueError(f"the prompt has {len(ids)} tokens; with max_tokens {first.max_tokens} that is over "
                                 f"the model's {self.max_context}")
        groups = self.engine.generate(prompts, 1, SamplingParams(temperature=first.temperature,
                                                                 max_new_tokens=first.max_tokens))
        eos = set(self.engine.eos_ids)
        out = []
        for request, ids, (completion,) in zip(batch, prompts, groups, strict=True):
            tokens = [t for t in completion.token_ids if t not in eos]
            top = self._top_logprobs(ids, completion.token_ids, request.top_logprobs) if request.top_logprobs else None
            out.append(ChatResult(text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                                  finish_reason="length" if completion.finish_reason == "length" else "stop",
                                  prompt_tokens=len(ids), completion_tokens=len(completion.token_ids), logprobs=top))
        return out

    def _top_logprobs(self, prompt: list[int], response: list[int], k: int) -> list[tuple[str, float, list]]:
        """Per response token: its text, its log-prob and the ``k`` most likely tokens with theirs (raw logits)."""
        device = next(self.model.parameters()).device
        ids = torch.tensor([prompt + response], device=device)
        with torch.autocast(device_type=device.type, dtype=self.precision.generation_dtype or torch.float32,
                            enabled=self.precision.generation_dtype is not None):
            logits = self.model(ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(response)].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        values, indices = logprobs.topk(min(k, MAX_TOP_LOGPROBS), dim=-1)
        decode = self.tokenizer.convert_ids_to_tokens
        out = []
        for pos, token in enumerate(response):
            names = [self.tokenizer.convert_tokens_to_string([t]) for t in decode(indices[pos].tolist())]
            out.append((self.tokenizer.convert_tokens_to_string([decode(token)]), float(logprobs[pos, token]),
                        list(zip(names, values[pos].tolist(), strict=True))))
        return out


def completion_body(result: ChatResult, model: str, created: int, request_id: str) -> dict[str, Any]:
    """The OpenAI chat-completion body of ``result``."""
    choice: dict[str, Any] = {"index": 0, "finish_reason": result.finish_reason,
                              "message": {"role": "assistant", "content": result.text}}
    if result.logprobs is not None:
        choice["logprobs"] = {"content": [
            {"token": tok, "logprob": lp, "top_logprobs": [{"token": t, "logprob": v} for t, v in top]}
            for tok, lp, top in result.logprobs]}
    return {"id": request_id, "object": "chat.completion", "created": created, "model": model, "choices": [choice],
            "usage": {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
                      "total_tokens": result.prompt_tokens + result.completion_tokens}}
