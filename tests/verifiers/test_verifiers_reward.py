"""RewardFunction and the worker pool: weighted totals, containment of crashing/hanging/NaN verifiers,
caching, order, and workers that never outlive their parent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from rlvr.verifiers import verifier
from rlvr.verifiers.pool import Call, Status, VerifierPool
from rlvr.verifiers.reward import RewardFunction, VerifierSpec


@verifier("test_user_behaviour")
def user_behaviour(completion: str, sample: dict, *, bonus: float = 0.0):
    """A user verifier whose behaviour the completion's first word picks."""
    completion = completion.split()[0] if completion.split() else ""
    if completion == "hang":
        time.sleep(120)
    if completion == "crash":
        raise RuntimeError("user bug")
    if completion == "nan":
        return float("nan")
    if completion == "skip":
        return None
    if completion == "string":
        return "1.0"
    if completion == "dict":
        return {"score": 0.25, "why": "partial"}
    if completion == "exit":
        os._exit(3)
    return 1.0 + bonus


def test_weighted_combination_and_labels() -> None:
    specs = [
        VerifierSpec("math", weight=1.0),
        VerifierSpec("format", weight=0.5),
        VerifierSpec("math", weight=2.0, kwargs={"answer_field": "alt"}),
    ]
    completions = ["<think>6*7</think><answer>\\boxed{42}</answer>", "\\boxed{41}"]
    samples = [{"answer": "42", "alt": "41"}, {"answer": "42", "alt": "41"}]
    with RewardFunction(specs, num_workers=2) as reward_fn:
        assert reward_fn.labels == ["math", "format", "math#2"]
        first, second = reward_fn.score(completions, samples)
    assert first.scores == {"math": 1.0, "format": 1.0, "math#2": 0.0}
    assert first.total == pytest.approx(1.0 * 1 + 0.5 * 1 + 2.0 * 0)
    assert second.scores == {"math": 0.0, "format": 0.0, "math#2": 1.0}
    assert second.total == pytest.approx(2.0)
    assert first.extras["math/extracted"] == "42" and first.extras["format/reason"] == "ok"
    assert first.failures == {} and second.failures == {}


def test_crash_nan_hang_wrong_type_are_contained_and_counted() -> None:
    specs = [VerifierSpec("test_user_behaviour", weight=2.0, timeout_s=0.5), VerifierSpec("boxed_format", weight=1.0)]
    completions = ["ok \\boxed{1}", "crash", "nan", "hang", "skip", "string", "dict", "exit", "ok again"]
    with RewardFunction(specs, num_workers=2, failure_score=-1.0) as reward_fn:
        start = time.perf_counter()
        results = reward_fn.score(completions, [{} for _ in completions])
        elapsed = time.perf_counter() - start
        counters = reward_fn.counters()
    assert elapsed < 10  # the hang cost its 0.5 s deadline, not 120 s
    by_text = dict(zip(completions, results, strict=True))
    assert by_text["ok \\boxed{1}"].total == pytest.approx(2.0 * 1.0 + 1.0)
    assert by_text["crash"].failures["test_user_behaviour"].startswith("error: RuntimeError: user bug")
    assert by_text["crash"].total == pytest.approx(2.0 * -1.0)
    assert by_text["nan"].failures["test_user_behaviour"] == "nan"
    assert by_text["hang"].failures["test_user_behaviour"] == "timeout"
    assert by_text["hang"].scores["test_user_behaviour"] is None
    assert by_text["skip"].scores["test_user_behaviour"] is None and by_text["skip"].total == 0.0
    assert by_text["string"].failures["test_user_behaviour"].startswith("error: returned str")
    assert by_text["dict"].scores["test_user_behaviour"] == 0.25
    assert by_text["dict"].extras["test_user_behaviour/why"] == "partial"
    assert by_text["exit"].failures["test_user_behaviour"].startswith("error: worker died")
    assert by_text["ok again"].scores["test_user_behaviour"] == 1.0, by_text["ok again"]  # the pool recovered
    assert counters["test_user_behaviour/timeout"] == 1
    assert counters["test_user_behaviour/error"] == 3  # crash, wrong type, dead worker
    assert counters["test_user_behaviour/nan"] == 1
    assert counters["test_user_behaviour/skipped"] == 1
    assert counters["worker_restarts"] == 2  # the hang and the exit


def test_failure_score_none_leaves_failures_out_of_the_total() -> None:
    specs = [VerifierSpec("test_user_behaviour", weight=1.0), VerifierSpec("boxed_format", weight=1.0)]
    with RewardFunction(specs, num_workers=1, failure_score=None) as reward_fn:
        (result,) = reward_fn.score(["crash \\boxed{2}"], [{}])
    assert result.total == 1.0 and "test_user_behaviour" in result.failures


def test_kwargs_reach_the_verifier_and_order_is_kept() -> None:
    completions = [f"\\boxed{{{i}}}" for i in range(150)]
    samples = [{"answer": str(i if i % 3 else i + 1)} for i in range(150)]
    specs = [VerifierSpec("math"), VerifierSpec("test_user_behaviour", kwargs={"bonus": 0.5})]
    with RewardFunction(specs, num_workers=2) as reward_fn:
        results = reward_fn.score(completions, samples)
    assert [r.scores["math"] for r in results] == [0.0 if i % 3 == 0 else 1.0 for i in range(150)]
    assert all(r.scores["test_user_behaviour"] == 1.5 for r in results)


def test_math_results_are_cached_by_gold_and_extracted_answer() -> None:
    completions = ["work... \\boxed{4}", "other work \\boxed{4}", "\\boxed{5}"] * 4
    with RewardFunction([VerifierSpec("math")], num_workers=2) as reward_fn:
        first = reward_fn.score(completions, [{"answer": "4"}] * len(completions))
        second = reward_fn.score(completions[:3], [{"answer": "4"}] * 3)
        counters = reward_fn.counters()
    assert [r.scores["math"] for r in first] == [1.0, 1.0, 0.0] * 4
    assert [r.scores["math"] for r in second] == [1.0, 1.0, 0.0]
    assert counters["math/calls"] == 2  # ("4", "4") and ("4", "5")
    assert counters["math/cache_hits"] == 13


def test_verifier_named_by_import_path_runs_in_workers() -> None:
    spec = VerifierSpec("tests.verifiers.test_verifiers_reward:user_behaviour", kwargs={"bonus": 1.0})
    with RewardFunction([spec], num_workers=1) as reward_fn:
        (result,) = reward_fn.score(["fine"], [{}])
    assert result.scores["tests.verifiers.test_verifiers_reward:user_behaviour"] == 2.0


def test_bad_specs_fail_early() -> None:
    with pytest.raises(KeyError, match="math"):
        RewardFunction([VerifierSpec("maht")])
    with pytest.raises(ValueError, match="timeout_s"):
        RewardFunction([VerifierSpec("math", timeout_s=0)])
    with pytest.raises(ValueError, match="label"):
        RewardFunction([VerifierSpec("math", label="x"), VerifierSpec("format", label="x")])
    with RewardFunction([VerifierSpec("math")], num_workers=1) as reward_fn, pytest.raises(ValueError, match="samples"):
        reward_fn.score(["a", "b"], [{}])


def test_pool_kills_a_hung_call_and_finishes_the_chunk() -> None:
    calls = [Call("test_user_behaviour", text, {}, {}, 0.3) for text in ["a", "hang", "b", "c"]]
    with VerifierPool(num_workers=1, max_chunk=8) as pool:
        outcomes = pool.run(calls)
        assert pool.restarts == 1
    assert [o.status for o in outcomes] == [Status.OK, Status.TIMEOUT, Status.OK, Status.OK]
    assert outcomes[1].seconds >= 0.3


def test_workers_die_with_their_parent(tmp_path) -> None:
    script = textwrap.dedent(
        """
        import json, os, signal, sys
        from rlvr.verifiers.reward import RewardFunction, VerifierSpec
        fn = RewardFunction([VerifierSpec("boxed_format")], num_workers=2)
        fn.score(["\\\\boxed{1}"] * 8, [{}] * 8)
        print(json.dumps([w.process.pid for w in fn._pool._workers]), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=os.getcwd())
    pids = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(pids) == 2
    deadline = time.monotonic() + 5
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in pids if _alive(pid)]
        time.sleep(0.05)
    assert alive == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def test_close_stops_workers() -> None:
    reward_fn = RewardFunction([VerifierSpec("boxed_format")], num_workers=2)
    reward_fn.score(["\\boxed{1}"], [{}])
    processes = [w.process for w in reward_fn._pool._workers]
    reward_fn.close()
    assert all(not p.is_alive() for p in processes)


@verifier("test_ranged", score_range=(0.0, 1.0))
def ranged(completion: str, sample: dict) -> float:
    """Returns the float the completion spells: 'inf', '-inf', '1.5', ..."""
    return float(completion)


def test_inf_is_reported_as_inf_and_a_score_outside_the_declared_range_is_a_failure() -> None:
    completions = ["inf", "-inf", "nan", "1.5", "-0.25", "1.0", "0.0"]
    with RewardFunction([VerifierSpec("test_ranged")], num_workers=1, failure_score=0.0) as reward_fn:
        results = reward_fn.score(completions, [{} for _ in completions])
        counters = reward_fn.counters()
    failures = [r.failures.get("test_ranged") for r in results]
    assert failures == ["inf", "inf", "nan", "range: 1.5 outside [0.0, 1.0]", "range: -0.25 outside [0.0, 1.0]",
                        None, None]
    assert [r.scores["test_ranged"] for r in results] == [None, None, None, None, None, 1.0, 0.0]
    assert counters["test_ranged/inf"] == 2 and counters["test_ranged/nan"] == 1 and counters["test_ranged/range"] == 2


def test_built_in_verifiers_declare_their_ranges() -> None:
    from rlvr.verifiers.registry import get_verifier

    assert get_verifier("math").score_range == (0.0, 1.0)
    assert get_verifier("format").score_range == (0.0, 1.0)
    assert get_verifier("length_penalty").score_range == (-1.0, 0.0)
    assert get_verifier("overlong").score_range == (None, 0.0)
    with pytest.raises(ValueError, match="low 2 is above high 1"):
        verifier("test_bad_range", score_range=(2, 1))
