"""The curriculum inside ``rlvr train`` on the tiny model: DAPO dynamic sampling with all-solved, all-failed and mixed
batches, solve-rate statistics through a checkpoint and resume, staged response lengths, and the curriculum metrics,
histograms and plot."""

import json
from pathlib import Path

import pytest

from rlvr.config import resolve
from rlvr.runs.metrics import read_metrics
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset

ME = "tests.curriculum.test_curriculum_trainer"


def always_solved(completion: str, sample: dict) -> float:
    """1 for every completion: every group is all-solved (zero variance)."""
    return 1.0


def never_solved(completion: str, sample: dict) -> float:
    """0 for every completion: every group is all-failed (zero variance)."""
    return 0.0


def odd_answers_solved(completion: str, sample: dict) -> float:
    """Prompts with an odd answer are always solved (zero-variance groups); the others score 1 when the completion
    starts with a digit (mixed groups, some of them zero-variance by chance)."""
    if int(sample["answer"]) % 2:
        return 1.0
    return 1.0 if completion[:1].isdigit() else 0.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def _recipe(tiny, verifier: str, **sections) -> dict:
    raw = tiny_recipe(*tiny, **sections)
    raw["verifiers"] = [{"name": f"{ME}:{verifier}"}]
    raw["reward"] = {"num_workers": 1}
    return raw


def _trainer(raw: dict, run_dir: Path, resume: bool = False, allow_changed: tuple[str, ...] = ()):
    from rlvr.trainer.trainer import RLTrainer

    return RLTrainer(resolve(raw), run_dir, resume=resume, allow_changed=allow_changed)


def _steps(run_dir: Path) -> list[dict]:
    return [m for m in read_metrics(run_dir) if "rollout/rounds" in m]


@pytest.mark.parametrize("verifier, rate", [("always_solved", 1.0), ("never_solved", 0.0)])
def test_dynamic_sampling_with_no_signal_finishes_every_step(tiny, tmp_path, verifier, rate):
    raw = _recipe(tiny, verifier, trainer={"steps": 2},
                  algorithm={"dynamic_sampling": {"enabled": True, "max_rounds": 3}})
    trainer = _trainer(raw, tmp_path / "run")
    summary = trainer.train()
    assert summary["steps"] == 2
    steps = _steps(tmp_path / "run")
    assert len(steps) == 2
    for m in steps:
        assert m["rollout/rounds"] == 3 and m["rollout/max_rounds_hit"] == 1.0
        assert m["rollout/groups_generated"] == 12 and m["rollout/groups_kept"] == 0  # 3 rounds x 4 prompts
        assert m["rollout/batch_filled"] == 0.0 and m["train/skipped_empty_batch"] == 1.0
        assert m["rollout/zero_var_groups_before_filter"] == 1.0
        # the rollout's seconds sampled every group, the dropped ones too
        assert m["rollout/tokens_per_s"] == pytest.approx(m["rollout/tokens_generated"] / m["time/rollout_s"])
        assert m["rollout/tokens_generated"] > 0
        assert m[f"curriculum/group_solve_rate/{'100' if rate else '0'}"] == 1.0
        assert m["rollout/tokens_generated"] > 0 and m["rollout/tokens"] == 0  # generated, none trained on
    assert summary["tokens_generated"] == sum(m["rollout/tokens_generated"] for m in steps)
    tracker = trainer.curriculum.tracker
    seen = tracker.groups > 0
    assert seen.sum() == min(24, len(trainer.prompt_set.train))  # 24 groups, one epoch: no prompt twice
    assert set(tracker.estimate[seen].tolist()) == {rate}


def test_without_dynamic_sampling_zero_variance_groups_are_trained_on(tiny, tmp_path):
    raw = _recipe(tiny, "always_solved", trainer={"steps": 1})
    _trainer(raw, tmp_path / "run").train()
    (m,) = _steps(tmp_path / "run")
    assert m["rollout/rounds"] == 1 and m["rollout/groups_kept"] == 4 and m["rollout/max_rounds_hit"] == 0.0
    assert m["rollout/zero_var_groups_after_filter"] == 1.0 and m["rollout/tokens"] > 0


def test_dynamic_sampling_trains_on_no_zero_advantage_group(tiny, tmp_path):
    raw = _recipe(tiny, "odd_answers_solved", trainer={"steps": 3},
                  algorithm={"dynamic_sampling": {"enabled": True, "max_rounds": 12}})
    trainer = _trainer(raw, tmp_path / "run")
    trainer.train()
    steps = _steps(tmp_path / "run")
    assert all(m["rollout/zero_var_groups_after_filter"] == 0.0 for m in steps)
    assert all(m["rollout/zero_var_groups_before_filter"] > 0.0 for m in steps)
    assert sum(m["rollout/rounds"] for m in steps) > 3  # refills happened
    for step in range(1, 4):
        rows = [json.loads(x) for x in (tmp_path / f"run/samples/step-{step}.jsonl").read_text().splitlines()]
        groups: dict[int, list[float]] = {}
        for row in rows:
            groups.setdefault(row["group"], []).append(row["reward"])
            assert int(row["answer"]) % 2 == 0  # always-solved prompts never reach the update
            assert row["advantage"] != 0.0
        assert groups and all(max(g) > min(g) for g in groups.values())
    train = trainer.prompt_set.train
    odd_seen = [i for i, p in enumerate(train) if int(p.row["answer"]) % 2 and trainer.curriculum.tracker.groups[i]]
    assert odd_seen and all(trainer.curriculum.tracker.rate(i) == 1.0 for i in odd_seen)


def _comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "cpu/")) and "per_s" not in k} for r in records]


def test_pools_and_solve_rates_resume_step_for_step(tiny, tmp_path):
    sections = dict(algorithm={"dynamic_sampling": {"enabled": True, "max_rounds": 2}},
                    curriculum={"sampler": "pools", "pools": {"weights": {"easy": 0.2, "normal": 0.6, "hard": 0.2}}})
    straight = _trainer(_recipe(tiny, "odd_answers_solved", trainer={"steps": 4}, **sections), tmp_path / "a")
    straight.train()
    first = _trainer(_recipe(tiny, "odd_answers_solved", trainer={"steps": 2}, **sections), tmp_path / "b")
    first.train()  # checkpoint step-2, as a run killed after it would leave
    saved = json.loads((tmp_path / "b/checkpoints/step-2/trainer_state.json").read_text())["curriculum"]
    assert sum(saved["solve_rates"]["groups"]) == sum(m["rollout/groups_generated"] for m in _steps(tmp_path / "b"))
    resumed = _trainer(_recipe(tiny, "odd_answers_solved", trainer={"steps": 4}, **sections), tmp_path / "b",
                       resume=True, allow_changed=("trainer.steps",))  # the run is extended: 2 -> 4 steps
    assert resumed.curriculum.tracker.state_dict() == saved["solve_rates"]
    resumed.train()
    assert _comparable(read_metrics(tmp_path / "a")) == _comparable(read_metrics(tmp_path / "b"))
    assert resumed.curriculum.state_dict() == straight.curriculum.state_dict()
    m = _steps(tmp_path / "a")[-1]
    assert m["curriculum/pool_easy"] + m["curriculum/pool_normal"] + m["curriculum/pool_hard"] == \
        len(straight.prompt_set.train)
    assert m["curriculum/pool_easy"] >= 1  # odd-answer prompts seen so far are always solved


def test_staged_response_length_metrics_histograms_and_plot(tiny, tmp_path):
    raw = _recipe(tiny, "odd_answers_solved", trainer={"steps": 3}, rollout={"max_new_tokens": 8},
                  curriculum={"stages": [{"step": 0, "max_new_tokens": 2}, {"step": 2, "max_new_tokens": 8}]})
    _trainer(raw, tmp_path / "run").train()
    steps = _steps(tmp_path / "run")
    assert [m["curriculum/max_new_tokens"] for m in steps] == [2, 2, 8]
    assert all(m["rollout/response_length"] <= 2 for m in steps[:2])
    assert steps[2]["rollout/response_length"] > 2
    assert (tmp_path / "run/plots/curriculum.png").stat().st_size > 1000
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "run/tensorboard"), size_guidance={"histograms": 0})
    events.Reload()
    hist = events.Histograms("curriculum/group_solve_rate")
    assert [h.step for h in hist] == [1, 2, 3] and hist[0].histogram_value.num == 4  # 4 groups a step
    assert "curriculum/prompt_solve_rate" in events.Tags()["histograms"]


def test_token_budget_ends_the_run_after_the_step_that_spends_it(tiny, tmp_path):
    raw = _recipe(tiny, "odd_answers_solved", trainer={"steps": 1})
    _trainer(raw, tmp_path / "probe").train()
    per_step = _steps(tmp_path / "probe")[0]["rollout/tokens_generated"]  # 4 groups x 4 samples
    budget = int(2.5 * per_step)  # spent during the third step on this tiny task (lengths vary little)
    raw = _recipe(tiny, "odd_answers_solved", trainer={"steps": 10, "max_tokens_generated": budget})
    summary = _trainer(raw, tmp_path / "run").train()
    steps = _steps(tmp_path / "run")
    totals = [m["rollout/tokens_generated_total"] for m in steps]
    assert summary["steps"] == len(steps) < 10
    assert totals[-1] >= budget > totals[-2]  # stopped at the first step that reached the budget, not before
    assert summary["tokens_generated"] == totals[-1]
    assert (tmp_path / f"run/checkpoints/step-{len(steps)}").is_dir()


def test_token_budget_stops_dynamic_sampling_rounds(tiny, tmp_path):
    raw = _recipe(tiny, "never_solved", trainer={"steps": 5, "max_tokens_generated": 1},
                  algorithm={"dynamic_sampling": {"enabled": True, "max_rounds": 3}})
    summary = _trainer(raw, tmp_path / "run").train()
    (m,) = _steps(tmp_path / "run")  # one round spends the 1-token budget: no refill, no second step
    assert summary["steps"] == 1 and m["rollout/rounds"] == 1 and m["rollout/groups_kept"] == 0
    assert m["train/skipped_empty_batch"] == 1.0


def test_an_unfilled_step_scales_its_loss_by_the_share_of_groups_kept(tiny, tmp_path):
    runs = {}
    for scale in (True, False):
        raw = _recipe(tiny, "odd_answers_solved", trainer={"steps": 1}, optim={"grad_clip": None},
                      algorithm={"dynamic_sampling": {"enabled": True, "max_rounds": 1, "scale_unfilled": scale}})
        # one round: refills could fill the batch (they did once the sampler changed), and the test needs it unfilled
        _trainer(raw, tmp_path / str(scale)).train()
        (runs[scale],) = _steps(tmp_path / str(scale))
    scaled, full = runs[True], runs[False]
    fill = scaled["rollout/batch_filled"]
    assert 0 < fill < 1 and fill == full["rollout/batch_filled"]  # same rollouts: odd answers dropped
    assert scaled["train/loss"] == pytest.approx(fill * full["train/loss"], rel=1e-5, abs=1e-9)
    assert scaled["train/grad_norm"] == pytest.approx(fill * full["train/grad_norm"], rel=1e-4)
