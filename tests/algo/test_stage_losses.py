"""SFT's loss and the preference losses (DPO, cDPO, IPO) against values and gradients computed by hand from their
closed forms, and their rows in the objective table."""

import math

import pytest
import torch

from rlvr.algo.preference import PreferenceInputs, cdpo_loss, chosen_nll, dpo_loss, ipo_loss, preference_accuracy
from rlvr.algo.sft import sft_loss
from rlvr.algo.table import OBJECTIVES, objective_needs


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _inputs(tokens_c=(2.0, 4.0), tokens_r=(4.0, 2.0)):
    """Two pairs: policy (-3, -4) and (-5, -4.5), reference (-3.5, -3.5) and (-4, -4), so the log-ratio differences
    are h = 0.5 - (-0.5) = 1 and h = -1 - (-0.5) = -0.5."""
    lc = torch.tensor([-3.0, -5.0], dtype=torch.float64, requires_grad=True)
    lr = torch.tensor([-4.0, -4.5], dtype=torch.float64, requires_grad=True)
    inputs = PreferenceInputs(lc, lr, torch.tensor([-3.5, -4.0], dtype=torch.float64),
                              torch.tensor([-3.5, -4.0], dtype=torch.float64),
                              torch.tensor(tokens_c, dtype=torch.float64), torch.tensor(tokens_r, dtype=torch.float64))
    return inputs, lc, lr


def test_sft_loss_is_the_token_mean_nll_of_the_masked_tokens():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -4.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    loss = sft_loss(logp, mask, num_tokens=3)
    assert loss.item() == pytest.approx((2 + 3 + 0.5) / 3)
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, -1 / 3, -1 / 3, -1 / 3, 0.0, 0.0])
    # a micro-batch's share of a larger step: the step's token count is the denominator
    assert sft_loss(logp.detach(), mask, num_tokens=6).item() == pytest.approx(5.5 / 6)
    with pytest.raises(ValueError, match="one"):
        sft_loss(logp, mask[:, :2], num_tokens=3)


def test_dpo_loss_and_gradient():
    inputs, lc, lr = _inputs()
    out = dpo_loss(inputs, beta=0.5)
    assert out.losses.tolist() == pytest.approx([math.log(1 + math.exp(-0.5)), math.log(1 + math.exp(0.25))])
    out.losses.sum().backward()
    g1, g2 = -0.5 * (1 - _sigmoid(0.5)), -0.5 * (1 - _sigmoid(-0.25))  # d/d lc of -log sigmoid(beta h)
    assert lc.grad.tolist() == pytest.approx([g1, g2])
    assert lr.grad.tolist() == pytest.approx([-g1, -g2])
    assert out.chosen_rewards.tolist() == pytest.approx([0.25, -0.5])  # beta x (policy - reference)
    assert out.rejected_rewards.tolist() == pytest.approx([-0.25, -0.25])
    assert preference_accuracy(out.chosen_rewards, out.rejected_rewards).tolist() == [1.0, 0.0]


def test_cdpo_is_dpo_with_the_label_flipped_with_probability_eps():
    inputs, lc, _ = _inputs()
    out = cdpo_loss(inputs, beta=0.5, label_smoothing=0.1)
    first = 0.9 * math.log(1 + math.exp(-0.5)) + 0.1 * math.log(1 + math.exp(0.5))
    second = 0.9 * math.log(1 + math.exp(0.25)) + 0.1 * math.log(1 + math.exp(-0.25))
    assert out.losses.tolist() == pytest.approx([first, second])
    out.losses.sum().backward()
    # d/dx [-(1 - eps) log sigmoid(x) - eps log sigmoid(-x)] = sigmoid(x) - (1 - eps), times beta
    assert lc.grad.tolist() == pytest.approx([0.5 * (_sigmoid(0.5) - 0.9), 0.5 * (_sigmoid(-0.25) - 0.9)])
    inputs, _, _ = _inputs()
    assert cdpo_loss(inputs, beta=0.5, label_smoothing=0.0).losses.tolist() == \
        pytest.approx(dpo_loss(inputs, beta=0.5).losses.tolist())
    with pytest.raises(ValueError, match="label_smoothing"):
        cdpo_loss(inputs, beta=0.5, label_smoothing=0.5)


def test_ipo_normalises_the_log_ratios_per_token():
    inputs, lc, lr = _inputs()
    out = ipo_loss(inputs, beta=0.5)
    # pair 1: 0.5 / 2 - (-0.5) / 4 = 0.375, target 1 / (2 beta) = 1: (0.375 - 1)^2; pair 2: -1/4 + 0.5/2 = 0: 1
    assert out.losses.tolist() == pytest.approx([0.390625, 1.0])
    out.losses.sum().backward()
    assert lc.grad.tolist() == pytest.approx([2 * (0.375 - 1) / 2, 2 * (0.0 - 1) / 4])
    assert lr.grad.tolist() == pytest.approx([-2 * (0.375 - 1) / 4, -2 * (0.0 - 1) / 2])
    with pytest.raises(ValueError, match="beta"):
        ipo_loss(inputs, beta=0.0)


def test_the_nll_term_is_the_chosen_response_per_token():
    inputs, _, _ = _inputs()
    assert chosen_nll(inputs.chosen_logps, inputs.chosen_tokens).tolist() == pytest.approx([1.5, 1.25])


def test_inputs_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="one length"):
        PreferenceInputs(*(torch.zeros(2) for _ in range(5)), torch.zeros(3))


def test_sft_and_the_preference_losses_are_rows_of_the_objective_table():
    assert [(r.name, r.stage, r.data, r.reference) for r in OBJECTIVES] == [
        ("sft", "sft", "examples", False), ("dpo", "dpo", "pairs", True), ("cdpo", "dpo", "pairs", True),
        ("ipo", "dpo", "pairs", True)]
    assert OBJECTIVES["cdpo"].loss_function() is cdpo_loss and OBJECTIVES["sft"].loss_function() is sft_loss
    need = objective_needs("dpo")
    assert (need.reference, need.critic, need.old_logprobs) == (True, False, False)
    with pytest.raises(KeyError, match="did you mean 'dpo'"):
        OBJECTIVES["dpp"]
