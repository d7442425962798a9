"""Which checkpoints a run keeps and what they hold: the newest ``trainer.keep_checkpoints``, the best by held-out
eval, the HF ``model/`` folder in the last one only (unless ``trainer.export_every_checkpoint``), and ``rlvr eval`` on a
checkpoint without it."""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.cli import main
from rlvr.config import resolve
from rlvr.runs.checkpoint import best_by_eval, list_checkpoints
from rlvr.runs.metrics import read_metrics
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def _train(raw: dict, run_dir):
    from rlvr.trainer.trainer import RLTrainer

    trainer = RLTrainer(resolve(raw), run_dir)
    trainer.train()
    trainer.engine.destroy()


def test_the_newest_and_the_best_by_eval_are_kept_and_only_the_last_holds_model(tiny, tmp_path):
    run = tmp_path / "run"
    _train(tiny_recipe(*tiny, trainer={"steps": 4, "save_every": 1, "keep_checkpoints": 1},
                       eval={"enabled": True, "k": 2, "every": 2}), run)
    evals = {m["step"]: m["eval/pass_at_1"] for m in read_metrics(run) if "eval/pass_at_1" in m and m["step"]}
    assert set(evals) == {2, 4}
    kept = [n for n, _ in list_checkpoints(run)]
    assert kept == ([2, 4] if evals[2] > evals[4] else [4])  # steps 1 and 3 deleted
    assert best_by_eval(run).name == f"step-{2 if evals[2] > evals[4] else 4}"
    assert (run / "checkpoints/step-4/model/config.json").is_file()
    assert not (run / "checkpoints/step-2/model").exists()
    state = json.loads((run / "checkpoints/step-4/trainer_state.json").read_text())
    assert state["eval"]["step"] == 4 and state["eval"]["pass_at_1"] == evals[4]


def test_best_by_eval_is_the_highest_pass_at_1_of_the_checkpoints(tmp_path):
    for step, score in ((1, 0.5), (2, None), (3, 0.75), (4, 0.25)):
        folder = tmp_path / "checkpoints" / f"step-{step}"
        folder.mkdir(parents=True)
        ev = {"step": step, "pass_at_1": score} if score is not None else None
        (folder / "trainer_state.json").write_text(json.dumps({"step": step, "eval": ev}))
    assert best_by_eval(tmp_path).name == "step-3"
    assert best_by_eval(tmp_path / "nothing") is None


def test_eval_of_a_checkpoint_without_model_writes_it_from_the_deepspeed_state(tiny, tmp_path, capsys):
    from safetensors.torch import load_file

    run = tmp_path / "run"
    raw = tiny_recipe(*tiny, trainer={"steps": 2, "save_every": 1})
    _train(raw, run)
    first = run / "checkpoints/step-1"
    assert not (first / "model").exists() and (run / "checkpoints/step-2/model").is_dir()
    assert main(["eval", str(first), "--k", "1"]) == 0
    assert "holds no model/ folder" in capsys.readouterr().err
    saved = torch.load(first / "deepspeed/state/mp_rank_00_model_states.pt", weights_only=False)["module"]
    written = load_file(first / "model/model.safetensors")
    assert written and all(torch.equal(written[k], saved[k]) for k in written)
    assert not torch.equal(written["model.norm.weight"],
                           load_file(run / "checkpoints/step-2/model/model.safetensors")["model.norm.weight"])
