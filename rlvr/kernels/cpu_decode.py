"""Faster CPU decoding for the ``hf`` engine's low-precision generation copy, behind one entry point,
:func:`accelerate`.

Where the fused bf16 kernels build and run (:mod:`.fused_decode`, :mod:`.build`: Llama-style models on AVX-512), each
decode step goes through them; where they do not but oneDNN packs bf16 weights, the linear layers read prepacked
weights (:mod:`.packed_linear`); elsewhere the model decodes as it is. The engine imports this module only when it
makes a generation copy, so the decode loop and the engine load no kernel code otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from rlvr.kernels import fused_decode, packed_linear
from rlvr.kernels.fused_decode import FusedDecoder


@dataclass
class CpuDecode:
    """How a generation copy decodes: through ``fused`` (its kernels pack their own weights), or through the model's
    own modules (with oneDNN-packed linear layers where packing is supported)."""

    model: nn.Module
    fused: FusedDecoder | None

    def refresh(self) -> None:
        """Re-read the model's weights after a weight sync (the fused decoder's, or the packed linears')."""
        if self.fused is not None:
            self.fused.refresh()
        else:
            packed_linear.repack(self.model)


def accelerate(model: nn.Module) -> CpuDecode:
    """Set ``model`` (a bf16 generation copy) up for the fastest decoding this CPU supports; decided once."""
    fused = fused_decode.build_fused_decoder(model)  # read at the call: the module's own, as a test may swap it
    if fused is None and packed_linear.packing_supported(model):
        packed_linear.pack_linears(model)
    return CpuDecode(model, fused)
