"""Linear layers over oneDNN-prepacked bf16 weights, for the ``hf`` engine's generation copy on a CPU.

Decoding multiplies a few rows (the running samples, 16 in the CPU demo) by every weight once per new token, so it
is bound by how fast the GEMM streams the weights. ``F.linear`` on a plain bf16 weight re-lays the weight out into
oneDNN's blocked format inside every call; a weight packed once (``torch.ops.mkldnn._reorder_linear_weight``, the
prepacking torch's own Inductor uses when it freezes a CPU model) skips that, with outputs bit-for-bit equal to
``F.linear``'s (``benchmarks/bench_decode_ab.py`` measures a decode step both ways; numbers in
``benchmarks/RESULTS.md``).

:func:`pack_linears` turns each ``nn.Linear`` of a model into a :class:`PackedLinear` in place (same parameters, same
names, so tied weights stay tied and weight sync is unchanged); after the parameters change, :func:`repack` refreshes
the packed copies (0.2 s for 135M parameters). Only bf16 weights on a CPU with native bf16 are packed
(:func:`packing_supported`); everything else keeps ``F.linear``. Where the fused decode step runs
(:mod:`rlvr.kernels.fused_decode`, Llama-style models), it packs its own copies and these go back to ``F.linear``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PACK_BATCH_HINT = 16
"""The row count oneDNN's weight layout is chosen for; any row count is computed correctly (tested 1-1000)."""


def packing_supported(model: nn.Module) -> bool:
    """Whether :func:`pack_linears` applies: parameters in bf16 on the CPU, and oneDNN able to pack them here
    (:func:`rlvr.kernels.machine.bf16_packing_supported`: built in, a CPU with native bf16)."""
    from rlvr.kernels.machine import bf16_packing_supported

    params = list(model.parameters())
    return (bool(params) and all(p.device.type == "cpu" and p.dtype == torch.bfloat16 for p in params)
            and bf16_packing_supported())


def pack_weight(weight: Tensor) -> Tensor:
    """A bf16 (out, in) weight packed for ``torch.ops.mkldnn._linear_pointwise``, laid out for
    :data:`PACK_BATCH_HINT` rows."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), PACK_BATCH_HINT)


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` (same ``weight``/``bias`` parameters) whose forward reads a oneDNN-packed copy of the weight.

    Shapes as ``nn.Linear``: (..., in_features) -> (..., out_features). No gradients: the packed copy is a constant
    (generation copies are frozen). Built by :func:`pack_linears`, not directly.
    """

    packed_weight: Tensor

    def repack(self) -> None:
        """Re-pack ``weight`` (after it changed)."""
        self.packed_weight = pack_weight(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and self.weight.requires_grad:
            return F.linear(x, self.weight, self.bias)  # the packed copy carries no gradient
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")


def pack_linears(model: nn.Module) -> int:
    """Turn every ``nn.Linear`` of ``model`` into a :class:`PackedLinear` in place and pack its weight; returns how
    many. Call only where :func:`packing_supported` holds."""
    count = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = PackedLinear
            module.repack()
            count += 1
    return count


def unpack_linears(model: nn.Module) -> None:
    """Turn every :class:`PackedLinear` of ``model`` back into a plain ``nn.Linear`` (``F.linear`` on its weight) and
    drop its packed copy."""
    for module in model.modules():
        if isinstance(module, PackedLinear):
            module.__class__ = nn.Linear
            del module.packed_weight


def repack(model: nn.Module) -> None:
    """Refresh the packed weights of every :class:`PackedLinear` in ``model`` (after a weight sync)."""
    for module in model.modules():
        if isinstance(module, PackedLinear):
            module.repack()
