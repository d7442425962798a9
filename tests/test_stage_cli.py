"""The command line of the SFT and preference stages: a recipe given to the command of another kind names the command
it is for, and ``rlvr check`` knows both kinds (data and masks, the template's end of turn, memory), naming the row a
template cannot mask."""

import json

import pytest

from rlvr.cli import main
from tests.test_cli import _error, _write
from tests.tiny import build_tiny_chat_model


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    d = tmp_path_factory.mktemp("chat")
    model = build_tiny_chat_model(d / "model")
    sft = d / "sft.jsonl"
    sft.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"{i}+1=?"},
                                                    {"role": "assistant", "content": str(i + 1)}]}) + "\n"
                           for i in range(12)))
    pairs = d / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"{i}+1=?", "chosen": str(i + 1), "rejected": str(i)}) + "\n"
                             for i in range(12)))
    return model, sft, pairs


def _recipes(chat, tmp_path, **sft_data):
    model, sft, pairs = chat
    s = _write(tmp_path, {"kind": "sft", "model": {"name": str(model)},
                          "data": {"source": {"type": "jsonl", "path": str(sft)}, "eval_size": 2, **sft_data}},
               "sft.yaml")
    d = _write(tmp_path, {"kind": "dpo", "model": {"name": str(model)},
                          "data": {"source": {"type": "jsonl", "path": str(pairs)}, "eval_size": 2}}, "dpo.yaml")
    return s, d


def test_a_stage_recipe_given_to_another_command_names_its_own(chat, tmp_path, capsys):
    sft, dpo = _recipes(chat, tmp_path)
    err = _error(capsys, ["train", sft, "-o", str(tmp_path / "run")])
    assert f"is an SFT recipe (kind: sft): train it with `rlvr sft {sft}`" in err
    err = _error(capsys, ["sft", dpo, "-o", str(tmp_path / "run")])
    assert f"is a preference recipe (kind: dpo): train it with `rlvr dpo {dpo}`" in err
    err = _error(capsys, ["dpo", sft, "-o", str(tmp_path / "run")])
    assert f"train it with `rlvr sft {sft}`; `rlvr dpo` takes a preference recipe" in err
    err = _error(capsys, ["rm", "train", sft, "-o", str(tmp_path / "run")])
    assert f"`rlvr sft {sft}`" in err
    assert not (tmp_path / "run").exists()


def test_check_knows_both_kinds(chat, tmp_path, capsys):
    sft, dpo = _recipes(chat, tmp_path)
    assert main(["check", sft, dpo, "--show-prompt"]) == 0
    out = capsys.readouterr().out
    assert "10 training and 2 held-out examples; masks checked against one rendering of each conversation" in out
    assert "10 training and 2 held-out pairs" in out
    assert "the template's end of turn '<|im_end|>' (id 1) is learned and stops generation" in out
    assert out.count("per rank, 1 rank(s), ZeRO-0; the policy alone") == 2
    assert "\u00ab1<|im_end|>\u00bb" in out  # the learned stretch of the first example


def test_check_names_the_row_a_template_cannot_mask(chat, tmp_path, capsys):
    strips = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'][1:] if m['role'] == 'assistant' "
              "else m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
              "{% endif %}")
    sft, _ = _recipes(chat, tmp_path, chat_template=strips, eval_size=0)
    assert main(["check", sft]) == 1
    out = capsys.readouterr().out
    assert f"error   data: {chat[1]}:1: the chat template does not write assistant turn 2 as the data has it" in out
