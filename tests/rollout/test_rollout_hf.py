"""The hf rollout engine: prefix-cached generation gives the same tokens as plain generate, logprobs match a forward
pass, finish reasons, group order."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.models.logprobs import response_logprobs
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.hf import HFRolloutEngine
from tests.tiny import build_tiny_model, build_tokenizer


@pytest.fixture(scope="module")
def model_and_tok(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("m") / "model", hidden=32)
    return AutoModelForCausalLM.from_pretrained(path).eval(), build_tokenizer()


def test_greedy_matches_plain_generate_and_groups_keep_order(model_and_tok):
    model, tok = model_and_tok
    prompts = [tok("1+2=?")["input_ids"], tok("13+4=?:")["input_ids"], tok("a")["input_ids"]]
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], batch_size=4, autocast_dtype=None)
    groups = engine.generate(prompts, 2, SamplingParams(temperature=0, max_new_tokens=6))
    assert [len(g) for g in groups] == [2, 2, 2]
    for p, group in zip(prompts, groups):
        ref = model.generate(torch.tensor([p]), do_sample=False, max_new_tokens=6, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)[0, len(p):].tolist()
        ref = ref[:ref.index(tok.eos_token_id) + 1] if tok.eos_token_id in ref else ref
        assert group[0].token_ids == ref and group[1].token_ids == ref
        assert group[0].finish_reason == ("stop" if ref[-1] == tok.eos_token_id else "length")


def test_sampled_logprobs_match_a_training_forward(model_and_tok):
    model, tok = model_and_tok
    prompts = [tok("2+2=?")["input_ids"], tok("9+1=?:")["input_ids"]]
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], batch_size=8, autocast_dtype=None)
    torch.manual_seed(0)
    groups = engine.generate(prompts, 3, SamplingParams(temperature=0.7, max_new_tokens=5))
    for p, group in zip(prompts, groups):
        for c in group:
            ids = torch.tensor([p + c.token_ids])
            lp, _ = response_logprobs(model, ids, torch.ones_like(ids), len(c.token_ids), temperature=0.7)
            assert torch.allclose(lp[0], torch.tensor(c.logprobs), atol=1e-4)


def test_bad_arguments(model_and_tok):
    model, tok = model_and_tok
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id])
    with pytest.raises(ValueError, match="n must be >= 1"):
        engine.generate([[3]], 0, SamplingParams())
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate([[]], 1, SamplingParams())


@pytest.fixture()
def fresh_model(tmp_path):
    path = build_tiny_model(tmp_path / "model", hidden=32)
    return path, AutoModelForCausalLM.from_pretrained(path).eval()


def test_bf16_generation_copy_holds_the_cast_weights_and_fp32_buffers(fresh_model):
    _, model = fresh_model
    tok = build_tokenizer()
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], autocast_dtype=torch.bfloat16)
    gen = engine.generation_model
    assert gen is not model
    src = dict(model.named_parameters())
    for name, p in gen.named_parameters():
        assert p.dtype == torch.bfloat16 and not p.requires_grad
        assert torch.equal(p, src[name].to(torch.bfloat16)), name
    assert gen.lm_head.weight is gen.model.embed_tokens.weight  # tied embeddings stay tied
    for name, b in gen.named_buffers():  # RoPE frequencies: fp32, as in the policy (bf16 would skew the angles)
        assert b.dtype == dict(model.named_buffers())[name].dtype == torch.float32
        assert torch.equal(b, dict(model.named_buffers())[name]), name
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the policy itself is untouched


def test_generation_copy_generates_like_a_bf16_model_and_follows_sync(fresh_model):
    path, model = fresh_model
    tok = build_tokenizer()
    prompts = [tok("1+2=?")["input_ids"], tok("13+4=?:")["input_ids"]]
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], batch_size=4, autocast_dtype=torch.bfloat16)
    torch.manual_seed(0)
    with torch.no_grad():  # an optimizer step on the policy
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    stale = [c.token_ids for g in engine.generate(prompts, 1, greedy) for c in g]
    engine.sync_weights(model)
    synced = [c.token_ids for g in engine.generate(prompts, 1, greedy) for c in g]
    model.save_pretrained(path)  # the updated policy, loaded directly in bf16, is the reference
    ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    ref = HFRolloutEngine(ref_model, tok, [tok.eos_token_id], batch_size=4, autocast_dtype=None)
    expected = [c.token_ids for g in ref.generate(prompts, 1, greedy) for c in g]
    assert synced == expected
    assert stale != synced  # without sync the copy still held the old weights


def test_generation_copy_needs_a_low_precision_dtype(fresh_model):
    _, model = fresh_model
    tok = build_tokenizer()
    with pytest.raises(ValueError, match="generation_copy=True needs an autocast_dtype"):
        HFRolloutEngine(model, tok, [tok.eos_token_id], autocast_dtype=None, generation_copy=True)
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], autocast_dtype=None)
    assert engine.generation_model is model  # fp32: parameters shared, sync is a no-op
