"""The huge-page arena: 2 MB-aligned, zero-filled, sliced in order on 64-byte boundaries, backed by transparent huge
pages where the kernel offers them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.kernels.huge_pages import HUGE_PAGE, HugePageArena, slice_bytes

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def test_slices_follow_one_another_on_64_byte_boundaries_from_a_2mb_boundary():
    shapes = [((3, 5), torch.bfloat16), ((7,), torch.float32), ((2, 64), torch.bfloat16)]
    assert [slice_bytes(s, d) for s, d in shapes] == [64, 64, 256]  # 30 and 28 bytes round up to a line
    arena = HugePageArena(sum(slice_bytes(s, d) for s, d in shapes))
    pieces = [arena.take(s, d) for s, d in shapes]
    assert pieces[0].data_ptr() % HUGE_PAGE == 0
    assert [p.data_ptr() - pieces[0].data_ptr() for p in pieces] == [0, 64, 128]
    assert [(tuple(p.shape), p.dtype) for p in pieces] == [(s, d) for s, d in shapes]
    assert all(p.is_contiguous() and not p.any() for p in pieces)
    pieces[1].fill_(1.5)
    assert pieces[0].abs().sum() == 0 and pieces[2].abs().sum() == 0 and pieces[1].sum() == 10.5
    assert arena.free_bytes == 0


def test_taking_more_than_is_left_names_both_sizes():
    arena = HugePageArena(128)
    arena.take((16,), torch.float32)
    with pytest.raises(ValueError, match=r"64 bytes left, a \(20,\) torch.float32 tensor needs 80"):
        arena.take((20,), torch.float32)
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        HugePageArena(-1)


def _smaps_field(address: int, field: str) -> int:
    """``field`` (e.g. ``THPeligible``) of the mapping holding ``address`` in this process's /proc/self/smaps."""
    holds = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:  # a mapping's first line: its address range
            start, end = (int(a, 16) for a in head.split("-"))
            holds = start <= address < end
        elif holds and line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} line for the mapping of {address:#x} in /proc/self/smaps")


@pytest.mark.skipif(not THP.exists() or "[never]" in THP.read_text(), reason="no transparent huge pages here")
def test_the_arena_is_eligible_for_huge_pages_where_the_kernel_offers_them():
    arena = HugePageArena(8 * HUGE_PAGE)
    block = arena.take((8 * HUGE_PAGE,), torch.uint8)
    block.fill_(1)  # touched: the pages exist
    # eligible once madvise(MADV_HUGEPAGE) took (whether 2 MB pages were free at the fault is the machine's matter)
    assert _smaps_field(block.data_ptr(), "THPeligible") == 1
