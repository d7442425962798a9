"""One block of memory on 2 MB pages for tensors a kernel streams through at every step (the decode step's packed
weights): :class:`HugePageArena`.

A decode step at 16 rows reads every weight once while its dot products run; on 4 KB pages the hardware prefetchers
stop at every page boundary and each page costs a TLB miss, so the read falls behind the arithmetic. On an AMD EPYC
(AVX512_BF16, 2 threads) the GEMMs of one SmolLM2-135M decode step over the same packed weights took 12.1 ms on
2 MB pages against 13.7-14.2 ms on 4 KB ones (``benchmarks/RESULTS.md``). Linux maps an anonymous region on
transparent huge pages when asked (``madvise(MADV_HUGEPAGE)``, which the common ``madvise`` setting of
``/sys/kernel/mm/transparent_hugepage/enabled`` honours); elsewhere the arena is plain memory and works the same.
torch's ``THP_MEM_ALLOC_ENABLE=1`` puts every large allocation of a process on huge pages instead; for the training
update, which allocates and frees hundreds of MB a micro-batch, it raised system time and gained nothing
(``benchmarks/RESULTS.md``), so only what a kernel streams at every step asks for them here.
"""

from __future__ import annotations

import math
import mmap

import torch
from torch import Tensor

HUGE_PAGE = 2 << 20
"""Bytes of a transparent huge page on x86-64."""
ALIGN = 64
"""Bytes every slice starts on: one cache line (and one AVX-512 vector)."""


class HugePageArena:
    """``nbytes`` of zero-filled memory, starting on a 2 MB boundary and asked for on 2 MB pages, handed out in
    slices by :meth:`take`.

    The memory lives as long as any slice (each slice's tensor keeps the mapping). Slices are never returned: the
    arena is sized once for what its owner holds for its life (the decode step's packed weights, re-packed in place).
    The mapping is private: while a forked child lives, the parent's writes copy the pages they touch (4 KB pieces of
    a 2 MB page, until the kernel merges them again), as for any memory of the process.

    Args:
        nbytes: the sum of what will be taken, each slice's :func:`slice_bytes`.
    Raises:
        ValueError: ``nbytes`` < 0.
    """

    def __init__(self, nbytes: int) -> None:
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        size = math.ceil(max(nbytes, 1) / HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE  # room to start on a 2 MB boundary
        if hasattr(mmap, "MAP_ANONYMOUS"):
            mapping = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            if hasattr(mmap, "MADV_HUGEPAGE"):
                try:
                    mapping.madvise(mmap.MADV_HUGEPAGE)
                except OSError:  # a kernel without transparent huge pages: plain pages
                    pass
            memory = torch.frombuffer(mapping, dtype=torch.uint8)  # keeps the mapping alive
            skip = -memory.data_ptr() % HUGE_PAGE
        else:  # no anonymous mappings (Windows): plain memory, aligned to a line only
            memory = torch.zeros(nbytes + ALIGN, dtype=torch.uint8)
            skip = -memory.data_ptr() % ALIGN
        self._memory = memory[skip:skip + nbytes]
        self._used = 0

    @property
    def free_bytes(self) -> int:
        """Bytes not yet taken."""
        return self._memory.numel() - self._used

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        """The next slice of the arena as a contiguous tensor of ``shape`` and ``dtype`` (zeros until written).

        Raises:
            ValueError: fewer than ``prod(shape) x itemsize`` bytes left.
        """
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > self.free_bytes:
            raise ValueError(f"the arena has {self.free_bytes} bytes left, a {tuple(shape)} {dtype} tensor needs "
                             f"{nbytes}")
        piece = self._memory[self._used:self._used + nbytes]
        self._used = min(self._memory.numel(), self._used + slice_bytes(shape, dtype))
        return piece.view(dtype).view(shape)


def slice_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes :meth:`HugePageArena.take` uses for a ``shape`` ``dtype`` tensor (its size rounded up to 64 bytes): sum
    them to size an arena."""
    return math.ceil(math.prod(shape) * dtype.itemsize / ALIGN) * ALIGN
