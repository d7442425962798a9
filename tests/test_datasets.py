"""The shipped datasets' generators: deterministic, the held-out split disjoint from the training split, rows as the
recipes read them."""

import importlib.util
import json
from pathlib import Path

import pytest

from rlvr.tools.formats import CallFormat

REPO = Path(__file__).resolve().parents[1]


def _generator(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "datasets" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def arith():
    return _generator("make_arith_tool")


def test_arith_tool_rows_are_deterministic_and_the_shipped_files_are_seed_0(arith):
    assert arith.make_rows(seed=0) == arith.make_rows(seed=0)
    assert arith.make_rows(seed=1, train=50, heldout=10) != arith.make_rows(seed=0, train=50, heldout=10)
    train, heldout = arith.make_rows(seed=0)
    for name, rows in (("arith_tool_train.jsonl", train), ("arith_tool_heldout.jsonl", heldout)):
        shipped = [json.loads(line) for line in (REPO / "datasets" / name).read_text().splitlines()]
        assert shipped == rows, name


def test_arith_tool_splits_are_disjoint_and_questions_distinct(arith):
    train, heldout = arith.make_rows(seed=0)
    train_q, heldout_q = [r["question"] for r in train], [r["question"] for r in heldout]
    assert len(set(train_q)) == len(train_q) == arith.TRAIN_ROWS
    assert len(set(heldout_q)) == len(heldout_q) == arith.HELDOUT_ROWS
    assert not set(train_q) & set(heldout_q)


def test_arith_tool_rows_hold_3_to_4_terms_of_2_to_3_digits_and_their_value(arith):
    train, heldout = arith.make_rows(seed=0, train=300, heldout=50)
    for r in train + heldout:
        expr = r["question"].removeprefix("What is ").removesuffix("?")
        terms = expr.split()[::2]
        assert 3 <= len(terms) <= 4 and all(t.isdigit() and 2 <= len(t) <= 3 for t in terms), r
        assert set(expr.split()[1::2]) <= {"+", "-"}, r
        assert r["answer"] == str(eval(expr)) and int(r["answer"]) >= 0, r


def test_the_worked_solution_is_what_a_fenced_python_call_rollout_writes(arith):
    """The example turn's output block is the rollout's own (rlvr.tools.formats, fenced): the model sees in the
    example exactly the text a real call gets appended."""
    _, heldout = arith.make_rows(seed=0, train=0, heldout=20)
    for r in heldout:
        expr = r["question"].removeprefix("What is ").removesuffix("?")
        turn = f"```python\nprint({expr})\n```\n"
        fmt = CallFormat("fenced")
        (call,) = fmt.parse(turn, {"python"})
        assert call.arguments == {"code": f"print({expr})"}
        answer = fmt.answer_text(turn, [r["answer"] + "\n"])
        assert r["solution"] == turn + answer + f"\\boxed{{{r['answer']}}}"


def test_arith_tool_transcripts_are_the_shipped_file_and_share_no_question(arith):
    train, heldout = arith.make_rows(seed=0)
    rows = arith.transcripts(arith.SFT_ROWS, {r["question"][8:-1] for r in train + heldout})
    shipped = [json.loads(line) for line in (REPO / "datasets" / "arith_tool_sft.jsonl").read_text().splitlines()]
    assert shipped == rows and len(rows) == 400
    questions = {r["messages"][1]["content"].split("\n")[0] for r in rows}
    assert len(questions) == 400 and not questions & {r["question"] for r in train + heldout}
    first = rows[0]["messages"]
    assert first[0]["content"] == CallFormat("fenced").instructions([{"function": {"name": "python"}}])
    expr = first[1]["content"][len("What is "):first[1]["content"].index("?")]
    assert first[2]["content"] == f"```python\nprint({expr})\n```\n```output\n{rows[0]['answer']}\n```\n" \
                                  f"\\boxed{{{rows[0]['answer']}}}"
    assert int(rows[0]["answer"]) == eval(expr)  # noqa: S307 - digits, spaces, + and - only


def test_guessing_games_are_deterministic_distinct_and_the_shipped_file_is_seed_0():
    guessing = _generator("make_guessing")
    rows = guessing.make_rows(seed=0)
    assert rows == guessing.make_rows(seed=0) and rows != guessing.make_rows(seed=1)
    shipped = [json.loads(line) for line in (REPO / "datasets" / "guessing.jsonl").read_text().splitlines()]
    assert shipped == rows and len(rows) == 90 * 3
    assert len({r["question"] for r in rows}) == len(rows)  # the prompt split keeps one row per distinct question
    for r in rows:
        assert r["high"] - r["low"] + 1 in (8, 10, 12) and r["low"] <= r["answer"] <= r["high"]
        assert f"from {r['low']} to {r['high']}." in r["question"] and "4 guesses" in r["question"]
