"""The ``hermes`` call format (``<tool_call>`` JSON, answered by a ``tool`` message of the chat template) with the
python tool in the sandbox, on vLLM's CPU backend, under both turn schedules.

A random tiny model never writes a ``<tool_call>`` by itself, so vLLM's structured outputs hold each turn to a
regular expression: the first turn to a call of the python tool, the second to an answer. What is checked is what
the rollout does with them: the call paused at the stop string, parsed and run in the sandbox, its output appended as
the template's tool message (mask 0), the next turn generated after it, the whole conversation re-rendered to the
same ids."""

import pytest
import torch

from rlvr.rollout.base import SamplingParams
from rlvr.rollout.multi_turn import multi_turn_generate
from rlvr.tools.loading import build_tool_environment
from rlvr.tools.spec import ToolsConfig
from tests.sandbox_required import require_backend
from tests.tiny import build_chat_tokenizer, build_tiny_chat_model
from tests.vllm_required import require_vllm

pytestmark = pytest.mark.vllm

CALL = '<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call>'
ANSWER = "It is 42."
TURNS = [r'<tool_call>\n\{"name": "python", "arguments": \{"code": "print\(6\*7\)"\}\}\n</tool_call>', r"It is 42\."]


@pytest.fixture(scope="module")
def engine_and_tok(tmp_path_factory):
    vllm = require_vllm()
    from rlvr.rollout.vllm_engine import VLLMRolloutEngine

    path = build_tiny_chat_model(tmp_path_factory.mktemp("tinychat") / "model", hidden=128)  # head size 32: the smallest vLLM's CPU attention takes
    tok = build_chat_tokenizer()
    llm = vllm.LLM(model=str(path), dtype="float32", enforce_eager=True, seed=0, max_model_len=512,
                   enable_chunked_prefill=False, logprobs_mode="processed_logprobs")
    return VLLMRolloutEngine(llm, [tok.eos_token_id], dtype=torch.float32, max_model_len=512), tok


def _held_to(engine, patterns):
    """Make the engine's k-th request follow ``patterns[k]`` (the last one after that), by vLLM's structured
    outputs."""
    from vllm.sampling_params import StructuredOutputsParams

    made, requests = engine.sampling_params, iter(range(10**6))

    def sampling_params(n, sampling, seed):
        params = made(n, sampling, seed)
        params.structured_outputs = StructuredOutputsParams(regex=patterns[min(next(requests), len(patterns) - 1)])
        return params

    return sampling_params


@pytest.mark.parametrize("scheduling", ["rounds", "continuous"])
def test_a_hermes_call_on_vllm_runs_in_the_sandbox_and_the_next_turn_follows_the_tool_message(
        engine_and_tok, scheduling, monkeypatch):
    require_backend("docker")
    engine, tok = engine_and_tok
    monkeypatch.setattr(engine, "sampling_params", _held_to(engine, TURNS))
    env = build_tool_environment(ToolsConfig(tools=[{"name": "python"}], call_format="hermes"), tok)
    row = {"messages": [{"role": "user", "content": "What is 6*7?"}]}
    torch.manual_seed(0)
    out = multi_turn_generate(engine, tok, env, [row], 1, SamplingParams(max_new_tokens=200), max_turns=3,
                              eos_ids=[tok.eos_token_id], scheduling=scheduling)
    [[s]] = out.groups
    enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    [first, second] = s.turns
    assert (first.text, first.finish_reason) == (CALL, "stop_sequence")
    [call] = first.calls
    assert (call.name, call.arguments, call.status, call.output) == ("python", {"code": "print(6*7)"}, "ok", "42\n")
    glue = enc("<|im_end|>\n<|im_start|>tool\n42\n<|im_end|>\n<|im_start|>assistant\n")
    assert s.token_ids[first.answer[0]:first.answer[1]] == glue
    assert s.token_ids == enc(CALL) + glue + enc(ANSWER) + [tok.eos_token_id]
    assert s.response_mask == [1] * len(enc(CALL)) + [0] * len(glue) + [1] * (len(enc(ANSWER)) + 1)
    assert (second.text, second.finish_reason, s.finish_reason, s.final_text) == (ANSWER, "stop", "stop", ANSWER)
    assert all(lp <= 0.0 for lp in s.logprobs) and all(lp == 0.0 for lp, m in zip(s.logprobs, s.response_mask)
                                                       if not m)
    whole = tok.apply_chat_template(s.messages, tokenize=False)
    assert enc(whole)[:len(s.prompt_ids) + len(s.token_ids)] == s.prompt_ids + s.token_ids
    assert out.metrics()["tools/calls_per_sample"] == 1.0 and out.metrics()["tools/error_rate"] == 0.0
