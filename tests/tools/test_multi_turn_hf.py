"""The multi-turn loop on the real hf engine (tiny model): rows pause at stop strings, answers are appended, rows
resume; every sampled token's log-prob equals a forward pass over the whole final sequence (answers included), and
the loss mask covers exactly the sampled tokens."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.models.logprobs import response_logprobs
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.hf import HFRolloutEngine
from rlvr.rollout.multi_turn import multi_turn_generate
from rlvr.tools import Environment, Reply
from tests.tiny import build_tiny_model, build_tokenizer


class Counter(Environment):
    """Pauses a row at any of a few letters and answers inline with a fixed text."""

    stop = ("a", "b", "c", "d", "e", "f")

    def reset(self, row):
        return row["prompt"]

    def step_many(self, episodes, assistant_messages, ended_by_stop):
        return [Reply(text=" 7=\n") if stopped else Reply(done=True) for stopped in ended_by_stop]


@pytest.fixture(scope="module")
def model_and_tok(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("m") / "model", hidden=32, init_std=0.2)
    return AutoModelForCausalLM.from_pretrained(path).eval(), build_tokenizer()


def test_sampled_logprobs_match_a_forward_over_the_whole_multi_turn_sequence(model_and_tok):
    model, tok = model_and_tok
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], batch_size=16, autocast_dtype=None)
    torch.manual_seed(0)
    rows = [{"prompt": "1+2=?"}, {"prompt": "13+4=?:"}]
    out = multi_turn_generate(engine, tok, Counter(), rows, 4, SamplingParams(temperature=1.0, max_new_tokens=30),
                              max_turns=3, eos_ids=[tok.eos_token_id])
    samples = [s for g in out.groups for s in g]
    assert any(len(s.turns) > 1 for s in samples), "no row paused: pick other stop strings"
    answer = tok(" 7=\n", add_special_tokens=False)["input_ids"]
    for s in samples:
        assert s.sampled_tokens <= 30 and len(s.turns) <= 3
        for turn in s.turns[:-1]:
            assert turn.finish_reason == "stop_sequence" and turn.text[-1] in Counter.stop
            assert s.token_ids[turn.answer[0]:turn.answer[1]] == answer
        ids = torch.tensor([s.prompt_ids + s.token_ids])
        lp, _ = response_logprobs(model, ids, torch.ones_like(ids), len(s.token_ids), temperature=1.0)
        mask = torch.tensor(s.response_mask, dtype=torch.bool)
        assert torch.allclose(lp[0][mask], torch.tensor(s.logprobs)[mask], atol=1e-4)
        assert all(lp_ == 0.0 for lp_, m in zip(s.logprobs, s.response_mask) if not m)
    assert out.rounds >= 2
