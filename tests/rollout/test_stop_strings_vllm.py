"""Stop strings on the vLLM engine: the ids up to and including the token that completed the stop string, exactly as
sampled (the same as a free run's prefix), ``finish_reason == "stop_sequence"``; and the multi-turn loop on vLLM,
its sampled tokens' log-probs equal to the trainer's forward over the whole sequence."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.models.logprobs import response_logprobs
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.multi_turn import multi_turn_generate
from tests.tiny import build_tiny_model, build_tokenizer
from tests.tools.test_multi_turn_hf import Counter
from tests.vllm_required import require_vllm

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def engine_model_tok(tmp_path_factory):
    vllm = require_vllm()
    from rlvr.rollout.vllm_engine import VLLMRolloutEngine

    path = build_tiny_model(tmp_path_factory.mktemp("tiny32") / "model", hidden=128, layers=2, init_std=0.2)
    tok = build_tokenizer()
    llm = vllm.LLM(model=str(path), dtype="float32", enforce_eager=True, seed=0, max_model_len=128,
                   enable_chunked_prefill=False, logprobs_mode="processed_logprobs")
    engine = VLLMRolloutEngine(llm, [tok.eos_token_id], dtype=torch.float32, max_model_len=128)
    return engine, AutoModelForCausalLM.from_pretrained(path).eval(), tok


def test_vllm_stops_at_the_token_that_completes_a_stop_string(engine_model_tok):
    engine, _, tok = engine_model_tok
    prompts = [tok("1+2=?")["input_ids"], tok("13+4=?:")["input_ids"]]
    free = [g[0] for g in engine.generate(prompts, 1, SamplingParams(temperature=0, max_new_tokens=24))]
    for p, ref in zip(prompts, free):
        text = tok.decode(ref.token_ids)
        stop = text[3:5]
        cut = next(i for i in range(1, len(ref.token_ids) + 1) if stop in tok.decode(ref.token_ids[:i]))
        [[c]] = engine.generate([p], 1, SamplingParams(temperature=0, max_new_tokens=24, stop=("zzzz", stop)))
        assert (c.finish_reason, c.stop_sequence) == ("stop_sequence", stop)
        assert c.token_ids == ref.token_ids[:cut]
        assert c.logprobs == pytest.approx(ref.logprobs[:cut], abs=1e-5)
    [[plain]] = engine.generate(prompts[:1], 1, SamplingParams(temperature=0, max_new_tokens=24))
    assert plain.finish_reason in ("stop", "length") and plain.stop_sequence is None


@pytest.mark.parametrize("scheduling", ["rounds", "continuous"])
def test_multi_turn_on_vllm_keeps_the_sampled_ids_and_logprobs(engine_model_tok, scheduling):
    engine, model, tok = engine_model_tok
    torch.manual_seed(0)
    out = multi_turn_generate(engine, tok, Counter(), [{"prompt": "1+2=?"}, {"prompt": "9+9=?"}], 4,
                              SamplingParams(temperature=1.0, max_new_tokens=30), max_turns=3,
                              eos_ids=[tok.eos_token_id], scheduling=scheduling)
    samples = [s for g in out.groups for s in g]
    assert any(len(s.turns) > 1 for s in samples)
    for s in samples:
        for turn in s.turns[:-1]:
            assert turn.finish_reason == "stop_sequence" and turn.text[-1] in Counter.stop
        ids = torch.tensor([s.prompt_ids + s.token_ids])
        with torch.no_grad():
            lp, _ = response_logprobs(model, ids, torch.ones_like(ids), len(s.token_ids), temperature=1.0)
        mask = torch.tensor(s.response_mask, dtype=torch.bool)
        assert torch.allclose(lp[0][mask], torch.tensor(s.logprobs)[mask], atol=2e-3)


def test_continuous_turns_on_vllm_sample_what_rounds_sample_greedily(engine_model_tok):
    """Greedy, the two schedules must agree token for token: each request of the continuous schedule joins vLLM's
    running batch on its own, and its ids are the same as the round's."""
    engine, _, tok = engine_model_tok
    rows = [{"prompt": p} for p in ("1+2=?", "9+9=?", "13+4=?:", "7*8=")]
    outs = {}
    for scheduling in ("rounds", "continuous"):
        outs[scheduling] = multi_turn_generate(engine, tok, Counter(), rows, 1,
                                               SamplingParams(temperature=0, max_new_tokens=30), max_turns=4,
                                               eos_ids=[tok.eos_token_id], scheduling=scheduling)
    facts = {k: [(s.token_ids, s.response_mask, [t.finish_reason for t in s.turns]) for g in out.groups for s in g]
             for k, out in outs.items()}
    assert facts["continuous"] == facts["rounds"]
    assert sum(len(s.turns) for g in outs["rounds"].groups for s in g) > len(rows)  # some rows had several turns
    for a, b in zip(*(sum(out.groups, []) for out in outs.values()), strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
