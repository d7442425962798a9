"""Every row's types are checked in one pass before anything loads, each problem named by the file's line (blank lines
counted) or, for other sources, the 1-based row number; a prompt past the model's context is named as such."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from rlvr.config import DataConfig, resolve
from rlvr.data.sources import DataError, load_rows
from rlvr.preflight.checks import _check_context
from rlvr.preflight.report import Report


def _cfg(path) -> DataConfig:
    return DataConfig(source={"type": "jsonl", "path": str(path)})


def _write(tmp_path, rows: list, blank_after: int = 1):
    path = tmp_path / "data.jsonl"
    lines = [json.dumps(r) for r in rows]
    lines.insert(blank_after, "")  # a blank line: line numbers are the file's
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = {"question": "1+1?", "answer": "2"}


@pytest.mark.parametrize("answer, what", [(["2"], "a list (['2'])"), ({"x": 2}, "a dict ({'x': 2})"),
                                          (True, "a bool (True)"), (float("nan"), "not a finite number (nan)")])
def test_a_gold_answer_that_is_not_text_or_a_number(tmp_path, answer, what):
    path = _write(tmp_path, [GOOD] * 30 + [{"question": "q", "answer": answer}])
    with pytest.raises(DataError, match=re.escape(f"{path}:32: 'answer' (data.answer_field) is {what}; a gold answer "
                                                  "is text or a number")):
        load_rows(_cfg(path))


def test_a_null_answer_is_named_by_its_line(tmp_path):
    path = _write(tmp_path, [GOOD, GOOD, {"question": "q", "answer": None}])
    with pytest.raises(DataError, match=re.escape(f"{path}:4: 'answer' (data.answer_field) is null; give it a "
                                                  "value, or drop the row")):
        load_rows(_cfg(path))


@pytest.mark.parametrize("prompt, what", [
    (7, "is a int (7), not text or a list of chat messages"),
    (["a", "b"], "holds chat messages, but message 1 is not a {'role', 'content'} mapping with text content"),
    ([], "holds chat messages, but an empty list of messages"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
     "holds chat messages, but the last message is a assistant turn; the policy answers a user turn"),
    ([{"role": "user", "content": "hi"}, {"role": "system", "content": "be brief"}, {"role": "user", "content": "q"}],
     "holds chat messages, but message 2 is a system turn after the first message"),
    ([{"role": "tool", "content": "x"}], "holds chat messages, but message 1 has role 'tool'; expected one of system, "
                                         "user, assistant"),
])
def test_a_prompt_that_is_not_text_or_a_conversation(tmp_path, prompt, what):
    path = _write(tmp_path, [GOOD, {"question": prompt, "answer": "1"}])
    with pytest.raises(DataError) as e:
        load_rows(_cfg(path))
    assert str(e.value) == f"{path}:3: 'question' (data.prompt_field) {what}"


def test_numbers_and_text_answers_pass(tmp_path):
    path = _write(tmp_path, [GOOD, {"question": "q", "answer": 3}, {"question": "q", "answer": 2.5}])
    assert len(load_rows(_cfg(path))) == 3


def test_a_non_utf8_byte_is_named_by_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"question": "a", "answer": "1"}\n\n{"question": "caf\xe9", "answer": "1"}\n')
    with pytest.raises(DataError, match=re.escape(f"{path}:3: not UTF-8 (invalid continuation byte at byte 18 of "
                                                  "the line)")):
        load_rows(_cfg(path))


def test_a_prompt_longer_than_the_context(tmp_path):
    path = _write(tmp_path, [GOOD, GOOD, {"question": "x " * 10, "answer": "1"}])
    rows = load_rows(_cfg(path))
    prompts = [SimpleNamespace(row=r, token_ids=[0] * (9000 if i == 2 else 10)) for i, r in enumerate(rows)]
    recipe = resolve({"data": {"source": {"type": "jsonl", "path": str(path)}}, "verifiers": [{"name": "math"}]})
    report = Report()
    assert _check_context(report, recipe, 8192, SimpleNamespace(train=prompts[:2], eval=prompts[2:]), rows)
    (finding,) = report.findings
    assert (finding.level, finding.check) == ("error", "context")
    assert finding.message == (f"{path}:4 is longer than the model's context (8,192 tokens): its prompt is 9,000 "
                               "tokens, and rollout.max_new_tokens=256 must fit after it; shorten or drop it")
    assert not _check_context(Report(), recipe, 8192, SimpleNamespace(train=prompts[:2], eval=[]), rows)


def test_a_5000_digit_integer_answer_is_kept_exactly_as_text(tmp_path):
    path = tmp_path / "data.jsonl"
    digits = "7" * 5000
    path.write_text(json.dumps(GOOD) + "\n" + '{"question": "big?", "answer": ' + digits + "}\n")
    rows = load_rows(_cfg(path))
    assert rows[1]["answer"] == digits and rows[0]["answer"] == "2"


def test_a_line_nested_200000_deep_is_named_by_its_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + '{"question": ' + "[" * 200_000 + "]" * 200_000 + "}\n")
    with pytest.raises(DataError, match=re.escape(f"{path}:2: nested too deeply to read")):
        load_rows(_cfg(path))


@pytest.mark.parametrize("row, message", [
    ({"question": "what is \ud800?", "answer": "1"},
     "'question' (data.prompt_field) holds a lone surrogate '\\ud800' at character 9"),
    ({"question": "q", "answer": "\udfff"}, "'answer' (data.answer_field) holds a lone surrogate '\\udfff' at character 1"),
    ({"question": "  \n", "answer": "1"}, "'question' (data.prompt_field) is empty: there is no question to answer"),
    ({"question": "q", "answer": " "}, "'answer' (data.answer_field) is empty: no completion could ever match it"),
])
def test_text_no_tokenizer_or_verifier_can_use_is_named_by_its_line(tmp_path, row, message):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(row) + "\n")  # json.dumps writes the surrogate as \ud800
    with pytest.raises(DataError) as e:
        load_rows(_cfg(path))
    assert str(e.value) == f"{path}:2: {message}" + (", which is not text (a broken \\u escape?)"
                                                     if "surrogate" in message else "")
