"""The ``hf`` engine's decode loop: sampling with a preallocated KV cache and GQA attention without copies.

Why not transformers ``generate``: per decode step and layer, its ``DynamicCache`` ``torch.cat``s the growing cache
(a full copy of it every step), and SDPA's wrapper copies the cache to every query head (``repeat_kv``) whenever an
attention mask is present (left padding always makes one): on SmolLM2-135M (9 query / 3 KV heads, 30 layers) that
is more memory traffic per step than reading the weights. ``output_logits=True`` (the log-probs the trainer needs)
also keeps every step's fp32 logits, (T, R, V), to the end. Here:

- :class:`PreallocatedCache`: each layer's keys/values live in one (R, H_kv, P + T, d) buffer; a step writes its
  column in place and attention reads a view of the filled part (no copy).
- :func:`rlvr.models.attention.grouped_query_attention` (on the engine's generation copy): for one query token,
  attention over the un-repeated cache, exactly ``repeat_kv`` + SDPA without the copy.
- the log-prob of each sampled token is taken at once from that step's logits; no (T, R, V) stack.

Sampling uses transformers' own temperature, top-k and top-p warpers in ``generate``'s order, then one exact draw
from the softmax by inverting its CDF (:func:`sample_categorical`; ``torch.multinomial`` draws one random number per
vocabulary entry, 12x slower here), greedy = argmax; finished rows are fed the pad id (a row also ends where an
optional per-row callback says so: stop strings, :mod:`rlvr.rollout.stop`). The distribution is ``generate``'s; the
draws for a given seed are not (and the logits, from an equivalent computation, can differ in the last bits), so a
seeded run samples other tokens than it did with ``generate``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from rlvr.runtime.interrupts import raise_if_interrupted

if TYPE_CHECKING:
    from rlvr.kernels.fused_decode import FusedDecoder


class PreallocatedLayer(DynamicLayer):
    """One layer's KV cache in a buffer of fixed capacity: ``update`` writes the new columns in place and returns a
    view of the filled columns, (R, H_kv, L, d), instead of a concatenated copy.

    Raises:
        ValueError: an update past the capacity.
    """

    def __init__(self, keys: Tensor, values: Tensor, length: int) -> None:
        super().__init__()
        self.buf_keys, self.buf_values = keys, values  # (R, H_kv, capacity, d)
        self.dtype, self.device = keys.dtype, keys.device
        self.length = length
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]
        self.is_initialized = True

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:  # buffers come in __init__
        pass

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        end = self.length + key_states.shape[-2]
        if end > self.buf_keys.shape[2]:
            raise ValueError(f"KV cache capacity {self.buf_keys.shape[2]} exceeded: {end} positions")
        self.buf_keys[:, :, self.length:end] = key_states
        self.buf_values[:, :, self.length:end] = value_states
        self.length = end
        self.keys, self.values = self.buf_keys[:, :, :end], self.buf_values[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.buf_keys.shape[2]


class PreallocatedCache(Cache):
    """A KV cache of :class:`PreallocatedLayer` s, built from a prefilled cache and repeated per sample.

    Args:
        prefilled: the cache of a prefill over U prompts (any transformers cache with per-layer ``keys``/``values``
            of shape (U, H_kv, P, d)).
        repeats: samples per prompt (rows of the new cache: R = U * repeats, prompt-major as ``repeat_interleave``).
        capacity: positions each layer can hold (P + the new tokens to come).
    Raises:
        ValueError: ``capacity`` smaller than the prefilled length.
    """

    def __init__(self, prefilled: Cache, repeats: int, capacity: int) -> None:
        layers = []
        for layer in prefilled.layers:
            u, h, p, d = layer.keys.shape
            if capacity < p:
                raise ValueError(f"capacity {capacity} is below the prefilled length {p}")
            keys = layer.keys.new_empty((u * repeats, h, capacity, d))
            values = layer.values.new_empty((u * repeats, h, capacity, layer.values.shape[-1]))
            keys[:, :, :p] = layer.keys.repeat_interleave(repeats, dim=0)
            values[:, :, :p] = layer.values.repeat_interleave(repeats, dim=0)
            layers.append(PreallocatedLayer(keys, values, p))
        super().__init__(layers=layers)


def sampling_warpers(temperature: float, top_k: int, top_p: float) -> LogitsProcessorList:
    """transformers' sampling warpers in ``generate``'s order (temperature, top-k, top-p), skipping no-ops."""
    warpers = LogitsProcessorList()
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k:
        warpers.append(TopKLogitsWarper(top_k=top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p))
    return warpers


def sample_categorical(probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One draw per row of a categorical distribution by inverting its CDF: (R, V) probabilities -> (R,) ids.

    Exact sampling like ``torch.multinomial(probs, 1)``, but with one uniform number per row instead of one
    exponential per vocabulary entry: on CPU, multinomial over SmolLM2's 16 x 49,152 probabilities took 60 ms (its
    random numbers), this 5 ms. The CDF is summed in float64, so a token's share of [0, 1) is its probability to
    ~1e-16; tokens of probability 0 (cut by top-k/top-p) are never drawn. Draws differ from multinomial's for a seed.
    """
    cdf = probs.double().cumsum(-1)  # (R, V)
    u = torch.rand((probs.shape[0], 1), dtype=torch.float64, device=probs.device, generator=generator)
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(1).clamp_(max=probs.shape[1] - 1)


@torch.no_grad()
def sample(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, n: int, *, max_new_tokens: int,
           temperature: float, top_k: int, top_p: float, eos_ids: list[int], pad_id: int,
           synced: bool = False, fused: FusedDecoder | None = None,
           stop_when: Callable[[int, list[int]], bool] | None = None) -> tuple[Tensor, Tensor]:
    """Sample ``n`` continuations of each left-padded prompt, prefilling each prompt once.

    Args:
        model: an HF causal LM (any attention; copy-free GQA with
        :func:`rlvr.models.attention.use_grouped_query_attention`).
        input_ids, attention_mask: (U, P) prompts, left-padded (mask 1 on real tokens; at least one per row).
        n: samples per prompt; rows are prompt-major (prompt u's samples are rows u*n .. u*n + n - 1).
        max_new_tokens: T, the most tokens per sample. temperature: 0 = greedy. top_k: 0 = off. top_p: 1 = off.
        eos_ids: ids that end a sample (it is kept; the row is then fed ``pad_id``).
        synced: keep stepping until every rank of the default process group has finished (ZeRO-3: each forward
            all-gathers the partitioned weights, so a rank that stopped early would hang the others), as
            ``generate(synced_gpus=True)`` does.
        fused: decode steps through this :class:`~rlvr.kernels.fused_decode.FusedDecoder` of ``model`` (the
            prefill still runs ``model``); None = ``model``'s own forward.
        stop_when: called after each step as ``stop_when(row, ids)`` for every row still running that did not just
            sample an eos, with the row's sampled ids so far (a list this loop owns; do not keep or change it): True
            ends the row there (its last token is kept, pad after), as an eos would. None (the default) = only eos
            ends a row, and the loop is the same as without the argument.
    Returns:
        tokens (R, T') long and logprobs (R, T') fp32, R = U * n, T' <= T the steps run (until every row ended):
        each token's log-prob under softmax(logits / temperature) (raw logits when greedy), before top-k/top-p;
        pad after a row's eos.
    Raises:
        ValueError: ``n`` or ``max_new_tokens`` below 1, or a prompt with no real token.
    """
    if n < 1 or max_new_tokens < 1:
        raise ValueError(f"n and max_new_tokens must be >= 1, got n={n}, max_new_tokens={max_new_tokens}")
    if not bool(attention_mask.bool().any(-1).all()):
        raise ValueError("every prompt needs at least one real token in attention_mask")
    u, p = input_ids.shape
    device = input_ids.device
    attention_mask = attention_mask.long()
    prompt_pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (U, P) positions skipping left padding
    prefill = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=prompt_pos,
                    past_key_values=DynamicCache(config=model.config), use_cache=True, logits_to_keep=1)
    if fused is not None:
        state = fused.start(prefill.past_key_values, attention_mask, n, p + max_new_tokens)
    else:
        cache = PreallocatedCache(prefill.past_key_values, n, p + max_new_tokens)
    logits = prefill.logits[:, -1].repeat_interleave(n, 0)  # (R, V)
    del prefill
    r = u * n
    mask = torch.ones((r, p + max_new_tokens), dtype=torch.long, device=device)
    mask[:, :p] = attention_mask.repeat_interleave(n, 0)
    next_pos = attention_mask.sum(-1).repeat_interleave(n, 0).unsqueeze(1)  # (R, 1) position of the next token
    warpers = sampling_warpers(temperature, top_k, top_p) if temperature > 0 else None
    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=device)
    running = torch.ones(r, dtype=torch.bool, device=device)
    tokens, logprobs = [], []
    history: list[list[int]] = [[] for _ in range(r)]  # each row's sampled ids (read only with stop_when)
    # plain temperature sampling on the fused path: one kernel per step draws (same uniforms as sample_categorical)
    fused_sampling = fused is not None and temperature > 0 and not top_k and top_p >= 1.0
    live: Tensor | None = None  # with fused sampling, the rows `logits` holds once some have ended (None: all)
    for step in range(max_new_tokens):
        raise_if_interrupted()
        if fused_sampling:
            token, lp = fused.sample_tokens(logits, temperature, rows=live, total=r)
        else:
            scores = logits.float()  # (R, V)
            if warpers is None:
                token = scores.argmax(-1)
            else:
                # the warpers read no token history (temperature/top-k/top-p): an empty (R, 0) one stands in for it
                probs = torch.softmax(warpers(input_ids.new_empty((r, 0)), scores), dim=-1)
                token = sample_categorical(probs)
                if temperature != 1.0:
                    scores = scores / temperature
            lse = torch.logsumexp(scores, -1)
            lp = scores.gather(-1, token.unsqueeze(-1)).squeeze(-1) - lse  # (R,)
        token = torch.where(running, token, pad_id)
        tokens.append(token)
        logprobs.append(lp)
        if stop_when is not None:
            was_running = running.tolist()
        running &= ~torch.isin(token, eos)
        if stop_when is not None:
            ids, still = token.tolist(), running.tolist()
            for row in range(r):
                if was_running[row]:
                    history[row].append(ids[row])
                    if still[row] and stop_when(row, history[row]):
                        running[row] = False
        if step + 1 == max_new_tokens or _all_finished(running, synced):
            break
        if fused is not None and not bool(running.all()):
            # rows that ended are decoded no further: a step's work shrinks with the rows still running (with rlvr's
            # GEMM kernels each row's logits are the same bits either way: FusedDecoder.step); the ended rows are not
            # drawn from with fused sampling, else their logits stay zero; either way their draws are replaced by pad
            active = running.nonzero().squeeze(1)
            step_logits = fused.step(state, token[active], next_pos.squeeze(1)[active], active)
            if fused_sampling:  # only the running rows are drawn from
                logits, live = step_logits, active
            else:
                logits = step_logits.new_zeros((r, step_logits.shape[1])).index_copy_(0, active, step_logits)
        elif fused is not None:
            logits = fused.step(state, token, next_pos.squeeze(1))
        else:
            logits = model(input_ids=token.unsqueeze(1), attention_mask=mask[:, :p + step + 1], position_ids=next_pos,
                           past_key_values=cache, use_cache=True).logits[:, -1]
        next_pos = next_pos + 1
    return torch.stack(tokens, 1), torch.stack(logprobs, 1)


def _all_finished(running: Tensor, synced: bool) -> bool:
    """Whether no row (on any rank, when ``synced``) is still running; (R,) bool in."""
    if not synced:
        return not bool(running.any())
    alive = running.any().to(torch.float32).reshape(1)
    torch.distributed.all_reduce(alive, op=torch.distributed.ReduceOp.MAX)
    return not bool(alive.item())
