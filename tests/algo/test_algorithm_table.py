"""The algorithm table: a new estimator is one function and one row, and the schema, the trainer's advantage stage,
the pre-flight memory estimate and the recipe reference all pick it up; the tables refuse a duplicate or unknown name.
"""

import pytest
import torch

from rlvr.algo.table import ALGORITHMS, POLICY_LOSSES, AlgorithmRow, PolicyLossRow, Table, needs


def max_baseline_advantages(rewards: torch.Tensor, *, valid: torch.Tensor | None = None, std_normalize: bool = False,
                            eps: float = 1e-6) -> torch.Tensor:
    """The toy estimator: each reward minus the best valid reward of its group ((B, G) -> (B, G); dropped samples 0)."""
    valid = torch.ones_like(rewards, dtype=torch.bool) if valid is None else valid
    best = torch.where(valid, rewards, -torch.inf).max(dim=1, keepdim=True).values
    return torch.where(valid, rewards - best, 0.0)


TOY = AlgorithmRow("max_baseline", advantages=f"{__name__}:max_baseline_advantages", baseline="group",
                   normalisation="group", std_normalize=False, summary="the group's best reward as the baseline")


@pytest.fixture
def toy_row():
    ALGORITHMS.add(TOY)  # the one row
    try:
        yield TOY
    finally:
        ALGORITHMS.remove(TOY.name)


def _raw(**algorithm) -> dict:
    return {"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}],
            "algorithm": algorithm}


def _batch(rewards: list[float], group_size: int, lengths: list[int], valid: list[bool] | None = None):
    from rlvr.data.prompts import Prompt
    from rlvr.rollout.base import Completion
    from rlvr.trainer.batch import RolloutBatch

    prompts = [Prompt(index=b, row={}, text="p", token_ids=[1]) for b in range(len(rewards) // group_size)]
    completions = [Completion([5] * k, [0.0] * k, "stop") for k in lengths]
    batch = RolloutBatch(prompts=prompts, completions=completions, group_size=group_size)
    batch.rewards = torch.tensor(rewards)
    batch.valid = torch.tensor(valid) if valid is not None else None
    batch.response_mask = torch.tensor([[1.0] * k + [0.0] * (max(lengths) - k) for k in lengths])
    return batch


def test_a_toy_estimator_is_one_function_and_one_row(toy_row):
    from rlvr.config import dump_recipe, resolve
    from rlvr.config.reference import render
    from rlvr.preflight.memory import held_models
    from rlvr.trainer.algorithms import GroupRelative, build_algorithm

    recipe = resolve(_raw(name="max_baseline"))
    a = recipe.algorithm
    assert (a.name, a.advantage.std_normalize, a.kl.placement, a.kl.estimator) == ("max_baseline", False, "loss", "k3")
    assert "name: max_baseline" in dump_recipe(recipe)
    # the trainer's advantage stage runs the row's function: rewards (1, 0, 0.5 | 2, 2, dropped) over G = 3
    stage = build_algorithm(a)
    assert isinstance(stage, GroupRelative) and stage.estimator is max_baseline_advantages
    batch = _batch([1.0, 0.0, 0.5, 2.0, 2.0, 7.0], 3, [2, 1, 2, 1, 2, 2], valid=[True] * 5 + [False])
    out = stage.advantages(batch, 0.0, lambda t: t).advantages
    assert out.tolist() == [[0.0, 0.0], [-1.0, 0.0], [-0.5, -0.5], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    # what a step needs: the policy alone at beta 0; a KL penalty adds the reference (in the reward: old log-probs too)
    assert needs(a) == stage.needs
    assert (stage.needs.reference, stage.needs.critic, stage.needs.old_logprobs) == (False, False, False)
    kl = resolve(_raw(name="max_baseline", kl={"beta": 0.1, "placement": "reward", "estimator": "k1"})).algorithm
    assert (needs(kl).reference, needs(kl).critic, needs(kl).old_logprobs) == (True, False, True)
    # the pre-flight memory estimate counts those models, and the recipe reference lists the row
    assert [role for role, _, _ in held_models(recipe)] == ["policy"]
    assert [role for role, _, _ in held_models(resolve(_raw(name="max_baseline", kl={"beta": 0.1})))] == \
        ["policy", "reference"]
    reference = render()
    assert '`"ppo"` \\| `"max_baseline"`' in reference
    assert f"| `max_baseline` | `{__name__}:max_baseline_advantages` | group | group | `false` | k3 in the loss | " \
           "the policy only | the group's best reward as the baseline |" in reference


def test_without_the_row_the_name_is_unknown():
    from rlvr.config import RecipeError, resolve

    with pytest.raises(RecipeError, match=r"^unknown algorithm 'max_baseline' \(valid algorithm.name: grpo, rloo, "
                                          r"reinforce_pp, ppo\)$"):
        resolve(_raw(name="max_baseline"))


def test_a_second_row_of_a_name_is_refused():
    with pytest.raises(ValueError, match=r"^algorithm 'grpo' is already in the table: a second row of the same name "
                                         r"would replace it silently; pick another name$"):
        ALGORITHMS.add(AlgorithmRow("grpo", advantages=TOY.advantages, baseline="group", normalisation="group",
                                    std_normalize=False, summary="another grpo"))
    with pytest.raises(ValueError, match=r"^policy loss 'cispo' is already in the table"):
        POLICY_LOSSES.add(PolicyLossRow("cispo", loss="rlvr.algo.losses:cispo_loss", settings=(), summary="again"))
    assert ALGORITHMS["grpo"].summary.startswith("GRPO") and POLICY_LOSSES["cispo"].settings == ("clip_low",
                                                                                              "clip_high")


def test_an_unknown_name_names_the_closest_and_every_valid_one():
    table: Table[PolicyLossRow] = Table("policy loss", "algorithm.policy_loss")
    table.add(PolicyLossRow("ppo_clip", loss="m:f", settings=(), summary=""))
    with pytest.raises(KeyError, match=r"unknown policy loss 'ppo_clp'; did you mean 'ppo_clip'\? \(valid "
                                       r"algorithm.policy_loss: ppo_clip\)"):
        table["ppo_clp"]
    with pytest.raises(ValueError, match=r"^unknown policy loss 'x' \(valid algorithm.policy_loss: ppo_clip\)$"):
        table.check("x")


def test_every_row_names_a_function_that_loads():
    from rlvr.algo import advantages, gae, losses

    assert [row.advantage_function() for row in ALGORITHMS] == [
        advantages.grpo_advantages, advantages.rloo_advantages, advantages.reinforce_pp_advantages,
        gae.gae_advantages]
    assert [row.loss_function() for row in POLICY_LOSSES] == [losses.ppo_clip_loss, losses.cispo_loss]
    broken = AlgorithmRow("x", advantages="rlvr.algo.advantages:no_such", baseline="group", normalisation="group",
                          std_normalize=False, summary="")
    with pytest.raises(ValueError, match=r"cannot load 'rlvr.algo.advantages:no_such' \(AttributeError"):
        broken.advantage_function()
