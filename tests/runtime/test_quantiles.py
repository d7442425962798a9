"""Quantiles over ranks (the ``train/is_ratio_*`` metrics): exact with few values, within one summary step in rank with
many, the same on every rank, and with two real gloo processes equal to the quantiles of the union."""

import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlvr.runtime.quantiles import merged_quantiles, quantiles_over_ranks, summarise

QS = (0.05, 0.5, 0.95, 1.0)


def test_few_values_give_the_exact_inverted_cdf_quantiles():
    # sorted 0.25, 1, 2, 3, 4 (five tokens): the smallest value whose share of tokens reaches q
    # q = 0.05 -> 1 token of 5 (0.25); 0.5 -> 3 of 5 (2); 0.95 -> 5 of 5 (4); 1 -> the largest
    assert quantiles_over_ranks(torch.tensor([1.0, 4.0, 0.25, 3.0, 2.0]), QS) == [0.25, 2.0, 4.0, 4.0]
    # q * n landing on a whole count takes that value, not the next: 0.5 of 4 tokens is the 2nd
    assert quantiles_over_ranks(torch.tensor([4.0, 1.0, 3.0, 2.0]), (0.5,)) == [2.0]
    values = torch.rand(1000, generator=torch.Generator().manual_seed(0))
    expected = np.quantile(values.double().numpy(), QS, method="inverted_cdf").tolist()
    assert quantiles_over_ranks(values, QS) == expected


def test_no_values_anywhere_is_nan():
    assert all(np.isnan(quantiles_over_ranks(torch.zeros(0), QS)))


def test_many_values_are_summarised_within_one_step_in_rank():
    # rank A: 0..9999 (summarised to 100 values, each weighing 100), rank B: 20000..20049 (50 values, exact)
    a, b = torch.arange(10_000, dtype=torch.float64), torch.arange(20_000, 20_050, dtype=torch.float64)
    sa, sb = summarise(a, max_values=100), summarise(b, max_values=100)
    assert (sa[0].numel(), sa[1], sb[0].numel(), sb[1]) == (100, 100.0, 50, 1.0)
    assert sa[0][0] == 0 and sa[0][-1] == 9999  # the ends are kept: the max and min are exact
    got = merged_quantiles([sa, sb], QS)
    union = torch.cat([a, b]).numpy()
    exact = np.quantile(union, QS, method="inverted_cdf")
    for q, g, e in zip(QS, got, exact):
        rank_of = (union <= g).sum()
        assert abs(rank_of - (union <= e).sum()) <= 101, (q, g, e)  # one summary step of rank A (100 tokens)
    assert got[-1] == 20_049


def test_summaries_refuse_nonsense():
    with pytest.raises(ValueError, match="max_values must be at least 2"):
        summarise(torch.ones(3), max_values=1)
    with pytest.raises(ValueError, match=r"quantiles must lie in \(0, 1\]"):
        merged_quantiles([summarise(torch.ones(3))], (0.0,))


def _rank(rank: int, port: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        values = torch.tensor([[1.0, 4.0, 0.25], [3.0, 2.0, 7.0, 0.5, 6.0]][rank])
        out[rank] = quantiles_over_ranks(values, QS)
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_get_the_quantiles_of_the_union():
    from rlvr.runtime.distributed import _free_port

    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(_free_port(), out), nprocs=2, join=True)
        results = dict(out)
    # union sorted: 0.25 0.5 1 2 3 4 6 7 (8 tokens): 0.05 -> 1st, 0.5 -> 4th, 0.95 -> 8th
    assert results[0] == results[1] == [0.25, 2.0, 7.0, 7.0]
