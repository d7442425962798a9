"""`rlvr verify`, driven through a small argparse shim (the same add_parser the rlvr CLI uses)."""

from __future__ import annotations

import argparse
import json

import pytest

from rlvr.commands.verify import add_parser


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlvr")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_single_math_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["verify", "math", "--gold", r"\frac{1}{2}", "--pred", r"so the answer is \boxed{0.5}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["score"] == 1 and out["extracted"] == "0.5"


def test_math_file_keeps_order_and_fields(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    distinct = [("2", r"\boxed{2}", 1), (r"20\text{ cm}", r"\boxed{20\text{ m}}", 0), ("x=3", "x = 3", 1),
                (r"\frac{1}{2004!}", r"\boxed{\frac{1}{2006!}}", 0), ("1,2", r"\boxed{2, 1}", 1)]
    rows = [{"id": i, "gold": g, "pred": p, "want": w} for i, (g, p, w) in enumerate(distinct * 400)]
    lines = [json.dumps(r) for r in rows] + ["not json", json.dumps({"gold": "1"})]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert _run(["verify", "math", "--file", str(path), "--workers", "2"]) == 0
    captured = capsys.readouterr()
    out = [json.loads(line) for line in captured.out.splitlines()]
    assert len(out) == len(lines)
    assert [o["id"] for o in out[:-2]] == list(range(len(rows)))
    assert all(o["score"] == o["want"] and o["gold"] == r["gold"] for o, r in zip(out[:-2], rows, strict=True))
    assert out[-2]["score"] is None and "not JSON" in out[-2]["error"]
    assert out[-1]["score"] is None and "pred" in out[-1]["error"]


def test_format_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "f.jsonl"
    rows = [{"completion": "<think>a</think><answer>1</answer>"}, {"completion": "a</think><answer>1</answer>"}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert _run(["verify", "format", "--file", str(path)]) == 0
    assert [json.loads(x)["score"] for x in capsys.readouterr().out.splitlines()] == [1, 0]
    assert _run(["verify", "format", "--file", str(path), "--prefilled-think"]) == 0
    assert [json.loads(x)["score"] for x in capsys.readouterr().out.splitlines()] == [1, 1]


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["verify", "math", "--gold", "1"]) == 2
    assert _run(["verify", "math", "--file", "/no/such/file.jsonl"]) == 2
    assert "no such file" in capsys.readouterr().err
