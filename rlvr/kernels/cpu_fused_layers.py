"""RMSNorm and SwiGLU as one kernel each, forward and backward, for models trained on a CPU (``cpu_fused_layers.cpp``).

transformers' ``LlamaRMSNorm`` is four torch ops forward (square, mean, rsqrt, two products) and about ten backward;
``LlamaMLP``'s ``act_fn(gate_proj(x)) * up_proj(x)`` two forward and four backward; each op is a pass over a fresh
(tokens, features) buffer. On a CPU these passes are bound by memory and page faults, not arithmetic: together with
RoPE they were 13-20% of an update on SmolLM2 (``benchmarks/RESULTS.md``). :func:`fuse_cpu_layers` gives the
RMSNorm and MLP modules of Llama, Mistral and Qwen2/3 models a forward through one kernel pass each way:

- RMSNorm over fp32 inputs (the residual stream: fp32 in fp32 training and under bf16 autocast over fp32 weights):
  ``weight * (x * rsqrt(mean(x²) + eps))``, the same formula and order of products as transformers', fp32 throughout.
  Under bf16 autocast the kernel writes its output in bf16, the bits autocast's cast would give each of its readers
  (the q, k and v projections; gate and up; the output layer), so those casts go; the readers' gradients then meet
  in bf16 (autograd sums them in the output's dtype) where they were cast to fp32 and summed there.
- SwiGLU ``silu(gate) * up`` in bf16 or fp32 (the projections' output dtype): computed in fp32 and rounded once,
  where torch rounds ``silu(gate)`` to bf16 before the product (so bf16 outputs may differ by one rounding).

Other inputs (GPU tensors, fp16, an RMSNorm over bf16 activations) take the modules' own forward. The kernels are
AVX2 + FMA (any x86 CPU torch runs AVX2 kernels on), built on first use like rlvr's other CPU kernels
(:func:`rlvr.kernels.build.build_kernels`); where they cannot build, nothing is changed.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from types import MethodType, ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SOURCE = Path(__file__).with_name("cpu_fused_layers.cpp")

RMS_NORM_CLASSES = ("LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm")
"""transformers' RMSNorm modules computing ``weight * (x * rsqrt(mean(x²) + eps))`` (not Gemma's ``1 + weight``)."""
MLP_CLASSES = ("LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP")
"""transformers' MLP modules computing ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``."""


@lru_cache(maxsize=1)
def fused_layer_kernels() -> ModuleType | None:
    """The compiled ``rms_norm_forward/backward`` and ``silu_mul_forward/backward``, or None where this CPU or
    machine cannot build or run them (the reason printed once)."""
    from rlvr.kernels.build import AVX2_CFLAGS, avx2_supported, build_kernels

    return build_kernels("rlvr_fused_layer_kernels", SOURCE, "the CPU RMSNorm / SwiGLU kernels",
                         "training keeps transformers' RMSNorm and MLP ops", cflags=AVX2_CFLAGS,
                         supported=avx2_supported)


class _RMSNorm(torch.autograd.Function):
    """``weight * (x * rsqrt(mean(x²) + eps))`` over the last dimension of fp32 ``x`` (..., H), ``weight`` (H,); the
    output fp32, or bf16 (rounded once from the fp32 result) with ``bf16_out``."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float, bf16_out: bool) -> Tensor:
        flat = x.reshape(-1, x.shape[-1]).contiguous()
        y, rstd = fused_layer_kernels().rms_norm_forward(flat, weight.contiguous(), eps, bf16_out)
        ctx.save_for_backward(flat, weight, rstd)
        ctx.shape = x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None, None]:
        flat, weight, rstd = ctx.saved_tensors
        grad_x, grad_weight = fused_layer_kernels().rms_norm_backward(
            grad.reshape(flat.shape).contiguous(), flat, weight.contiguous(), rstd)
        return grad_x.view(ctx.shape), grad_weight, None, None


class _SiluMul(torch.autograd.Function):
    """``silu(gate) * up`` for ``gate`` and ``up`` of one shape and dtype (bf16 or fp32)."""

    @staticmethod
    def forward(ctx, gate: Tensor, up: Tensor) -> Tensor:
        gate, up = gate.contiguous(), up.contiguous()
        ctx.save_for_backward(gate, up)
        return fused_layer_kernels().silu_mul_forward(gate, up)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor]:
        gate, up = ctx.saved_tensors
        grad_gate, grad_up = fused_layer_kernels().silu_mul_backward(grad.to(gate.dtype).contiguous(), gate, up)
        return grad_gate, grad_up


def rms_norm(x: Tensor, weight: Tensor, eps: float, bf16_out: bool = False) -> Tensor:
    """RMSNorm of fp32 CPU ``x`` (..., H) with fp32 ``weight`` (H,) through the kernel, same shape; fp32, or with
    ``bf16_out`` bf16 rounded once from the fp32 result (the bits autocast's cast of the fp32 output would give).

    Raises:
        RuntimeError: inputs not fp32 on the CPU, or ``weight`` not of size H (from the kernel).
    """
    return _RMSNorm.apply(x, weight, eps, bf16_out)


def silu_mul(gate: Tensor, up: Tensor) -> Tensor:
    """``silu(gate) * up`` through the kernel where both are CPU tensors of one shape and dtype (bf16 or fp32) and
    the kernels are built; otherwise torch's ``F.silu(gate) * up``."""
    if (gate.device.type == "cpu" and gate.dtype in (torch.bfloat16, torch.float32) and up.dtype == gate.dtype
            and up.shape == gate.shape and fused_layer_kernels() is not None):
        return _SiluMul.apply(gate, up)
    return F.silu(gate) * up


def _rms_norm_forward(self: nn.Module, hidden_states: Tensor) -> Tensor:
    weight = self.weight
    if (hidden_states.device.type == "cpu" and hidden_states.dtype == torch.float32
            and weight.dtype == torch.float32 and weight.device.type == "cpu"):
        return rms_norm(hidden_states, weight, self.variance_epsilon, bf16_out=_autocast_to_bf16())
    return type(self).forward(self, hidden_states)


def _autocast_to_bf16() -> bool:
    """Whether CPU autocast to bf16 is on: then every reader of an RMSNorm's output (the projections, the output
    layer) casts it to bf16 first, once per reader (three for q, k and v), so the kernel writes it in bf16 instead."""
    return torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def _mlp_forward(self: nn.Module, x: Tensor) -> Tensor:
    return self.down_proj(silu_mul(self.gate_proj(x), self.up_proj(x)))


def fuse_cpu_layers(model: nn.Module) -> int:
    """Route ``model``'s RMSNorm and SwiGLU MLP modules (:data:`RMS_NORM_CLASSES`, :data:`MLP_CLASSES` with a
    ``silu`` activation) through the kernels, in place; returns how many modules now do (0 where the kernels do not
    build here, or ``model`` has none of those modules). Each patched forward checks its inputs at every call and
    takes the module's own forward for anything the kernels do not take."""
    candidates = []
    for module in model.modules():
        name = type(module).__name__
        if name in RMS_NORM_CLASSES and hasattr(module, "variance_epsilon"):
            candidates.append((module, _rms_norm_forward))
        elif (name in MLP_CLASSES and getattr(getattr(module, "config", None), "hidden_act", None) == "silu"
              and all(hasattr(module, p) for p in ("gate_proj", "up_proj", "down_proj"))):
            candidates.append((module, _mlp_forward))
    if not candidates or fused_layer_kernels() is None:
        return 0
    for module, forward in candidates:
        module.forward = MethodType(forward, module)
    return len(candidates)
