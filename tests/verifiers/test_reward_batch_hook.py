"""The registry's batch hook: a verifier with a `batch` function gets all of a score() call's samples in one
worker call (the code verifier judges a whole step's completions in one `rlvr.sandbox.run_many`)."""
import pytest

from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
from rlvr.sandbox.backends.docker_backend import docker_problem
from rlvr.verifiers import get_verifier, verifier
from rlvr.verifiers.code import code_rewards_batch
from rlvr.verifiers.reward import RewardFunction, VerifierSpec


def _batch_of_lengths(completions, samples, fail_on=None):
    out = []
    for c, s in zip(completions, samples, strict=True):
        out.append(ValueError(f"cannot score {c!r}") if c == fail_on else {"score": len(c) / 10, "batch": len(completions)})
    return out


@verifier("test_batch_len", batch=_batch_of_lengths)
def batch_len(completion, sample, fail_on=None):
    return {"score": len(completion) / 10, "batch": 1}


@verifier("test_batch_wrong_length", batch=lambda completions, samples: [1.0])
def batch_wrong_length(completion, sample):
    return 1.0


def test_all_samples_go_to_one_batch_call_and_one_bad_sample_fails_alone():
    with RewardFunction([VerifierSpec("test_batch_len", kwargs={"fail_on": "bad"})], num_workers=2) as reward_fn:
        results = reward_fn.score(["a", "abc", "bad", "abcde"], [{}] * 4)
    assert [r.scores["test_batch_len"] for r in results] == [0.1, 0.3, None, 0.5]
    assert [r.extras.get("test_batch_len/batch") for r in results] == [4, 4, None, 4]  # one call for all four
    assert results[2].failures == {"test_batch_len": "error: ValueError: cannot score 'bad'"}
    assert results[2].total == 0.0  # failure_score 0.0


def test_a_batch_returning_the_wrong_number_of_results_fails_every_sample():
    with RewardFunction([VerifierSpec("test_batch_wrong_length")], num_workers=1) as reward_fn:
        results = reward_fn.score(["x", "y"], [{}, {}])
    assert [r.failures["test_batch_wrong_length"] for r in results] == [
        "error: batch verifier returned a list of 1, expected a list of 2 results"] * 2


def test_code_is_registered_with_its_batch_hook():
    assert get_verifier("code").batch is code_rewards_batch


@pytest.mark.skipif(docker_problem() is not None and bwrap_problem() is not None,
                    reason="neither Docker nor bubblewrap can run here")
def test_code_verifier_scores_a_step_through_the_batch_hook():
    sample = {"test_type": "stdio", "tests": [{"input": "3 4\n", "output": "7\n"}, {"input": "1 1\n", "output": "2\n"}]}
    right = "```python\nprint(sum(map(int, input().split())))\n```"
    wrong = "```python\nprint(7)\n```"
    with RewardFunction([VerifierSpec("code", timeout_s=30)], num_workers=2) as reward_fn:
        results = reward_fn.score([right, wrong, right, "x"], [sample, sample, sample, {"test_type": "stdio"}])
        counters = reward_fn.counters()
    assert [r.scores["code"] for r in results] == [1.0, 0.5, 1.0, None]
    assert [r.extras.get("code/verdicts") for r in results] == [["AC", "AC"], ["AC", "WA"], ["AC", "AC"], None]
    assert results[3].failures["code"].startswith("error: ValueError: code verifier needs sample['tests']")
    assert counters["worker_restarts"] == 0
