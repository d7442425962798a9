"""The corrections for stale and mismatched tokens as tensor functions and as recipe keys: each one's weights on a
hand-made example, the bound on the log-ratio, ``algorithm.tis_cap`` read as ``correction: tis``, what a step needs,
and the recipe's errors (unknown name with the closest one, a setting the chosen row does not read, a band without 1).
"""

import math

import pytest
import torch

from rlvr.algo.corrections import behaviour_log_ratio, icepop, sequence_mask, truncated_is
from rlvr.algo.table import CORRECTIONS, needs
from rlvr.config import AlgorithmConfig, RecipeError, describe_algorithm, dump_recipe, resolve
from rlvr.config.loading import apply_overrides

# Two samples of three response tokens, the second one token shorter. Behaviour ratios r = pi_old / pi_behav:
#   sample 0: 1, 4, 1/4      (geometric mean (1 * 4 / 4)^(1/3) = 1)
#   sample 1: 3, 2, padding  (geometric mean sqrt(6) = 2.449)
RATIOS = [[1.0, 4.0, 0.25], [3.0, 2.0, 1.0]]
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ROLLOUT = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.3, 0.0]])
OLD = ROLLOUT + torch.log(torch.tensor(RATIOS))


def _raw(**algorithm) -> dict:
    return {"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}],
            "algorithm": algorithm}


def close(actual: torch.Tensor, expected: list[list[float]]) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected), rtol=1e-6, atol=1e-7)


def test_truncated_is_weighs_each_token_by_its_ratio_capped():
    out = truncated_is(OLD, ROLLOUT, MASK, cap=2.0)
    close(out.weight, [[1.0, 2.0, 0.25], [2.0, 2.0, 0.0]])  # min(r, 2); padding 0
    close(out.ratio, [[1.0, 4.0, 0.25], [3.0, 2.0, 0.0]])
    assert torch.equal(out.kept, MASK)  # a truncation masks nothing


def test_icepop_keeps_the_ratio_inside_the_band_and_masks_outside():
    out = icepop(OLD, ROLLOUT, MASK, low=0.5, high=5.0)
    # 1, 4 in [0.5, 5] keep their ratio as weight; 1/4 < 0.5 is masked; 3 and 2 are kept
    close(out.weight, [[1.0, 4.0, 0.0], [3.0, 2.0, 0.0]])
    close(out.kept, [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    # the band's ends are inside it: a ratio of exactly 0.5 or 5 is kept
    edge = icepop(torch.log(torch.tensor([[0.5, 5.0]])), torch.zeros(1, 2), torch.ones(1, 2), low=0.5, high=5.0)
    close(edge.kept, [[1.0, 1.0]])


def test_sequence_mask_drops_a_whole_sample_by_its_geometric_mean():
    out = sequence_mask(OLD, ROLLOUT, MASK, low=0.5, high=2.0)
    # sample 0: g = 1 (kept, weight 1 on every token, whatever each token's ratio); sample 1: g = sqrt(6) > 2
    close(out.weight, [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    close(out.kept, [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    assert math.sqrt(6) > 2.0
    # with a wider band both samples stay; a sample with no token in the loss has g = 1
    assert torch.equal(sequence_mask(OLD, ROLLOUT, MASK, low=0.5, high=2.5).kept, MASK)
    empty = sequence_mask(torch.full((1, 2), -3.0), torch.zeros(1, 2), torch.zeros(1, 2), low=0.9, high=1.1)
    assert torch.equal(empty.weight, torch.zeros(1, 2))


def test_the_log_ratio_is_bounded_so_no_weight_is_inf_or_nan():
    old = torch.tensor([[0.0, -1e4, 0.0, -float("inf")]])
    rollout = torch.tensor([[-1e4, 0.0, -float("inf"), 0.0]])
    mask = torch.ones(1, 4)
    assert behaviour_log_ratio(old, rollout, mask).tolist() == [[20.0, -20.0, 20.0, -20.0]]
    for out in (truncated_is(old, rollout, mask, cap=2.0), icepop(old, rollout, mask, low=0.5, high=5.0),
                sequence_mask(old, rollout, mask, low=0.5, high=2.0)):
        assert torch.isfinite(out.weight).all() and torch.isfinite(out.ratio).all()
    close(truncated_is(old, rollout, mask, cap=2.0).weight, [[2.0, math.exp(-20.0), 2.0, math.exp(-20.0)]])
    # garbage under the mask (a padding position) never reaches a weight or a ratio
    garbage = truncated_is(torch.tensor([[0.0, 1e4]]), torch.tensor([[0.0, -1e4]]), torch.tensor([[1.0, 0.0]]), cap=2.0)
    assert garbage.weight.tolist() == [[1.0, 0.0]] and garbage.ratio.tolist() == [[1.0, 0.0]]
    with pytest.raises(ValueError, match=r"expected \(R, T\) tensors of one shape: old_logprobs \(1, 4\), "
                                         r"rollout_logprobs \(1, 3\), mask \(1, 4\)"):
        behaviour_log_ratio(old, rollout[:, :3], mask)


def test_the_weight_inside_the_bound_is_min_of_exp_and_cap_bit_for_bit():
    """Within the bound the ``tis`` weight is exactly ``min(exp(old - rollout), cap)``, the formula ``tis_cap`` is
    documented by: the same float32 operations, so the same bits."""
    torch.manual_seed(0)
    old, rollout = -5 * torch.rand(6, 40), -5 * torch.rand(6, 40)
    mask = (torch.rand(6, 40) > 0.2).float()
    formula = torch.exp(old - rollout).clamp(max=2.0) * mask
    assert torch.equal(truncated_is(old, rollout, mask, cap=2.0).weight, formula)


@pytest.mark.parametrize("name", ["tis", "seq_mask", "icepop", "decoupled"])
def test_on_policy_tokens_get_weight_one_under_every_correction(name):
    row = CORRECTIONS[name]
    out = row.weight_function()(OLD, OLD.clone(), MASK, **row.settings)
    assert torch.equal(out.weight, MASK) and torch.equal(out.kept, MASK)


def test_rows_defaults_and_what_a_step_needs():
    assert CORRECTIONS.names() == ("none", "tis", "seq_mask", "icepop", "decoupled")
    assert {r.name: r.settings for r in CORRECTIONS} == {
        "none": {}, "tis": {"cap": 2.0}, "seq_mask": {"low": 0.5, "high": 2.0}, "icepop": {"low": 0.5, "high": 5.0},
        "decoupled": {"cap": 5.0}}
    assert CORRECTIONS["decoupled"].weight_function() is truncated_is
    with pytest.raises(ValueError, match="correction 'none' has no weights"):
        CORRECTIONS["none"].weight_function()
    # a correction reads pi_old: its step computes the old log-probs, even with one optimizer step per batch
    assert needs(AlgorithmConfig()).old_logprobs is False
    for name in ("tis", "seq_mask", "icepop", "decoupled"):
        assert needs(AlgorithmConfig(correction=name)).old_logprobs is True
    assert needs(AlgorithmConfig(tis_cap=2.0)).old_logprobs is True


def test_the_table_refuses_a_second_row_of_a_name():
    with pytest.raises(ValueError, match="correction 'icepop' is already in the table"):
        CORRECTIONS.add(CORRECTIONS["icepop"])


@pytest.mark.parametrize("name, given, filled", [
    ("none", {}, (None, None, None)),
    ("tis", {}, (2.0, None, None)),
    ("tis", {"cap": 3.0}, (3.0, None, None)),
    ("seq_mask", {}, (None, 0.5, 2.0)),
    ("seq_mask", {"low": 0.999, "high": 1.001}, (None, 0.999, 1.001)),
    ("icepop", {}, (None, 0.5, 5.0)),
    ("icepop", {"high": 8.0}, (None, 0.5, 8.0)),
    ("decoupled", {}, (5.0, None, None)),
])
def test_a_recipe_with_each_correction_validates_and_spells_out_its_settings(name, given, filled):
    recipe = resolve(_raw(correction={"type": name, **given}))
    c = recipe.algorithm.correction
    assert (c.type, c.cap, c.low, c.high) == (name, *filled)
    # the resolved recipe reads back to the same correction
    again = resolve({**_raw(), "algorithm": recipe.algorithm.model_dump()}).algorithm.correction
    assert again == c
    assert f"type: {name}" in dump_recipe(recipe)
    assert ("correction" in describe_algorithm(recipe)) is (name != "none")  # `rlvr config show`'s summary line
    # the bare name is short for {type: name}
    if not given:
        assert resolve(_raw(correction=name)).algorithm.correction == c


def test_set_on_the_command_line():
    raw = apply_overrides(_raw(), ["algorithm.correction.type=icepop", "algorithm.correction.high=4"])
    c = resolve(raw).algorithm.correction
    assert (c.type, c.low, c.high) == ("icepop", 0.5, 4.0)
    assert "no KL penalty, correction icepop (low 0.5, high 4), reward from" in describe_algorithm(resolve(raw))
    assert resolve(apply_overrides(_raw(), ["algorithm.correction=seq_mask"])).algorithm.correction.high == 2.0


def test_tis_cap_is_read_as_correction_tis():
    a = resolve(_raw(tis_cap=2.5)).algorithm
    assert (a.correction.type, a.correction.cap, a.tis_cap) == ("tis", 2.5, 2.5)
    # both spellings, when they agree, are one correction (a resolved recipe holds both)
    assert resolve(_raw(tis_cap=2.5, correction={"type": "tis", "cap": 2.5})).algorithm.correction == a.correction
    with pytest.raises(RecipeError, match=r"algorithm.tis_cap=2.5 is the older spelling of algorithm.correction: "
                                          r"\{type: tis, cap: 2.5\}, and algorithm.correction says type 'icepop': "
                                          r"keep one of the two"):
        resolve(_raw(tis_cap=2.5, correction="icepop"))
    with pytest.raises(RecipeError, match=r"algorithm.correction says type 'tis', cap 2.0: keep one"):
        resolve(_raw(tis_cap=2.5, correction="tis"))


def test_an_unknown_correction_names_the_closest_and_the_valid_ones():
    with pytest.raises(RecipeError, match=r"^unknown correction 'icepp'; did you mean 'icepop'\? \(valid "
                                          r"algorithm.correction.type: none, tis, seq_mask, icepop, decoupled\)$"):
        resolve(_raw(correction="icepp"))
    with pytest.raises(RecipeError, match=r"unknown correction 'seqmask'; did you mean 'seq_mask'\?"):
        resolve(_raw(correction={"type": "seqmask"}))


def test_settings_the_row_does_not_read_and_bands_without_1_are_refused():
    with pytest.raises(RecipeError, match=r"algorithm.correction.low=0.5 has no meaning with algorithm.correction."
                                          r"type='tis', which reads algorithm.correction.cap: remove it"):
        resolve(_raw(correction={"type": "tis", "low": 0.5}))
    with pytest.raises(RecipeError, match=r"algorithm.correction.cap=2.0 has no meaning with algorithm.correction."
                                          r"type='none', which reads no setting: remove it"):
        resolve(_raw(correction={"cap": 2.0}))
    with pytest.raises(RecipeError, match=r"algorithm.correction.low=0.5 has no meaning with algorithm.correction."
                                          r"type='decoupled'"):
        resolve(_raw(correction={"type": "decoupled", "low": 0.5}))
    with pytest.raises(RecipeError, match=r"algorithm.correction.high"):
        resolve(_raw(correction={"type": "icepop", "high": 0.9}))  # a band that leaves out 1 drops on-policy tokens
    with pytest.raises(RecipeError, match=r"algorithm.correction.low"):
        resolve(_raw(correction={"type": "seq_mask", "low": 1.2}))
    with pytest.raises(RecipeError, match=r"algorithm.correction: low=1.0 must be below high=1.0"):
        resolve(_raw(correction={"type": "icepop", "low": 1.0, "high": 1.0}))
    with pytest.raises(RecipeError, match=r"algorithm.correction.cap"):
        resolve(_raw(correction={"type": "tis", "cap": 0.0}))
