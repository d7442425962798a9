"""The FLOP / bandwidth floor of a GRPO step that benchmarks/bench_vs_trl.py reports, on hand-computed numbers."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from compute_floor import step_floor  # noqa: E402


def test_step_floor_counts_a_shared_prompt_once_and_takes_the_roofline():
    # 2 groups (prompts of 10 and 20 tokens) x 2 samples of 5 tokens: 30 + 20 = 50 tokens; 100 params
    f = step_floor(params=100, prompt_tokens_per_group=[10, 20], completion_tokens=[5, 5, 5, 5], flops_per_s=1000.0,
                   bytes_per_s=50.0, weight_bytes=2)
    assert f.generation_flops == 2 * 100 * 50 == 10_000
    assert f.training_flops == 6 * 100 * 50 == 30_000
    assert f.generation_compute_s == 10.0
    assert f.generation_bandwidth_s == 5 * 100 * 2 / 50.0 == 20.0  # decoding reads every weight once per step
    # prefill 2 x 100 x 30 / 1000 = 6 s, then 5 decode steps of 4 rows: max(4 x 0.2, 4.0) = 4 s each (bandwidth)
    assert f.generation_s == pytest.approx(6.0 + 5 * 4.0)
    assert f.training_s == 30.0
    assert f.step_s == pytest.approx(56.0)


def test_the_generation_floor_is_taken_at_each_decode_step():
    # 1 prompt of 10 tokens, 4 samples of 1, 1, 1 and 4 tokens; 100 params, 1000 FLOP/s, a weight read of 0.5 s:
    # the prefill 2 s; step 0 has 4 rows live (0.8 s of FLOPs), steps 1-3 one row (0.2 s): each bound by the read
    f = step_floor(100, [10], [1, 1, 1, 4], flops_per_s=1000.0, bytes_per_s=400.0, weight_bytes=2)
    assert f.generation_compute_s == pytest.approx(2 * 100 * 17 / 1000)  # 3.4 s: all FLOPs at once
    assert f.generation_bandwidth_s == pytest.approx(4 * 0.5)  # 2.0 s: one read per decode step
    assert f.generation_s == pytest.approx(2.0 + 0.8 + 3 * 0.5)  # 4.3 s: above both totals


def test_step_floor_adds_no_grad_forwards_to_training():
    f = step_floor(100, [10], [10], 1000.0, 1e9, 2, no_grad_forwards=1)  # e.g. a reference-model forward
    assert f.training_flops == 6 * 100 * 20 + 2 * 100 * 20


def test_step_floor_rejects_a_zero_rate():
    with pytest.raises(ValueError, match="flops_per_s"):
        step_floor(100, [10], [10], 0.0, 1e9, 2)


def _run(side: str, wall_s: float, limits: dict | None) -> dict:
    # one warm-up step (dropped) and one timed step: 1 prompt of 10 tokens, 2 samples of 5 tokens
    step = {"wall_s": wall_s, "generation_s": 1.0, "scoring_s": 0.0, "training_s": 1.0, "load_1m": 1.0,
            "prompt_tokens": [10], "completion_tokens": [5, 5]}
    run = {"side": side, "steps": [step, step], "peak_rss_mb": 1.0, "versions": {}}
    return run if limits is None else {**run, "limits": limits}


def test_the_floors_are_taken_at_the_median_of_the_limits_measured_before_each_run():
    from bench_vs_trl import summarize

    machine = {"matmul_flops_per_s": {"bf16": 500.0}, "read_bytes_per_s": 25.0}
    runs = [_run("rlvr", 2.0, {"matmul_flops_per_s": 2000.0, "read_bytes_per_s": 100.0}),
            _run("rlvr", 2.0, {"matmul_flops_per_s": 1000.0, "read_bytes_per_s": 50.0}),
            _run("trl", 8.0, {"matmul_flops_per_s": 1000.0, "read_bytes_per_s": 60.0}),
            _run("trl", 8.0, None)]  # recorded without limits: the invocation's (500 FLOP/s, 25 B/s)
    summ = summarize(runs, params=100, machine=machine, precision="bf16")
    # medians: 1000 FLOP/s (500, 1000, 1000, 2000), 55 B/s (25, 50, 60, 100)
    # prefill 2 x 100 x 10 / 1000 = 2 s, then 5 steps of max(2 rows x 0.2 s, 200 B / 55 B/s)
    for side in ("rlvr", "trl"):
        assert summ["sides"][side]["floor"]["generation"] == pytest.approx(2.0 + 5 * 200 / 55)
        assert summ["sides"][side]["floor"]["training"] == pytest.approx(6 * 100 * 20 / 1000)
    assert summ["limits"] == {"matmul_flops_per_s": [500.0, 1000.0, 2000.0], "read_bytes_per_s": [25.0, 55.0, 100.0],
                              "per_run": True}
    assert summ["ratio"] == pytest.approx(0.25)
