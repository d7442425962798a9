"""The hf engine's decode loop: copy-free GQA attention equals repeat_kv + SDPA, the preallocated cache gives
generate's greedy tokens (GQA attention on), the inverse-CDF draw follows the distribution, log-probs under top-k."""

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from rlvr.models import attention
from rlvr.models.logprobs import response_logprobs
from rlvr.rollout import decode
from tests.tiny import build_tiny_model, build_tokenizer


class _Attn(torch.nn.Module):  # what sdpa_attention_forward reads from an attention module
    num_key_value_groups = 3
    is_causal = True


def test_decode_attention_equals_repeat_kv_sdpa_with_a_padding_mask():
    torch.manual_seed(0)
    r, kv_heads, groups, d, length = 4, 2, 3, 8, 7
    q = torch.randn(r, kv_heads * groups, 1, d)
    buf_k, buf_v = torch.randn(r, kv_heads, 12, d), torch.randn(r, kv_heads, 12, d)
    k, v = buf_k[:, :, :length], buf_v[:, :, :length]  # a view of a preallocated buffer, as the cache gives
    mask = torch.ones(r, 1, 1, length, dtype=torch.bool)
    mask[0, ..., :3] = False  # left padding on two rows
    mask[2, ..., :1] = False
    out, _ = attention.grouped_query_attention(_Attn(), q, k, v, mask, scaling=d ** -0.5)
    ref, _ = sdpa_attention_forward(_Attn(), q, k, v, mask, scaling=d ** -0.5)
    assert out.shape == ref.shape == (r, 1, kv_heads * groups, d)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    # by hand for row 0, head 4 (KV head 1): softmax over the 4 unpadded positions
    w = torch.softmax(q[0, 4, 0] @ k[0, 1, 3:].T * d ** -0.5, -1)
    torch.testing.assert_close(out[0, 0, 4], w @ v[0, 1, 3:], atol=1e-6, rtol=1e-5)


def test_preallocated_cache_writes_in_place_and_refuses_overflow():
    from transformers import DynamicCache
    prefilled = DynamicCache()
    prefilled.update(torch.arange(2 * 1 * 3 * 2.).view(2, 1, 3, 2), torch.zeros(2, 1, 3, 2), 0)
    cache = decode.PreallocatedCache(prefilled, repeats=2, capacity=4)
    layer = cache.layers[0]
    assert layer.keys.shape == (4, 1, 3, 2) and layer.get_seq_length() == 3
    assert torch.equal(layer.keys[1], prefilled.layers[0].keys[0]) and torch.equal(layer.keys[2],
                                                                                   prefilled.layers[0].keys[1])
    k, _ = cache.update(torch.full((4, 1, 1, 2), 7.0), torch.ones(4, 1, 1, 2), 0)
    assert k.shape == (4, 1, 4, 2) and k.data_ptr() == layer.buf_keys.data_ptr() and float(k[3, 0, 3, 1]) == 7.0
    with pytest.raises(ValueError, match="capacity 4 exceeded"):
        cache.update(torch.zeros(4, 1, 1, 2), torch.zeros(4, 1, 1, 2), 0)


@pytest.fixture(scope="module")
def gqa_model_and_tok(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("m") / "model", hidden=32, init_std=0.2)  # 4 query / 2 KV heads
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    return model, build_tokenizer()


def _left_pad(prompts, pad_id):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
    return ids, mask


def test_greedy_decode_with_gqa_attention_matches_generate(gqa_model_and_tok):
    model, tok = gqa_model_and_tok
    prompts = [tok("1+2=?")["input_ids"], tok("13+4=?:")["input_ids"], tok("a")["input_ids"]]
    ids, mask = _left_pad(prompts, tok.pad_token_id)
    calls = []
    fn = attention.grouped_query_attention

    def counting(*args, **kwargs):
        calls.append(args[1].shape[2])
        return fn(*args, **kwargs)

    attention.AttentionInterface.register(attention.GQA_ATTENTION, counting)
    model.config._attn_implementation = attention.GQA_ATTENTION
    try:
        tokens, _ = decode.sample(model, ids, mask, 2, max_new_tokens=8, temperature=0, top_k=0, top_p=1.0,
                                  eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    finally:
        attention.AttentionInterface.register(attention.GQA_ATTENTION, fn)
        model.config._attn_implementation = "sdpa"
    assert 1 in calls  # the decode steps went through the copy-free attention
    for u, p in enumerate(prompts):
        ref = model.generate(torch.tensor([p]), do_sample=False, max_new_tokens=8, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)[0, len(p):].tolist()
        for row in (2 * u, 2 * u + 1):
            got = tokens[row, :len(ref)].tolist()
            assert got == ref
            assert all(t == tok.pad_token_id for t in tokens[row, len(ref):].tolist())  # fed pad after eos


def test_sampled_logprobs_under_top_k_are_the_untruncated_tempered_ones(gqa_model_and_tok):
    model, tok = gqa_model_and_tok
    prompts = [tok("2+2=?")["input_ids"], tok("9+1=?:")["input_ids"]]
    ids, mask = _left_pad(prompts, tok.pad_token_id)
    torch.manual_seed(0)
    tokens, lps = decode.sample(model, ids, mask, 3, max_new_tokens=5, temperature=0.7, top_k=5, top_p=1.0,
                                eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    for row in range(6):
        p = prompts[row // 3]
        resp = tokens[row].tolist()
        if tok.eos_token_id in resp:
            resp = resp[:resp.index(tok.eos_token_id) + 1]
        full = torch.tensor([p + resp])
        with torch.no_grad():
            logits = model(full).logits[0, len(p) - 1:-1] / 0.7  # (T, V)
        ranks = (logits > logits.gather(-1, torch.tensor(resp).unsqueeze(-1))).sum(-1)
        assert bool((ranks < 5).all())  # every sampled token is in the top 5
        lp, _ = response_logprobs(model, full, torch.ones_like(full), len(resp), temperature=0.7)
        torch.testing.assert_close(lps[row, :len(resp)], lp[0], atol=1e-4, rtol=0)


def test_sample_categorical_follows_the_probabilities_and_never_draws_zero_mass():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(20000, 1)
    gen = torch.Generator().manual_seed(0)
    draws = decode.sample_categorical(probs, gen)
    freq = torch.bincount(draws, minlength=5).double() / draws.numel()
    assert freq[1] == 0 and freq[4] == 0
    # 20,000 draws: the standard error of a frequency is at most 0.0036; 4 s.e. tolerance
    torch.testing.assert_close(freq, probs[0].double(), atol=0.015, rtol=0)
    # unnormalised rows are fine (the CDF is scaled by its total), and a one-hot row always gives its id
    assert decode.sample_categorical(torch.tensor([[0.0, 0.0, 2.0]]), gen).tolist() == [2]


def test_bad_arguments_are_named(gqa_model_and_tok):
    model, tok = gqa_model_and_tok
    ids, mask = torch.tensor([[3, 4]]), torch.tensor([[0, 0]])
    with pytest.raises(ValueError, match="at least one real token"):
        decode.sample(model, ids, mask, 1, max_new_tokens=2, temperature=1.0, top_k=0, top_p=1.0, eos_ids=[0],
                      pad_id=0)
    with pytest.raises(ValueError, match="n and max_new_tokens must be >= 1"):
        decode.sample(model, ids, torch.ones_like(ids), 0, max_new_tokens=2, temperature=1.0, top_k=0, top_p=1.0,
                      eos_ids=[0], pad_id=0)
