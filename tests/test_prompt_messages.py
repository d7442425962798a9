"""``prompt_messages``: the chat turns behind ``render_prompt`` (what another trainer is given to see rlvr's prompt)."""

import pytest

from rlvr.config import resolve
from rlvr.data.templates import prompt_messages, render_prompt
from tests.tiny import build_tokenizer

CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def _data(**data):
    raw = {"model": {"name": "unused"}, "data": {"source": {"type": "jsonl", "path": "unused.jsonl"}, **data},
           "verifiers": [{"name": "math"}]}
    return resolve(raw).data


def test_boxed_few_shot_turns_are_the_shot_then_the_question():
    cfg = _data(template="boxed", few_shot=1, system_prompt="Be brief.")
    shot, row = {"question": "1+2=?", "answer": "3"}, {"question": "4+5=?", "answer": "9"}
    assert prompt_messages(row, cfg, [shot]) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+2=?\nPut your final answer within \\boxed{}."},
        {"role": "assistant", "content": "\\boxed{3}"},
        {"role": "user", "content": "4+5=?\nPut your final answer within \\boxed{}."},
    ]


def test_render_prompt_is_the_chat_template_over_those_turns():
    cfg = _data(template="boxed", few_shot=1)
    tok = build_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    shot, row = {"question": "1+2=?", "answer": "3"}, {"question": "4+5=?", "answer": "9"}
    text = render_prompt(row, tok, cfg, [shot])
    assert text == tok.apply_chat_template(prompt_messages(row, cfg, [shot]), tokenize=False,
                                           add_generation_prompt=True)
    assert text == ("<user>1+2=?\nPut your final answer within \\boxed{}.\n<assistant>\\boxed{3}\n"
                    "<user>4+5=?\nPut your final answer within \\boxed{}.\n<assistant>")


def test_the_plain_text_r1_template_has_no_chat_turns():
    with pytest.raises(ValueError, match="template=r1"):
        prompt_messages({"question": "1+2=?"}, _data(template="r1"))


def test_a_shot_field_is_the_examples_whole_assistant_turn():
    cfg = _data(template="boxed", few_shot=1, shot_field="solution")
    solution = "```python\nprint(1 + 2)\n```\n```output\n3\n```\n\\boxed{3}"
    shot, row = {"question": "1+2=?", "answer": "3", "solution": solution}, {"question": "4+5=?", "answer": "9"}
    assert prompt_messages(row, cfg, [shot]) == [
        {"role": "user", "content": "1+2=?\nPut your final answer within \\boxed{}."},
        {"role": "assistant", "content": solution},
        {"role": "user", "content": "4+5=?\nPut your final answer within \\boxed{}."},
    ]


def test_rows_without_the_shot_field_are_refused_when_there_are_examples(tmp_path):
    from rlvr.data.sources import DataError, load_rows

    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "1+2=?", "answer": "3", "solution": "x"}\n{"question": "4+5=?", "answer": "9"}\n')
    raw = {"model": {"name": "unused"}, "verifiers": [{"name": "math"}],
           "data": {"source": {"type": "jsonl", "path": str(path)}, "shot_field": "solution"}}
    assert len(load_rows(resolve(raw).data)) == 2  # no examples: the field is not needed
    raw["data"]["few_shot"] = 1
    with pytest.raises(DataError, match=r"rows.jsonl:2 has no 'solution' field \(data.shot_field\)"):
        load_rows(resolve(raw).data)
