"""Every labelled case in tests/data/math_cases.jsonl; the expected value is the label (`equal`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.verifiers.math_answer import judge_math

CASES_FILE = Path(__file__).resolve().parents[1] / "data" / "math_cases.jsonl"
CASES = [json.loads(line) for line in CASES_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_math_dev_case(case: dict) -> None:
    verdict = judge_math(case["gold"], case["pred"])
    assert (verdict.equal is True) is case["equal"], (
        f"{case['id']} [{case['category']}] {case['note']}: expected equal={case['equal']}, got {verdict}"
    )


def test_corpus_is_the_labelled_one() -> None:
    assert len(CASES) >= 200
    assert {c["equal"] for c in CASES} == {True, False}
