"""Independent numbers for the trainer's loss and gradients (issue 11): a plain-torch reference of one training step,
written here without importing rlvr's advantage, loss, KL or log-prob code, against which the trainer's
``update`` must agree to float tolerance, case by case.

The reference runs each sample alone through the HF model (no padding, no shared prompt cache, no micro-batches),
computes advantages, the clipped objective, KL, entropy and the aggregation from the formulas of the papers, and
backpropagates once per optimizer step. The trainer runs its real path: ``collect`` (a deterministic fake rollout
engine, the real verifier pool), ``prepare``, ``compute_advantages`` and ``update`` through DeepSpeed with
micro-batches of 4. The gradient of every parameter is read just before each optimizer step.

To make every term live, the reference policy is perturbed before the step (KL to it is not 0) and the policy
is perturbed after the old log-probs are taken (ratios spread on both sides of 1, so every clip region is hit).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import pytest
import torch

from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset
from tests.trainer.test_multirank import FakeRolloutEngine

TEMPERATURE = 0.7
MAX_NEW = 8


def fails_on_b(completion: str, sample: dict) -> float:
    """A verifier that raises on completions containing ``b`` (with ``failure_score: null`` they are dropped)."""
    if "b" in completion:
        raise ValueError("cannot score a 'b'")
    return 0.0


# ------------------------------------------------------------------------------------------------ the reference
def ref_token_logprobs(model: torch.nn.Module, prompt: list[int], completion: list[int]) -> tuple[torch.Tensor,
                                                                                                 torch.Tensor]:
    """Log-probs (k,) of the completion's tokens and the entropies (k,) of the temperature-scaled next-token
    distributions, one unpadded sequence through the model."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / TEMPERATURE  # (k, V)
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(1, torch.tensor(completion).unsqueeze(1)).squeeze(1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@dataclass
class Case:
    """A recipe's algorithm settings, and what the reference does with them."""

    advantage: str = "grpo"
    std_normalize: bool = True
    loss_agg: str = "token-mean"
    clip_low: float = 0.2
    clip_high: float = 0.2
    clip_ratio_c: float | None = None
    beta: float = 0.0
    estimator: str = "k3"
    placement: str = "loss"
    entropy_coef: float = 0.0
    mask_truncated: bool = False
    drop_failed: bool = False
    policy_loss: str = "ppo_clip"
    level: str = "token"
    ppo_epochs: int = 1
    mini_batches: int = 1
    off_policy: bool = True  # the test sets old log-probs before perturbing the policy (ratios != 1)

    def algorithm(self) -> dict:
        return {"name": self.advantage, "advantage": {"std_normalize": self.std_normalize}, "loss_agg": self.loss_agg,
                "clip_low": self.clip_low, "clip_high": self.clip_high, "clip_ratio_c": self.clip_ratio_c,
                "kl": {"beta": self.beta, "estimator": self.estimator, "placement": self.placement},
                "entropy_coef": self.entropy_coef, "mask_truncated": self.mask_truncated,
                "policy_loss": self.policy_loss, "importance_sampling_level": self.level,
                "ppo_epochs": self.ppo_epochs, "mini_batches": self.mini_batches}


def kl_estimate(logp: torch.Tensor, ref: torch.Tensor, estimator: str) -> torch.Tensor:
    log_r = ref - logp
    return {"k1": -log_r, "k2": 0.5 * log_r ** 2, "k3": torch.exp(log_r) - 1 - log_r}[estimator]


def ref_advantages(case: Case, rewards: list[list[float]], valid: list[list[bool]], masks: list[list[float]],
                   kl_reward: list[torch.Tensor] | None) -> list[torch.Tensor]:
    """Per-sample token advantages (k_i,), the formulas written out group by group."""
    g = len(rewards[0])
    out: list[torch.Tensor] = []
    for rs, vs in zip(rewards, valid):
        kept = [r for r, v in zip(rs, vs) if v]
        for j in range(g):
            if not vs[j] or len(kept) < 2:
                out.append(0.0)
                continue
            mean = sum(kept) / len(kept)
            if case.advantage == "rloo":
                a = rs[j] - (sum(kept) - rs[j]) / (len(kept) - 1)
            else:
                a = rs[j] - mean
            if case.advantage in ("grpo", "rloo") and case.std_normalize:
                std = math.sqrt(sum((r - mean) ** 2 for r in kept) / (len(kept) - 1))
                a = a / (std + 1e-6)
            out.append(a)
    tokens = [torch.full((len(m),), float(a)) * torch.tensor(m) for a, m in zip(out, masks)]
    if kl_reward is not None:  # the return of token t carries -beta * sum_{s >= t} kl_s
        tokens = [(t - case.beta * torch.flip(torch.cumsum(torch.flip(kl * torch.tensor(m), [0]), 0), [0]))
                  * torch.tensor(m) for t, kl, m in zip(tokens, kl_reward, masks)]
    if case.advantage == "reinforce_pp":  # whiten over every unmasked token of the batch (population std)
        flat = torch.cat([t[torch.tensor(m) > 0] for t, m in zip(tokens, masks)]).double()
        mean, std = flat.mean(), flat.std(unbiased=False)
        tokens = [((t.double() - mean) / (std + 1e-6)).float() * torch.tensor(m) for t, m in zip(tokens, masks)]
    return tokens


def ref_loss(case: Case, model: torch.nn.Module, samples: list[dict], adv: list[torch.Tensor],
             sign: dict[str, float]) -> torch.Tensor:
    """The mini-batch loss over ``samples`` (each with prompt, completion, mask, old, ref), aggregated over the whole
    mini-batch. ``sign`` flips terms (+1 = as the papers write them)."""
    per_token, masks, per_seq = [], [], []
    for s, a in zip(samples, adv):
        logp, ent = ref_token_logprobs(model, s["prompt"], s["completion"])
        m = torch.tensor(s["mask"])
        old = s["old"] if s["old"] is not None else logp.detach()
        a = sign["advantage"] * a
        if case.policy_loss == "cispo":
            w = torch.clamp(torch.exp(logp - old), 1 - case.clip_low, 1 + case.clip_high).detach()
            pg = -w * a * logp
        elif case.level == "sequence":  # GSPO eq. 5: one ratio per sample, s = exp(mean log-ratio)
            seq_ratio = torch.exp(((logp - old) * m).sum() / m.sum().clamp(min=1))
            a0 = a[0] if m.sum() > 0 else torch.tensor(0.0)
            pg_seq = torch.maximum(-a0 * seq_ratio, -a0 * torch.clamp(seq_ratio, 1 - case.clip_low, 1 + case.clip_high))
            pg = pg_seq.expand(len(logp))
        else:
            ratio = torch.exp(logp - old)
            pg = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - case.clip_low, 1 + case.clip_high))
            if case.clip_ratio_c is not None:
                pg = torch.where(a < 0, torch.minimum(pg, -a * case.clip_ratio_c), pg)
        loss_t = pg
        if case.beta > 0 and case.placement == "loss":
            loss_t = loss_t + sign["kl"] * case.beta * kl_estimate(logp, s["ref"], case.estimator)
        if case.entropy_coef > 0:
            loss_t = loss_t - sign["entropy"] * case.entropy_coef * ent
        per_token.append(loss_t * m)
        masks.append(m)
    n_seqs = sum(1 for m in masks if m.sum() > 0)
    n_tokens = sum(float(m.sum()) for m in masks)
    if case.loss_agg == "token-mean":
        return sum(t.sum() for t in per_token) / max(n_tokens, 1.0)
    if case.loss_agg == "seq-mean-token-mean":
        return sum(t.sum() / m.sum() for t, m in zip(per_token, masks) if m.sum() > 0) / max(n_seqs, 1)
    if case.loss_agg == "seq-mean-token-sum-norm":
        return sum(t.sum() for t in per_token) / (max(n_seqs, 1) * MAX_NEW)
    raise AssertionError(case.loss_agg)


def reference_step(case: Case, policy: torch.nn.Module, samples: list[dict], adv: list[torch.Tensor], seed: int,
                   step: int, optim: dict, sign: dict[str, float]) -> tuple[list[dict], list[float], torch.nn.Module]:
    """All optimizer steps of one training step: per step the gradients (name -> tensor) and the loss, plus the
    model after the last one (AdamW and norm clipping as in the recipe). The sample order per epoch is the trainer's
    documented shuffle: ``randperm(N)`` from a generator seeded ``seed * 1_000_003 + step``."""
    model = copy.deepcopy(policy)
    opt = torch.optim.AdamW(model.parameters(), lr=optim["lr"], betas=optim["betas"], weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    n = len(samples)
    grads, losses = [], []
    for _ in range(case.ppo_epochs):
        order = torch.randperm(n, generator=gen).tolist() if (case.ppo_epochs > 1 or case.mini_batches > 1) \
            else list(range(n))
        size = math.ceil(n / case.mini_batches)
        for k in range(case.mini_batches):
            mb = order[k * size:(k + 1) * size]
            opt.zero_grad()
            loss = ref_loss(case, model, [samples[i] for i in mb], [adv[i] for i in mb], sign)
            loss.backward()
            grads.append({name: p.grad.detach().clone() for name, p in model.named_parameters()})
            losses.append(float(loss.detach()))
            torch.nn.utils.clip_grad_norm_(model.parameters(), optim["grad_clip"])
            opt.step()
    return grads, losses, model


# ------------------------------------------------------------------------------------------------ the trainer side
def _perturb(model: torch.nn.Module, seed: int, scale: float) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)


def _raw(tiny, case: Case) -> dict:
    # fails_on_b has weight 0: it changes no total reward, only which samples are dropped under failure_score null
    verifiers = [{"name": "tests.tiny:digit_fraction"}, {"name": "tests.tiny:starts_with_digit", "weight": 0.0},
                 {"name": "tests.trainer.test_reference_step:fails_on_b", "weight": 0.0}]
    return tiny_recipe(*tiny, algorithm=case.algorithm(), verifiers=verifiers,
                       reward={"num_workers": 1, "solved_verifier": "tests.tiny:starts_with_digit",
                               "failure_score": None if case.drop_failed else 0.0},
                       rollout={"prompts_per_step": 4, "group_size": 4, "max_new_tokens": MAX_NEW,
                                "temperature": TEMPERATURE},
                       optim={"lr": 3e-3, "micro_batch_size": 4, "grad_clip": 1.0},
                       trainer={"steps": 1, "log_samples_every": 0})


@dataclass
class Shared:
    """One trainer (with a reference model) and one rollout batch for every case: building a trainer per case costs
    ~1 minute on this machine's shared cores. Each case swaps in its own recipe, restores the initial policy and a
    fresh optimizer state, and re-runs verify and prepare (validity and truncation masks depend on the case)."""

    trainer: object
    batch: object
    initial: dict


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    from rlvr.config import resolve
    from rlvr.models.loading import load_tokenizer
    from rlvr.trainer.trainer import RLTrainer

    d = tmp_path_factory.mktemp("tiny")
    tiny = build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")
    recipe = resolve(_raw(tiny, Case(beta=0.3)))
    tok = load_tokenizer(recipe.model.name, recipe.model)
    engine = FakeRolloutEngine(int(tok.eos_token_id), [tok.convert_tokens_to_ids(c) for c in "0123456789abc"])
    trainer = RLTrainer(recipe, d / "run", rollout_engine=engine)
    _perturb(trainer.ref_model, seed=1, scale=0.05)  # KL to the reference is not 0 from the first token
    batch, _, _ = trainer.collect()
    yield Shared(trainer, batch, copy.deepcopy(trainer.model.state_dict())), tiny
    trainer.reward_fn.close()
    trainer.engine.destroy()


@dataclass
class Prepared:
    trainer: object
    batch: object
    samples: list[dict]
    rewards: list[list[float]]
    valid: list[list[bool]]


def _prepare(case: Case, shared) -> Prepared:
    """The shared trainer set to the case's recipe, the batch scored and prepared, and the reference's view of it."""
    from rlvr.config import resolve
    from rlvr.trainer.algorithms import build_algorithm
    from rlvr.trainer.dynamic_sampling import score
    from rlvr.trainer.stages import StageTimer

    sh, tiny = shared
    trainer, batch = sh.trainer, sh.batch
    trainer.recipe = resolve(_raw(tiny, case))
    trainer.algorithm = build_algorithm(trainer.recipe.algorithm, reference=trainer.ref_model is not None)
    trainer.rewards = trainer._reward_source()
    trainer.kl_ctl.beta = case.beta
    trainer.model.load_state_dict(sh.initial)
    trainer.engine.optimizer.state.clear()  # fresh AdamW moments: every case is a first optimizer step
    batch.old_logprobs = batch.ref_logprobs = batch.advantages = None
    score(trainer.rewards, batch, trainer.curriculum.max_new_tokens(trainer.step_done))
    trainer.prepare(batch, StageTimer())
    samples = []
    for i, comp in enumerate(batch.completions):
        k = len(comp.token_ids)
        truncated = case.mask_truncated and comp.finish_reason == "length"
        dropped = bool(batch.reward_results[i].failures) and case.drop_failed
        samples.append({"prompt": list(batch.prompt_of(i).token_ids), "completion": list(comp.token_ids),
                        "mask": [0.0 if truncated or dropped else 1.0] * k, "old": None, "ref": None})
    with torch.no_grad():
        for s in samples:
            s["ref"] = ref_token_logprobs(trainer.ref_model, s["prompt"], s["completion"])[0]
            if case.off_policy or trainer.algorithm.needs.old_logprobs:
                s["old"] = ref_token_logprobs(trainer.model, s["prompt"], s["completion"])[0]
    if case.off_policy and batch.old_logprobs is None:  # hand the trainer the same old log-probs
        old = torch.zeros_like(batch.response_mask)
        for i, s in enumerate(samples):
            old[i, :len(s["old"])] = s["old"]
        batch.old_logprobs = old
    g = batch.group_size
    rewards = [[r.total for r in batch.reward_results[b * g:(b + 1) * g]] for b in range(len(batch.prompts))]
    valid = [[not (case.drop_failed and r.failures) for r in batch.reward_results[b * g:(b + 1) * g]]
             for b in range(len(batch.prompts))]
    return Prepared(trainer, batch, samples, rewards, valid)


def _trainer_step(p: Prepared) -> tuple[list[dict], dict]:
    """Advantages and the update as the trainer runs them; the gradients read before each optimizer step."""
    trainer = p.trainer
    trainer.compute_advantages(p.batch)
    grads = []
    real_step = type(trainer.engine).step

    def step_and_record():
        grads.append({name: q.grad.detach().clone() for name, q in trainer.model.named_parameters()})
        real_step(trainer.engine)

    trainer.engine.step = step_and_record
    try:
        metrics = trainer.update(p.batch)
    finally:
        del trainer.engine.step
    return grads, metrics


CASES = {
    "grpo": Case(),
    "grpo-seq-mean-token-mean": Case(loss_agg="seq-mean-token-mean"),
    "rloo": Case(advantage="rloo", std_normalize=False),
    "reinforce_pp": Case(advantage="reinforce_pp"),
    "dr_grpo-sum-norm": Case(std_normalize=False, loss_agg="seq-mean-token-sum-norm"),
    "clip-higher": Case(clip_low=0.1, clip_high=0.28),
    "dual-clip": Case(clip_low=0.1, clip_high=0.1, clip_ratio_c=1.15),
    "k2-in-loss": Case(beta=0.3, estimator="k2"),
    "k3-in-loss": Case(beta=0.3, estimator="k3"),
    "k1-in-reward": Case(beta=0.3, estimator="k1", placement="reward"),
    "k2-in-reward": Case(beta=0.3, estimator="k2", placement="reward"),
    "k3-in-reward-reinforce_pp": Case(advantage="reinforce_pp", beta=0.3, estimator="k3", placement="reward"),
    "entropy-bonus": Case(entropy_coef=0.05),
    "mask-truncated-seq-mean": Case(mask_truncated=True, loss_agg="seq-mean-token-mean"),
    "failure-score-null": Case(drop_failed=True, loss_agg="seq-mean-token-mean"),
    "gspo": Case(level="sequence", loss_agg="seq-mean-token-mean", clip_low=0.02, clip_high=0.03),
    "cispo": Case(policy_loss="cispo", clip_low=1.0, clip_high=0.1),
    "epochs-2-mini-batches-2": Case(ppo_epochs=2, mini_batches=2, off_policy=False, beta=0.3, estimator="k3",
                                    entropy_coef=0.05, clip_low=0.1, clip_high=0.15),
}
SIGNS = {"advantage": 1.0, "kl": 1.0, "entropy": 1.0}


def _assert_close_grads(trainer_grads: list[dict], ref_grads: list[dict], label: str) -> None:
    assert len(trainer_grads) == len(ref_grads), label
    for step, (tg, rg) in enumerate(zip(trainer_grads, ref_grads)):
        for name in rg:
            torch.testing.assert_close(tg[name], rg[name], rtol=2e-4, atol=2e-6,
                                       msg=lambda m: f"{label}, optimizer step {step}, {name}: {m}")


def _reference(case: Case, p: Prepared, sign: dict[str, float]):
    kl_reward = None
    if case.beta > 0 and case.placement == "reward":
        kl_reward = [sign["kl"] * kl_estimate(s["old"], s["ref"], case.estimator) for s in p.samples]
        sign = {**sign, "kl": 1.0}
    adv = ref_advantages(case, p.rewards, p.valid, [s["mask"] for s in p.samples], kl_reward)
    return adv, *reference_step(case, p.trainer.model, p.samples, adv, seed=0, step=0,
                                optim={"lr": 3e-3, "betas": (0.9, 0.99), "grad_clip": 1.0}, sign=sign)


@pytest.mark.parametrize("name", list(CASES))
def test_trainer_step_equals_the_reference(name, shared):
    case = CASES[name]
    p = _prepare(case, shared)
    _perturb(p.trainer.model, seed=2, scale=0.03)  # after the old log-probs: ratios spread around 1
    adv, ref_grads, ref_losses, ref_model = _reference(case, p, SIGNS)
    grads, metrics = _trainer_step(p)
    # one rank at ZeRO-0: the step skips DeepSpeed's flatten + all-reduce + copy of every gradient (nothing to average)
    assert p.trainer.engine.enable_backward_allreduce is False
    torch.testing.assert_close(p.batch.advantages, _padded(adv, p.batch.advantages.shape), rtol=1e-5, atol=1e-6)
    _assert_close_grads(grads, ref_grads, name)
    assert metrics["train/loss"] == pytest.approx(sum(ref_losses) / len(ref_losses), rel=1e-4, abs=1e-6)
    for (pname, q), r in zip(p.trainer.model.named_parameters(), ref_model.parameters()):
        # atol 1e-4 against ~3e-3 moves. Adam divides by sqrt(v) + 1e-8: a weight whose gradient is float noise in
        # both (|g| ~1e-9, where two equal sums in another order differ) moves by up to lr in either direction, so
        # those weights are held to that bound instead
        noise = torch.stack([step[pname].abs() for step in ref_grads]).amax(0) < 1e-7
        moved, want = q.detach(), r.detach()
        torch.testing.assert_close(moved[~noise], want[~noise], rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"{name} {pname}: {m}")
        assert bool(((moved - want).abs()[noise] <= 2 * 3e-3 * len(ref_grads)).all()), pname
    # the batch really exercised what the case is about
    if case.off_policy and case.policy_loss == "ppo_clip" and case.level == "token":
        assert metrics["train/clip_fraction_low"] > 0 and metrics["train/clip_fraction_high"] > 0, metrics
    if case.clip_ratio_c is not None:
        assert metrics["train/clip_fraction_dual"] > 0, metrics
    if case.drop_failed:
        assert 0 < sum(v for vs in p.valid for v in vs) < 16
    if case.mask_truncated:
        assert any(c.finish_reason == "length" for c in p.batch.completions)


def _padded(rows: list[torch.Tensor], shape: tuple) -> torch.Tensor:
    out = torch.zeros(shape)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


@pytest.mark.parametrize("term, name", [("advantage", "grpo"), ("kl", "k3-in-loss"), ("entropy", "entropy-bonus"),
                                        ("kl", "k2-in-reward")])
def test_a_flipped_sign_is_caught(term, name, shared):
    """The comparison has teeth: the reference with one term's sign flipped disagrees with the trainer (so a trainer
    with that sign flipped would fail :func:`test_trainer_step_equals_the_reference`)."""
    case = CASES[name]
    p = _prepare(case, shared)
    _perturb(p.trainer.model, seed=2, scale=0.03)
    _, ref_grads, _, _ = _reference(case, p, {**SIGNS, term: -1.0})
    grads, _ = _trainer_step(p)
    with pytest.raises(AssertionError):
        _assert_close_grads(grads, ref_grads, f"{name} with {term} flipped")
