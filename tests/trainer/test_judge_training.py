"""GRPO with a judge as the reward: the tiny model against a scripted chat server (fast), and the embedded model
judged by the embedded model behind ``rlvr judge serve`` (slow). Judge failures leave samples out, never score 0;
the judge's metrics reach metrics.jsonl and its raw verdicts the samples dump."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.config import resolve
from rlvr.runs.metrics import read_metrics
from tests.fake_chat import FakeChatServer, Reply, user_text
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset

_RESPONSE = re.compile(r"Response:\n(.*)\n\nIs the response", re.S)


def _verdict(request: dict) -> Reply:
    """Score 10 for a response that starts with a digit, 0 otherwise; no verdict at all for one that starts with 'a'
    (a judge failure: that sample must be left out)."""
    response = _RESPONSE.search(user_text(request)).group(1)
    if response.startswith("a"):
        return Reply(text="I cannot tell.")
    return Reply(text=f"Score: {10 if response[:1].isdigit() else 0}")


def test_grpo_with_a_scripted_judge(tmp_path):
    from rlvr.trainer.trainer import RLTrainer

    model_dir = build_tiny_model(tmp_path / "model", init_std=0.2)
    data = write_addition_dataset(tmp_path / "data.jsonl")
    with FakeChatServer(_verdict) as server:
        judge = {"name": "judge", "timeout_s": 30,
                 "kwargs": {"url": server.url, "model": "scripted", "retries": 0, "concurrency": 4}}
        raw = tiny_recipe(model_dir, data, verifiers=[{"name": "tests.tiny:starts_with_digit", "optimise": False},
                                                      judge],
                          reward={"num_workers": 1, "solved_verifier": "tests.tiny:starts_with_digit",
                                  "max_failure_rate": 1.0},
                          trainer={"steps": 2, "save_every": 0, "log_samples_every": 1})
        trainer = RLTrainer(resolve(raw), tmp_path / "run")
        trainer.train()
        trainer.engine.destroy()
        asked = len(server.requests)
    steps = [m for m in read_metrics(tmp_path / "run") if "reward/calls/judge" in m]
    assert len(steps) == 2
    rows = [json.loads(line) for line in (tmp_path / "run/samples/step-1.jsonl").read_text().splitlines()]
    for row in rows:
        text = row["completion"].strip()  # what the judge saw (reasoning stripping also trims)
        digit = text[:1].isdigit()
        if text.startswith("a"):
            assert row["scores"]["judge"] is None and "I cannot tell." in row["failures"]["judge"]
        else:
            assert row["scores"]["judge"] == (1.0 if digit else 0.0)
            assert row["extras"]["judge/raw"] == f"Score: {10 if digit else 0}"
    first = steps[0]
    judged = [r for r in rows if not r["completion"].strip().startswith("a")]
    assert first["reward/infra_failures/judge"] == len(rows) - len(judged)
    assert first["reward/calls/judge"] + first["reward/cache_hits/judge"] == len(rows)
    assert first["reward/requests/judge"] == 1.0 and first["reward/latency_s/judge"] > 0
    # where both scored, the judge agrees with the rule unless a leading space hid the digit from the rule
    agree = [r for r in judged if r["completion"].strip()[:1].isdigit() == r["completion"][:1].isdigit()]
    assert first["reward/agreement/judge"] == pytest.approx(len(agree) / len(judged))
    assert sum(m["reward/calls/judge"] for m in steps) <= asked


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_grpo_judged_by_the_embedded_model_behind_a_local_server(tmp_path):
    """A few GRPO steps of the embedded model on arithmetic, scored by the embedded model itself as a yes/no judge
    behind ``rlvr judge serve`` (a real HTTP server and model), beside the math verifier as gold."""
    from rlvr.trainer.trainer import RLTrainer

    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    server = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "judge", "serve", "--port", str(port),
                               "--model", "embedded:smollm2-135m-instruct"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = server.stdout.readline()
            if "serving" in line or server.poll() is not None:
                break
        assert server.poll() is None, "the judge server did not start"
        data = tmp_path / "data.jsonl"
        with data.open("w") as fh:
            for i in range(16):
                a, b = i % 4 + 1, i // 4 + 1
                fh.write(json.dumps({"question": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n")
        judge = {"name": "judge", "timeout_s": 120, "kwargs": {
            "url": f"http://127.0.0.1:{port}/v1", "model": "embedded:smollm2-135m-instruct",
            "verdict": "yes_no_logprob"}}
        raw = {"seed": 0, "model": {"name": "embedded:smollm2-135m-instruct"},
               "data": {"source": {"type": "jsonl", "path": str(data)}, "template": "boxed", "eval_size": 0},
               "rollout": {"engine": "hf", "prompts_per_step": 2, "group_size": 4, "max_new_tokens": 24},
               "verifiers": [judge, {"name": "math", "optimise": False}],
               "reward": {"num_workers": 1, "solved_verifier": "math", "max_failure_rate": 1.0},
               "optim": {"lr": 1e-6, "micro_batch_size": 8},
               "trainer": {"steps": 2, "save_every": 0, "log_samples_every": 1},
               "eval": {"enabled": False}}
        trainer = RLTrainer(resolve(raw), tmp_path / "run")
        trainer.train()
        trainer.engine.destroy()
    finally:
        server.terminate()
        server.wait(timeout=30)
    steps = [m for m in read_metrics(tmp_path / "run") if "reward/calls/judge" in m]
    assert len(steps) == 2
    for m in steps:
        assert m["reward/calls/judge"] + m["reward/cache_hits/judge"] == 8
        assert 0.0 <= m["reward/judge"] <= 1.0 and m["reward/infra_failures/judge"] == 0
        assert 0.0 <= m["reward/agreement/judge"] <= 1.0
    rows = [json.loads(line) for line in (tmp_path / "run/samples/step-1.jsonl").read_text().splitlines()]
    assert all(0.0 <= r["scores"]["judge"] <= 1.0 and "'" in r["extras"]["judge/raw"] for r in rows)
