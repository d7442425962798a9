"""Every labelled case in tests/data/format_cases.jsonl; the expected reward is the label."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.verifiers.format_tags import check_r1_format, r1_format

CASES_FILE = Path(__file__).resolve().parents[1] / "data" / "format_cases.jsonl"
CASES = [json.loads(line) for line in CASES_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_format_dev_case(case: dict) -> None:
    result = r1_format(case["completion"], {})
    assert result["score"] == float(case["expected_reward"]), f"{case['id']} {case['note']}: {result}"


PREFILL = [c for c in CASES if c["category"] == "prefill"]


@pytest.mark.parametrize("case", PREFILL, ids=[c["id"] for c in PREFILL])
def test_prefill_cases_pass_when_the_template_prefilled_think(case: dict) -> None:
    # the note says: a verifier that re-attaches the prefill should pass
    assert check_r1_format(case["completion"], prefilled_think=True).ok
    assert r1_format(case["completion"], {"prompt": "<|im_start|>assistant\n<think>\n"})["score"] == 1.0
    assert r1_format(case["completion"], {"prompt": "Solve it."})["score"] == 0.0
