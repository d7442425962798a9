"""Each correction through the real policy objective: its loss and gradient equal the arithmetic written out below,
``tis_cap`` gives the bits of ``correction: tis``, masked tokens get exactly zero gradient, on-policy tokens change
nothing, and the ``train/is_ratio_*`` / ``train/correction_masked_fraction`` metrics count every sample once.
Last, one real training step of a tiny model with each correction logs those metrics from its batch.

The policy here is a free log-prob per token (the worker returns a leaf tensor), so the gradient of the loss with
respect to a token's log-prob is read directly.

The example: two samples of three response tokens, the second one token shorter (5 tokens in the loss).
- advantages: +1 on every token of sample 0, -2 on sample 1
- behaviour ratios r = pi_old / pi_behav: sample 0: 1, 4, 1/4; sample 1: 3, 2 (geometric means 1 and sqrt(6))
- the policy equals pi_old except at token (0, 1), where pi / pi_old = 1.5: PPO's clip (eps 0.2) is active there
  (A > 0, ratio above 1.2), so that token's loss is -1 * 1.2 and its gradient 0.
Per-token PPO loss l_t = max(-A r', -A clip(r')) with r' = pi / pi_old:
  sample 0: -1, -1.2, -1     sample 1: +2, +2
and its derivative in the token's log-prob (-A r' where unclipped, 0 where clipped):
  sample 0: -1, 0, -1        sample 1: +2, +2
The loss is token-mean: sum_t w_t l_t / 5, the gradient w_t dl_t / 5.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlvr.config import AlgorithmConfig
from rlvr.data.prompts import Prompt
from rlvr.rollout.base import Completion
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.policy_objective import PolicyObjective
from rlvr.trainer.update_loop import Denominators

RATIOS = [[1.0, 4.0, 0.25], [3.0, 2.0, 1.0]]
MASK = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
ADV = [[1.0, 1.0, 1.0], [-2.0, -2.0, 0.0]]
LOSS_TOKENS = [[-1.0, -1.2, -1.0], [2.0, 2.0, 0.0]]
LOSS_GRAD = [[-1.0, 0.0, -1.0], [2.0, 2.0, 0.0]]

# weights w_t per correction (see tests/algo/test_corrections.py for each one's rule)
WEIGHTS = {
    "none": [[1, 1, 1], [1, 1, 0]],
    "tis": [[1, 2, 0.25], [2, 2, 0]],            # min(r, 2)
    "decoupled": [[1, 4, 0.25], [3, 2, 0]],      # min(r, 5)
    "icepop": [[1, 4, 0], [3, 2, 0]],            # r inside [0.5, 5]; 1/4 masked
    "seq_mask": [[1, 1, 1], [0, 0, 0]],          # sample 1's geometric mean sqrt(6) > 2: dropped
}
# sum_t w_t l_t / 5, written out
EXPECTED_LOSS = {
    "none": (-1 - 1.2 - 1 + 2 + 2) / 5,                          # 0.16
    "tis": (-1 * 1 - 1.2 * 2 - 1 * 0.25 + 2 * 2 + 2 * 2) / 5,    # 0.87
    "decoupled": (-1 * 1 - 1.2 * 4 - 1 * 0.25 + 2 * 3 + 2 * 2) / 5,  # 0.79
    "icepop": (-1 * 1 - 1.2 * 4 - 1 * 0 + 2 * 3 + 2 * 2) / 5,    # 0.84
    "seq_mask": (-1 - 1.2 - 1 + 0 + 0) / 5,                      # -0.64
}
MASKED = {"none": None, "tis": 0.0, "decoupled": 0.0, "icepop": 1 / 5, "seq_mask": 2 / 5}


class FreeLogprobs:
    """A stand-in policy worker whose log-probs (N, T) are a leaf tensor: ``forward`` returns its rows."""

    def __init__(self, logp: torch.Tensor) -> None:
        self.logp = logp

    def forward(self, batch: RolloutBatch, idx: list[int], entropy_grad: bool = False):
        return self.logp[idx], torch.zeros(len(idx), self.logp.shape[1]), self.logp.shape[1]


def _example(correction) -> tuple[RolloutBatch, torch.Tensor, AlgorithmConfig]:
    batch = RolloutBatch(prompts=[Prompt(0, {}, "q", [1])], completions=[Completion([5] * 3, [0.0] * 3, "stop"),
                                                                          Completion([5] * 2, [0.0] * 2, "stop")],
                         group_size=2)
    batch.response_mask = torch.tensor(MASK)
    batch.rollout_logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.3, 0.0]])
    batch.old_logprobs = batch.rollout_logprobs + torch.log(torch.tensor(RATIOS))
    batch.advantages = torch.tensor(ADV)
    logp = batch.old_logprobs.clone()
    logp[0, 1] += math.log(1.5)
    config = AlgorithmConfig(loss_agg="token-mean", **({"correction": correction} if correction else {}))
    return batch, logp.requires_grad_(True), config


def _run(config: AlgorithmConfig, batch: RolloutBatch, logp: torch.Tensor, passes: list[list[int]]
         ) -> tuple[torch.Tensor, dict[str, float], PolicyObjective]:
    """The objective over the micro-batches ``passes`` (each one's loss summed, as gradient accumulation does)."""
    sums: dict[str, float] = {}

    def add(key: str, value: float) -> None:
        sums[key] = sums.get(key, 0.0) + value

    objective = PolicyObjective(FreeLogprobs(logp), config, kl_beta=0.0, max_len=3)
    denominators = Denominators(tokens=5.0, sequences=2.0)
    loss = sum(objective(batch, idx, denominators, True, add) for idx in passes)
    return loss, sums, objective


@pytest.mark.parametrize("name", list(WEIGHTS))
def test_each_corrections_loss_and_gradient_are_the_hand_computed_ones(name):
    batch, logp, config = _example(None if name == "none" else name)
    loss, sums, _ = _run(config, batch, logp, [[0, 1]])
    assert float(loss.detach()) == pytest.approx(EXPECTED_LOSS[name], abs=1e-6)
    loss.backward()
    expected_grad = torch.tensor(WEIGHTS[name], dtype=torch.float32) * torch.tensor(LOSS_GRAD) / 5
    torch.testing.assert_close(logp.grad, expected_grad, rtol=1e-5, atol=1e-7)
    # the policy-gradient term is the whole loss here (no KL, no entropy), as train/pg_loss reports it
    assert sums["pg_loss"] == pytest.approx(EXPECTED_LOSS[name], abs=1e-6)


def test_masked_tokens_get_exactly_zero_gradient():
    for name, zero in (("icepop", [(0, 2)]), ("seq_mask", [(1, 0), (1, 1)])):
        batch, logp, config = _example(name)
        loss, _, _ = _run(config, batch, logp, [[0, 1]])
        loss.backward()
        for r, t in zero:
            assert logp.grad[r, t].item() == 0.0, (name, r, t)  # exactly, not just small
        assert logp.grad[0, 0].item() != 0.0


def test_tis_cap_gives_the_bits_of_correction_tis():
    batch, logp, _ = _example(None)
    a, _, _ = _run(AlgorithmConfig(loss_agg="token-mean", tis_cap=2.0), batch, logp, [[0, 1]])
    a.backward()
    grad_a = logp.grad.clone()
    logp.grad = None
    b, _, _ = _run(AlgorithmConfig(loss_agg="token-mean", correction={"type": "tis", "cap": 2.0}), batch, logp,
                   [[0, 1]])
    b.backward()
    assert torch.equal(a, b) and torch.equal(grad_a, logp.grad)
    # and the loss is the policy loss times min(exp(old - rollout), cap), the formula tis_cap is documented by
    assert float(a.detach()) == pytest.approx(EXPECTED_LOSS["tis"], abs=1e-6)


@pytest.mark.parametrize("name", ["tis", "seq_mask", "icepop", "decoupled"])
def test_on_policy_samples_leave_the_loss_unchanged(name):
    """When the rollout engine sampled with the trainer's own log-probs (single-pass on-policy training), every ratio
    is 1 and the correction changes no bit of the loss or its gradient."""
    batch, logp, base_config = _example(None)
    batch.rollout_logprobs = batch.old_logprobs.clone()
    plain, _, _ = _run(base_config, batch, logp, [[0, 1]])
    plain.backward()
    plain_grad = logp.grad.clone()
    logp.grad = None
    corrected, _, _ = _run(AlgorithmConfig(loss_agg="token-mean", correction=name), batch, logp, [[0, 1]])
    corrected.backward()
    assert torch.equal(plain, corrected) and torch.equal(plain_grad, logp.grad)


@pytest.mark.parametrize("name", list(WEIGHTS))
def test_ratio_quantiles_and_masked_fraction_count_each_sample_once(name):
    batch, logp, config = _example(None if name == "none" else name)
    # micro-batches [0], [1], then [0] again (a second epoch or mini-batch): sample 0 is counted once
    _, sums, objective = _run(config, batch, logp, [[0], [1], [0]])
    metrics = objective.metrics({**sums, "opt_steps": 1.0}, lr=1e-6, has_reference=False, kl_beta=0.0)
    correction_keys = {"train/is_ratio_p05", "train/is_ratio_p50", "train/is_ratio_p95", "train/is_ratio_max",
                       "train/correction_masked_fraction"}
    if name == "none":
        assert not correction_keys & set(metrics)  # the default run logs what it always logged
        return
    assert correction_keys <= set(metrics)
    # ratios over the 5 tokens in the loss, sorted 1/4, 1, 2, 3, 4: p05 is the 1st (1 of 5 >= 0.05 x 5), p50 the 3rd
    # (3 of 5 >= 2.5), p95 the 5th (5 >= 4.75), whatever the correction does with them
    got = [metrics[f"train/is_ratio_{k}"] for k in ("p05", "p50", "p95", "max")]
    assert got == pytest.approx([0.25, 2.0, 4.0, 4.0], rel=1e-6)
    assert metrics["train/correction_masked_fraction"] == pytest.approx(MASKED[name])
    # every other metric is the one the uncorrected objective reports
    base_batch, base_logp, base_config = _example(None)
    _, base_sums, base = _run(base_config, base_batch, base_logp, [[0], [1], [0]])
    base_metrics = base.metrics({**base_sums, "opt_steps": 1.0}, lr=1e-6, has_reference=False, kl_beta=0.0)
    assert set(metrics) == set(base_metrics) | correction_keys


def test_a_batch_without_old_logprobs_is_a_clear_error():
    batch, logp, config = _example("icepop")
    batch.old_logprobs = None
    with pytest.raises(ValueError, match=r"algorithm.correction.type='icepop' weighs by pi_old / pi_behav and the "
                                         r"batch has no old_logprobs"):
        _run(config, batch, logp, [[0, 1]])


# ------------------------------------------------------------------------------------ one step of a tiny model
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tests.tiny import build_tiny_model, write_addition_dataset

    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


ROLLOUT_LOGPROB = -3.9
"""What the scripted engine reports for every token: near the tiny model's own log-probs of the script (-4.0 to
-3.2), so the behaviour ratios exp(old log-prob + 3.9) (0.9 to 2) fall on both sides of the bands below."""


@pytest.mark.usefixtures("no_plots")
@pytest.mark.parametrize("correction", [{"type": "icepop", "low": 0.95, "high": 1.2},
                                        {"type": "seq_mask", "low": 0.95, "high": 1.05}])
def test_a_training_step_logs_the_corrections_statistics_of_its_batch(tiny, tmp_path, correction):
    """The step's metrics are those of its batch: the ratios exp(old - rollout) over its tokens in the loss, and the
    share of them the band masks (micro-batches of 3 rows: the 8 samples are seen over three micro-batches)."""
    from rlvr.config import resolve
    from rlvr.models.loading import load_tokenizer
    from rlvr.rollout.base import Completion
    from rlvr.trainer.trainer import RLTrainer
    from tests.tiny import tiny_recipe
    from tests.trainer.test_trainer_wiring import ScriptedEngine

    class Engine(ScriptedEngine):
        def generate(self, prompt_token_ids, n, sampling):
            return [[Completion(c.token_ids, [ROLLOUT_LOGPROB] * len(c.token_ids), c.finish_reason) for c in group]
                    for group in super().generate(prompt_token_ids, n, sampling)]

    script = [["1", "a2", "ab", "123"], ["9", "x", "1b", "zz"]]
    recipe = resolve(tiny_recipe(*tiny, rollout={"prompts_per_step": 2, "group_size": 4},
                                 optim={"micro_batch_size": 3}, algorithm={"correction": correction}))
    trainer = RLTrainer(recipe, tmp_path / "run", rollout_engine=Engine(
        load_tokenizer(recipe.model.name, recipe.model), script))
    try:
        assert trainer.algorithm.needs.old_logprobs  # one optimizer step per batch, yet the old log-probs are taken
        batch, _, timer = trainer.collect()
        trainer.prepare(batch, timer)
        trainer.compute_advantages(batch)
        metrics = trainer.update(batch)
    finally:
        trainer.reward_fn.close()
        trainer.engine.destroy()
    mask = batch.response_mask > 0
    log_ratio = batch.old_logprobs - batch.rollout_logprobs
    ratios = torch.exp(log_ratio[mask]).double().numpy()
    expected = np.quantile(ratios, (0.05, 0.5, 0.95), method="inverted_cdf")
    got = [metrics[f"train/is_ratio_{k}"] for k in ("p05", "p50", "p95")]
    assert got == pytest.approx(expected.tolist(), rel=1e-6)
    assert metrics["train/is_ratio_max"] == pytest.approx(ratios.max(), rel=1e-6)
    c = recipe.algorithm.correction
    if c.type == "icepop":
        masked = ((ratios < c.low) | (ratios > c.high)).mean()
    else:
        lengths = mask.sum(1)
        geometric = torch.exp((log_ratio * mask).sum(1) / lengths.clamp(min=1))
        dropped = (geometric < c.low) | (geometric > c.high)
        masked = float((lengths * dropped).sum() / lengths.sum())
    assert metrics["train/correction_masked_fraction"] == pytest.approx(masked)
    assert 0 < metrics["train/correction_masked_fraction"] < 1  # the example masks some tokens, not all
    assert math.isfinite(metrics["train/loss"])
