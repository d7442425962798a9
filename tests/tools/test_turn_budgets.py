"""Turns and budgets of the multi-turn loop: a closed block that is no call costs no turn, a call left unanswered at
max_turns is handed on as truncated, max_response_tokens is never exceeded."""

from rlvr.rollout.base import SamplingParams
from rlvr.rollout.multi_turn import multi_turn_generate
from rlvr.tools import CallFormat, ToolEnvironment
from tests.tools.scripted import EchoTool, ScriptedEngine, chat_tokenizer

ROW = {"messages": [{"role": "user", "content": "What is 1+1?"}]}
PLAIN = "Plan:\n```text\nadd them\n```\n"  # a closed fence in another language: no call
CALL = "```python\nprint(1+1)\n```\n"
BOXED_CALL = "```python\n# \\boxed{2}\nprint(1+1)\n```\n"


def _run(script, max_turns, max_new_tokens=200, max_response_tokens=None, n=1):
    tok = chat_tokenizer()
    tool = EchoTool()
    env = ToolEnvironment([tool], CallFormat("fenced"), tok, max_tool_output_tokens=64, instructions=False)
    engine = ScriptedEngine(tok, script)
    out = multi_turn_generate(engine, tok, env, [ROW], n, SamplingParams(max_new_tokens=max_new_tokens),
                              max_turns=max_turns, eos_ids=[tok.eos_token_id], max_response_tokens=max_response_tokens)
    [[s]] = out.groups
    return tok, tool, engine, s


def _enc(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_a_closed_block_that_is_no_call_costs_no_turn():
    # one turn allowed: two plain blocks, then a call, would have used 3 turns; they are one turn, the call unanswered
    tok, tool, engine, s = _run([(PLAIN, False), (PLAIN, False), ("2", True)], max_turns=1)
    assert len(s.turns) == 1 and s.finish_reason == "stop" and tool.batches == []
    assert s.turns[0].text == PLAIN + PLAIN + "2" and s.turns[0].finish_reason == "stop"
    assert s.turns[0].sampled == (0, 2 * len(PLAIN) + 2) and s.turns[0].answer is None
    assert s.response_mask == [1] * (2 * len(PLAIN) + 2)  # nothing was inserted between the stretches
    assert len(engine.calls) == 3 and engine.calls[2][0] == [s.prompt_ids + _enc(tok, PLAIN + PLAIN)]
    assert s.final_text == PLAIN + PLAIN + "2"


def test_plain_blocks_around_calls_count_only_the_calls_turns():
    tok, tool, engine, s = _run([(PLAIN, False), (CALL, False), (PLAIN, False), ("2", True)], max_turns=2)
    assert [t.finish_reason for t in s.turns] == ["stop_sequence", "stop"] and s.finish_reason == "stop"
    assert s.turns[0].text == PLAIN + CALL and s.turns[1].text == PLAIN + "2"
    assert tool.batches == [["print(1+1)"]]


def test_a_call_left_unanswered_at_max_turns_is_handed_on_as_truncated():
    tok, tool, engine, s = _run([(CALL, False), (BOXED_CALL, False)], max_turns=2)
    assert s.finish_reason == "max_turns" and s.turns[-1].text == BOXED_CALL and s.turns[-1].answer is None
    assert tool.batches == [["print(1+1)"]]
    assert s.to_completion().finish_reason == "length"  # rewards and mask_truncated see it as cut, not a stop


def test_an_eos_at_max_turns_is_a_normal_stop():
    tok, tool, engine, s = _run([(CALL, False), ("2", True)], max_turns=2)
    assert s.finish_reason == "stop" and s.to_completion().finish_reason == "stop"


def test_max_response_tokens_is_never_exceeded_by_a_turn_or_an_answer():
    tok = chat_tokenizer()
    call, answer = len(_enc(tok, CALL)), len(_enc(tok, "```output\nran: print(1+1)\n```\n"))
    assert (call, answer) == (25, 30)
    # the cap falls inside the tool's answer: the answer is cut there and the sample ends
    tok, tool, engine, s = _run([(CALL, False), ("2", True)], max_turns=4, max_response_tokens=40)
    assert len(s.token_ids) == 40 and s.finish_reason == "length" and s.to_completion().finish_reason == "length"
    assert s.response_mask == [1] * 25 + [0] * 15 and len(engine.calls) == 1
    # the cap falls inside the second turn: that turn samples only the room left (60 - 55 = 5 ids)
    tok, tool, engine, s = _run([(CALL, False), ("The answer is 2.", True)], max_turns=4, max_response_tokens=60)
    assert len(s.token_ids) == 60 and s.finish_reason == "length" and s.turns[-1].text == "The a"
    assert engine.calls[1][2].max_new_tokens == 5 and s.sampled_tokens == 30
    # a cap below max_new_tokens bounds the first turn too
    tok, tool, engine, s = _run([(CALL, False)], max_turns=4, max_response_tokens=10)
    assert engine.calls[0][2].max_new_tokens == 10 and len(s.token_ids) == 10 and s.turns[0].calls == []
