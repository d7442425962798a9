"""SFT loss masks from rendering (rlvr/data/conversations.py): hand-computed masks for prompt/completion rows and a
multi-turn conversation with a tool call, the whole sequence equal to one apply_chat_template of the conversation,
template boilerplate masked, and the templates that cannot give a correct mask refused, naming the row. The tiny
character-level chat tokenizer makes every expected id countable by hand (one id per character)."""

import json
from pathlib import Path

import pytest

from rlvr.config import SFTDataConfig
from rlvr.data.conversations import MaskError, tokenize_conversation, tokenize_plain
from rlvr.data.pair_examples import build_pair_examples
from rlvr.data.sft_examples import build_sft_examples
from rlvr.data.sources import DataError
from rlvr.data.special_text import special_strings
from tests.tiny import build_chat_tokenizer, build_tokenizer

QWEN25_TEMPLATE = (Path(__file__).resolve().parent / "data" / "qwen2_5_chat_template.jinja").read_text()
TOOLS = [{"type": "function", "function": {"name": "add", "description": "adds two numbers", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
CALL = {"type": "function", "function": {"name": "add", "arguments": {"a": 47, "b": 385}}}


@pytest.fixture
def tok():
    return build_chat_tokenizer()


def _learned(tok, out) -> str:
    """The text of the learned ids, one piece per stretch of mask 1, joined by '|'."""
    pieces, current = [], []
    for i, m in zip(out.ids, out.mask, strict=True):
        if m:
            current.append(i)
        elif current:
            pieces.append(tok.decode(current))
            current = []
    if current:
        pieces.append(tok.decode(current))
    return "|".join(pieces)


def test_a_prompt_and_completion_as_text_learns_the_completion_and_the_eos():
    tok = build_tokenizer()
    out = tokenize_plain(tok, "1+2=?", "3", eos_id=tok.eos_token_id)
    assert out.ids == tok("1+2=?3", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert out.mask == [0, 0, 0, 0, 0, 1, 1]
    assert out.context_len == 5 and out.prompt_ids == out.ids[:5]


def test_a_chat_completion_learns_the_answer_and_its_end_of_turn_not_the_newline_after(tok):
    messages = [{"role": "user", "content": "1+2=?"}, {"role": "assistant", "content": "3"}]
    out = tokenize_conversation(tok, messages, trained=[1], eos_ids=[tok.eos_token_id])
    text = "<|im_start|>user\n1+2=?<|im_end|>\n<|im_start|>assistant\n3<|im_end|>\n"
    assert out.ids == tok(text, add_special_tokens=False)["input_ids"]
    # <|im_start|> u s e r \n 1 + 2 = ? <|im_end|> \n <|im_start|> a s s i s t a n t \n = 24 ids, then 3 <|im_end|> \n
    assert out.mask == [0] * 24 + [1, 1, 0]
    assert out.context_len == 24 and tok.decode(out.prompt_ids).endswith("<|im_start|>assistant\n")


def test_a_multi_turn_tool_conversation_learns_the_call_and_the_final_answer_only(tok):
    tok.chat_template = QWEN25_TEMPLATE
    messages = [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": "What is 47+385?"},
                {"role": "assistant", "content": "", "tool_calls": [CALL]}, {"role": "tool", "content": "432"},
                {"role": "assistant", "content": "\\boxed{432}"}]
    out = tokenize_conversation(tok, messages, trained=[2, 4], eos_ids=[tok.eos_token_id], tools=TOOLS)
    whole = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    assert out.ids == tok(whole, add_special_tokens=False)["input_ids"]  # one rendering of the whole conversation
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 47, "b": 385}}\n</tool_call><|im_end|>'
    assert _learned(tok, out) == f"{call}|\\boxed{{432}}<|im_end|>"
    # 1 id per character: the call is 67 characters and its end of turn, the answer 11 and its end of turn
    assert sum(out.mask) == len(call) - len("<|im_end|>") + 1 + len("\\boxed{432}") + 1
    # the newline between <|im_start|>assistant and <tool_call> is the generation prompt's, not learned
    start = out.mask.index(1)
    assert tok.decode(out.ids[start - 10:start]) == "assistant\n"
    # the last turn only: the call is context
    last = tokenize_conversation(tok, messages, trained=[4], eos_ids=[tok.eos_token_id], tools=TOOLS)
    assert _learned(tok, last) == "\\boxed{432}<|im_end|>" and last.ids == out.ids


def test_an_empty_think_block_the_template_inserts_is_masked(tok):
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' and "
                         "'<think>' not in m['content'] %}<think>\n\n</think>\n\n{% endif %}{{ m['content'] }}"
                         "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    messages = [{"role": "user", "content": "1+2=?"}, {"role": "assistant", "content": "3"}]
    out = tokenize_conversation(tok, messages, trained=[1], eos_ids=[tok.eos_token_id])
    assert "<think>" in tok.decode(out.ids) and _learned(tok, out) == "3<|im_end|>"
    thought = [{"role": "user", "content": "1+2=?"}, {"role": "assistant", "content": "<think>\nadd\n</think>\n\n3"}]
    out = tokenize_conversation(tok, thought, trained=[1], eos_ids=[tok.eos_token_id])
    assert _learned(tok, out) == "<think>\nadd\n</think>\n\n3<|im_end|>"  # the model's own reasoning is learned


STRIP_EARLIER_THINK = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' and not "
                       "loop.last %}{{ m['content'].split('</think>')[-1].lstrip() }}{% else %}{{ m['content'] }}"
                       "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                       "{% endif %}")
STRIP_ALL_THINK = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'].split('</think>')[-1] }}"
                   "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
NO_EOS_TURN = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
               "{% if add_generation_prompt %}[assistant] {% endif %}")
TWO_TURNS = [{"role": "user", "content": "1+2=?"}, {"role": "assistant", "content": "<think>\nadd\n</think>3"},
             {"role": "user", "content": "and 2+2?"}, {"role": "assistant", "content": "<think>\nadd\n</think>4"}]


@pytest.mark.parametrize("template, trained, error", [
    (STRIP_EARLIER_THINK, [1, 3], "rewrites assistant turn 2 once later messages follow"),
    (STRIP_ALL_THINK, [3], "does not write assistant turn 4 as the data has it"),
    (NO_EOS_TURN, [3], "ends assistant turn 4 without any of the eos ids"),
])
def test_a_template_that_cannot_give_a_correct_mask_is_an_error_naming_the_row(tok, template, trained, error):
    tok.chat_template = template
    with pytest.raises(MaskError, match=error) as caught:
        tokenize_conversation(tok, TWO_TURNS, trained=trained, eos_ids=[tok.eos_token_id], where="data.jsonl:7")
    assert str(caught.value).startswith("data.jsonl:7: ")


def test_a_template_that_rewrites_earlier_turns_still_trains_the_last_one(tok):
    tok.chat_template = STRIP_EARLIER_THINK
    out = tokenize_conversation(tok, TWO_TURNS, trained=[3], eos_ids=[tok.eos_token_id])
    assert _learned(tok, out) == "<think>\nadd\n</think>4<|im_end|>"


def test_text_holding_a_control_token_is_refused_or_split_never_a_control_token(tok):
    messages = [{"role": "user", "content": "say <|im_end|>"}, {"role": "assistant", "content": "ok"}]
    with pytest.raises(DataError, match="'<|im_end|>'"):
        tokenize_conversation(tok, messages, trained=[1], eos_ids=[tok.eos_token_id], specials=special_strings(tok))
    out = tokenize_conversation(tok, messages, trained=[1], eos_ids=[tok.eos_token_id], special="split",
                                specials=special_strings(tok))
    assert out.ids.count(tok.eos_token_id) == 2  # the two turns' ends; the user's text is ten ordinary characters
    assert _learned(tok, out) == "ok<|im_end|>"


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sft_rows_of_every_shape_split_and_drop_the_overlong(tmp_path, tok):
    rows = [{"prompt": f"{i}+1=?", "completion": str(i + 1)} for i in range(6)]
    rows.append({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
    rows.append({"prompt": [{"role": "user", "content": "2+2=?"}], "completion": "4"})
    rows.append({"prompt": "long", "completion": "x" * 200})
    cfg = SFTDataConfig(source={"type": "jsonl", "path": str(_write(tmp_path / "d.jsonl", rows))}, eval_size=2,
                        max_length=64)
    split = build_sft_examples(cfg, tok, [tok.eos_token_id], seed=0)
    assert (len(split.train) + len(split.eval) + split.dropped, len(split.eval), split.dropped) == (9, 2, 1)
    chat = next(e for e in split.train + split.eval if e.row.get("prompt") == [{"role": "user", "content": "2+2=?"}])
    assert tok.decode([i for i, m in zip(chat.ids, chat.mask) if m]) == "4<|im_end|>"
    bad = _write(tmp_path / "bad.jsonl", rows[:3] + [{"question": "x"}])
    cfg = SFTDataConfig(source={"type": "jsonl", "path": str(bad)}, eval_size=0)
    with pytest.raises(DataError, match=r"bad.jsonl:4: expected a 'messages' field"):
        build_sft_examples(cfg, tok, [tok.eos_token_id], seed=0)


def test_preference_pairs_share_their_prompt_and_learn_each_response(tmp_path, tok):
    from rlvr.config import DPODataConfig

    rows = [{"prompt": f"{i}+1=?", "chosen": str(i + 1), "rejected": str(i + 2), "answer": str(i + 1)}
            for i in range(4)]
    rows.append({"prompt": [{"role": "user", "content": "2+2=?"}], "chosen": "4",
                 "rejected": [{"role": "assistant", "content": "5"}]})
    cfg = DPODataConfig(source={"type": "jsonl", "path": str(_write(tmp_path / "p.jsonl", rows))}, eval_size=1)
    split = build_pair_examples(cfg, tok, [tok.eos_token_id], seed=0)
    assert len(split.train) + len(split.eval) == 5 and len(split.eval) == 1
    text = next(p for p in split.train + split.eval if p.row["prompt"] == "0+1=?")
    assert (tok.decode(text.prompt_ids), tok.decode(text.chosen_ids), tok.decode(text.rejected_ids)) == \
        ("0+1=?", "1<|im_end|>", "2<|im_end|>")
    assert text.chosen_mask == [1, 1]
    chat = next(p for p in split.train + split.eval if isinstance(p.row["prompt"], list))
    assert tok.decode(chat.prompt_ids) == "<|im_start|>user\n2+2=?<|im_end|>\n<|im_start|>assistant\n"
    assert (tok.decode(chat.chosen_ids), chat.chosen_mask) == ("4<|im_end|>\n", [1, 1, 0])


def test_the_fenced_formats_output_block_is_not_learned(tok):
    """The fenced call format's tool answer (an ```output block the rollout appends inside the assistant's turn) is
    masked; the code before it and the answer after it are learned."""
    from rlvr.data.conversations import FENCED_OUTPUT

    turn = "```python\nprint(47 + 385)\n```\n```output\n432\n```\n\\boxed{432}"
    messages = [{"role": "user", "content": "What is 47 + 385?"}, {"role": "assistant", "content": turn}]
    out = tokenize_conversation(tok, messages, trained=[1], eos_ids=[tok.eos_token_id], masked_blocks=FENCED_OUTPUT)
    assert _learned(tok, out) == "```python\nprint(47 + 385)\n```\n|\\boxed{432}<|im_end|>"
    whole = tokenize_conversation(tok, messages, trained=[1], eos_ids=[tok.eos_token_id])
    assert whole.ids == out.ids and sum(whole.mask) - sum(out.mask) == len("```output\n432\n```\n")
