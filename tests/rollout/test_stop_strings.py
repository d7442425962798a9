"""Stop strings in the hf engine: a response ends at the token that completes a stop string (kept, ids verbatim),
``finish_reason == "stop_sequence"``; eos still wins; without stop strings nothing changes. On both decode paths
(transformers' modules and, where the CPU runs them, the fused bf16 kernels)."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.kernels.build import kernels_supported
from rlvr.kernels.machine import cpu_native_bf16
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.hf import HFRolloutEngine
from rlvr.rollout.stop import StopStrings
from tests.tiny import build_tiny_model, build_tokenizer


@pytest.fixture(scope="module")
def model_and_tok(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("m") / "model", hidden=32, init_std=0.2)
    return AutoModelForCausalLM.from_pretrained(path).eval(), build_tokenizer()


def _greedy(engine, prompts, **kw):
    return [g[0] for g in engine.generate(prompts, 1, SamplingParams(temperature=0, max_new_tokens=24, **kw))]


def _check_stops_at_completing_token(engine, tok, prompts):
    free = _greedy(engine, prompts)
    for p, ref in zip(prompts, free):
        text = tok.decode(ref.token_ids, skip_special_tokens=False)
        assert len(ref.token_ids) >= 6, text
        stop = text[3:5]  # a two-character string the free run completes at its token 5 (or earlier)
        cut = next(i for i in range(1, len(ref.token_ids) + 1)
                   if stop in tok.decode(ref.token_ids[:i], skip_special_tokens=False))
        [stopped] = _greedy(engine, [p], stop=("never-sampled", stop))
        assert stopped.finish_reason == "stop_sequence" and stopped.stop_sequence == stop
        assert stopped.token_ids == ref.token_ids[:cut]
        assert stopped.logprobs == pytest.approx(ref.logprobs[:cut], abs=1e-5)


def test_a_stop_string_ends_the_row_at_the_token_that_completes_it(model_and_tok):
    model, tok = model_and_tok
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], batch_size=4, autocast_dtype=None)
    prompts = [tok("1+2=?")["input_ids"], tok("13+4=?:")["input_ids"]]
    _check_stops_at_completing_token(engine, tok, prompts)


def test_other_rows_keep_decoding_and_no_stop_strings_is_the_old_behaviour(model_and_tok):
    model, tok = model_and_tok
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], batch_size=8, autocast_dtype=None)
    prompts = [tok("1+2=?")["input_ids"], tok("7+7=?")["input_ids"]]
    free = _greedy(engine, prompts)
    first = tok.decode(free[0].token_ids)
    stop = first[2:4]
    together = _greedy(engine, prompts, stop=(stop,))
    alone = [_greedy(engine, [p], stop=(stop,))[0] for p in prompts]
    assert [c.token_ids for c in together] == [c.token_ids for c in alone]
    assert together[0].finish_reason == "stop_sequence"
    if stop not in tok.decode(free[1].token_ids):
        assert together[1].token_ids == free[1].token_ids and together[1].finish_reason == free[1].finish_reason
    torch.manual_seed(3)
    plain = engine.generate(prompts, 3, SamplingParams(temperature=1.0, max_new_tokens=10))
    torch.manual_seed(3)
    again = engine.generate(prompts, 3, SamplingParams(temperature=1.0, max_new_tokens=10, stop=()))
    assert [[c.token_ids for c in g] for g in plain] == [[c.token_ids for c in g] for g in again]
    assert all(c.finish_reason in ("stop", "length") and c.stop_sequence is None for g in plain for c in g)


def test_pad_equal_to_eos_does_not_hide_the_stop(model_and_tok):
    model, tok = model_and_tok
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], batch_size=4, autocast_dtype=None)
    engine.pad_id = tok.eos_token_id  # SmolLM2: pad == eos; rows after their stop are fed eos
    prompts = [tok("2+2=?")["input_ids"], tok("9+1=?:")["input_ids"]]
    _check_stops_at_completing_token(engine, tok, prompts)


@pytest.mark.skipif(not kernels_supported()[0] or not cpu_native_bf16()[0],
                    reason="the fused decode kernels need AVX-512 and native bf16")
def test_stop_strings_on_the_fused_decode_path(model_and_tok):
    model, tok = model_and_tok
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], batch_size=4, autocast_dtype=torch.bfloat16)
    assert engine.fused is not None
    _check_stops_at_completing_token(engine, tok, [tok("1+2=?")["input_ids"], tok("5+5=?")["input_ids"]])


def test_matcher_finds_strings_across_token_boundaries_and_rejects_empty():
    tok = build_tokenizer()
    stops = StopStrings(tok, ["b c", "zz"])
    ids = tok("aab c")["input_ids"]
    assert [stops.matched(ids[:i]) for i in range(1, len(ids) + 1)] == [None, None, None, None, "b c"]
    assert stops.first_stop(tok("xb czz")["input_ids"]) == (4, "b c")
    with pytest.raises(ValueError, match="non-empty"):
        StopStrings(tok, [""])
