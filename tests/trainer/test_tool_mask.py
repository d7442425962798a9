"""The loss mask of tool-use samples through the real policy loss: a hand-built two-turn sample (sampled tokens, a tool
answer, sampled tokens again) gets exactly zero gradient at the tool answer's positions, and its loss equals the loss
of a sample made of the sampled tokens alone. Also: the batch ANDs the mask in, the rollout-vs-trainer log-prob gap is
measured on sampled tokens only, and PPO's score sits at the last sampled token.

The policy here is a free logits tensor (R, T, V) per position, so the log-prob of each response token depends only on
its own row of logits: a token that the loss does not see gets a gradient of exactly 0.
"""

from __future__ import annotations

import pytest
import torch

from rlvr.algo.losses import count_sequences
from rlvr.config import AlgorithmConfig
from rlvr.data.prompts import Prompt
from rlvr.rollout.base import Completion
from rlvr.trainer.algorithms import GAE
from rlvr.trainer.batch import RolloutBatch, tensorize
from rlvr.trainer.policy_objective import PolicyObjective
from rlvr.trainer.update_loop import Denominators

V = 12
PROMPT = [1, 2]
# turn 1 sampled (3 tokens), the tool's answer (2 tokens), turn 2 sampled (2 tokens, the last one eos)
RESPONSE = [3, 4, 5, 6, 7, 8, 9]
MASK = [1, 1, 1, 0, 0, 1, 1]
OTHER = [5, 4, 3, 10]  # the group's second sample: one turn, no tool call
SAMPLED = [i for i, m in enumerate(MASK) if m]


class LogitsWorker:
    """A stand-in policy worker: ``logits`` (N, T, V) is the model; ``forward`` gives log-probs and entropies of the
    batch's response ids from it, as :meth:`rlvr.trainer.workers.ModelWorker.forward` does from a model."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits

    def forward(self, batch: RolloutBatch, idx: list[int], entropy_grad: bool = False):
        t = max(len(batch.completions[i].token_ids) for i in idx)
        p = batch.input_ids.shape[1] - batch.response_mask.shape[1]
        ids = batch.input_ids[idx, p:p + t]
        logp_all = torch.log_softmax(self.logits[idx, :t], dim=-1)
        logp = logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, (entropy if entropy_grad else entropy.detach()), t


def _batch(responses: list[list[int]], masks: list[list[int]] | None) -> RolloutBatch:
    comps = [Completion(list(r), [-0.5] * len(r), "stop") for r in responses]
    batch = RolloutBatch(prompts=[Prompt(0, {}, "q", list(PROMPT))], completions=comps, group_size=len(responses),
                         texts=["" for _ in responses], sampled_masks=masks or [])
    tensorize(batch, pad_id=0, mask_truncated=False)
    return batch


def _loss(batch: RolloutBatch, logits: torch.Tensor, config: AlgorithmConfig, adv: list[float],
          old_shift: float = 0.3) -> tuple[torch.Tensor, dict[str, float], PolicyObjective]:
    """The policy objective's loss on the whole batch as one micro-batch (global denominators as run_update takes
    them), with old and reference log-probs that differ from the policy's (every term live)."""
    worker = LogitsWorker(logits)
    with torch.no_grad():
        logp, _, _ = worker.forward(batch, list(range(batch.num_samples)))
    shifts = torch.linspace(-old_shift, old_shift, logp.shape[1]).unsqueeze(0)
    batch.old_logprobs = (logp + shifts).detach()
    batch.ref_logprobs = (logp - 0.5 * shifts).detach()
    batch.advantages = torch.tensor(adv).unsqueeze(1) * batch.response_mask
    mask = batch.response_mask
    denominators = Denominators(tokens=float(mask.sum()), sequences=float(count_sequences(mask)))
    sums: dict[str, float] = {}

    def add(key: str, value: float) -> None:
        sums[key] = sums.get(key, 0.0) + value

    objective = PolicyObjective(worker, config, kl_beta=0.1, max_len=16)
    loss = objective(batch, list(range(batch.num_samples)), denominators, True, add)
    return loss, sums, objective


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("policy_loss", ["ppo_clip", "cispo"])
def test_tool_tokens_get_no_gradient_and_the_loss_is_the_sampled_tokens_loss(loss_agg, policy_loss):
    config = AlgorithmConfig(loss_agg=loss_agg, policy_loss=policy_loss, entropy_coef=0.01,
                             kl={"beta": 0.1, "placement": "loss"}, clip_low=0.1, clip_high=0.1)
    torch.manual_seed(0)
    base = torch.randn(2, len(RESPONSE), V)

    logits = base.clone().requires_grad_(True)
    batch = _batch([RESPONSE, OTHER], [MASK, [1] * len(OTHER)])
    loss, sums, _ = _loss(batch, logits, config, adv=[1.0, -1.0])
    loss.backward()
    tool_positions = [i for i, m in enumerate(MASK) if not m]
    assert torch.count_nonzero(logits.grad[0, tool_positions]) == 0  # exactly zero, not just small
    assert torch.count_nonzero(logits.grad[0, SAMPLED]) > 0
    assert sums["tokens"] == len(SAMPLED) + len(OTHER)

    # the same sample with the tool answer cut out: the sampled tokens alone, at the same logits
    alone_logits = torch.zeros(2, len(RESPONSE), V)
    alone_logits[0, :len(SAMPLED)] = base[0, SAMPLED]
    alone_logits[1] = base[1]
    alone_logits.requires_grad_(True)
    alone = _batch([[RESPONSE[i] for i in SAMPLED], OTHER], None)
    t = alone.response_mask.shape[1]
    keep = [SAMPLED + [-1] * (t - len(SAMPLED)), list(range(t))]  # row 0: the sampled positions (then padding)
    for name in ("old_logprobs", "ref_logprobs", "advantages"):
        full = getattr(batch, name)
        setattr(alone, name, torch.stack([full[r, keep[r]] for r in range(2)]) * alone.response_mask)
    mask = alone.response_mask
    objective = PolicyObjective(LogitsWorker(alone_logits), config, kl_beta=0.1, max_len=16)
    loss_alone = objective(alone, [0, 1], Denominators(float(mask.sum()), float(count_sequences(mask))), True,
                           lambda k, v: None)
    torch.testing.assert_close(loss, loss_alone, rtol=1e-6, atol=1e-7)
    loss_alone.backward()
    torch.testing.assert_close(logits.grad[0, SAMPLED], alone_logits.grad[0, :len(SAMPLED)], rtol=1e-5, atol=1e-7)


def test_the_batch_ands_the_sampled_mask_into_the_response_mask():
    batch = _batch([RESPONSE, OTHER], [MASK, [1] * len(OTHER)])
    assert batch.response_mask[0].tolist() == [float(m) for m in MASK]
    assert batch.response_mask[1].tolist() == [1.0] * len(OTHER) + [0.0] * (len(RESPONSE) - len(OTHER))
    assert [batch.sampled_length(i) for i in range(2)] == [len(SAMPLED), len(OTHER)]
    truncated = RolloutBatch(prompts=[Prompt(0, {}, "q", list(PROMPT))],
                             completions=[Completion(list(RESPONSE), [0.0] * 7, "length")], group_size=1,
                             texts=[""], sampled_masks=[MASK])
    tensorize(truncated, pad_id=0, mask_truncated=True)
    assert truncated.response_mask.sum() == 0  # mask_truncated still drops the whole sample


def test_the_rollout_logprob_gap_is_measured_on_sampled_tokens_only():
    config = AlgorithmConfig(loss_agg="token-mean")
    torch.manual_seed(1)
    logits = torch.randn(2, len(RESPONSE), V, requires_grad=True)
    batch = _batch([RESPONSE, OTHER], [MASK, [1] * len(OTHER)])
    worker = LogitsWorker(logits)
    with torch.no_grad():
        logp, _, _ = worker.forward(batch, [0, 1])
    rollout = logp.clone()
    rollout[0, [3, 4]] = 0.0  # what the rollout records for a tool answer: 0.0, far from the trainer's log-probs
    batch.rollout_logprobs = rollout
    _, sums, objective = _loss(batch, logits, config, adv=[1.0, -1.0])
    assert sums["mismatch"] == pytest.approx(0.0, abs=1e-6)
    assert objective.mismatch_max == pytest.approx(0.0, abs=1e-6)


def test_ppo_puts_the_score_at_the_last_sampled_token_and_skips_the_tool_answer():
    # a sample cut (length) right after a tool answer: its last ids are the tool's, its score goes on its last sampled
    # token, and GAE's advantages are 0 on the answer
    resp, mask = [3, 4, 5, 6, 7], [1, 1, 1, 0, 0]
    comps = [Completion(resp, [0.0] * 5, "length")]
    batch = RolloutBatch(prompts=[Prompt(0, {}, "q", list(PROMPT))], completions=comps, group_size=1, texts=[""],
                         sampled_masks=[mask])
    tensorize(batch, pad_id=0, mask_truncated=False)
    batch.rewards = torch.tensor([1.0])
    batch.valid = torch.tensor([True])
    batch.values = torch.zeros(1, 5)
    batch.old_logprobs = batch.ref_logprobs = torch.zeros(1, 5)
    config = AlgorithmConfig(name="ppo", advantage={"gamma": 1.0, "lam": 1.0, "std_normalize": False})
    out = GAE(config).advantages(batch, 0.0, lambda x: x)
    # gamma = lam = 1, V = 0: every sampled token's advantage and return is the score; the answer's are 0
    assert out.advantages[0].tolist()[3:] == [0.0, 0.0]
    assert out.returns[0].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
