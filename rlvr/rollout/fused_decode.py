"""A fused decode step for Llama-style models in bf16 on a CPU: the ``hf`` engine's generation copy, one new token.

Decoding a few rows (16 in the CPU demo) reads every weight once per token, so the step's floor is the time to stream
the weights (11-14 ms for SmolLM2-135M in bf16 on 2 cores). Through transformers' modules a step is ~6,000 small
ops: 211 linear layers, 30 SDPA calls and the element-wise rest (RMSNorm alone is 7 ops, RoPE 10, the causal mask
and the rotary table rebuilt every step), each a few microseconds of dispatch for a few microseconds of work. Here a
layer is 9 calls:

    add_rms_norm -> qkv GEMM -> rope_and_cache -> decode_attention -> o GEMM
    -> add_rms_norm -> gate/up GEMM -> silu_mul -> down GEMM

The GEMMs run on oneDNN-prepacked bf16 weights (:mod:`rlvr.rollout.packed_linear`), q/k/v and gate/up each
concatenated into one weight (fewer, larger calls stream the weights faster); the other four are the C++ kernels of
``decode_kernels.cpp`` (:mod:`rlvr.rollout.kernels`), which round to bf16 where transformers' bf16 modules round.
Keys are cached transposed in blocks of 16 positions, (R, H_kv, C / 16, d, 16), so the attention scores of 16
positions are one vector FMA a dimension.

Supported: ``llama``, ``mistral`` and ``qwen2`` models (RMSNorm, RoPE, SwiGLU MLP, full attention; biases on any
projection), their parameters in bf16 on a CPU where :func:`rlvr.rollout.packed_linear.packing_supported` holds and
the kernels build (:func:`fused_decode_supported` says why not). The prefill stays with transformers' modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch
from torch import Tensor, nn
from transformers.cache_utils import Cache

from rlvr.rollout.kernels import decode_kernels
from rlvr.rollout.packed_linear import PACK_BATCH_HINT, PackedLinear, packing_supported

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
_linear = torch.ops.mkldnn._linear_pointwise


def _pack(weight: Tensor) -> Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), PACK_BATCH_HINT)


def _concat_bias(*linears: nn.Linear) -> Tensor | None:
    """The biases of linears fused into one (zeros for the ones without), or None when none has one."""
    if all(lin.bias is None for lin in linears):
        return None
    return torch.cat([lin.bias.detach() if lin.bias is not None else lin.weight.new_zeros(lin.out_features)
                      for lin in linears])


def fused_decode_supported(model: nn.Module) -> tuple[bool, str]:
    """Whether :class:`FusedDecoder` can run ``model`` (an HF causal LM), and why not in words (kernels not built)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        return False, f"model type {model_type!r} is not one of {SUPPORTED_MODEL_TYPES}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return False, f"hidden_act {config.hidden_act!r} is not silu"
    if any(kind != "full_attention" for kind in (getattr(config, "layer_types", None) or [])):
        return False, "sliding-window attention layers"
    if model_type == "mistral" and getattr(config, "sliding_window", None):
        return False, "sliding-window attention"
    rope_type = getattr(getattr(getattr(model, "model", None), "rotary_emb", None), "rope_type", "default")
    if rope_type.startswith("dynamic") or rope_type == "longrope":
        return False, f"RoPE type {rope_type!r} depends on the sequence length"
    if not packing_supported(model):
        return False, "parameters not bf16 on a CPU with native bf16"
    return True, ""


@dataclass
class _Layer:
    """One decoder layer's fused weights (packed copies) and the views of its norm weights and packed linears."""

    attention: nn.Module
    mlp: nn.Module
    input_norm: nn.Module
    post_norm: nn.Module
    qkv: Tensor | None = None
    qkv_bias: Tensor | None = None
    gate_up: Tensor | None = None
    gate_up_bias: Tensor | None = None


class FusedDecoder:
    """The decode step of ``model`` through fused kernels (see the module docstring); the model's own parameters
    are read (norms, embedding; o/down/LM-head through their :class:`PackedLinear` copies), q/k/v and gate/up from
    concatenated packed copies made here, which :meth:`refresh` rebuilds after the parameters change.

    Args:
        model: an HF causal LM for which :func:`fused_decode_supported` holds, its linears packed
            (:func:`rlvr.rollout.packed_linear.pack_linears`).
        kernels: the compiled kernels (:func:`rlvr.rollout.kernels.decode_kernels`).
    Raises:
        ValueError: ``model`` unsupported or its linears not packed.
    """

    def __init__(self, model: nn.Module, kernels: ModuleType) -> None:
        ok, reason = fused_decode_supported(model)
        if not ok:
            raise ValueError(f"fused decoding does not support this model: {reason}")
        self.model, self.kernels = model, kernels
        config = model.config
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.scale = self.head_dim ** -0.5
        self.eps = float(config.rms_norm_eps)
        decoder = model.model
        self.layers = [_Layer(layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm)
                       for layer in decoder.layers]
        for module in (*(lyr.attention.o_proj for lyr in self.layers), *(lyr.mlp.down_proj for lyr in self.layers),
                       model.lm_head):
            if not isinstance(module, PackedLinear):
                raise ValueError("fused decoding reads packed linear layers: pack_linears(model) first")
        # q/k/v and gate/up are read from the concatenated packs made here; their own packs would be a second copy
        # of those weights, so they go back to F.linear on the plain weights (only the prefill calls them)
        for layer in self.layers:
            for module in (layer.attention.q_proj, layer.attention.k_proj, layer.attention.v_proj,
                           layer.mlp.gate_proj, layer.mlp.up_proj):
                if isinstance(module, PackedLinear):
                    module.__class__ = nn.Linear
                    del module.packed_weight
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Re-pack the concatenated q/k/v and gate/up weights from the model's parameters (after a weight sync)."""
        for layer in self.layers:
            attn, mlp = layer.attention, layer.mlp
            layer.qkv = _pack(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
            layer.qkv_bias = _concat_bias(attn.q_proj, attn.k_proj, attn.v_proj)
            layer.gate_up = _pack(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
            layer.gate_up_bias = _concat_bias(mlp.gate_proj, mlp.up_proj)

    def start(self, prefilled: Cache, prompt_mask: Tensor, repeats: int, capacity: int) -> DecodeState:
        """The cache of a decode from a prefill over U prompts, repeated for ``repeats`` samples each.

        Args:
            prefilled: transformers' cache of the prefill, per layer (U, H_kv, P, d) keys/values.
            prompt_mask: (U, P) long/bool, 1 on real prompt tokens (left padding 0).
            repeats: samples per prompt (rows R = U * repeats, prompt-major).
            capacity: positions the cache holds (P + the most new tokens).
        Raises:
            ValueError: ``capacity`` below P.
        """
        u, p = prompt_mask.shape
        if capacity < p:
            raise ValueError(f"capacity {capacity} is below the prefilled length {p}")
        rows = u * repeats
        capacity = -(-capacity // 16) * 16  # whole blocks of 16 positions
        keys_t, values = [], []
        for layer in prefilled.layers:
            k = layer.keys.to(torch.bfloat16).repeat_interleave(repeats, 0)  # (R, H_kv, P, d)
            v = layer.values.to(torch.bfloat16).repeat_interleave(repeats, 0)
            kt = k.new_zeros((rows, self.kv_heads, self.head_dim, capacity))
            kt[..., :p] = k.transpose(-1, -2)
            # (R, H_kv, C / 16, d, 16): dimension i of 16 consecutive positions side by side
            keys_t.append(kt.view(rows, self.kv_heads, self.head_dim, capacity // 16, 16).transpose(2, 3).contiguous())
            vb = v.new_zeros((rows, self.kv_heads, capacity, self.head_dim))
            vb[:, :, :p] = v
            values.append(vb)
        key_bias = torch.zeros((rows, capacity), dtype=torch.float32)  # 0 = attend, -inf = left padding
        key_bias[:, :p].masked_fill_(~prompt_mask.bool().repeat_interleave(repeats, 0), float("-inf"))
        positions = torch.arange(int(prompt_mask.long().sum(-1).max()) + capacity - p + 1)
        cos, sin = self.model.model.rotary_emb(torch.empty(0, dtype=torch.bfloat16), positions.unsqueeze(0))
        return DecodeState(keys_t, values, key_bias, cos[0].contiguous(), sin[0].contiguous(), p)

    @torch.no_grad()
    def step(self, state: DecodeState, tokens: Tensor, positions: Tensor) -> Tensor:
        """One decode step: the next token of each row in, its logits out.

        Args:
            state: from :meth:`start`; its cache gains this token's keys/values.
            tokens: (R,) long, the tokens to feed. positions: (R,) long, their positions (RoPE).
        Returns:
            (R, V) bf16 logits for the token after ``tokens``.
        Raises:
            ValueError: the cache is full.
        """
        k = self.kernels
        column = state.length
        if column >= state.key_bias.shape[1]:
            raise ValueError(f"KV cache capacity {state.key_bias.shape[1]} exceeded")
        positions = positions.contiguous()
        hidden = self.model.model.embed_tokens(tokens)  # (R, D) bf16, a new tensor (updated in place below)
        delta = None
        for layer, keys_t, values in zip(self.layers, state.keys_t, state.values, strict=True):
            attn, mlp = layer.attention, layer.mlp
            normed = k.add_rms_norm(hidden, delta, layer.input_norm.weight, self.eps)
            qkv = _linear(normed, layer.qkv, layer.qkv_bias, "none", [], "")
            queries = k.rope_and_cache(qkv, state.cos, state.sin, positions, keys_t, values, column, self.heads)
            context = k.decode_attention(queries, keys_t, values, state.key_bias, column + 1, self.scale)
            delta = _linear(context, attn.o_proj.packed_weight, attn.o_proj.bias, "none", [], "")
            normed = k.add_rms_norm(hidden, delta, layer.post_norm.weight, self.eps)
            gate_up = _linear(normed, layer.gate_up, layer.gate_up_bias, "none", [], "")
            delta = _linear(k.silu_mul(gate_up), mlp.down_proj.packed_weight, mlp.down_proj.bias, "none", [], "")
        normed = k.add_rms_norm(hidden, delta, self.model.model.norm.weight, self.eps)
        head = self.model.lm_head
        state.length = column + 1
        return _linear(normed, head.packed_weight, head.bias, "none", [], "")

    def sample_tokens(self, logits: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
        """One draw per row from softmax(logits / temperature) and its log-prob, by the inverse CDF at one uniform
        number a row (``torch.rand((R, 1), dtype=float64)``, as :func:`rlvr.rollout.decode.sample_categorical`
        draws them), in one pass of a kernel instead of ~10 ops over (R, V) fp32 copies.

        Args:
            logits: (R, V) bf16. temperature: > 0.
        Returns:
            tokens (R,) long and log-probs (R,) fp32 (nats, under softmax(logits / temperature)).
        """
        uniforms = torch.rand((logits.shape[0], 1), dtype=torch.float64)
        tokens, logprobs = self.kernels.sample_tokens(logits.contiguous(), float(temperature), uniforms)
        return tokens, logprobs

@dataclass
class DecodeState:
    """The running decode's cache: per layer keys transposed in blocks of 16 positions (R, H_kv, C / 16, d, 16) and
    values (R, H_kv, C, d) in bf16;
    key_bias (R, C) fp32, added to the attention scores (0, or -inf for left padding); the RoPE tables (positions,
    d) bf16; ``length`` positions filled."""

    keys_t: list[Tensor]
    values: list[Tensor]
    key_bias: Tensor
    cos: Tensor
    sin: Tensor
    length: int


def build_fused_decoder(model: nn.Module) -> FusedDecoder | None:
    """A :class:`FusedDecoder` for ``model`` where it is supported and the kernels build, else None."""
    if not fused_decode_supported(model)[0] or not any(isinstance(m, PackedLinear) for m in model.modules()):
        return None
    kernels = decode_kernels()
    return FusedDecoder(model, kernels) if kernels is not None else None
