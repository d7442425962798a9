"""Two ranks run the curriculum exactly like one: with the ``pools`` sampler and DAPO dynamic sampling, both draw the
same prompts, keep the same solve-rate table (every rank records every group) and log the same metrics, including
refill rounds of one prompt, where one of the two ranks generates nothing and must still join the update.

Runs through :mod:`tests.trainer.test_multirank`'s ``torchrun`` worker and its prompt-determined fake rollout engine.
"""

from __future__ import annotations

import json

import pytest

from rlvr.runs.metrics import read_metrics
from tests.trainer.test_multirank import _recipe, _torchrun

pytestmark = pytest.mark.multiprocess

COMPARED = ("train/loss", "reward/mean", "rollout/rounds", "rollout/groups_generated", "rollout/groups_kept",
            "rollout/zero_var_groups_before_filter", "rollout/zero_var_groups_after_filter",
            "rollout/tokens_generated", "curriculum/pool_easy", "curriculum/pool_normal", "curriculum/pool_hard",
            "curriculum/drawn_easy", "curriculum/group_solve_rate/100")


def test_two_ranks_match_one_rank_with_pools_and_dynamic_sampling(tmp_path):
    from tests.tiny import build_tiny_model, write_addition_dataset

    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")

    def scenario(name: str) -> dict:
        raw = _recipe(model_dir, data, 0, 4)
        raw["verifiers"] = [{"name": "tests.curriculum.test_curriculum_trainer:odd_answers_solved"}]
        raw["reward"] = {"num_workers": 1}
        raw["algorithm"]["dynamic_sampling"] = {"enabled": True, "max_rounds": 3}
        raw["curriculum"] = {"sampler": "pools", "pools": {"weights": {"easy": 0.3, "normal": 0.5, "hard": 0.2}}}
        return {"recipe": raw, "run_dir": str(tmp_path / name)}

    _torchrun(2, [scenario("two")], tmp_path, "two_ranks")
    _torchrun(1, [scenario("one")], tmp_path, "one_rank")
    one = [m for m in read_metrics(tmp_path / "one") if "rollout/rounds" in m]
    two = [m for m in read_metrics(tmp_path / "two") if "rollout/rounds" in m]
    assert len(one) == len(two) == 4
    for a, b in zip(one, two, strict=True):
        for key in COMPARED:
            assert a.get(key) == pytest.approx(b.get(key), rel=2e-4, abs=1e-6), (a["step"], key)
    assert any(m["rollout/rounds"] > 1 for m in one)  # refills happened
    assert all(m["rollout/zero_var_groups_after_filter"] == 0 for m in one)
    state = [json.loads((tmp_path / name / "checkpoints/step-4/trainer_state.json").read_text())["curriculum"]
             for name in ("one", "two")]
    assert state[0] == state[1]
