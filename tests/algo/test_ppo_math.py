"""The PPO path's pure functions: GAE against hand-computed values, global whitening (2 ranks == 1 rank), the clipped
value loss, per-token rewards, the running reward normaliser, explained variance and the adaptive KL controller."""

from __future__ import annotations

import math
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlvr.algo.advantages import whiten
from rlvr.algo.gae import gae_advantages
from rlvr.algo.kl import AdaptiveKLController
from rlvr.algo.reward_shaping import RunningRewardNormalizer, masked_moments, per_token_rewards
from rlvr.algo.value_loss import clipped_value_loss, explained_variance


# ------------------------------------------------------------------------------------------------------------ GAE
def test_gae_matches_hand_computed_four_tokens():
    # gamma 0.9, lambda 0.8, reward 1 at the last token; by hand (gamma * lambda = 0.72):
    # t3: delta = 1 - 0.2 = 0.8 -> A = 0.8
    # t2: delta = 0.9*0.2 - 0.3 = -0.12 -> A = -0.12 + 0.72*0.8 = 0.456
    # t1: delta = 0.9*0.3 - 0.4 = -0.13 -> A = -0.13 + 0.72*0.456 = 0.19832
    # t0: delta = 0.9*0.4 - 0.5 = -0.14 -> A = -0.14 + 0.72*0.19832 = 0.0027904
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.4, 0.3, 0.2]])
    adv, ret = gae_advantages(rewards, values, torch.ones(1, 4), gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, torch.tensor([[0.0027904, 0.19832, 0.456, 0.8]]))
    torch.testing.assert_close(ret, torch.tensor([[0.5027904, 0.59832, 0.756, 1.0]]))


def test_gae_skips_masked_tokens_and_padding():
    # tokens 0, 2 are the policy's; token 1 is an observation (masked), token 3 padding. Skipping token 1:
    # t2: delta = 1 - 0.3 = 0.7 -> A = 0.7;  t0 (next real token t2): delta = 0 + 0.9*0.3 - 0.5 = -0.23,
    # A = -0.23 + 0.72*0.7
    rewards = torch.tensor([[0.0, 5.0, 1.0, 7.0]])  # rewards on masked tokens must not leak in
    values = torch.tensor([[0.5, 9.0, 0.3, 9.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    adv, ret = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, torch.tensor([[-0.23 + 0.72 * 0.7, 0.0, 0.7, 0.0]]))
    torch.testing.assert_close(ret, torch.tensor([[0.27 + 0.72 * 0.7, 0.0, 1.0, 0.0]]))


def test_gae_with_lambda_one_and_gamma_one_is_return_minus_value():
    rewards = torch.tensor([[0.1, -0.2, 0.3, 1.0], [0.0, 2.0, 0.0, 0.0]])
    values = torch.rand(2, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]])
    adv, ret = gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0)
    reward_to_go = torch.tensor([[1.2, 1.1, 1.3, 1.0], [2.0, 2.0, 0.0, 0.0]])
    torch.testing.assert_close(ret, reward_to_go)
    torch.testing.assert_close(adv, (reward_to_go - values) * mask)


def test_gae_rejects_bad_input():
    with pytest.raises(ValueError, match="same"):
        gae_advantages(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match="gamma"):
        gae_advantages(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), gamma=1.5)


# ---------------------------------------------------------------------------------------------------- whitening
def test_masked_moments_and_whiten_single_process():
    values = torch.tensor([[1.0, 2.0, 3.0, 100.0], [5.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    mean, var, count = masked_moments(values, mask)
    assert (mean, count) == (2.75, 4.0)
    assert var == pytest.approx(((1.75 ** 2) + 0.75 ** 2 + 0.25 ** 2 + 2.25 ** 2) / 3)
    out = whiten(values, mask)
    assert float(out[mask.bool()].mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(out[mask.bool()].std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
    assert out[0, 3] == 0 and out[1, 1] == 0
    centred = whiten(values, mask, std_normalize=False)
    torch.testing.assert_close(centred, (values - 2.75) * mask)


def _sum_over_ranks(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    dist.all_reduce(out)
    return out


def _whiten_worker(rank: int, init_file: str, values: torch.Tensor, mask: torch.Tensor, out_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        shard = slice(0, 3) if rank == 0 else slice(3, 5)  # uneven shards: 3 rows and 2 rows
        out = whiten(values[shard], mask[shard], all_reduce_sum=_sum_over_ranks)
        gathered = [None, None]
        dist.all_gather_object(gathered, out)
        if rank == 0:
            torch.save(torch.cat(gathered), out_file)
    finally:
        dist.destroy_process_group()


@pytest.mark.multiprocess
def test_whitening_over_two_ranks_equals_one_rank():
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(5, 6, generator=gen) * 3 + 1
    mask = (torch.rand(5, 6, generator=gen) > 0.3).float()
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "out.pt")
        mp.spawn(_whiten_worker, args=(os.path.join(tmp, "init"), values, mask, out_file), nprocs=2, join=True)
        two_ranks = torch.load(out_file)
    torch.testing.assert_close(two_ranks, whiten(values, mask))
    # and per-rank statistics (the bug) would differ
    per_rank = torch.cat([whiten(values[:3], mask[:3]), whiten(values[3:], mask[3:])])
    assert not torch.allclose(per_rank, two_ranks)


# --------------------------------------------------------------------------------------------------- value loss
def test_clipped_value_loss_by_hand():
    old = torch.tensor([[0.0, 0.0, 0.0]])
    values = torch.tensor([[0.5, -0.1, 0.5]], requires_grad=True)
    returns = torch.tensor([[1.0, 1.0, -1.0]])
    out = clipped_value_loss(values, old, returns, torch.tensor([[1.0, 1.0, 0.0]]), value_clip=0.2)
    # token 0: V=0.5 clipped to 0.2: max((0.5-1)^2, (0.2-1)^2) = 0.64 -> 0.32, clipped branch
    # token 1: V=-0.1 inside the clip: (−1.1)^2 = 1.21 -> 0.605, not clipped; token 2 masked
    torch.testing.assert_close(out.loss, torch.tensor([[0.32, 0.605, 0.0]]))
    assert out.clipped.tolist() == [[1.0, 0.0, 0.0]]
    out.loss.sum().backward()
    assert values.grad.tolist()[0][0] == 0.0  # the clipped branch passes no gradient
    assert values.grad.tolist()[0][1] == pytest.approx(-1.1)
    plain = clipped_value_loss(values, old, returns, torch.ones(1, 3), value_clip=None)
    torch.testing.assert_close(plain.loss, 0.5 * (values.detach() - returns).square())
    with pytest.raises(ValueError, match="value_clip"):
        clipped_value_loss(values, old, returns, torch.ones(1, 3), value_clip=0.0)


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.ones(1, 4)
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full((1, 4), 2.5), returns, mask) == pytest.approx(0.0)
    # V = R + noise with Var[noise] = Var[R] / ... : residual (0, 1, 0, -1) var 2/3 against var(R) 5/3 -> 1 - 0.4
    assert explained_variance(returns - torch.tensor([[0.0, 1.0, 0.0, -1.0]]), returns, mask) == pytest.approx(0.6)
    assert math.isnan(explained_variance(torch.zeros(1, 4), torch.ones(1, 4), mask))


# ------------------------------------------------------------------------------------------------ token rewards
def test_per_token_rewards_put_the_score_on_the_last_response_token():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # row 0: eos at 2, then a pad
    kl = torch.tensor([[0.1, 0.2, 0.3, 9.0], [0.0, 0.1, 0.0, 0.5]])
    scores = torch.tensor([2.0, 1.0])
    r = per_token_rewards(scores, mask, kl=kl, beta=0.5, truncated=torch.tensor([False, True]),
                          truncation_penalty=3.0)
    torch.testing.assert_close(r, torch.tensor([[-0.05, -0.1, -0.15 + 2.0, 0.0],
                                                [0.0, -0.05, 0.0, -0.25 + 1.0 - 3.0]]))
    assert per_token_rewards(scores, mask).tolist() == [[0, 0, 2, 0], [0, 0, 0, 1]]


def test_running_normalizer_matches_all_samples_at_once_and_round_trips():
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randn(n, generator=gen) * 2 + 3 for n in (5, 1, 8)]
    norm = RunningRewardNormalizer(clip=1.5)
    for b in batches:
        norm.update(b)
    everything = torch.cat(batches)
    assert norm.count == 14
    assert norm.mean == pytest.approx(float(everything.mean()))
    assert norm.var == pytest.approx(float(everything.var()))
    x = torch.tensor([3.0, 100.0])
    expected = ((x - everything.mean()) / everything.std()).clamp(-1.5, 1.5)
    torch.testing.assert_close(norm.normalize(x), expected, atol=1e-5, rtol=1e-5)
    resumed = RunningRewardNormalizer(clip=1.5)
    resumed.load_state_dict(norm.state_dict())
    torch.testing.assert_close(resumed.normalize(x), norm.normalize(x))


# ------------------------------------------------------------------------------------------------ adaptive KL
def test_adaptive_kl_moves_beta_toward_the_target():
    high = AdaptiveKLController(beta=0.1, target=0.05, horizon=10)
    assert high.update(measured_kl=0.2) == pytest.approx(0.1 * (1 + 0.2 / 10))  # KL too high: beta up (capped error)
    low = AdaptiveKLController(beta=0.1, target=0.05, horizon=10)
    assert low.update(measured_kl=0.04) == pytest.approx(0.1 * (1 - 0.2 / 10))  # KL too low: beta down
    fixed = AdaptiveKLController(beta=0.1, target=None)
    assert fixed.update(measured_kl=1.0) == 0.1
