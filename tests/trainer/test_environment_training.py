"""`rlvr train` on the environment example (recipes/guessing_demo.yaml, made small): a model plays the number-guessing
game against ``rlvr.tools.envs.number_guessing:NumberGuessing`` for 2 GRPO steps, the environment's replies out of
the loss and its episode reward the only reward (``reward/env``). The fast test uses a tiny random chat model on games
over single digits (its random text holds a digit often enough to win some); the slow one the embedded
SmolLM2-135M-Instruct on the shipped games."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main
from rlvr.runs.metrics import read_metrics

REPO = Path(__file__).resolve().parents[2]


def _guessing_recipe(tmp_path: Path, **changes: dict) -> Path:
    """recipes/guessing_demo.yaml for 2 steps of 2 games x 4 samples, no evaluation, with ``changes`` per section."""
    raw = yaml.safe_load((REPO / "recipes" / "guessing_demo.yaml").read_text())
    raw["data"]["source"]["path"] = str(REPO / "datasets" / "guessing.jsonl")
    raw["rollout"].update(prompts_per_step=2, group_size=4, max_new_tokens=24)
    raw["optim"]["micro_batch_size"] = 8
    raw["trainer"] = {"steps": 2, "save_every": 0, "log_samples_every": 1}
    raw["eval"] = {"enabled": False}
    for section, values in changes.items():
        raw[section].update(values)
    path = tmp_path / "guessing.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _check_run(run: Path, max_guesses: int) -> list[dict]:
    """The checks every run of the game passes; returns the samples of both steps."""
    steps = [m for m in read_metrics(run) if "train/loss" in m]
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:
        assert m["reward/infra_failures/env"] == 0.0 and m["reward/samples"] == 8.0
        assert math.isnan(m["reward/env"]) or 0.0 <= m["reward/env"] <= 1.0
        assert m["tools/calls_per_sample"] == 0.0 and 1.0 <= m["tools/turns_per_sample"] <= max_guesses
    rows = [json.loads(line) for step in (1, 2)
            for line in (run / "samples" / f"step-{step}.jsonl").read_text().splitlines()]
    assert len(rows) == 16
    for row in rows:
        env = row["scores"]["env"]  # the environment's reward: the only one, weight 1
        assert env in (None, 0.0, 1.0) and row["reward"] == (env or 0.0) and isinstance(row["answer"], int)
        turns = row["turns"]
        assert [t["by"] for t in turns] == ["policy", "tool"] * (len(turns) // 2) + ["policy"] * (len(turns) % 2)
        for turn in turns:
            assert turn["in_loss"] == (turn["by"] == "policy")
            if turn["by"] == "tool":  # the environment's reply to a guess, never trained on
                assert "My number is" in turn["text"] or "Answer with one whole number." in turn["text"]
    assert any(t["by"] == "tool" for row in rows for t in row["turns"])  # the environment answered guesses
    assert any(row["scores"]["env"] is not None for row in rows)  # and ended games itself, won or lost
    return rows


def test_rlvr_train_plays_the_guessing_game_with_a_tiny_model(tmp_path, no_plots):
    from tests.tools.scripted import build_tiny_chat_model

    rng = random.Random(0)
    games = tmp_path / "games.jsonl"  # ranges of single digits: a random model's last digit wins now and then
    with games.open("w") as fh:
        for low, high in [(lo, hi) for lo in range(4) for hi in range(lo + 6, 10)]:
            fh.write(json.dumps({"question": f"I picked a whole number from {low} to {high}. Guess it.", "low": low,
                                 "high": high, "answer": rng.randint(low, high)}) + "\n")
    recipe = _guessing_recipe(
        tmp_path, model={"name": str(build_tiny_chat_model(tmp_path / "model"))},
        data={"source": {"type": "jsonl", "path": str(games)}, "eval_size": 0},
        rollout={"max_new_tokens": 128, "max_turns": 2, "environment_kwargs": {"max_guesses": 2}},
        trainer={"precision": "fp32", "num_threads": 1}, optim={"lr": 1e-3})
    assert main(["train", str(recipe), "-o", str(tmp_path / "run")]) == 0
    _check_run(tmp_path / "run", max_guesses=2)


@pytest.mark.slow
def test_rlvr_train_plays_the_guessing_game_with_the_embedded_model(tmp_path, no_plots):
    assert main(["train", str(_guessing_recipe(tmp_path)), "-o", str(tmp_path / "run")]) == 0
    rows = _check_run(tmp_path / "run", max_guesses=4)
    assert any("My number is" in t["text"] for row in rows for t in row["turns"] if t["by"] == "tool")
