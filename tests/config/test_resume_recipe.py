"""Resume (issue 11, fix 10): a changed recipe is refused with the list of changed keys unless each is allowed;
``--resume-from`` continues from an older checkpoint; TensorBoard events of the redone steps are dropped like
``metrics.jsonl``'s."""

from __future__ import annotations

import pytest

from rlvr.config import RecipeError, dump_recipe, resolve
from rlvr.runs.metrics import read_metrics
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def test_resume_with_a_changed_recipe_is_refused_before_the_model_loads(tiny, tmp_path):
    from rlvr.trainer.trainer import RLTrainer

    run = tmp_path / "run"
    (run / "checkpoints/step-2").mkdir(parents=True)  # the checks run before anything is loaded from it
    (run / "recipe.resolved.yaml").write_text(dump_recipe(resolve(tiny_recipe(*tiny))))
    changed = resolve(tiny_recipe(*tiny, rollout={"top_p": 0.9}, trainer={"steps": 9}))
    with pytest.raises(RecipeError, match=r"2 key\(s\):\n  rollout.top_p: 1.0 -> 0.9\n  trainer.steps: 3 -> 9\n"
                                          r"resume with the run's recipe, or accept the changes with "
                                          r"--allow-changed rollout.top_p --allow-changed trainer.steps"):
        RLTrainer(changed, run, resume=True)
    with pytest.raises(RecipeError, match=r"1 key\(s\):\n  rollout.top_p"):
        RLTrainer(changed, run, resume_from="checkpoints/step-2", allow_changed=["trainer.steps"])
    # the optimizer's own settings come back from the checkpoint: changing them is refused even when allowed
    with pytest.raises(RecipeError, match=r"optim.lr changed, but a resumed run takes them from the checkpoint"):
        RLTrainer(resolve(tiny_recipe(*tiny, optim={"lr": 1e-2})), run, resume=True, allow_changed=["optim"])
    with pytest.raises(FileNotFoundError, match=r"--resume-from checkpoints/step-7: not a finished checkpoint .*"
                                                r"its checkpoints: step-2"):
        RLTrainer(changed, run, resume_from="checkpoints/step-7")
    assert (run / "recipe.resolved.yaml").read_text() == dump_recipe(resolve(tiny_recipe(*tiny)))  # not overwritten


def test_cli_refuses_a_changed_recipe(tiny, tmp_path, capsys):
    import yaml

    from rlvr.cli import main

    run = tmp_path / "run"
    (run / "checkpoints/step-2").mkdir(parents=True)
    (run / "recipe.resolved.yaml").write_text(dump_recipe(resolve(tiny_recipe(*tiny))))
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe(*tiny)))
    assert main(["train", str(recipe), "-o", str(run), "--resume", "--set", "rollout.top_k=5"]) == 2
    assert "rollout.top_k: 0 -> 5" in capsys.readouterr().err
    assert main(["train", str(recipe), "-o", str(run), "--allow-changed", "rollout.top_k"]) == 2
    assert "--allow-changed only applies with --resume" in capsys.readouterr().err


def _tensorboard_scalars(run, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_resume_from_an_older_checkpoint_redoes_the_later_steps(tiny, tmp_path, no_plots):
    from rlvr.trainer.trainer import RLTrainer

    run = tmp_path / "run"
    first = RLTrainer(resolve(tiny_recipe(*tiny, trainer={"steps": 4, "save_every": 2, "keep_checkpoints": 3})), run)
    first.train()
    first.engine.destroy()
    before = {m["step"]: m["train/loss"] for m in read_metrics(run)}
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2", "step-4"]
    stale = (run / "checkpoints/step-4/trainer_state.json").stat().st_mtime_ns

    # steps 3 and 4 again from step 2, sampled at another temperature (allowed by name), so their numbers differ
    changed = resolve(tiny_recipe(*tiny, trainer={"steps": 4, "save_every": 2, "keep_checkpoints": 3},
                                  rollout={"temperature": 0.5}))
    second = RLTrainer(changed, run, resume_from="checkpoints/step-2", allow_changed=["rollout.temperature"])
    assert second.step_done == 2
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"]  # the later one is gone
    second.train()
    second.engine.destroy()

    after = {m["step"]: m["train/loss"] for m in read_metrics(run)}
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3, 4]  # each step once
    assert after[1] == before[1] and after[2] == before[2]
    assert after[4] != pytest.approx(before[4], abs=1e-9)  # redone at the new temperature
    # TensorBoard shows each step once, with the resumed run's values
    tb = _tensorboard_scalars(run, "train/loss")
    assert [s for s, _ in tb] == [1, 2, 3, 4]
    assert [v for _, v in tb] == pytest.approx([after[s] for s in (1, 2, 3, 4)], rel=1e-6)
    assert (run / "checkpoints/step-4/trainer_state.json").stat().st_mtime_ns != stale
    assert "temperature: 0.5" in (run / "recipe.resolved.yaml").read_text()  # the run's recipe is the resumed one


def test_a_run_written_before_a_key_existed_resumes_with_that_key_at_its_default(tiny, tmp_path):
    """Keys added to the schema since the run was written (here a reward key and a per-verifier one, removed from the
    saved recipe) are no change; a changed value of such a key still is."""
    import yaml

    from rlvr.config import check_resumed_recipe

    saved = yaml.safe_load(dump_recipe(resolve(tiny_recipe(*tiny))))
    del saved["reward"]["max_failure_rate"]
    for v in saved["verifiers"]:
        del v["memory_mb"]
    old = yaml.safe_dump(saved)
    check_resumed_recipe(old, resolve(tiny_recipe(*tiny)))  # nothing raised
    with pytest.raises(RecipeError, match=r"reward.max_failure_rate: 0.5 -> 0.9"):
        check_resumed_recipe(old, resolve(tiny_recipe(*tiny, reward={"max_failure_rate": 0.9})))
