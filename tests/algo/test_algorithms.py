"""Hand-computed checks of advantage estimators, the clipped loss, loss aggregation, KL estimators and masking."""

import math

import pytest
import torch

from rlvr.algo.advantages import (
    broadcast_to_tokens,
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    subtract_kl_from_returns,
    whiten,
)
from rlvr.algo.kl import AdaptiveKLController, kl_per_token
from rlvr.algo.losses import PolicyLossInputs, aggregate_loss, cispo_loss, ppo_clip_loss
from rlvr.algo.table import ALGORITHMS


def test_grpo_group_baseline_with_std():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    adv = grpo_advantages(rewards, std_normalize=True, eps=0.0 + 1e-12)
    # group 1: mean 0.5, unbiased std = sqrt(1/3) -> +-0.5 / 0.57735 = +-0.866025
    assert torch.allclose(adv[0], torch.tensor([0.866025, -0.866025, -0.866025, 0.866025]), atol=1e-5)
    assert torch.equal(adv[1], torch.zeros(4))  # zero-variance group: no gradient, no NaN


def test_dr_grpo_no_std():
    adv = grpo_advantages(torch.tensor([[3.0, 1.0]]), std_normalize=False)
    assert adv.tolist() == [[1.0, -1.0]]


def test_rloo_leave_one_out():
    adv = rloo_advantages(torch.tensor([[1.0, 0.0, 0.0]]))
    # 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -0.5
    assert torch.allclose(adv, torch.tensor([[1.0, -0.5, -0.5]]))


def test_reinforce_pp_batch_normalised():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    centred = reinforce_pp_advantages(rewards, std_normalize=True, eps=0.0)
    assert centred.tolist() == [[0.5, -0.5], [0.0, 0.0]]  # the estimator itself only subtracts the group mean
    # then whitened over the batch's tokens: sample 0 has 2 tokens, the others 1 -> values 0.5, 0.5, -0.5, 0, 0
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    tokens = broadcast_to_tokens(centred.reshape(-1), mask)
    out = whiten(tokens, mask, eps=0.0)
    mean = 0.5 / 5
    std = math.sqrt((2 * 0.5 ** 2 + 0.5 ** 2) / 5 - mean ** 2)  # population std over the 5 tokens
    expected = torch.tensor([[0.5 - mean, 0.5 - mean], [-0.5 - mean, 0.0], [-mean, 0.0], [-mean, 0.0]]) / std
    assert torch.allclose(out, expected * mask, atol=1e-6)


def test_whiten_uses_the_global_batch():
    """Two ranks' halves whitened with a summing all-reduce equal the whole batch whitened at once (fix 1: REINFORCE++
    normalised per rank)."""
    values = torch.tensor([[1.0, 2.0], [3.0, 0.0], [-1.0, 5.0], [0.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    whole = whiten(values, mask)
    halves = [(values[:2], mask[:2]), (values[2:], mask[2:])]

    def summed_over_ranks(stats):  # what all_reduce_sum returns on each rank
        return sum(torch.stack([(v.double() * m).sum(), (v.double() ** 2 * m).sum(), m.double().sum()])
                   for v, m in halves)

    parts = torch.cat([whiten(v, m, all_reduce_sum=summed_over_ranks) for v, m in halves])
    assert torch.allclose(parts, whole, atol=1e-6)
    assert not torch.allclose(whiten(*halves[0]), whole[:2], atol=1e-3)  # local statistics would differ


VALID = torch.tensor([[True, True, False, True], [True, False, False, False]])
REWARDS = torch.tensor([[1.0, 0.0, 0.7, 0.0], [1.0, 0.3, 0.0, 0.0]])


def test_grpo_leaves_dropped_samples_out():
    adv = grpo_advantages(REWARDS, valid=VALID, eps=0.0)
    # group 0 over valid [1, 0, 0]: mean 1/3, unbiased std sqrt(1/3); the dropped 0.7 counts nowhere
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    assert torch.allclose(adv[0], torch.tensor([(2 / 3) / std, -(1 / 3) / std, 0.0, -(1 / 3) / std]), atol=1e-6)
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # one valid sample left: no baseline, zero advantage


def test_rloo_and_reinforce_pp_leave_dropped_samples_out():
    adv = rloo_advantages(REWARDS, valid=VALID)
    assert torch.allclose(adv[0], torch.tensor([1.0, -0.5, 0.0, -0.5]))  # leave-one-out over the 3 valid
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]
    centred = reinforce_pp_advantages(REWARDS, valid=VALID)
    assert torch.allclose(centred[0], torch.tensor([2 / 3, -1 / 3, 0.0, -1 / 3]))
    assert centred[1].tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("name, std_normalize", [("grpo", True), ("grpo", False), ("rloo", False), ("rloo", True),
                                                  ("reinforce_pp", True)])
def test_a_machinery_failure_leaves_the_others_the_advantages_of_a_group_without_it(name, std_normalize):
    """A sample left out for a failure of the machinery (a broken sandbox, a verifier that timed out) changes nothing
    for its group's other samples: their advantages equal those of the group that never had it, whatever its reward
    (a fake 0 would have moved the baseline)."""
    est = ALGORITHMS[name].advantage_function()
    full = torch.tensor([[0.25, 1.0, 0.0, 0.0, 0.5]])
    for left_out in range(5):
        kept = [j for j in range(5) if j != left_out]
        valid = torch.ones(1, 5, dtype=torch.bool)
        valid[0, left_out] = False
        for fake in (0.0, 1.0, full[0, left_out].item()):
            rewards = full.clone()
            rewards[0, left_out] = fake
            with_failure = est(rewards, valid=valid, std_normalize=std_normalize, eps=1e-6)
            without = est(full[:, kept], std_normalize=std_normalize, eps=1e-6)
            assert torch.allclose(with_failure[:, kept], without, atol=1e-6), (left_out, fake)
            assert with_failure[0, left_out].item() == 0.0


def test_rloo_std_normalize_divides_by_the_group_std():
    """Fix 11: advantage.std_normalize was silently ignored by rloo."""
    rewards = torch.tensor([[1.0, 0.0, 0.0]])
    std = rewards.std()
    adv = rloo_advantages(rewards, std_normalize=True, eps=0.0)
    assert torch.allclose(adv, torch.tensor([[1.0, -0.5, -0.5]]) / std)


def test_unknown_estimator_names_valid_ones():
    with pytest.raises(KeyError, match=r"unknown algorithm 'grp'; did you mean 'grpo'\? \(valid algorithm.name: grpo, "
                                       r"rloo, reinforce_pp, ppo\)"):
        ALGORITHMS["grp"]


def test_loss_inputs_of_different_shapes_are_refused():
    with pytest.raises(ValueError, match=r"expected \(R, T\) tensors of one shape: logprobs \(2, 3\), old_logprobs "
                                         r"\(2, 3\), advantages \(2, 2\), mask \(2, 3\)"):
        PolicyLossInputs(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"expected \(R, T\) tensors"):
        PolicyLossInputs(torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.ones(3))


def test_group_of_one_is_rejected():
    with pytest.raises(ValueError, match="G >= 2"):
        grpo_advantages(torch.tensor([[1.0], [0.0]]))


def test_clip_low_and_high_differ():
    old = torch.zeros(1, 4)
    # ratios 0.5, 0.9, 1.1, 1.5 with eps_low = 0.2, eps_high = 0.28
    logp = torch.log(torch.tensor([[0.5, 0.9, 1.1, 1.5]]))
    mask = torch.ones(1, 4)
    pos = ppo_clip_loss(PolicyLossInputs(logp, old, torch.ones(1, 4), mask), clip_low=0.2, clip_high=0.28)
    # A > 0: loss = max(-r, -clip(r)) -> r=0.5: max(-0.5, -0.8) = -0.5; r=1.5: max(-1.5, -1.28) = -1.28 (clipped)
    assert torch.allclose(pos.loss, torch.tensor([[-0.5, -0.9, -1.1, -1.28]]))
    assert pos.clipped.tolist() == [[0.0, 0.0, 0.0, 1.0]]
    neg = ppo_clip_loss(PolicyLossInputs(logp, old, -torch.ones(1, 4), mask), clip_low=0.2, clip_high=0.28)
    # A < 0: loss = max(r, clip(r)) -> r=0.5: max(0.5, 0.8) = 0.8 (clipped); r=1.5: max(1.5, 1.28) = 1.5
    assert torch.allclose(neg.loss, torch.tensor([[0.8, 0.9, 1.1, 1.5]]))
    assert neg.clipped.tolist() == [[1.0, 0.0, 0.0, 0.0]]


def test_dual_clip_caps_negative_advantage():
    logp = torch.log(torch.tensor([[10.0]]))
    out = ppo_clip_loss(PolicyLossInputs(logp, torch.zeros(1, 1), -torch.ones(1, 1), torch.ones(1, 1)),
                        clip_ratio_c=3.0)
    assert out.loss.item() == pytest.approx(3.0)


def test_clip_regions_are_reported_apart():
    """Fix 7: the dual-clip region was missing from the clip fraction. Ratios 0.5, 1.5, 5 with A = +1, -1 each."""
    logp = torch.log(torch.tensor([[0.5, 1.5, 5.0, 0.5, 1.5, 5.0]]))
    adv = torch.tensor([[1.0, 1.0, 1.0, -1.0, -1.0, -1.0]])
    out = ppo_clip_loss(PolicyLossInputs(logp, torch.zeros(1, 6), adv, torch.ones(1, 6)), clip_low=0.2, clip_high=0.28,
                        clip_ratio_c=3.0)
    assert out.clipped_high.tolist() == [[0.0, 1.0, 1.0, 0.0, 0.0, 0.0]]  # A > 0, r > 1.28
    assert out.clipped_low.tolist() == [[0.0, 0.0, 0.0, 1.0, 0.0, 0.0]]   # A < 0, r < 0.8
    assert out.clipped_dual.tolist() == [[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]]  # A < 0, r > c = 3: loss capped at 3
    assert out.clipped.tolist() == [[0.0, 1.0, 1.0, 1.0, 0.0, 1.0]]
    assert torch.allclose(out.loss, torch.tensor([[-0.5, -1.28, -1.28, 0.8, 1.5, 3.0]]))


def test_gspo_clips_whole_sequences_by_the_length_normalised_ratio():
    # sample 0: token log-ratios 0.2 and 0.0 -> s = exp(0.1); sample 1: log-ratios -0.3, 0.1, 0.2 -> s = exp(0)
    logp = torch.tensor([[0.2, 0.0, 0.0], [-0.3, 0.1, 0.2]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]) * mask
    out = ppo_clip_loss(PolicyLossInputs(logp, torch.zeros(2, 3), adv, mask), clip_low=3e-4, clip_high=4e-4,
                        importance_sampling_level="sequence")
    s0 = math.exp(0.1)
    assert torch.allclose(out.ratio, torch.tensor([[s0, s0, 0.0], [1.0, 1.0, 1.0]]), atol=1e-6)
    assert out.clipped_high[0].tolist() == [1.0, 1.0, 0.0] and out.clipped[1].tolist() == [0.0, 0.0, 0.0]
    assert torch.allclose(out.loss, torch.tensor([[-(1 + 4e-4), -(1 + 4e-4), 0.0], [1.0, 1.0, 1.0]]), atol=1e-6)
    out.loss.sum().backward()
    # sample 0 is clipped (no gradient); sample 1's gradient per token is -A * s = 1 (GSPO-token's gradient)
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))


def test_cispo_keeps_the_gradient_of_clipped_tokens():
    logp = torch.log(torch.tensor([[2.0, 1.1, 0.5]])).requires_grad_()
    adv = torch.tensor([[1.0, 1.0, -1.0]])
    out = cispo_loss(PolicyLossInputs(logp, torch.zeros(1, 3), adv, torch.ones(1, 3)), clip_low=1.0, clip_high=0.28)
    # weights sg(clip(r, 0, 1.28)) = 1.28, 1.1, 0.5; loss = -w * A * logp
    w = torch.tensor([[1.28, 1.1, 0.5]])
    assert torch.allclose(out.loss, -w * adv * logp.detach(), atol=1e-6)
    assert out.clipped_high.tolist() == [[1.0, 0.0, 0.0]] and out.clipped_low.tolist() == [[0.0, 0.0, 0.0]]
    out.loss.sum().backward()
    assert torch.allclose(logp.grad, -w * adv)  # the clipped token (r = 2) still has gradient -1.28


def test_seq_mean_modes_do_not_count_fully_masked_sequences():
    """Fix 6: a sample masked out entirely (mask_truncated, dropped) is no sequence of the mean."""
    loss = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [9.0, 9.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert aggregate_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2.0 + 4.0) / 2)
    assert aggregate_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6.0 + 4.0) / 2)
    assert aggregate_loss(loss, mask, "seq-mean-token-sum-norm", max_len=8).item() == pytest.approx(10.0 / (2 * 8))


def test_clipped_tokens_get_no_gradient():
    logp = torch.log(torch.tensor([[1.5, 1.0]])).requires_grad_()
    out = ppo_clip_loss(PolicyLossInputs(logp, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2)), clip_low=0.2,
                        clip_high=0.2)
    out.loss.sum().backward()
    assert logp.grad[0, 0].item() == 0.0
    assert logp.grad[0, 1].item() == pytest.approx(-1.0)  # d(-r)/dlogp = -r = -1


LOSS = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize("mode,expected", [
    ("token-mean", (1 + 2 + 3 + 4) / 4),            # 2.5
    ("seq-mean-token-mean", (2.0 + 4.0) / 2),        # per-seq means 2 and 4
    ("seq-mean-token-sum", (6.0 + 4.0) / 2),
    ("seq-mean-token-sum-norm", (6.0 + 4.0) / (2 * 8)),
])
def test_loss_aggregation(mode, expected):
    assert aggregate_loss(LOSS, MASK, mode, max_len=8).item() == pytest.approx(expected)


def test_aggregation_with_global_denominators_sums_over_micro_batches():
    whole = aggregate_loss(LOSS, MASK, "token-mean")
    parts = sum(aggregate_loss(LOSS[i:i + 1], MASK[i:i + 1], "token-mean", num_tokens=4) for i in range(2))
    assert parts.item() == pytest.approx(whole.item())
    whole = aggregate_loss(LOSS, MASK, "seq-mean-token-mean")
    parts = sum(aggregate_loss(LOSS[i:i + 1], MASK[i:i + 1], "seq-mean-token-mean", num_seqs=2) for i in range(2))
    assert parts.item() == pytest.approx(whole.item())


def test_sum_norm_needs_max_len():
    with pytest.raises(ValueError, match="max_len"):
        aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_padding_never_changes_the_loss(mode):
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    old = torch.tensor([[-1.1, -1.9, -0.5]])
    adv = torch.tensor([[1.0, 1.0, 1.0]])
    mask = torch.ones(1, 3)
    base = aggregate_loss(ppo_clip_loss(PolicyLossInputs(logp, old, adv, mask)).loss, mask, mode, max_len=8)
    # the same sample with 3 padding columns holding garbage values
    pad = lambda x, v: torch.cat([x, torch.full((1, 3), v)], dim=1)  # noqa: E731
    padded = ppo_clip_loss(PolicyLossInputs(pad(logp, 5.0), pad(old, -30.0), pad(adv, 7.0), pad(mask, 0.0)))
    assert aggregate_loss(padded.loss, pad(mask, 0.0), mode, max_len=8).item() == pytest.approx(base.item())


def test_kl_estimators_hand_computed():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    log_r = math.log(0.25) - math.log(0.5)  # -log 2
    assert kl_per_token(logp, ref, "k1").item() == pytest.approx(-log_r)
    assert kl_per_token(logp, ref, "k2").item() == pytest.approx(0.5 * log_r ** 2)
    assert kl_per_token(logp, ref, "k3").item() == pytest.approx(0.5 - 1 - log_r)  # r - 1 - log r, r = 0.5
    assert kl_per_token(ref, ref, "k3").item() == 0.0


def test_k3_is_unbiased_estimate_of_kl():
    torch.manual_seed(0)
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.4, 0.4, 0.2])
    true_kl = float((p * (p / q).log()).sum())
    x = torch.multinomial(p, 200_000, replacement=True)
    est = kl_per_token(p.log()[x][None], q.log()[x][None], "k3").mean().item()
    assert est == pytest.approx(true_kl, rel=0.02)


def test_kl_in_reward_subtracts_future_kl():
    adv = broadcast_to_tokens(torch.tensor([1.0]), torch.tensor([[1.0, 1.0, 0.0]]))
    out = subtract_kl_from_returns(adv, torch.tensor([[0.1, 0.2, 9.0]]), torch.tensor([[1.0, 1.0, 0.0]]), beta=1.0)
    assert torch.allclose(out, torch.tensor([[1.0 - 0.3, 1.0 - 0.2, 0.0]]))


def test_adaptive_kl_moves_beta_toward_target():
    ctl = AdaptiveKLController(beta=0.1, target=0.01, horizon=10)
    assert ctl.update(0.05) == pytest.approx(0.1 * (1 + 0.2 / 10))  # error clipped at +0.2
    ctl = AdaptiveKLController(beta=0.1, target=0.01, horizon=10)
    assert ctl.update(0.005) == pytest.approx(0.1 * (1 - 0.2 / 10))  # error -0.5 clipped to -0.2
