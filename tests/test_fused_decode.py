"""The fused bf16 decode step (rlvr/rollout/fused_decode.py, decode_kernels.cpp): each kernel against the torch ops
it replaces (bit for bit where the same roundings happen in the same order), the whole step against transformers'
bf16 forward (as close to the fp32 model as that forward is), weight refresh, the sampler's draws, the support test,
and bad input named. Needs a CPU with native bf16 and AVX-512 (the kernels' build); elsewhere it is skipped and the
hf engine keeps transformers' modules."""

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from rlvr.precision import cpu_native_bf16
from rlvr.rollout import decode
from rlvr.rollout.fused_decode import FusedDecoder, build_fused_decoder, fused_decode_supported
from rlvr.rollout.hf import _low_precision_copy
from rlvr.rollout.kernels import decode_kernels, kernels_supported
from tests.tiny import build_tiny_model

pytestmark = pytest.mark.skipif(not kernels_supported()[0] or not cpu_native_bf16()[0],
                                reason="the fused decode kernels need AVX-512 and native bf16")
BF16 = torch.bfloat16


@pytest.fixture(scope="module")
def kernels():
    built = decode_kernels()
    assert built is not None, "the kernels failed to build on a CPU that supports them"
    return built


def _ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in units of the bf16 spacing at b (both bf16)."""
    spacing = torch.finfo(BF16).eps * b.float().abs().clamp(min=1e-30)
    return (a.float() - b.float()).abs() / spacing


@pytest.mark.parametrize("dim", [576, 40])  # a whole number of 16-lane chunks, and a tail
def test_add_rms_norm_is_transformers_residual_add_and_rmsnorm(kernels, dim):
    torch.manual_seed(0)
    hidden, delta = torch.randn(5, dim).to(BF16), torch.randn(5, dim).to(BF16)
    norm = LlamaRMSNorm(dim, eps=1e-5).to(BF16)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(dim) + 0.5)
        expected_sum = hidden + delta
        expected = norm(expected_sum)
    out = kernels.add_rms_norm(hidden, delta, norm.weight.detach(), 1e-5)
    assert torch.equal(hidden, expected_sum)  # updated in place, rounded as bf16 addition rounds
    assert _ulps(out, expected).max() <= 1.0  # only the order of the sum of squares differs
    assert (out == expected).float().mean() > 0.98
    assert torch.equal(kernels.add_rms_norm(expected_sum.clone(), None, norm.weight.detach(), 1e-5), out)


@pytest.mark.parametrize("head_dim", [64, 8])  # the vector path (halves of 16 lanes) and the scalar one
def test_rope_and_cache_rotates_like_transformers_and_fills_the_cache(kernels, head_dim):
    torch.manual_seed(1)
    rows, heads, kv_heads, capacity, column = 3, 4, 2, 32, 17
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * head_dim).to(BF16)
    angles = torch.rand(40, head_dim // 2) * 6.0
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(BF16)  # the (positions, d) tables transformers builds
    sin = torch.cat([angles.sin(), angles.sin()], -1).to(BF16)
    positions = torch.tensor([5, 39, 0])
    keys_t = torch.zeros(rows, kv_heads, capacity // 16, head_dim, 16, dtype=BF16)
    values = torch.zeros(rows, kv_heads, capacity, head_dim, dtype=BF16)
    queries = kernels.rope_and_cache(qkv, cos, sin, positions, keys_t, values, column, heads)
    q, k, v = qkv.view(rows, heads + 2 * kv_heads, head_dim).split([heads, kv_heads, kv_heads], 1)
    expected_q, expected_k = apply_rotary_pos_emb(q.unsqueeze(2), k.unsqueeze(2), cos[positions].unsqueeze(1),
                                                  sin[positions].unsqueeze(1))
    assert torch.equal(queries, expected_q.squeeze(2))  # the same bf16 roundings in the same order
    cached_keys = keys_t.transpose(2, 3).reshape(rows, kv_heads, head_dim, capacity)[..., column]
    assert torch.equal(cached_keys, expected_k.squeeze(2))
    assert torch.equal(values[:, :, column], v)
    assert keys_t.count_nonzero() == expected_k.count_nonzero()  # nothing but that one column was written
    assert values.count_nonzero() == v.count_nonzero()


@pytest.mark.parametrize("groups,head_dim,length", [(3, 64, 37), (2, 8, 16), (1, 16, 5)])
def test_decode_attention_is_grouped_sdpa_over_the_cache_with_left_padding(kernels, groups, head_dim, length):
    torch.manual_seed(2)
    rows, kv_heads, capacity = 4, 2, 48
    queries = torch.randn(rows, kv_heads * groups, head_dim).to(BF16)
    keys = torch.randn(rows, kv_heads, capacity, head_dim).to(BF16)
    values = torch.randn(rows, kv_heads, capacity, head_dim).to(BF16)
    keys_t = keys.transpose(2, 3).reshape(rows, kv_heads, head_dim, capacity // 16, 16).transpose(2, 3).contiguous()
    bias = torch.zeros(rows, capacity)
    bias[0, :3] = float("-inf")  # left padding on two rows
    bias[2, :1] = float("-inf")
    out = kernels.decode_attention(queries, keys_t, values, bias, length, head_dim ** -0.5)
    mask = torch.isfinite(bias[:, :length]).view(rows, 1, 1, length)
    expected = F.scaled_dot_product_attention(
        queries.float().unsqueeze(2), keys[:, :, :length].float().repeat_interleave(groups, 1),
        values[:, :, :length].float().repeat_interleave(groups, 1), attn_mask=mask)  # fp32 reference
    assert out.shape == (rows, kv_heads * groups * head_dim)
    torch.testing.assert_close(out.float(), expected.reshape(rows, -1), atol=8e-3, rtol=8e-3)  # bf16 output


def test_silu_mul_is_the_bf16_swiglu_product(kernels):
    torch.manual_seed(3)
    gate_up = (torch.randn(6, 2 * 1000) * 4).to(BF16)  # 1000: a tail chunk
    gate, up = gate_up.chunk(2, -1)
    expected = F.silu(gate) * up
    out = kernels.silu_mul(gate_up)
    assert _ulps(out, expected).max() <= 1.0  # exp to ~1e-7 relative can flip a rounding
    assert (out == expected).float().mean() > 0.99


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_sample_tokens_draws_what_sample_categorical_draws_for_the_same_uniforms(kernels, temperature, monkeypatch):
    torch.manual_seed(4)
    logits = (torch.randn(16, 3001) * 3).to(BF16)  # 3001: a tail chunk
    uniforms = torch.rand(16, 1, dtype=torch.float64)
    tokens, logprobs = kernels.sample_tokens(logits, temperature, uniforms)
    scores = logits.float() / temperature
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: uniforms)  # sample_categorical's one draw
    expected_tokens = decode.sample_categorical(torch.softmax(scores, -1))
    monkeypatch.undo()
    assert torch.equal(tokens, expected_tokens)
    expected_lp = scores.gather(-1, tokens[:, None])[:, 0] - torch.logsumexp(scores, -1)
    torch.testing.assert_close(logprobs, expected_lp, atol=2e-5, rtol=0)


def test_kernels_name_bad_input(kernels):
    with pytest.raises(RuntimeError, match="hidden: expected a contiguous 2-d bf16"):
        kernels.add_rms_norm(torch.zeros(2, 8), None, torch.zeros(8, dtype=BF16), 1e-5)
    with pytest.raises(RuntimeError, match="column 40 outside the cache capacity 32"):
        kernels.rope_and_cache(torch.zeros(1, 4 * 8, dtype=BF16), torch.zeros(4, 8, dtype=BF16),
                               torch.zeros(4, 8, dtype=BF16), torch.zeros(1, dtype=torch.long),
                               torch.zeros(1, 1, 2, 8, 16, dtype=BF16), torch.zeros(1, 1, 32, 8, dtype=BF16), 40, 2)
    with pytest.raises(RuntimeError, match="position 9 outside the RoPE table of 4"):
        kernels.rope_and_cache(torch.zeros(1, 4 * 8, dtype=BF16), torch.zeros(4, 8, dtype=BF16),
                               torch.zeros(4, 8, dtype=BF16), torch.tensor([9]),
                               torch.zeros(1, 1, 2, 8, 16, dtype=BF16), torch.zeros(1, 1, 32, 8, dtype=BF16), 3, 2)
    with pytest.raises(RuntimeError, match="temperature must be > 0"):
        kernels.sample_tokens(torch.zeros(1, 8, dtype=BF16), 0.0, torch.zeros(1, dtype=torch.float64))


def _llama(tmp_path, head_dim=64):
    torch.manual_seed(5)
    config = LlamaConfig(vocab_size=97, hidden_size=3 * head_dim, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=3, num_key_value_heads=1, max_position_embeddings=128,
                         initializer_range=0.2, tie_word_embeddings=True)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(tmp_path / "llama")
    return model


def _qwen2(tmp_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "qwen2", hidden=32, init_std=0.2)).eval()


def _kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    p = p_logits.float().log_softmax(-1)
    return float((p.exp() * (p - q_logits.float().log_softmax(-1))).sum(-1).mean())


@pytest.mark.parametrize("family", ["llama", "qwen2"])  # d = 64 (vector paths); d = 8 with q/k/v biases
def test_a_fused_step_is_as_close_to_the_fp32_model_as_transformers_bf16_step(tmp_path, kernels, family):
    model = _llama(tmp_path) if family == "llama" else _qwen2(tmp_path)
    hf_bf16 = _low_precision_copy(model, BF16)
    fused = FusedDecoder(_low_precision_copy(model, BF16), kernels)
    ids = torch.tensor([[0, 0, 5, 9, 11, 3], [4, 8, 15, 16, 23, 7]])  # row 0 left-padded
    mask = (torch.arange(6) >= torch.tensor([[2], [0]])).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    steps, repeats = 6, 2

    def prefill(m):
        return m(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=DynamicCache(config=m.config),
                 use_cache=True).past_key_values

    with torch.no_grad():
        caches = {"fp32": decode.PreallocatedCache(prefill(model), repeats, 6 + steps),
                  "bf16": decode.PreallocatedCache(prefill(hf_bf16), repeats, 6 + steps)}
        state = fused.start(prefill(fused.model), mask, repeats, 6 + steps)
        full_mask = torch.ones(4, 6 + steps, dtype=torch.long)
        full_mask[:, :6] = mask.repeat_interleave(repeats, 0)
        positions = mask.sum(-1).repeat_interleave(repeats, 0)
        tokens = torch.randint(1, 30, (4, steps), generator=torch.Generator().manual_seed(6))
        kl_hf, kl_fused = [], []
        for step in range(steps):
            kwargs = dict(input_ids=tokens[:, step:step + 1], attention_mask=full_mask[:, :7 + step],
                          position_ids=positions[:, None], use_cache=True)
            ref = model(past_key_values=caches["fp32"], **kwargs).logits[:, -1]
            hf = hf_bf16(past_key_values=caches["bf16"], **kwargs).logits[:, -1]
            ours = fused.step(state, tokens[:, step], positions)
            assert ours.shape == (4, model.config.vocab_size) and ours.dtype == BF16
            kl_hf.append(_kl(ref, hf))
            kl_fused.append(_kl(ref, ours))
            positions = positions + 1
    # bf16 noise either way: the fused step is no further from fp32 than transformers' bf16 forward (x2 margin)
    assert max(kl_fused) < 2 * max(kl_hf) + 1e-5, (kl_fused, kl_hf)
    assert state.length == 6 + steps


def test_refresh_follows_a_weight_change(tmp_path, kernels):
    model = _llama(tmp_path)
    gen = _low_precision_copy(model, BF16)
    fused = FusedDecoder(gen, kernels)
    ids, mask = torch.tensor([[3, 4, 5]]), torch.ones(1, 3, dtype=torch.long)

    with torch.no_grad():  # one prefill (through transformers' modules, which read the plain weights)
        cache = gen(input_ids=ids, attention_mask=mask, past_key_values=DynamicCache(config=gen.config),
                    use_cache=True).past_key_values

    def one_step():
        return fused.step(fused.start(cache, mask, 1, 8), torch.tensor([6]), torch.tensor([3])).float()

    before = one_step()
    with torch.no_grad():
        gen.model.layers[0].self_attn.q_proj.weight.mul_(2.0)  # only the fused q/k/v pack reads this weight
    assert torch.equal(one_step(), before)  # the pack is a snapshot until refreshed
    fused.refresh()
    assert not torch.equal(one_step(), before)


def test_the_hf_engine_samples_through_the_fused_step_and_its_logprobs_match_a_bf16_forward(tmp_path):
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.hf import HFRolloutEngine
    from tests.tiny import build_tokenizer

    model = _qwen2(tmp_path)
    tok = build_tokenizer()
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], autocast_dtype=BF16)
    assert engine.fused is not None
    torch.manual_seed(7)
    prompt = tok("12+3=?")["input_ids"]
    completions = engine.generate([prompt], 3, SamplingParams(temperature=1.0, max_new_tokens=8))[0]
    ref = _low_precision_copy(model, BF16)
    for completion in completions:
        full = torch.tensor([prompt + completion.token_ids])
        with torch.no_grad():
            logits = ref(input_ids=full).logits[0, len(prompt) - 1:-1].float()
        expected = logits.log_softmax(-1).gather(-1, torch.tensor(completion.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=0.05, rtol=0)


def test_support_is_decided_by_the_architecture_and_named(tmp_path):
    model = _llama(tmp_path)
    assert not fused_decode_supported(model)[0]  # fp32 parameters
    gen = _low_precision_copy(model, BF16)
    assert fused_decode_supported(gen) == (True, "")
    gen.config.hidden_act = "gelu"
    ok, reason = fused_decode_supported(gen)
    assert not ok and "gelu" in reason
    gen.config.hidden_act = "silu"
    gen.config.model_type = "gemma"
    assert fused_decode_supported(gen) == (False, "model type 'gemma' is not one of ('llama', 'mistral', 'qwen2')")
    assert build_fused_decoder(gen) is None
    with pytest.raises(ValueError, match="does not support this model: model type 'gemma'"):
        FusedDecoder(gen, object())
