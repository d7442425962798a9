"""Curriculum pieces without a model: solve-rate bookkeeping, the weighted pass sampler, pools, difficulty order and
weights, stages, the recipe schema's checks and the solve-rate bins."""

import json

import numpy as np
import pytest

from rlvr.config import CurriculumConfig, RecipeError, resolve
from rlvr.curriculum import Curriculum, CurriculumError, SolveRateTracker
from rlvr.curriculum.epoch_sampler import EpochSampler
from rlvr.curriculum.histogram import BIN_LABELS, bin_index, format_histogram, histogram
from rlvr.curriculum.pass_sampler import PassSampler


def _json(state):
    return json.loads(json.dumps(state))  # what a checkpoint's trainer_state.json gives back


# ------------------------------------------------------------------------------------------------ solve rates
def test_tracker_counts_and_ema():
    t = SolveRateTracker(3, ema=0.5)
    assert t.rate(0) is None and not t.known().any()
    assert t.observe(0, 2, 8) == 0.25
    assert t.rate(0) == 0.25  # the first group sets the estimate
    t.observe(0, 8, 8)
    assert t.rate(0) == pytest.approx(0.5 * 1.0 + 0.5 * 0.25)
    assert (t.samples[0], t.solved[0], t.groups[0]) == (16, 10, 2)
    assert t.known(min_samples=16).tolist() == [True, False, False]
    assert t.known(min_samples=17).tolist() == [False, False, False]


def test_tracker_state_round_trips_through_json_exactly():
    t = SolveRateTracker(5, ema=0.3, prior=[None, 0.5, None, None, 1.0])
    for i, s in [(0, 1), (2, 7), (0, 3), (4, 0)]:
        t.observe(i, s, 8)
    u = SolveRateTracker(5, ema=0.3)
    u.load_state_dict(_json(t.state_dict()))
    for name in ("samples", "solved", "groups", "has_prior"):
        assert getattr(u, name).tolist() == getattr(t, name).tolist()
    np.testing.assert_array_equal(u.estimate, t.estimate)  # NaN where none, exact floats elsewhere
    assert u.known().tolist() == [True, True, True, False, True]


def test_tracker_errors_name_the_problem():
    t = SolveRateTracker(2)
    with pytest.raises(IndexError, match="prompt index 2"):
        t.observe(2, 1, 4)
    with pytest.raises(ValueError, match="solved=5, samples=4"):
        t.observe(0, 5, 4)
    with pytest.raises(ValueError, match="covers 3 training prompts, this run has 2"):
        t.load_state_dict(SolveRateTracker(3).state_dict())
    with pytest.raises(ValueError, match="prompt 1 is 1.5"):
        SolveRateTracker(2, prior=[0.2, 1.5])


# ------------------------------------------------------------------------------------------------ pass sampler
def test_bucket_weights_observed_over_many_draws():
    category = np.array([0] * 30 + [1] * 50 + [2] * 20)
    weights = np.array([0.2, 0.5, 0.3])
    s = PassSampler(100, seed=7)
    drawn = [c for _ in range(500) for c in s.sample(16, category, weights).categories]  # 8,000 draws
    share = np.bincount(drawn, minlength=3) / len(drawn)
    # binomial standard error at n = 8000 is at most 0.0056: 0.02 is > 3.5 standard errors
    np.testing.assert_allclose(share, weights, atol=0.02)


def test_empty_categories_are_renormalised_and_fallback_never_aborts():
    s = PassSampler(10, seed=0)
    only_normal = np.ones(10, dtype=int)
    d = s.sample(40, only_normal, np.array([0.5, 0.5, 0.0]))
    assert set(d.categories) == {1} and d.fallback == 0  # the empty easy pool's weight moved to normal
    d = s.sample(5, only_normal, np.array([1.0, 0.0, 1.0]))  # every weighted pool is empty: draw from all eligible
    assert d.fallback == 5 and d.categories == [-1] * 5 and len(d.indices) == 5
    with pytest.raises(ValueError, match="no prompt is eligible"):
        s.sample(1, np.full(10, -1), np.ones(3))


def test_least_drawn_first_walks_a_category_in_passes():
    s = PassSampler(12, seed=3)
    cat = np.zeros(12, dtype=int)
    first = s.sample(5, cat, np.ones(1)).indices + s.sample(7, cat, np.ones(1)).indices
    assert sorted(first) == list(range(12))  # a full pass before any repeat, across calls
    second = s.sample(12, cat, np.ones(1)).indices
    assert sorted(second) == list(range(12)) and second != first  # the next pass is reshuffled


def test_tie_key_gives_easy_to_hard_passes():
    difficulty = np.array([3, 1, 2, 1, 3, 2], dtype=float)
    s = PassSampler(6, seed=0, tie_key=difficulty)
    order = s.sample(12, np.zeros(6, dtype=int), np.ones(1)).indices
    assert [difficulty[i] for i in order] == [1, 1, 2, 2, 3, 3] * 2


def test_sampler_is_deterministic_and_resumes_exactly():
    category = np.array([0, 1, 1, 2, 2, 2, 1, 0, 1, 1])
    weights = np.array([0.3, 0.4, 0.3])
    straight = PassSampler(10, seed=11)
    seq = [straight.sample(3, category, weights).indices for _ in range(8)]
    assert seq == [PassSampler(10, seed=11).sample(3, category, weights).indices] + seq[1:]  # same seed, same draws
    a = PassSampler(10, seed=11)
    head = [a.sample(3, category, weights).indices for _ in range(4)]
    b = PassSampler(10, seed=11)
    b.load_state_dict(_json(a.state_dict()))
    tail = [b.sample(3, category, weights).indices for _ in range(4)]
    assert head + tail == seq
    assert PassSampler(10, seed=12).sample(3, category, weights).indices != seq[0] or \
        PassSampler(10, seed=13).sample(3, category, weights).indices != seq[0]  # the seed matters


# ------------------------------------------------------------------------------------------------ curriculum
def _cfg(**kw) -> CurriculumConfig:
    return CurriculumConfig.model_validate(kw)


def test_default_curriculum_is_the_epoch_sampler():
    c = Curriculum(_cfg(), [{"q": i} for i in range(7)], seed=5, max_new_tokens=64)
    assert isinstance(c.sampler, EpochSampler)
    assert c.sample(7, step=0) == EpochSampler(7, seed=5).sample(7)
    assert c.max_new_tokens(1000) == 64


def test_pools_from_solve_rates_and_unseen_prompts_count_as_normal():
    rows = [{"q": i} for i in range(6)]
    c = Curriculum(_cfg(sampler="pools", pools={"hard_max": 0.2, "easy_min": 0.8, "min_samples": 4,
                                                  "weights": {"easy": 0, "normal": 0, "hard": 1}}),
                   rows, seed=0, max_new_tokens=8)
    c.observe([(0, 4, 4), (1, 0, 4), (2, 2, 4), (3, 0, 2)])  # easy, hard, normal, hard but only 2 samples seen
    assert c.pools().tolist() == [0, 2, 1, 1, 1, 1]
    assert c.sample(3, step=0) == [1, 1, 1]  # only the hard pool has weight
    report = c.end_step(0)
    m = report.metrics
    assert (m["curriculum/pool_easy"], m["curriculum/pool_normal"], m["curriculum/pool_hard"]) == (1, 4, 1)
    assert m["curriculum/drawn_hard"] == 1.0 and m["curriculum/prompts_with_stats"] == 4
    # group solve rates 1, 0, 0.5, 0 -> bins "100", "0", "40-60", "0"
    assert m["curriculum/group_solve_rate/0"] == 0.5 and m["curriculum/group_solve_rate/100"] == 0.25
    assert m["curriculum/group_solve_rate/40-60"] == 0.25
    assert sorted(report.histograms["curriculum/group_solve_rate"]) == [0.0, 0.0, 0.5, 1.0]
    assert c.end_step(1).metrics["curriculum/drawn_hard"] == 0.0  # counters reset per step


def test_prior_field_seeds_the_estimates():
    rows = [{"q": 0, "solve_rate": 1.0}, {"q": 1, "solve_rate": 0.5}, {"q": 2, "solve_rate": 0.0}]
    c = Curriculum(_cfg(sampler="pools", solve_rate={"prior_field": "solve_rate"}), rows, seed=0, max_new_tokens=8)
    assert c.pools().tolist() == [0, 1, 2]
    with pytest.raises(CurriculumError, match="training row 1 holds None"):
        Curriculum(_cfg(solve_rate={"prior_field": "solve_rate"}), [{"solve_rate": 0.1}, {}], seed=0,
                   max_new_tokens=8)


def test_difficulty_order_and_stages():
    rows = [{"level": f"Level {lv}"} for lv in (3, 1, 2, 1, 3, 2)]
    cfg = _cfg(sampler="difficulty", difficulty={"field": "level", "mode": "order"},
               stages=[{"step": 0, "max_new_tokens": 16, "max_difficulty": 2}, {"step": 5, "max_new_tokens": 32}])
    c = Curriculum(cfg, rows, seed=0, max_new_tokens=32)
    assert [c.max_new_tokens(s) for s in (0, 4, 5, 100)] == [16, 16, 32, 32]
    early = c.sample(8, step=0)
    assert [c.difficulty[i] for i in early] == [1, 1, 2, 2, 1, 1, 2, 2]  # level 3 is locked before step 5
    assert c.end_step(0).metrics["curriculum/eligible_prompts"] == 4
    late = c.sample(2, step=5)
    assert [c.difficulty[i] for i in late] == [3, 3]  # level 3 unlocked, never drawn yet: least drawn first


def test_difficulty_weights_per_stage():
    rows = [{"meta": {"d": lv}} for lv in [1] * 10 + [2] * 10]
    cfg = _cfg(sampler="difficulty", difficulty={"field": "meta.d", "mode": "weight", "weights": {1: 1, 2: 0}},
               stages=[{"step": 3, "difficulty_weights": {1: 1, 2: 3}}])
    c = Curriculum(cfg, rows, seed=1, max_new_tokens=8)
    assert {c.difficulty[i] for i in c.sample(30, step=0)} == {1.0}
    late = [c.difficulty[i] for _ in range(200) for i in c.sample(10, step=3)]
    assert late.count(2.0) / len(late) == pytest.approx(0.75, abs=0.03)


def test_curriculum_errors_name_the_field_and_value():
    with pytest.raises(CurriculumError, match=r"training row 1: .*'level'.*has no number"):
        Curriculum(_cfg(sampler="difficulty", difficulty={"field": "level"}), [{"level": 1}, {"level": "hard"}],
                   seed=0, max_new_tokens=8)
    with pytest.raises(CurriculumError, match=r"no 'lvl' in the row \(it has \['level'\]\)"):
        Curriculum(_cfg(sampler="difficulty", difficulty={"field": "lvl"}), [{"level": 1}], seed=0, max_new_tokens=8)
    with pytest.raises(CurriculumError, match=r"stages \(step 2\): no training prompt has a difficulty in \[5.0"):
        Curriculum(_cfg(difficulty={"field": "level"}, stages=[{"step": 2, "min_difficulty": 5}]),
                   [{"level": 1}, {"level": 2}], seed=0, max_new_tokens=8)
    with pytest.raises(CurriculumError, match="weight for difficulty 4, which no training prompt has"):
        Curriculum(_cfg(sampler="difficulty", difficulty={"field": "level", "mode": "weight", "weights": {4: 1}}),
                   [{"level": 1}], seed=0, max_new_tokens=8)


def test_curriculum_state_resumes_the_same_draws():
    rows = [{"q": i} for i in range(20)]
    cfg = _cfg(sampler="pools", pools={"weights": {"easy": 0.2, "normal": 0.5, "hard": 0.3}})

    def run(c, steps):
        out = []
        for step in steps:
            idx = c.sample(4, step)
            c.observe([(i, (i * 3) % 5, 4) for i in idx])  # a fixed fake policy: prompt i solves (3i mod 5)/4
            out.append(idx)
        return out

    straight = Curriculum(cfg, rows, seed=2, max_new_tokens=8)
    expected = run(straight, range(10))
    first = Curriculum(cfg, rows, seed=2, max_new_tokens=8)
    head = run(first, range(5))
    resumed = Curriculum(cfg, rows, seed=2, max_new_tokens=8)
    resumed.load_state_dict(_json(first.state_dict()))
    assert head + run(resumed, range(5, 10)) == expected
    assert resumed.tracker.state_dict() == straight.tracker.state_dict()


# ------------------------------------------------------------------------------------------------ recipe schema
def _recipe(curriculum: dict, max_new_tokens: int = 64):
    return resolve({"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}],
                    "rollout": {"max_new_tokens": max_new_tokens}, "curriculum": curriculum})


@pytest.mark.parametrize("curriculum, message", [
    ({"sampler": "pool"}, "curriculum.sampler"),
    ({"pools": {"hard_max": 0.5, "easy_min": 0.5}}, "hard_max=0.5 must be below easy_min=0.5"),
    ({"pools": {"weights": {"easy": 0, "normal": 0, "hard": 0}}}, "at least one of easy/normal/hard"),
    ({"sampler": "difficulty"}, "needs curriculum.difficulty.field"),
    ({"stages": [{"step": 5}, {"step": 2}]}, r"strictly increasing, got \[5, 2\]"),
    ({"stages": [{"step": 0, "max_new_tokens": 128}]}, "max_new_tokens=128 exceeds rollout.max_new_tokens=64"),
    ({"stages": [{"step": 0, "max_difficulty": 2}]}, "limits difficulty, which needs curriculum.difficulty.field"),
    ({"difficulty": {"field": "level", "mode": "weight"}}, "needs curriculum.difficulty.weights"),
    ({"pools": {"weigths": {}}}, "did you mean 'curriculum.pools.weights'"),
])
def test_recipe_rejects_bad_curricula(curriculum, message):
    with pytest.raises(RecipeError, match=message):
        _recipe(curriculum)


def test_recipe_accepts_a_full_curriculum():
    r = _recipe({"sampler": "difficulty", "difficulty": {"field": "level", "mode": "weight", "weights": {1: 2, 2: 1}},
                 "stages": [{"step": 0, "max_new_tokens": 32}, {"step": 10, "difficulty_weights": {1: 1, 2: 2}}]})
    assert r.curriculum.stages[1].difficulty_weights == {1.0: 1.0, 2.0: 2.0}
    assert _recipe({}).curriculum.sampler == "epoch"


# ------------------------------------------------------------------------------------------------ bins
def test_solve_rate_bins():
    assert [bin_index(r) for r in (0.0, 0.125, 0.2, 0.5, 0.79, 0.875, 1.0)] == [0, 1, 2, 3, 4, 5, 6]
    assert histogram([0.0, 0.0, 1.0, 0.5]) == [2, 0, 0, 1, 0, 0, 1]
    text = format_histogram([0.0, 0.0, 1.0, 0.5])
    assert len(text.splitlines()) == 1 + len(BIN_LABELS) and "50.0%" in text
    with pytest.raises(ValueError, match="got 1.5"):
        bin_index(1.5)
