"""Log-probabilities and entropy of response tokens under a model: the trainer's forward pass.

Only response positions get logits (``logits_to_keep``), never the prompt: on a 50k-vocabulary model the output layer
over every prompt position costs more than the rest of the forward pass. Shapes: N sequences, P prompt columns
(left-padded), T response columns (right-padded), V vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.checkpoint
from torch import Tensor

from rlvr.kernels import cpu_logprobs
from rlvr.models.attention import GQA_ATTENTION, MAX_SCORES_BYTES, SEGMENTS_KWARG, PackedSegments


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """(N, L) positions that skip left padding, matching what ``generate`` uses; padding gets position 0."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


DEFAULT_CHUNK_TOKENS = 1024
"""Response positions (summed over rows) whose fp32 log-softmax is computed at once: with a 152k vocabulary, about
0.6 GB per fp32 buffer, against 20 GB for the whole of 4 x 8192 tokens."""


def _chunk_logprobs(logits: Tensor, tokens: Tensor, temperature: float, entropy_grad: bool) -> tuple[Tensor, Tensor]:
    """Log-prob of ``tokens`` and entropy for one chunk: logits (N, C, V) any dtype, tokens (N, C); fp32 out."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)  # (N, C)
    logprobs = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - lse
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return logprobs, entropy


class _FusedTokenLogprobs(torch.autograd.Function):
    """Log-prob of the target tokens with a hand-written backward, and the entropy (no gradient), chunk by chunk.

    Forward per chunk: one fp32 copy of the logits, its logsumexp, the target's logit, and the entropy from the same
    buffer. Backward per chunk recomputes softmax from the saved logsumexp in place and writes
    ``d logp_t / d x = onehot(t) - softmax(x)`` (times the incoming gradient, over the temperature) straight into the
    logits' dtype. Autograd of the plain formula (``float()`` -> logsumexp -> gather, under checkpointing) makes about
    three times as many full-vocabulary passes: a zero-filled scatter for the gather, the float cast's backward, the
    recomputed forward and logsumexp's own softmax. On a CPU with AVX-512, both directions run as kernels of
    :mod:`rlvr.kernels.cpu_logprobs` instead (one pass per row, no fp32 buffer), the same formulas.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, tokens: Tensor, temperature: float, step: int) -> tuple[Tensor, Tensor]:
        ctx.temperature, ctx.step = temperature, step
        ctx.kernels = cpu_logprobs.kernels_apply(logits)
        if ctx.kernels:
            logprobs, entropy, lse = cpu_logprobs.token_logprobs_forward(logits, tokens, temperature)
            ctx.save_for_backward(logits, tokens, lse)
            ctx.mark_non_differentiable(entropy)
            return logprobs, entropy
        n, t, _ = logits.shape
        logprobs = logits.new_empty((n, t), dtype=torch.float32)
        entropy = torch.empty_like(logprobs)
        lse = torch.empty_like(logprobs)
        for start in range(0, t, step):
            end = min(start + step, t)
            x = logits[:, start:end].to(torch.float32, copy=True)  # (N, C, V); a copy even of fp32 logits
            if temperature != 1.0:
                x.div_(temperature)
            chunk_lse = torch.logsumexp(x, dim=-1)  # (N, C)
            logprobs[:, start:end] = x.gather(-1, tokens[:, start:end].unsqueeze(-1)).squeeze(-1) - chunk_lse
            x.sub_(chunk_lse.unsqueeze(-1))  # log p
            entropy[:, start:end] = -(x.exp() * x).sum(-1)
            lse[:, start:end] = chunk_lse
        ctx.save_for_backward(logits, tokens, lse)
        ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs: Tensor, _grad_entropy: Tensor) -> tuple[Tensor | None, None, None, None]:
        logits, tokens, lse = ctx.saved_tensors
        if ctx.kernels:
            grad = cpu_logprobs.token_logprobs_backward(logits, tokens, lse, grad_logprobs, ctx.temperature)
            return grad, None, None, None
        grad = torch.empty_like(logits)
        t = logits.shape[1]
        for start in range(0, t, ctx.step):
            end = min(start + ctx.step, t)
            g = grad_logprobs[:, start:end].float().unsqueeze(-1)  # (N, C, 1)
            if ctx.temperature != 1.0:
                g = g / ctx.temperature  # x = logits / temperature
            x = logits[:, start:end].to(torch.float32, copy=True)
            if ctx.temperature != 1.0:
                x.div_(ctx.temperature)
            x.sub_(lse[:, start:end].unsqueeze(-1)).exp_().mul_(-g)  # -g * softmax
            x.scatter_add_(-1, tokens[:, start:end].unsqueeze(-1), g)  # + g at the target
            grad[:, start:end] = x
        return grad, None, None, None


def token_logprobs_from_logits(logits: Tensor, tokens: Tensor, temperature: float = 1.0,
                               entropy_grad: bool = False,
                               chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> tuple[Tensor, Tensor]:
    """Log-prob of ``tokens`` and the entropy of the distribution, in fp32, a chunk of positions at a time.

    The fp32 copy of the logits (and the softmax over them) is never made for the whole (N, T, V) batch: positions are
    processed ``chunk_tokens`` (summed over the N rows) at a time, and backward keeps only the input logits (in their
    own dtype, bf16 under autocast) and recomputes the chunk's fp32 buffers; peak extra memory is a few fp32 (N, C, V)
    buffers, not (N, T, V) ones. Without ``entropy_grad`` the log-prob has a fused backward
    (:class:`_FusedTokenLogprobs`); with it, each chunk runs under activation checkpointing.

    Args:
        logits: (N, T, V) any float dtype. tokens: (N, T) ids. temperature: logits are divided by it (the sampling
            distribution of the rollout).
        entropy_grad: keep the entropy in the autograd graph (only for an entropy bonus).
        chunk_tokens: positions per chunk, summed over rows (>= 1).
    Returns:
        logprobs (N, T) and entropy (N, T), both fp32 nats.
    Raises:
        ValueError: ``chunk_tokens < 1`` or shapes that do not match.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    n, t = tokens.shape
    if logits.shape[:2] != (n, t):
        raise ValueError(f"logits {tuple(logits.shape)} do not match tokens {tuple(tokens.shape)}")
    step = max(chunk_tokens // max(n, 1), 1)  # positions per chunk
    if not entropy_grad:
        return _FusedTokenLogprobs.apply(logits, tokens, temperature, step)
    if step >= t:
        return _chunk_logprobs(logits, tokens, temperature, entropy_grad)
    checkpointed = torch.is_grad_enabled() and logits.requires_grad
    lps, ents = [], []
    for start in range(0, t, step):
        args = (logits[:, start:start + step], tokens[:, start:start + step], temperature, entropy_grad)
        if checkpointed:
            lp, ent = torch.utils.checkpoint.checkpoint(_chunk_logprobs, *args, use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(*args)
        lps.append(lp)
        ents.append(ent)
    return torch.cat(lps, dim=1), torch.cat(ents, dim=1)


def response_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    num_response_tokens: int,
    *,
    temperature: float = 1.0,
    autocast_dtype: torch.dtype | None = None,
    entropy_grad: bool = False,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> tuple[Tensor, Tensor]:
    """Log-probs and entropy of the last ``T = num_response_tokens`` columns of ``input_ids``.

    Args:
        model: an HF causal LM (or a DeepSpeed engine wrapping one) accepting ``logits_to_keep``.
        input_ids: (N, P + T) prompt (left-padded) followed by the response (right-padded).
        attention_mask: (N, P + T) 1 on real tokens.
        temperature: the rollout temperature.
        autocast_dtype: run the forward under CPU/GPU autocast in this dtype (logits are cast to fp32 after, a chunk
            of ``chunk_tokens`` positions at a time: see :func:`token_logprobs_from_logits`).
    Returns:
        logprobs (N, T) and entropy (N, T), fp32 (garbage on padding: mask them).
    """
    t = num_response_tokens
    device_type = input_ids.device.type
    with torch.autocast(device_type=device_type, dtype=autocast_dtype or torch.float32,
                        enabled=autocast_dtype is not None):
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    position_ids=position_ids_from_mask(attention_mask), logits_to_keep=t + 1, use_cache=False)
    logits = out.logits[:, :-1]  # (N, T, V): the logit at column P-1+t predicts response token t
    return token_logprobs_from_logits(logits, input_ids[:, -t:], temperature, entropy_grad, chunk_tokens)


def shared_prefix_logprobs(
    model: torch.nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    row_prompt: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    temperature: float = 1.0,
    autocast_dtype: torch.dtype | None = None,
    entropy_grad: bool = False,
    packed: bool = True,
) -> tuple[Tensor, Tensor]:
    """Like :func:`response_logprobs`, but each distinct prompt goes through the model once, shared by the rows
    (samples) of its group; the result and its gradient equal the per-row forward, and the prompt's compute is paid
    once per group instead of G times.

    Models with rlvr's attention (:data:`PACKED_MODEL_TYPES`, no sliding window) run one forward over a packed row
    without padding: every prompt's tokens, then every response's, each response attending to its prompt's keys and
    to itself (:class:`rlvr.models.attention.PackedSegments`); so no GEMM, norm or output-layer work is spent on
    padding. Its attention keeps every segment's scores for the backward; where they would pass
    :data:`rlvr.models.attention.MAX_SCORES_BYTES` a layer (long responses), and for other models, the prompts run
    with a KV cache, selected per row, then the right-padded responses over it (SDPA there keeps no scores).

    Args:
        prompt_ids: (U, P) distinct prompts, left-padded. prompt_mask: (U, P).
        row_prompt: (R,) long, the prompt row of each response row.
        response_ids: (R, T) responses, right-padded. response_mask: (R, T) 1 on real response tokens.
        packed: allow packed rows. The two paths make different numbers of forwards, so where forwards are
            collectives (ZeRO-3 over several ranks) the caller passes False: the choice must not differ by rank.
    Returns:
        logprobs (R, T) and entropy (R, T), fp32 (garbage on padding: mask them).
    """
    config = _packing_config(model) if packed else None
    if config is not None:
        out = _packed_logprobs(model, config, prompt_ids, prompt_mask, row_prompt, response_ids, response_mask,
                               temperature=temperature, autocast_dtype=autocast_dtype, entropy_grad=entropy_grad)
        if out is not None:
            return out
    device_type = prompt_ids.device.type
    t = response_ids.shape[1]
    with torch.autocast(device_type=device_type, dtype=autocast_dtype or torch.float32,
                        enabled=autocast_dtype is not None):
        prompt_pos = position_ids_from_mask(prompt_mask)
        first = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=prompt_pos, use_cache=True,
                      logits_to_keep=1)
        cache = first.past_key_values
        cache.batch_select_indices(row_prompt)  # (U, ...) -> (R, ...); differentiable gather
        start = prompt_mask.long().sum(-1)[row_prompt].unsqueeze(1)  # (R, 1) first response position
        resp_pos = start + torch.arange(t, device=response_ids.device).unsqueeze(0)  # (R, T)
        mask = torch.cat([prompt_mask[row_prompt], response_mask.to(prompt_mask.dtype)], dim=1)  # (R, P + T)
        # logits of response columns 0 .. T-2 only (the last column predicts nothing we score); an index tensor, not
        # a slice of T logits, whose backward would zero-fill and copy an (R, T, V) gradient
        keep = torch.arange(t - 1, device=response_ids.device) if t > 1 else 1
        # and of those only the columns whose next token is real: the output layer then skips the right padding
        scored = response_mask[:, 1:].bool() if t > 1 else None  # (R, T - 1)
        with _only_rows(_output_layer(model), scored):
            rest = model(input_ids=response_ids, attention_mask=mask, position_ids=resp_pos, past_key_values=cache,
                         use_cache=True, logits_to_keep=keep)
    # the prompt's last logit predicts response token 0; response column t predicts token t + 1. Scored apart and the
    # (R, T) results joined: joining the (R, T, V) logits would copy them (and their gradient) once more
    kw = dict(temperature=temperature, entropy_grad=entropy_grad)
    lp0, ent0 = token_logprobs_from_logits(first.logits[:, -1:][row_prompt], response_ids[:, :1], **kw)
    if t == 1:
        # the second forward still joins the graph (zero gradient): under ZeRO-3 every rank's backward must visit the
        # same modules, or a rank whose micro-batch has 1-token responses skips the others' parameter gathers (hang)
        return lp0 + 0.0 * rest.logits.sum(dim=(1, 2)).unsqueeze(1).float(), ent0
    if rest.logits.dim() == 3:  # no output layer found to narrow: (R, T - 1, V) over every column
        lp, ent = token_logprobs_from_logits(rest.logits, response_ids[:, 1:], **kw)
    else:  # (S, V) over the S scored columns, in row-major order; padding columns get 0
        lp_s, ent_s = token_logprobs_from_logits(rest.logits.unsqueeze(0), response_ids[:, 1:][scored].unsqueeze(0),
                                                 **kw)
        lp = lp_s.new_zeros(scored.shape).masked_scatter(scored, lp_s[0])
        ent = ent_s.new_zeros(scored.shape).masked_scatter(scored, ent_s[0])
    return torch.cat([lp0, lp], dim=1), torch.cat([ent0, ent], dim=1)


def _output_layer(model: torch.nn.Module) -> torch.nn.Module | None:
    """The LM head of an HF causal LM, through a DeepSpeed engine (``.module``) or a peft wrapper; None if unknown."""
    inner = getattr(model, "module", model)
    get = getattr(inner, "get_output_embeddings", None)
    layer = get() if callable(get) else None
    return layer if isinstance(layer, torch.nn.Module) else None


class _only_rows:
    """Within the block, ``layer`` (the LM head) sees only the positions of ``rows`` (R, C) bool of its (R, C, H)
    input, flattened to (S, H), S = rows.sum(): its FLOPs, the (S, V) logits and their gradient skip the padding.
    Nothing changes when ``layer`` or ``rows`` is None, or the input is not (R, C, H)."""

    def __init__(self, layer: torch.nn.Module | None, rows: Tensor | None) -> None:
        self.layer, self.rows, self.handle = layer, rows, None

    def _narrow(self, _module: torch.nn.Module, args: tuple) -> tuple | None:
        hidden = args[0]
        if hidden.dim() != 3 or hidden.shape[:2] != self.rows.shape:
            return None
        return (hidden[self.rows], *args[1:])

    def __enter__(self) -> None:
        if self.layer is not None and self.rows is not None:
            self.handle = self.layer.register_forward_pre_hook(self._narrow)

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            self.handle.remove()


PACKED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
"""Model types whose attention modules pass the forward's keywords to the attention function unchanged and need
nothing else from it (no soft-capping, no sinks): packed rows are exact for them."""


def _packing_config(model: torch.nn.Module) -> Any | None:
    """The HF config of ``model`` (through a DeepSpeed engine's ``.module`` or peft) if its training forward can run
    packed rows (rlvr's attention, a :data:`PACKED_MODEL_TYPES` type, no sliding window), else None."""
    config = getattr(getattr(model, "module", model), "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != GQA_ATTENTION:
        return None
    if getattr(config, "model_type", None) not in PACKED_MODEL_TYPES:
        return None
    sliding = "sliding_attention" in (getattr(config, "layer_types", None) or [])
    if sliding or (getattr(config, "use_sliding_window", True) and getattr(config, "sliding_window", None)):
        return None
    return config


def packed_layers(model: torch.nn.Module) -> int:
    """The layer count of ``model`` if its training forward can run packed rows (:func:`shared_prefix_logprobs`),
    else 0."""
    config = _packing_config(model)
    return int(config.num_hidden_layers) if config is not None else 0


def _packed_logprobs(model: torch.nn.Module, config: Any, prompt_ids: Tensor, prompt_mask: Tensor, row_prompt: Tensor,
                     response_ids: Tensor, response_mask: Tensor, *, temperature: float,
                     autocast_dtype: torch.dtype | None, entropy_grad: bool) -> tuple[Tensor, Tensor] | None:
    """:func:`shared_prefix_logprobs` as one forward over one packed row (U prompts, then R responses, no padding);
    None where its attention scores would pass :data:`rlvr.models.attention.MAX_SCORES_BYTES` a layer.

    The output layer runs on R + S positions: each row's prompt-last position (it predicts response token 0; the
    prompt's hidden state gathered once per row) and the S positions whose next response token is real.
    Raises:
        RuntimeError: not every attention layer read the packed segments (the model dropped the keyword).
    """
    dev = prompt_ids.device
    u, (r, t) = prompt_ids.shape[0], response_ids.shape
    p_len, r_len = prompt_mask.sum(1).tolist(), response_mask.sum(1).tolist()
    ids = [prompt_ids[i, prompt_mask[i].bool()] for i in range(u)] + [response_ids[j, :r_len[j]] for j in range(r)]
    offsets = [0]
    for piece in ids:
        offsets.append(offsets[-1] + len(piece))
    groups = row_prompt.tolist()
    positions = [torch.arange(n) for n in p_len] + [torch.arange(p_len[g], p_len[g] + n)
                                                    for g, n in zip(groups, r_len, strict=True)]
    spans = [(offsets[i], p_len[i], 0, 0) for i in range(u)]
    spans += [(offsets[u + j], r_len[j], offsets[g], p_len[g]) for j, g in enumerate(groups)]
    last = [offsets[g] + p_len[g] - 1 for g in groups]  # (R,) each row's prompt-last position
    scored = [torch.arange(offsets[u + j], offsets[u + j] + max(n - 1, 0)) for j, n in enumerate(r_len)]
    keep = torch.cat([torch.tensor(last), *scored]).to(dev)
    targets = torch.cat([response_ids[:, 0], *(response_ids[j, 1:n] for j, n in enumerate(r_len))])
    segments = PackedSegments(spans)
    if segments.scores_bytes(config.num_attention_heads) > MAX_SCORES_BYTES:
        return None
    # a 4D mask is passed through as it is (no (N, N) mask is built); segment_attention does not read it
    placeholder = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=dev)
    with torch.autocast(device_type=dev.type, dtype=autocast_dtype or torch.float32,
                        enabled=autocast_dtype is not None):
        out = model(input_ids=torch.cat(ids).unsqueeze(0), attention_mask=placeholder,
                    position_ids=torch.cat(positions).to(dev).unsqueeze(0), use_cache=False, logits_to_keep=keep,
                    **{SEGMENTS_KWARG: segments})
    if segments.layers_seen != config.num_hidden_layers:
        raise RuntimeError(f"{segments.layers_seen} of {config.num_hidden_layers} attention layers read the packed "
                           f"segments: the model's attention did not receive the {SEGMENTS_KWARG!r} keyword")
    lp, ent = token_logprobs_from_logits(out.logits, targets.unsqueeze(0), temperature, entropy_grad)
    real = response_mask[:, 1:].bool()  # (R, T - 1) response tokens 1.. that are real, row-major as `scored`

    def unpack(x: Tensor) -> Tensor:  # (1, R + S) -> (R, T), 0 on padding
        rest = x.new_zeros(r, t - 1).masked_scatter(real, x[0, r:])
        return torch.cat([x[0, :r].unsqueeze(1), rest], dim=1)

    return unpack(lp), unpack(ent)
