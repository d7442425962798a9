"""The multi-turn loop (rlvr/rollout/multi_turn.py) on a scripted engine: ids, loss mask, trace, budgets."""

import pytest

from rlvr.rollout.base import SamplingParams
from rlvr.rollout.multi_turn import TemplateNotAppendOnlyError, answer_ids, multi_turn_generate
from rlvr.tools import CallFormat, ToolEnvironment
from tests.tools.scripted import EchoTool, ScriptedEngine, chat_tokenizer

ROW = {"messages": [{"role": "user", "content": "What is 1+1?"}]}
CALL = "Let me compute.\n```python\nprint(1+1)\n```\nmore text the stop cuts off"
ANSWER = "The answer is 2."


def _run(script, max_turns=4, max_new_tokens=200, n=1, rows=(ROW,), fmt="fenced", tool=None):
    tok = chat_tokenizer()
    tool = tool or EchoTool()
    env = ToolEnvironment([tool], CallFormat(fmt), tok, max_tool_output_tokens=64, instructions=False)
    engine = ScriptedEngine(tok, script)
    out = multi_turn_generate(engine, tok, env, list(rows), n, SamplingParams(max_new_tokens=max_new_tokens),
                              max_turns=max_turns, eos_ids=[tok.eos_token_id])
    return tok, tool, engine, out


def test_two_turn_sample_ids_mask_logprobs_and_trace():
    tok, tool, engine, out = _run([(CALL, False), (ANSWER, True)])
    [[s]] = out.groups
    enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    turn1 = enc("Let me compute.\n```python\nprint(1+1)\n```\n")
    answer = enc("```output\nran: print(1+1)\n```\n")
    turn2 = enc(ANSWER) + [tok.eos_token_id]
    assert s.token_ids == turn1 + answer + turn2
    assert s.response_mask == [1] * len(turn1) + [0] * len(answer) + [1] * len(turn2)
    assert s.logprobs[:len(turn1)] == [-(k + 1) / 100 for k in range(len(turn1))]
    assert s.logprobs[len(turn1):len(turn1) + len(answer)] == [0.0] * len(answer)
    assert s.finish_reason == "stop" and s.final_text == ANSWER and s.sampled_tokens == len(turn1) + len(turn2)
    assert [t.finish_reason for t in s.turns] == ["stop_sequence", "stop"]
    assert s.turns[0].sampled == (0, len(turn1)) and s.turns[0].answer == (len(turn1), len(turn1) + len(answer))
    [call] = s.turns[0].calls
    assert (call.name, call.arguments, call.status) == ("python", {"code": "print(1+1)"}, "ok")
    assert tool.batches == [["print(1+1)"]]
    # the second turn continued the sample's own ids, with only the remaining budget
    prompts, n, sampling = engine.calls[1]
    assert prompts == [s.prompt_ids + turn1 + answer] and n == 1 and sampling.max_new_tokens == 200 - len(turn1)
    assert "\n```\n" in sampling.stop
    assert s.messages[-1] == {"role": "assistant", "content": CALL[:len(CALL) - len("more text the stop cuts off")]
                              + "```output\nran: print(1+1)\n```\n" + ANSWER}
    metrics = out.metrics()
    assert metrics["tools/calls_per_sample"] == 1 and metrics["tools/turns_per_sample"] == 2
    assert metrics["tools/fraction_of_samples_calling"] == 1 and metrics["tools/error_rate"] == 0


def test_all_paused_rows_run_as_one_batch_and_groups_keep_order():
    rows = [ROW, {"messages": [{"role": "user", "content": "And 2+2?"}]}]
    tok, tool, engine, out = _run([(CALL, False), (ANSWER, True)], n=3, rows=rows)
    assert [len(g) for g in out.groups] == [3, 3]
    assert len(tool.batches) == 1 and len(tool.batches[0]) == 6  # one round: every paused sample's call together
    assert engine.calls[0][1] == 3 and len(engine.calls[1][0]) == 6
    assert out.groups[1][0].prompt_ids != out.groups[0][0].prompt_ids


def test_max_turns_leaves_the_last_call_unanswered():
    tok, tool, engine, out = _run([(CALL, False)], max_turns=2)
    [[s]] = out.groups
    assert len(s.turns) == 2 and s.finish_reason == "max_turns"
    assert len(tool.batches) == 1 and s.turns[-1].answer is None and s.response_mask[-1] == 1


def test_token_budget_counts_sampled_tokens_over_all_turns_and_cuts_mid_call():
    first = len(chat_tokenizer()(CALL[:CALL.index("more")], add_special_tokens=False)["input_ids"])
    tok, tool, engine, out = _run([(CALL, False), (CALL, False)], max_new_tokens=first + 10)
    [[s]] = out.groups
    assert s.sampled_tokens == first + 10 and s.finish_reason == "length"
    assert s.turns[-1].finish_reason == "length" and s.turns[-1].calls == []  # a cut call is never run
    assert len(tool.batches) == 1


def test_a_turn_without_a_call_ends_the_episode():
    tok, tool, engine, out = _run([(ANSWER, True)])
    [[s]] = out.groups
    assert s.finish_reason == "stop" and len(s.turns) == 1 and tool.batches == [] and all(s.response_mask)


def test_hermes_answers_are_template_messages_with_glue_masked():
    call = '<tool_call>\n{"name": "python", "arguments": {"code": "print(4)"}}\n</tool_call>'
    tok, tool, engine, out = _run([(call, False), (ANSWER, True)], fmt="hermes")
    [[s]] = out.groups
    enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    glue = enc("<|im_end|>\n<|im_start|>tool\nran: print(4)<|im_end|>\n<|im_start|>assistant\n")
    assert s.token_ids == enc(call) + glue + enc(ANSWER) + [tok.eos_token_id]
    assert s.response_mask == [1] * len(enc(call)) + [0] * len(glue) + [1] * (len(enc(ANSWER)) + 1)
    whole = tok.apply_chat_template(s.messages, tokenize=False)
    assert tok(whole, add_special_tokens=False)["input_ids"][:len(s.prompt_ids) + len(s.token_ids)] == \
        s.prompt_ids + s.token_ids


def test_a_template_that_rewrites_the_prefix_is_refused_by_name():
    tok = chat_tokenizer()
    tok.chat_template = ("{% for m in messages %}{% if loop.last %}[last]{% endif %}{{ m['role'] }}:{{ m['content'] }}\n"
                         "{% endfor %}")
    prefix = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    with pytest.raises(TemplateNotAppendOnlyError, match="first difference"):
        answer_ids(tok, prefix, [{"role": "tool", "content": "x"}])
