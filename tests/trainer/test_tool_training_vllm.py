"""Training with the ``python`` tool on vLLM's CPU backend: the tool demo's recipe (``recipes/tool_demo.yaml``, the
embedded SmolLM2-135M-Instruct, which writes fenced python calls from its one-shot example) for two steps with
``rollout.engine: vllm``. The model's calls run in the sandbox; the tool's output enters the context with loss mask
0, and the sampled tokens' log-probs from vLLM agree with the trainer's forward over the whole multi-turn sequence.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.runs.metrics import read_metrics
from tests.sandbox_required import require_backend
from tests.vllm_required import require_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.docker]
REPO = Path(__file__).resolve().parents[2]


def test_the_tool_demo_trains_on_vllm_with_its_calls_out_of_the_loss(tmp_path, no_plots):
    require_vllm()
    from rlvr.config import load_recipe
    from rlvr.trainer.trainer import RLTrainer

    require_backend("docker")
    recipe = load_recipe(str(REPO / "recipes/tool_demo.yaml"), overrides=[
        "rollout.engine=vllm", "rollout.prompts_per_step=2", "rollout.group_size=4", "trainer.steps=2",
        "trainer.save_every=0", "trainer.num_threads=1", "trainer.log_samples_every=1", "eval.enabled=false",
        "reward.num_workers=1", "rollout.tools=[{name: python, kwargs: {time_s: 5.0, backend: docker}}]"])
    RLTrainer(recipe, tmp_path / "run").train()

    metrics = [m for m in read_metrics(tmp_path / "run") if "train/loss" in m]
    assert [m["step"] for m in metrics] == [1, 2]
    assert sum(m["tools/fraction_of_samples_calling"] for m in metrics) > 0  # the one-shot example is followed
    for m in metrics:
        assert m["tools/timeouts"] == 0.0
        # vLLM's log-probs of the sampled tokens against the trainer's forward (both fp32 or both bf16 on the CPU)
        assert abs(m["train/rollout_logprob_diff_mean"]) < 0.05, m["train/rollout_logprob_diff_mean"]
    rows = [json.loads(line) for step in (1, 2)
            for line in (tmp_path / "run/samples" / f"step-{step}.jsonl").read_text().splitlines()]
    called = [r for r in rows if any(t["by"] == "tool" for t in r["turns"])]
    assert called
    for row in called:
        turns = row["turns"]
        assert turns[0]["by"] == "policy" and "```python" in turns[0]["text"]
        for turn in turns:
            assert turn["in_loss"] == (turn["by"] == "policy")
            if turn["by"] == "tool":
                assert "```output" in turn["text"] and turn["calls"][0]["name"] == "python"
        assert row["sampled_tokens"] == sum(t["tokens"] for t in turns if t["by"] == "policy") < row["tokens"]
