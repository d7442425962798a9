"""A fused decode step for Llama-style models on a CPU, in bf16 (the ``hf`` engine's generation copy) or fp32 (the
policy itself, where generation runs in fp32): one new token a row.

Decoding a few rows (16 in the CPU demo) reads every weight once per token, so the step's floor is the time to stream
the weights. Through transformers' modules a step is ~6,000 small ops (211 linear layers for SmolLM2, 30 SDPA calls,
RMSNorm's 7 ops, RoPE's 10, the causal mask and the rotary table rebuilt every step), each a few microseconds of
dispatch for a few microseconds of work. Here a layer is 9 kernel calls:

    add_rms_norm -> qkv GEMM -> rope -> decode_attention (writes the new keys/values first) -> o GEMM
    -> add_rms_norm -> gate/up GEMM -> silu_mul -> down GEMM

and where the GEMMs are the tile kernels below, all of a step's layers are one call from Python (``decode_layers``
runs the same kernels in the same order in C++).

All but the GEMMs are AVX-512 kernels of ``decode_kernels.cpp`` (:mod:`rlvr.kernels.build`), rounding to bf16
where transformers' bf16 modules round. The GEMMs (q/k/v and gate/up each stacked into one weight) run on CPUs with
AMX through ``amx_linear``, which streams weights packed in 4 KB runs per 64 output columns faster than oneDNN's AMX
kernel does at these row counts (bit-identical outputs at 16 rows); elsewhere through ``dot_linear`` (AVX512_BF16 dot
products over the same packed weights) or oneDNN on its own prepacked weights, whichever a ~10 ms measurement at
start finds faster (:func:`measured_decode_gemm`; on an AMD EPYC without AMX, ``dot_linear``: a decode step 0.81x).
Keys are cached transposed in blocks of 16 positions, (R, H_kv, C / 16, d, 16), so the attention scores of 16
positions are one vector FMA a dimension; a group's samples share one copy of their prompt's keys and values (8
samples of a 57-token prompt: ~45% of the bytes attention reads in a 128-token rollout). The step's time against
transformers' modules: ``benchmarks/RESULTS.md``.

In fp32 the same step runs the AVX2 kernels of ``fp32_decode_kernels.cpp`` (:mod:`rlvr.kernels.fp32_decode`),
which take the same shapes and layouts with no rounding, and the GEMMs read the layers' own weights on every call
(``fp32_linears``: q/k/v and gate/up each one call over separate weights; or ``F.linear`` where a measurement finds
the kernel slower): no packed copy, so the policy's own parameters are decoded as they change, with nothing to
refresh.

Supported: ``llama``, ``mistral`` and ``qwen2`` models (RMSNorm, RoPE, SwiGLU MLP, full attention; biases on any
projection), their parameters in bf16 on a CPU where :func:`rlvr.kernels.packed_linear.packing_supported` holds
and the AVX-512 kernels build, or in fp32 (head size a multiple of 8) where the AVX2 ones build
(:func:`fused_decode_supported` says why not). The prefill stays with transformers' modules, whose bf16 linears read
their slices of the same tile packs (:class:`TileLinear`, through ``amx_linear`` or ``dot_linear``) where the
outputs come in groups of 64.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers.cache_utils import Cache

from rlvr.kernels.build import DECODE_SOURCES, amx_supported, avx2_supported, decode_kernels
from rlvr.kernels.fp32_decode import fp32_kernels, measured_fp32_decode
from rlvr.kernels.huge_pages import HugePageArena, slice_bytes
from rlvr.kernels.packed_linear import pack_weight, packing_supported, unpack_linears
from rlvr.kernels.timings import cached_timings, choose, measurement_generator, source_digest

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
MAX_GROUPS = 8
"""The most query heads per KV head ``decode_attention`` takes (``MAX_GROUPS`` in ``decode_kernels.cpp``)."""
_linear = torch.ops.mkldnn._linear_pointwise


def _concat_bias(*linears: nn.Linear) -> Tensor | None:
    """The biases of linears fused into one (zeros for the ones without), or None when none has one."""
    if all(lin.bias is None for lin in linears):
        return None
    return torch.cat([lin.bias.detach() if lin.bias is not None else lin.weight.new_zeros(lin.out_features)
                      for lin in linears])


def fused_decode_supported(model: nn.Module) -> tuple[bool, str]:
    """Whether :class:`FusedDecoder` can run ``model`` (an HF causal LM, bf16 or fp32 parameters), and why not in
    words (kernels not built)."""
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
    heads = getattr(config, "num_attention_heads", 1)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if heads % kv_heads or heads // kv_heads > MAX_GROUPS:
        return False, (f"{heads} query heads over {kv_heads} KV heads: the attention kernel takes whole groups of at "
                       f"most {MAX_GROUPS}")
    dtype = _parameter_dtype(model)
    if dtype == torch.float32:
        head_dim = _head_dim(config)
        if head_dim % 8:
            return False, f"head size {head_dim} is not a multiple of 8 (the fp32 attention kernel's vectors)"
        return avx2_supported()
    if not packing_supported(model):
        return False, "parameters neither fp32 nor bf16 on a CPU with native bf16"
    return True, ""


def _head_dim(config) -> int:
    """The attention head size of an HF config: ``head_dim`` where set, else hidden size / query heads."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _parameter_dtype(model: nn.Module) -> torch.dtype | None:
    """The dtype of all of ``model``'s parameters, all on the CPU; None where they differ or are elsewhere."""
    dtypes = {(p.dtype, p.device.type) for p in model.parameters()}
    return next(iter(dtypes))[0] if len(dtypes) == 1 and next(iter(dtypes))[1] == "cpu" else None


def packed_amx_shape(out_features: list[int], in_features: int) -> tuple[int, int, int, int, int]:
    """The shape :func:`pack_amx` packs weights of ``out_features`` (N_i) rows and ``in_features`` (K) columns into:
    (ceil(sum N_i / 64), K / 32, 4, 16, 32)."""
    return -(-sum(out_features) // 64), in_features // 32, 4, 16, 32


def pack_amx(weights: list[Tensor], kernels: ModuleType, out: Tensor | None = None) -> Tensor:
    """(N_i, K) bf16 weights stacked along N -> (N' / 64, K / 32, 4, 16, 32), N' = N rounded up to 64 (zero rows): the
    B-tile layout of the ``amx_linear`` kernel, element [g, c, t, p, 2 j + e] = stacked[64 g + 16 t + j, 32 c + 2 p
    + e]. Written by the ``amx_pack`` kernel straight from each weight where every N_i is a multiple of 64 (no stacked
    copy; oneDNN-reorder speed, 3x torch's permuted copy); otherwise the weights are stacked first.

    Args:
        weights: the (N_i, K) bf16 weights.
        kernels: the compiled decode kernels (``amx_pack``).
        out: where to pack (in place, e.g. a slice of a :class:`~rlvr.kernels.huge_pages.HugePageArena`): a bf16
            tensor of :func:`packed_amx_shape`, whose padding rows past N are zero (they are never written); None:
            a new tensor.
    Raises:
        ValueError: K not a multiple of 32, or ``out`` of another shape.
    """
    k = weights[0].shape[1]
    if k % 32:
        raise ValueError(f"AMX packing needs input features in multiples of 32, got {k}")
    shape = packed_amx_shape([w.shape[0] for w in weights], k)
    if len(weights) > 1 and any(w.shape[0] % 64 for w in weights):
        weights = [torch.cat(weights)]
    if out is None:
        aligned = all(w.shape[0] % 64 == 0 for w in weights)
        out = (torch.empty if aligned else torch.zeros)(shape, dtype=weights[0].dtype)
    elif tuple(out.shape) != shape or out.dtype != weights[0].dtype:
        raise ValueError(f"out: expected a {weights[0].dtype} tensor of shape {shape}, got {out.dtype} "
                         f"{tuple(out.shape)}")
    start = 0
    for weight in weights:
        kernels.amx_pack(weight.contiguous(), out, start)
        start += -(-weight.shape[0] // 64)
    return out


GEMM_KERNELS = ("amx", "dot", "onednn")
"""The decode step's GEMM kernels: ``amx_linear``, ``dot_linear`` (both over :func:`pack_amx`'s layout) and oneDNN."""


def decode_gemm_timings(kernels: ModuleType, out_features: int, in_features: int, rows: int = 16,
                        reps: int = 20) -> dict[str, float]:
    """Best-of-``reps`` seconds of one decode-shaped GEMM, (rows, in_features) @ (in_features, out_features) of random
    bf16 values, through ``dot_linear`` and through oneDNN on its prepacked weight, the two alternated.

    Raises:
        ValueError: ``in_features`` not a multiple of 32 (:func:`pack_amx`).
    """
    gen = measurement_generator()  # not the global RNG: a measurement must not shift the run's samples
    weight = (torch.randn(out_features, in_features, generator=gen) * 0.05).to(torch.bfloat16)
    x = torch.randn(rows, in_features, generator=gen).to(torch.bfloat16)
    tiles, onednn = pack_amx([weight], kernels), pack_weight(weight)
    calls = {"dot": lambda: kernels.dot_linear(x, tiles, None, out_features),
             "onednn": lambda: _linear(x, onednn, None, "none", [], "")}
    best = dict.fromkeys(calls, math.inf)
    for _ in range(reps + 1):  # the first pass is a warm-up (oneDNN builds its primitive)
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


DECODE_GEMM_CACHE_VERSION = 1
"""Part of :func:`measured_decode_gemm`'s cache key: a change to what is measured bumps it."""


@lru_cache(maxsize=8)
def measured_decode_gemm(kernels: ModuleType, out_features: int, in_features: int) -> str:
    """``"dot"`` or ``"onednn"``: ``dot_linear`` unless oneDNN ran a decode-shaped GEMM of this size at least
    :data:`rlvr.kernels.timings.SWITCH_MARGIN` faster on this machine (:func:`decode_gemm_timings`, ~10 ms; the
    two round differently, so close timings must not flip the choice), printed with its figures. Without AMX, the same
    vdpbf16ps instructions can stream the weights at different rates: on an AMD EPYC (AVX512_BF16, 2 threads)
    ``dot_linear`` made a SmolLM2 decode step 0.81x oneDNN's, while a dot-product kernel of an earlier layout lost to
    oneDNN on an Intel Xeon.

    The timings are cached per machine (:mod:`rlvr.kernels.timings`: ``<rlvr cache>/decode-gemm-<hash>.json``),
    keyed also by the kernels' source and the shape: two runs on a machine pick the same kernel, so the same seed
    samples the same tokens, even where the two kernels time within noise of each other.
    """
    if in_features % 32:
        return "onednn"
    key = {"version": DECODE_GEMM_CACHE_VERSION, "kernel_source": source_digest(DECODE_SOURCES),
           "shape": [out_features, in_features]}
    seconds, where = cached_timings("decode-gemm", key, ("dot", "onednn"),
                                    lambda: decode_gemm_timings(kernels, out_features, in_features))
    choice = choose(seconds, "dot", "onednn")
    print(f"[rlvr] decode GEMMs ({in_features} -> {out_features}, 16 rows): dot_linear {seconds['dot'] * 1e6:.0f} us, "
          f"oneDNN {seconds['onednn'] * 1e6:.0f} us; using {'dot_linear' if choice == 'dot' else 'oneDNN'} [{where}]",
          file=sys.stderr, flush=True)
    return choice


class _Projection:
    """One GEMM of the decode step: the weights of one or more linears stacked (q/k/v, gate/up) and packed once, in the
    tile layout of :func:`pack_amx` (input features a multiple of 32), for the ``amx_linear`` kernel (CPUs with AMX)
    or the ``dot_linear`` kernel (AVX512_BF16 dot products over the same layout); otherwise for oneDNN.
    (R, K) -> (R, N) bf16. With a tile pack and every linear's outputs a multiple of 64 (SmolLM2), each linear itself
    (the prefill's) reads its slice of the same pack (:class:`TileLinear`)."""

    def __init__(self, linears: tuple[nn.Linear, ...], kernels: ModuleType, gemm: str,
                 arena: HugePageArena | None) -> None:
        self.linears, self.kernels = linears, kernels
        self.out_features = sum(lin.out_features for lin in linears)
        self.gemm = gemm if self.tile_packed(linears, gemm) else "onednn"
        # a tile pack lives in the arena, re-packed in place at every refresh (FusedDecoder sizes the arena for it)
        self.packed = (arena.take(self.packed_shape(linears), linears[0].weight.dtype) if self.gemm in ("amx", "dot")
                       else None)
        self.refresh()
        if self.gemm in ("amx", "dot") and all(lin.out_features % 64 == 0 for lin in linears):
            start = 0
            for lin in linears:
                lin.__class__ = TileLinear
                lin.tile_projection, lin.tile_groups = self, (start, start + lin.out_features // 64)
                start += lin.out_features // 64

    def refresh(self) -> None:
        weights = [lin.weight.detach() for lin in self.linears]
        if self.gemm in ("amx", "dot"):
            self.packed = pack_amx(weights, self.kernels, out=self.packed)
        else:
            self.packed = pack_weight(torch.cat(weights) if len(weights) > 1 else weights[0])
        self.bias = _concat_bias(*self.linears)

    @staticmethod
    def tile_packed(linears: tuple[nn.Linear, ...], gemm: str) -> bool:
        """Whether ``linears`` with ``gemm`` read a :func:`pack_amx` pack: an ``amx`` or ``dot`` GEMM, and input
        features in multiples of 32 (the tiles take inputs in 32s; others go to oneDNN)."""
        return gemm in ("amx", "dot") and linears[0].in_features % 32 == 0

    @staticmethod
    def packed_shape(linears: tuple[nn.Linear, ...]) -> tuple[int, ...]:
        """The shape of the pack of ``linears`` (:func:`packed_amx_shape`)."""
        return packed_amx_shape([lin.out_features for lin in linears], linears[0].in_features)

    def __call__(self, x: Tensor) -> Tensor:
        if self.gemm == "amx":
            return self.kernels.amx_linear(x, self.packed, self.bias, self.out_features)
        if self.gemm == "dot":
            return self.kernels.dot_linear(x, self.packed, self.bias, self.out_features)
        return _linear(x, self.packed, self.bias, "none", [], "")


FP32_GEMM_KERNELS = ("fp32_linear", "torch")
"""The fp32 decode step's GEMM kernels: ``fp32_linears`` (AVX2) and ``F.linear``."""


class _Fp32Projection:
    """One GEMM of the fp32 decode step over one or more linears' own weights, read at every call (no copy, so a
    changed weight is seen at once): (R, K) -> (R, sum N_i) fp32, through ``fp32_linears`` or per-linear ``F.linear``
    (their outputs concatenated)."""

    def __init__(self, linears: tuple[nn.Linear, ...], kernels: ModuleType, gemm: str) -> None:
        self.linears, self.kernels, self.gemm = linears, kernels, gemm

    def refresh(self) -> None:
        """Nothing to re-read: every call reads the layers' weights."""

    def __call__(self, x: Tensor) -> Tensor:
        if self.gemm == "torch":
            outs = [F.linear(x, lin.weight, lin.bias) for lin in self.linears]
            return outs[0] if len(outs) == 1 else torch.cat(outs, -1)
        return self.kernels.fp32_linears(x, [lin.weight.detach() for lin in self.linears], _concat_bias(*self.linears))


class TileLinear(nn.Linear):
    """An ``nn.Linear`` of the generation copy (same parameters) whose forward without gradients reads its rows of a
    :class:`_Projection`'s tile pack through the projection's kernel (``amx_linear`` or ``dot_linear``): the
    prefill's GEMMs at the decode kernel's speed, with no second packed copy. Without AMX, on an AMD EPYC
    (AVX512_BF16, 2 threads, 2026-12-07), ``dot_linear`` ran SmolLM2's prefill shapes (57-228 rows) at 413-449
    GFLOP/s against 287-428 for oneDNN on the plain weights. Shapes as ``nn.Linear``: (..., in_features) ->
    (..., out_features) bf16."""

    tile_projection: _Projection
    tile_groups: tuple[int, int]

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and self.weight.requires_grad:
            return F.linear(x, self.weight, self.bias)
        start, end = self.tile_groups
        projection = self.tile_projection
        kernel = projection.kernels.amx_linear if projection.gemm == "amx" else projection.kernels.dot_linear
        out = kernel(x.reshape(-1, x.shape[-1]).contiguous(), projection.packed[start:end], self.bias,
                     self.out_features)
        return out.view(*x.shape[:-1], self.out_features)


@dataclass
class _Layer:
    """One decoder layer: its four GEMMs (bf16: packed copies made here) and its norm modules (read in place)."""

    qkv: _Projection | _Fp32Projection
    o: _Projection | _Fp32Projection
    gate_up: _Projection | _Fp32Projection
    down: _Projection | _Fp32Projection
    input_norm: nn.Module
    post_norm: nn.Module


class FusedDecoder:
    """The decode step of ``model`` through fused kernels (see the module docstring), in its parameters' dtype
    (bf16 or fp32). The norms and the embedding are read from the model's parameters. In bf16 the GEMMs read packed
    copies made here (q/k/v and gate/up stacked; the tile packs in one block asked for on 2 MB pages, in the order a
    step reads them: :class:`~rlvr.kernels.huge_pages.HugePageArena`), which :meth:`refresh` re-packs in place after
    the parameters change; the model's own linears (only the prefill calls them) stay ``F.linear`` on the plain
    weights, or read their slice of the packs (:class:`TileLinear`); packed ones
    (:class:`rlvr.kernels.packed_linear.PackedLinear`) go back to plain, their copy would be a second one. In fp32
    the GEMMs read the layers' own weights at every step.

    Args:
        model: an HF causal LM for which :func:`fused_decode_supported` holds.
        kernels: the compiled kernels of the model's dtype (bf16: :func:`rlvr.kernels.build.decode_kernels`;
            fp32: :func:`rlvr.kernels.fp32_decode.fp32_kernels`).
        gemm: the GEMMs' kernel. bf16: ``"amx"`` (``amx_linear``), ``"dot"`` (``dot_linear``, AVX512_BF16 dot
            products) or ``"onednn"``; None = ``"amx"`` where the CPU has AMX, else the faster of the other two as
            measured on this machine (:func:`measured_decode_gemm`); projections whose input features are not a
            multiple of 32 use oneDNN. fp32: ``"fp32_linear"`` or ``"torch"`` (``F.linear``); None = the faster
            as measured on this machine (:func:`rlvr.kernels.fp32_decode.measured_fp32_decode`).
    Attributes:
        one_call: whether :meth:`step` runs every layer in one kernel call (``decode_layers``; bf16 with the
            ``amx`` or ``dot`` GEMMs). Set it False to have the same kernels called one by one from Python, the same
            bits (``benchmarks/profile_decode.py`` times them so).
    Raises:
        ValueError: ``model`` unsupported, or ``gemm`` not one of its dtype's kernels.
    """

    def __init__(self, model: nn.Module, kernels: ModuleType, gemm: str | None = None) -> None:
        ok, reason = fused_decode_supported(model)
        if not ok:
            raise ValueError(f"fused decoding does not support this model: {reason}")
        self.dtype = _parameter_dtype(model)
        choices = FP32_GEMM_KERNELS if self.dtype == torch.float32 else GEMM_KERNELS
        if gemm is not None and gemm not in choices:
            raise ValueError(f"gemm must be one of {choices} or None for {self.dtype} parameters, got {gemm!r}")
        self.model, self.kernels = model, kernels
        config = model.config
        if gemm is None and self.dtype == torch.float32:
            gemm = "fp32_linear" if measured_fp32_decode(model) is not None else "torch"
        elif gemm is None:
            if amx_supported() and kernels.amx_permitted():  # the OS lets this process use AMX (Linux 5.16+)
                gemm = "amx"
            else:
                gemm = measured_decode_gemm(kernels, 2 * config.intermediate_size, config.hidden_size)
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = _head_dim(config)
        self.scale = self.head_dim ** -0.5
        self.eps = float(config.rms_norm_eps)
        unpack_linears(model)  # a packed copy of its own would be a second one (the engine never packs it)
        per_layer = [((lyr.self_attn.q_proj, lyr.self_attn.k_proj, lyr.self_attn.v_proj), (lyr.self_attn.o_proj,),
                   (lyr.mlp.gate_proj, lyr.mlp.up_proj), (lyr.mlp.down_proj,)) for lyr in model.model.layers]
        # every tile pack in one block, asked for on 2 MB pages
        tiled = [linears for linears in [*(ls for layer in per_layer for ls in layer), (model.lm_head,)]
                 if self.dtype != torch.float32 and _Projection.tile_packed(linears, gemm)]
        arena = (HugePageArena(sum(slice_bytes(_Projection.packed_shape(ls), self.dtype) for ls in tiled))
                 if tiled else None)

        def projection(linears: tuple[nn.Linear, ...]) -> _Fp32Projection | _Projection:
            if self.dtype == torch.float32:
                return _Fp32Projection(linears, kernels, gemm)
            return _Projection(linears, kernels, gemm, arena)

        self.layers = [_Layer(*(projection(linears) for linears in layer), lyr.input_layernorm,
                              lyr.post_attention_layernorm) for layer, lyr in zip(per_layer, model.model.layers)]
        self.lm_head = projection((model.lm_head,))
        # every layer in one kernel call where each GEMM is a tile kernel's (the same kernels in the same order)
        self.one_call = self.dtype == torch.bfloat16 and all(
            p.gemm == gemm and gemm in ("amx", "dot") for layer in self.layers
            for p in (layer.qkv, layer.o, layer.gate_up, layer.down))
        self._layer_args = self._one_call_args() if self.one_call else None

    @torch.no_grad()
    def refresh(self) -> None:
        """Re-pack every GEMM's weights from the model's parameters (after a weight sync; a no-op in fp32), in place:
        no step may run during it (it would read packs half written)."""
        for layer in self.layers:
            for projection in (layer.qkv, layer.o, layer.gate_up, layer.down):
                projection.refresh()
        self.lm_head.refresh()
        if self.one_call:
            self._layer_args = self._one_call_args()  # the biases are new tensors

    def _one_call_args(self) -> tuple[list[Tensor], list[Tensor], list[int], bool]:
        """``decode_layers``' per-layer weights (input norm, the four packs, post-attention norm), biases (an
        empty tensor where a GEMM has none), output sizes, and whether the packs are AMX's."""
        weights, biases, out_features = [], [], []
        none = torch.empty(0, dtype=self.dtype)
        for layer in self.layers:
            projections = (layer.qkv, layer.o, layer.gate_up, layer.down)
            weights += [layer.input_norm.weight, *(p.packed for p in projections), layer.post_norm.weight]
            biases += [p.bias if p.bias is not None else none for p in projections]
            out_features += [p.out_features for p in projections]
        return weights, biases, out_features, self.layers[0].qkv.gemm == "amx"

    def start(self, prefilled: Cache, prompt_mask: Tensor, repeats: int, capacity: int) -> DecodeState:
        """The cache of a decode from a prefill over U prompts, repeated for ``repeats`` samples each: the prompts'
        keys/values once per prompt (its samples read the same copy), each row's new ones in a cache of its own.

        Args:
            prefilled: transformers' cache of the prefill, per layer (U, H_kv, P, d) keys/values.
            prompt_mask: (U, P) long/bool, 1 on real prompt tokens (left padding 0).
            repeats: samples per prompt (rows R = U * repeats, prompt-major).
            capacity: positions a row's whole sequence holds (P + the most new tokens).
        Raises:
            ValueError: ``capacity`` below P.
        """
        u, p = prompt_mask.shape
        if capacity < p:
            raise ValueError(f"capacity {capacity} is below the prefilled length {p}")
        rows = u * repeats
        prompt_len, own_len = _blocks_of_16(p), _blocks_of_16(max(capacity - p, 1))
        prompt_keys, prompt_values, own_keys, own_values = [], [], [], []
        for layer in prefilled.layers:
            keys = layer.keys.to(self.dtype).new_zeros((u, self.kv_heads, prompt_len, self.head_dim))
            keys[:, :, :p] = layer.keys
            values = keys.new_zeros((u, self.kv_heads, prompt_len, self.head_dim))
            values[:, :, :p] = layer.values
            prompt_keys.append(_blocked_transpose(keys))
            prompt_values.append(values)
            own_keys.append(keys.new_zeros((rows, self.kv_heads, own_len // 16, self.head_dim, 16)))
            own_values.append(keys.new_zeros((rows, self.kv_heads, own_len, self.head_dim)))
        prompt_bias = torch.full((u, prompt_len), float("-inf"))  # 0 = attend, -inf = left padding or unused
        prompt_bias[:, :p].masked_fill_(prompt_mask.bool(), 0.0)
        positions = torch.arange(int(prompt_mask.long().sum(-1).max()) + own_len + 1)
        cos, sin = self.model.model.rotary_emb(torch.empty(0, dtype=self.dtype), positions.unsqueeze(0))
        return DecodeState(prompt_keys, prompt_values, prompt_bias, own_keys, own_values,
                           torch.zeros((rows, own_len)), cos[0].contiguous(), sin[0].contiguous())

    @torch.no_grad()
    def step(self, state: DecodeState, tokens: Tensor, positions: Tensor, rows: Tensor | None = None) -> Tensor:
        """One decode step: the next token of each row in, its logits out.

        Args:
            state: from :meth:`start`; each row's cache gains this token's keys/values.
            tokens: (A,) long, the tokens to feed. positions: (A,) long, their positions (RoPE).
            rows: (A,) long, increasing: the rows of ``state`` these are (the ones still running; the others'
                caches are left as they are and cost nothing); None = all R rows.
        Returns:
            (A, V) logits (the parameters' dtype) for the token after ``tokens``. With rlvr's GEMM kernels
            (``amx``, ``dot``, ``fp32_linear``) each row's are the same bits whichever other rows run with it (every
            kernel computes a row on its own); oneDNN and ``F.linear`` may order a row's sums by the row count
            (last-bit differences).
        Raises:
            ValueError: the rows' caches are full.
        """
        k = self.kernels
        column = state.length
        if column >= state.own_bias.shape[1]:
            raise ValueError(f"KV cache capacity {state.own_bias.shape[1]} new positions exceeded")
        positions = positions.contiguous()
        hidden = self.model.model.embed_tokens(tokens)  # (R, D), a new tensor (updated in place below)
        if self.one_call:
            normed = k.decode_layers(hidden, *self._layer_args, self.model.model.norm.weight, self.eps, state.cos,
                                     state.sin, positions, self.heads, self.kv_heads, state.prompt_keys,
                                     state.prompt_values, state.prompt_bias, state.own_keys, state.own_values,
                                     state.own_bias, column, self.scale, rows)
            state.length = column + 1
            return self.lm_head(normed)
        delta = None
        for index, layer in enumerate(self.layers):
            normed = k.add_rms_norm(hidden, delta, layer.input_norm.weight, self.eps)
            rotated = k.rope(layer.qkv(normed), state.cos, state.sin, positions, self.heads, self.kv_heads)
            context = k.decode_attention(rotated, state.prompt_keys[index], state.prompt_values[index],
                                         state.prompt_bias, state.own_keys[index], state.own_values[index],
                                         state.own_bias, column, self.scale, rows)
            normed = k.add_rms_norm(hidden, layer.o(context), layer.post_norm.weight, self.eps)
            delta = layer.down(k.silu_mul(layer.gate_up(normed)))
        state.length = column + 1
        return self.lm_head(k.add_rms_norm(hidden, delta, self.model.model.norm.weight, self.eps))

    def sample_tokens(self, logits: Tensor, temperature: float, rows: Tensor | None = None,
                      total: int | None = None) -> tuple[Tensor, Tensor]:
        """One draw per row from softmax(logits / temperature) and its log-prob, by the inverse CDF at one uniform
        number a row (``torch.rand((R, 1), dtype=float64)``, as :func:`rlvr.rollout.decode.sample_categorical`
        draws them), in one pass of a kernel instead of ~10 ops over (R, V) fp32 copies.

        Args:
            logits: (R, V) in the parameters' dtype, or (A, V) for rows ``rows`` of ``total`` (the rows still
                decoding): the uniforms are drawn for all ``total`` rows, so each row draws as it would with every
                row's logits given, and the rows not given are not drawn from (a row's draw costs ~20 us, 49,152
                entries). temperature: > 0.
        Returns:
            tokens (R,) long and log-probs (R,) fp32 (nats, under softmax(logits / temperature)); R = ``total`` when
            ``rows`` is given, with token 0 and log-prob 0 at the rows not given.
        """
        uniforms = torch.rand((logits.shape[0] if rows is None else total, 1), dtype=torch.float64)
        if rows is None:
            return tuple(self.kernels.sample_tokens(logits.contiguous(), float(temperature), uniforms))
        drawn, logprobs = self.kernels.sample_tokens(logits.contiguous(), float(temperature), uniforms[rows])
        return (drawn.new_zeros(total).index_copy_(0, rows, drawn),
                logprobs.new_zeros(total).index_copy_(0, rows, logprobs))

@dataclass
class DecodeState:
    """The running decode's cache, per layer, in the parameters' dtype (bf16 or fp32): the U prompts' keys
    (U, H_kv, P' / 16, d, 16: transposed in blocks of 16 positions) and values (U, H_kv, P', d), P' = P rounded up
    to 16, with prompt_bias (U, P') fp32 added to the scores (0, or -inf on left padding and the round-up); each
    row's own keys (R, H_kv, T' / 16, d, 16) and values (R, H_kv, T', d) for its new tokens, own_bias (R, T') fp32
    (zeros); the RoPE tables (positions, d); ``length`` own positions filled."""

    prompt_keys: list[Tensor]
    prompt_values: list[Tensor]
    prompt_bias: Tensor
    own_keys: list[Tensor]
    own_values: list[Tensor]
    own_bias: Tensor
    cos: Tensor
    sin: Tensor
    length: int = 0


def _blocks_of_16(n: int) -> int:
    return -(-n // 16) * 16


def _blocked_transpose(keys: Tensor) -> Tensor:
    """(N, H_kv, C, d) keys -> (N, H_kv, C / 16, d, 16): dimension i of 16 consecutive positions side by side."""
    n, h, c, d = keys.shape
    return keys.view(n, h, c // 16, 16, d).transpose(3, 4).contiguous()


def build_fused_decoder(model: nn.Module) -> FusedDecoder | None:
    """A :class:`FusedDecoder` for ``model`` (bf16 or fp32) where it is supported and the kernels build, else None."""
    if not fused_decode_supported(model)[0]:
        return None
    kernels = fp32_kernels() if _parameter_dtype(model) == torch.float32 else decode_kernels()
    return FusedDecoder(model, kernels) if kernels is not None else None
