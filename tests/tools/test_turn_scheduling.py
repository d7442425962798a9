"""The two schedules of a multi-turn rollout (rlvr/rollout/multi_turn.py): ``continuous`` gives the same samples as
``rounds`` where the engine samples by context, a sample whose call was answered goes on while a slower one still
decodes its first turn, the environment answers while the engine decodes, and the errors of a schedule the engine
or the recipe cannot run."""

import threading

import pytest
from pydantic import ValidationError

from rlvr.config import Recipe
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.multi_turn import multi_turn_generate, request_seed
from rlvr.tools import CallFormat, ToolEnvironment
from tests.tools.scripted import ContextScriptedEngine, EchoTool, ScriptedEngine, chat_tokenizer

SHORT, LONG = "What is 1+1?", "And 2+2?"
SCRIPTS = {
    SHORT: [("```python\nprint(1+1)\n```\n", False), ("It is 2.", True)],
    LONG: [("Let me think about this one for a good while first.\n```python\nprint(2+2)\n```\n", False),
           ("It is 4.", True)],
}
ROWS = [{"messages": [{"role": "user", "content": q}]} for q in (SHORT, LONG)]


class _SlowEcho(EchoTool):
    """EchoTool that records, per batch, the thread it ran on and the engine's decode steps while it ran."""

    def __init__(self, engine: ContextScriptedEngine, seconds: float):
        super().__init__()
        self.engine, self.seconds, self.threads, self.steps_during = engine, seconds, [], []

    def run_batch(self, arguments, sessions):
        before = self.engine.steps
        threading.Event().wait(self.seconds)
        self.threads.append(threading.current_thread().name)
        self.steps_during.append(self.engine.steps - before)
        return super().run_batch(arguments, sessions)


def _rollout(scheduling, n=2, step_s=0.0, tool_s=0.0):
    tok = chat_tokenizer()
    engine = ContextScriptedEngine(tok, SCRIPTS, step_s=step_s)
    tool = _SlowEcho(engine, tool_s)
    env = ToolEnvironment([tool], CallFormat("fenced"), tok, max_tool_output_tokens=64, instructions=False)
    out = multi_turn_generate(engine, tok, env, ROWS, n, SamplingParams(max_new_tokens=200), max_turns=3,
                              eos_ids=[tok.eos_token_id], scheduling=scheduling)
    return engine, tool, out


def _facts(sample):
    return (sample.token_ids, sample.response_mask, sample.logprobs, sample.finish_reason, sample.messages,
            [(t.sampled, t.answer, t.text, t.answer_text, [(c.name, c.arguments, c.status) for c in t.calls])
             for t in sample.turns])


def test_continuous_gives_the_samples_that_rounds_give():
    _, rounds_tool, rounds = _rollout("rounds")
    engine, tool, continuous = _rollout("continuous")
    assert [[_facts(s) for s in g] for g in continuous.groups] == [[_facts(s) for s in g] for g in rounds.groups]
    [short, _], [long, _] = continuous.groups
    assert short.final_text == "It is 2." and long.final_text == "It is 4." and len(long.turns) == 2
    assert sorted(sum(tool.batches, [])) == sorted(sum(rounds_tool.batches, []))  # the same calls, answered once
    # one request per sample and turn, seeded by (one draw, sample, turn): 2 rows x 2 samples x 2 turns
    assert len(engine.seeds) == 8 and len({seed for _, seed in engine.seeds}) == 8
    assert continuous.metrics()["tools/calls_per_sample"] == 1.0


def test_an_answered_sample_goes_on_while_a_slower_one_still_decodes_its_first_turn():
    engine, tool, out = _rollout("continuous", n=1, step_s=0.01, tool_s=0.05)
    events = engine.events
    long_first_end = next(step for what, key, step in events if what == "end" and key == 1)
    short_second_start = [step for what, key, step in events if what == "start" and key == 0][1]
    assert short_second_start < long_first_end  # in rounds it would wait for the long turn's end
    # the short sample's call was answered on the environment's worker thread while the long turn decoded
    assert tool.batches[0] == ["print(1+1)"] and tool.threads[0].startswith("rlvr-environment")
    assert tool.steps_during[0] > 0
    assert out.groups[0][0].final_text == "It is 2." and out.groups[1][0].final_text == "It is 4."
    # continuous: rounds counts the environment's batches (each sample's call, then its last turn, ended by eos)
    assert out.rounds == 4 and len(tool.batches) == 2
    # the first batch ran while the long sample decoded: the rollout waited for the environment only part of its time
    assert out.tool_seconds >= 2 * 0.05 and out.tool_wait_seconds < out.tool_seconds - 0.04
    _, _, rounds = _rollout("rounds", n=1, tool_s=0.05)
    assert rounds.tool_wait_seconds == rounds.tool_seconds >= 0.05  # one batch: both calls of the round


def test_request_seeds_depend_on_the_sample_and_request_only():
    seeds = {request_seed(12345, sample, request) for sample in range(64) for request in range(8)}
    assert len(seeds) == 64 * 8 and all(0 <= s < 2**31 - 1 for s in seeds)
    assert request_seed(12345, 3, 1) == request_seed(12345, 3, 1) != request_seed(12346, 3, 1)


def test_continuous_on_an_engine_without_a_stream_is_an_error_naming_the_engine():
    tok = chat_tokenizer()
    env = ToolEnvironment([EchoTool()], CallFormat("fenced"), tok, max_tool_output_tokens=64, instructions=False)
    with pytest.raises(ValueError, match="ScriptedEngine has none"):
        multi_turn_generate(ScriptedEngine(tok, [("x", True)]), tok, env, ROWS[:1], 1, SamplingParams(),
                            max_turns=2, eos_ids=[tok.eos_token_id], scheduling="continuous")


def test_a_recipe_asking_continuous_turns_of_the_hf_engine_is_refused():
    base = {"model": {"name": "m"}, "data": {"source": {"type": "jsonl", "path": "x.jsonl"}},
            "verifiers": [{"name": "math"}]}
    with pytest.raises(ValidationError, match="turn_scheduling=continuous needs an engine with continuous batching"):
        Recipe.model_validate({**base, "rollout": {"engine": "hf", "tools": [{"name": "python"}],
                                                   "turn_scheduling": "continuous"}})
    recipe = Recipe.model_validate({**base, "rollout": {"engine": "vllm", "tools": [{"name": "python"}],
                                                        "turn_scheduling": "continuous"}})
    assert recipe.rollout.turn_scheduling == "continuous"
