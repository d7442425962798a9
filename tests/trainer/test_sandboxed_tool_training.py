"""Training with the built-in ``python`` tool: the policy's calls run in the sandbox (Docker or bubblewrap), and
hostile calls (an endless loop, a 10 MB print, ``os.kill(-1, SIGSTOP)``) each cost their sample one turn, never the
step: the step finishes in bounded time and ``tools/error_rate`` and ``tools/timeouts`` count them.

The rollout engine is :class:`tests.tools.scripted.PythonCallEngine` (a random tiny model never writes a tool call):
sample j of every prompt writes the j-th program of ``PROGRAMS`` in a fenced python block, then answers after the
tool's output. The trainer, the tool environment, the python tool and the sandbox are the real ones.

Where a backend is not available the test skips with the reason, except under ``CI=true``, where it fails (a CI
without Docker deselects ``-m "not docker"``).
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from rlvr.runs.metrics import read_metrics
from tests.sandbox_required import require_backend
from tests.tiny import write_addition_dataset

pytestmark = pytest.mark.security
BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "bwrap"]
TIME_S = 1.0
# (program, the call's status): one per sample of a group (group_size 4)
PROGRAMS = [
    ("while True:\n    pass", "timeout"),
    ("print('x' * 10_000_000)", "error"),  # past output_kb
    ("import os, signal\nos.kill(-1, signal.SIGSTOP)\nprint('after')", "error"),  # contained: it fails itself only
    ("print(6 * 7)", "ok"),
]


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    from tests.tools.scripted import build_tiny_chat_model

    d = tmp_path_factory.mktemp("python_tool_model")
    return build_tiny_chat_model(d / "model"), write_addition_dataset(d / "data.jsonl")


@pytest.mark.parametrize("backend", BACKENDS)
def test_hostile_python_calls_cost_one_turn_never_the_step(chat_model, tmp_path, backend, no_plots):
    from rlvr.config import load_recipe
    from rlvr.models.loading import load_tokenizer
    from rlvr.trainer.trainer import RLTrainer
    from tests.tools.scripted import PythonCallEngine
    from tests.trainer.test_tool_training import tool_recipe

    require_backend(backend)
    raw = tool_recipe(*chat_model, steps=2)
    raw["rollout"].update({"tools": [{"name": "python", "kwargs": {"time_s": TIME_S, "output_kb": 64,
                                                                   "backend": backend}}],
                           "max_new_tokens": 128, "max_tool_output_tokens": 64, "call_format": "fenced"})
    path = tmp_path / "python_tool.yaml"
    path.write_text(yaml.safe_dump(raw))
    recipe = load_recipe(str(path))
    engine = PythonCallEngine(load_tokenizer(recipe.model.name, recipe.model), [p for p, _ in PROGRAMS])
    trainer = RLTrainer(recipe, tmp_path / "run", rollout_engine=engine)
    start = time.monotonic()
    trainer.train()
    wall = time.monotonic() - start

    metrics = [m for m in read_metrics(tmp_path / "run") if "train/loss" in m]
    assert [m["step"] for m in metrics] == [1, 2]
    groups = raw["rollout"]["prompts_per_step"]
    for m in metrics:
        # every sample called once and went on after the answer, whatever its call did
        assert m["tools/calls_per_sample"] == 1.0 and m["tools/fraction_of_samples_calling"] == 1.0
        assert m["tools/turns_per_sample"] == 2.0
        assert m["tools/error_rate"] == sum(s != "ok" for _, s in PROGRAMS) / len(PROGRAMS)
        assert m["tools/timeouts"] == float(groups * sum(s == "timeout" for _, s in PROGRAMS))
        assert m["tools/truncated_outputs"] >= groups  # the 10 MB prints at least
        assert m["reward/solve_rate"] == 0.25  # only the harmless call succeeded
        # a round's calls run as one batch: the loop costs its time limit, not the step
        assert m["time/tools_s"] < 20 * TIME_S, m["time/tools_s"]
        assert sum(v for k, v in m.items() if k.startswith("time/") and k != "time/tools_s") < 60, m
    assert wall < 180, wall

    rows = [json.loads(line) for line in (tmp_path / "run" / "samples" / "step-2.jsonl").read_text().splitlines()]
    assert len(rows) == groups * len(PROGRAMS)
    statuses = sorted(row["turns"][1]["calls"][0]["status"] for row in rows)
    assert statuses == sorted(s for _, s in PROGRAMS for _ in range(groups))
    for row in rows:
        turns = row["turns"]
        assert [t["by"] for t in turns] == ["policy", "tool", "policy"]
        assert [t["in_loss"] for t in turns] == [True, False, True]
        assert turns[0]["text"].startswith("```python") and "```output" in turns[1]["text"]
        assert len(turns[1]["text"]) < 400  # the 10 MB print is shown cut to max_tool_output_tokens
        assert row["completion"] == "so 42"
        status = turns[1]["calls"][0]["status"]
        if status == "timeout":  # the model is told, in a short error
            assert "TimeoutError" in turns[1]["text"]
        assert row["scores"]["tests.tools.scripted:used_a_tool"] == float(status == "ok")
