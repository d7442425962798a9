"""scripts/compare_runs.py: a run equals itself (NaN metrics included), and a changed value, sample or weight is
named."""
import importlib.util
import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

_spec = importlib.util.spec_from_file_location("compare_runs", Path(__file__).parents[1] / "scripts" / "compare_runs.py")
compare_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_runs)


def _run(path: Path, metrics: list[dict], weight: torch.Tensor) -> Path:
    (path / "samples").mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (path / "samples" / "step-1.jsonl").write_text(json.dumps({"reward": metrics[0]["reward/mean"]}) + "\n")
    (path / "checkpoints" / "step-1" / "model").mkdir(parents=True)
    save_file({"w": weight}, str(path / "checkpoints" / "step-1" / "model" / "model.safetensors"))
    return path


def test_a_run_with_nan_metrics_and_weights_equals_itself(tmp_path, capsys):
    metrics = [{"step": 1, "reward/mean": math.nan, "rollout/response_length_correct": math.nan, "time/step_s": 1.0}]
    weight = torch.tensor([1.0, math.nan, 3.0])
    a = _run(tmp_path / "a", metrics, weight)
    b = _run(tmp_path / "b", [{**metrics[0], "time/step_s": 2.0}], weight.clone())  # clock keys are skipped
    assert compare_runs.main([str(a), str(b)]) == 0
    assert "IDENTICAL: 1 steps of metrics" in capsys.readouterr().out


def test_a_changed_value_sample_or_weight_is_named(tmp_path, capsys):
    a = _run(tmp_path / "a", [{"step": 1, "reward/mean": 0.5}], torch.tensor([1.0, math.nan]))
    b = _run(tmp_path / "b", [{"step": 1, "reward/mean": 0.25}], torch.tensor([1.0, 2.0]))
    assert compare_runs.main([str(a), str(b)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["step 1 reward/mean: 0.5 vs 0.25", "samples/step-1.jsonl: differs", "step-1: tensor w differs"]
    assert out[3].startswith("DIFFERENT")
