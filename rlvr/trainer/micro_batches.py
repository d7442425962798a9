"""Splitting a mini-batch into micro-batches (one forward/backward each) by rows and by padded tokens.

A fixed row count is wrong for long responses: 8 rows of 16k tokens need 64x the activations of 8 rows of 256. With a
token budget, a micro-batch holds as many rows as fit in ``max_tokens`` padded tokens (rows x longest row), so memory
per forward is bounded whatever the response lengths; short responses still batch together.
"""

from __future__ import annotations


def plan_micro_batches(indices: list[int], lengths: list[int], max_rows: int,
                       max_tokens: int | None = None, *, unit: int = 1, packed: bool = False) -> list[list[int]]:
    """Greedy split of ``indices`` (kept in order) into micro-batches.

    Args:
        indices: sample indices of one mini-batch, in the order they should be processed.
        lengths: padded-token cost of each sample (prompt + response tokens), aligned with ``indices``.
        max_rows: rows per micro-batch at most (``optim.micro_batch_size``); a unit larger than it goes alone.
        max_tokens: tokens per micro-batch at most (``optim.micro_batch_tokens``): ``rows x longest row`` (padded
            rows), or the sum of the rows' lengths with ``packed``; ``None`` = rows only. A single unit over the budget
            gets a micro-batch of its own.
        unit: consecutive indices that stay in one micro-batch (2: a preference pair, whose loss needs both).
        packed: the forward packs its rows into one row without padding (SFT, DPO), so a row costs its own length.
    Returns:
        lists of indices, covering ``indices`` exactly once, in order.
    Raises:
        ValueError: ``max_rows < 1``, ``max_tokens < 1``, ``unit < 1``, ``lengths`` not aligned with ``indices``, or
            a count of indices that is not a multiple of ``unit``.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if len(lengths) != len(indices):
        raise ValueError(f"{len(lengths)} lengths for {len(indices)} indices")
    if unit < 1 or len(indices) % unit:
        raise ValueError(f"{len(indices)} indices do not split into units of {unit}")
    plan: list[list[int]] = []
    current: list[int] = []
    longest = total = 0
    for start in range(0, len(indices), unit):
        index, length = indices[start:start + unit], lengths[start:start + unit]
        widest, summed = max(longest, *length), total + sum(length)
        too_many_rows = len(current) + unit > max_rows
        cost = summed if packed else (len(current) + unit) * widest
        too_many_tokens = max_tokens is not None and cost > max_tokens
        if current and (too_many_rows or too_many_tokens):
            plan.append(current)
            current, widest, summed = [], max(length), sum(length)
        current.extend(index)
        longest, total = widest, summed
    if current:
        plan.append(current)
    return plan


def micro_batches_are_collective(zero_stage: int, backward: bool) -> bool:
    """Whether every rank must run the same number of micro-batch passes (else their collectives mismatch: a hang).

    ZeRO-3 gathers parameters in every forward (and backward); ZeRO-2 reduces gradients in every backward, in its
    gradient hooks, even with DeepSpeed's ``managed_gradient_accumulation: false`` (its stage 0 and 1 reduce only in
    ``step()``).

    Args:
        zero_stage: DeepSpeed ZeRO stage (0-3). backward: the passes include a backward (the update), not only forwards.
    """
    return zero_stage == 3 or (backward and zero_stage == 2)
