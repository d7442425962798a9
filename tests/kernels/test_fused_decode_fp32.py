"""The fused fp32 decode step (rlvr/kernels/fused_decode.py over fp32_decode_kernels.cpp): each kernel against the
fp32 torch ops it replaces (to fp32 rounding: the same sums in another order), the whole step against transformers'
fp32 forward, a step of some rows against a step of all, the layers' weights read as they change (nothing to
refresh), the sampler's draws, the hf engine decoding an fp32 policy through it, and bad input named. Needs a CPU
torch runs AVX2 kernels on (the kernels' build); elsewhere it is skipped and fp32 decoding keeps transformers'
modules."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, DynamicCache, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from rlvr.kernels import fp32_decode
from rlvr.kernels.build import avx2_supported
from rlvr.kernels.fp32_decode import fp32_kernels
from rlvr.kernels.fused_decode import FusedDecoder, _Fp32Projection, build_fused_decoder, fused_decode_supported
from rlvr.rollout import decode
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.hf import HFRolloutEngine
from tests.tiny import build_tiny_model, build_tokenizer

pytestmark = pytest.mark.skipif(not avx2_supported()[0], reason="the fp32 decode kernels need AVX2")
BF16 = torch.bfloat16


@pytest.fixture(scope="module")
def kernels():
    built = fp32_kernels()
    assert built is not None, "the fp32 kernels failed to build on a CPU that supports them"
    return built


@pytest.fixture
def measured(tmp_path, monkeypatch):
    """The fp32 GEMM choice made without timing anything (fp32_linear measured faster), cached under tmp_path."""
    monkeypatch.setattr(fp32_decode, "fp32_decode_timings", lambda kernels, weights: {"kernel": 1.0, "torch": 2.0})
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("dim", [576, 40])  # whole 8-lane chunks, and a tail
def test_add_rms_norm_is_transformers_residual_add_and_rmsnorm(kernels, dim):
    torch.manual_seed(0)
    hidden, delta = torch.randn(5, dim), torch.randn(5, dim)
    norm = LlamaRMSNorm(dim, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(dim) + 0.5)
        expected_sum = hidden + delta
        expected = norm(expected_sum)
    out = kernels.add_rms_norm(hidden, delta, norm.weight.detach(), 1e-5)
    assert out.dtype == torch.float32 and out.shape == (5, dim)
    assert torch.equal(hidden, expected_sum)  # updated in place: one fp32 addition an element, as torch's
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)  # only the order of the sum of squares differs
    assert torch.equal(kernels.add_rms_norm(expected_sum.clone(), None, norm.weight.detach(), 1e-5), out)


@pytest.mark.parametrize("head_dim", [64, 8])
def test_rope_rotates_queries_and_keys_like_transformers_and_copies_values(kernels, head_dim):
    torch.manual_seed(1)
    rows, heads, kv_heads = 3, 4, 2
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * head_dim)
    angles = torch.rand(40, head_dim // 2) * 6.0
    cos = torch.cat([angles.cos(), angles.cos()], -1)  # the (positions, d) tables transformers builds
    sin = torch.cat([angles.sin(), angles.sin()], -1)
    positions = torch.tensor([5, 39, 0])
    out = kernels.rope(qkv, cos, sin, positions, heads, kv_heads)
    q, k, v = qkv.view(rows, heads + 2 * kv_heads, head_dim).split([heads, kv_heads, kv_heads], 1)
    expected_q, expected_k = apply_rotary_pos_emb(q.unsqueeze(2), k.unsqueeze(2), cos[positions].unsqueeze(1),
                                                  sin[positions].unsqueeze(1))
    assert out.shape == (rows, heads + 2 * kv_heads, head_dim) and out.dtype == torch.float32
    # x * cos + rotate_half(x) * sin: one rounding apart where the compiler fuses a multiply-add
    torch.testing.assert_close(out[:, :heads], expected_q.squeeze(2), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out[:, heads:heads + kv_heads], expected_k.squeeze(2), rtol=1e-6, atol=1e-6)
    assert torch.equal(out[:, heads + kv_heads:], v)


def _blocked(keys: torch.Tensor) -> torch.Tensor:  # (N, H_kv, C, d) -> (N, H_kv, C / 16, d, 16)
    n, h, c, d = keys.shape
    return keys.view(n, h, c // 16, 16, d).transpose(3, 4).contiguous()


# own lengths (column + 1): 21 and 23 (neither a multiple of 8 nor of 16), 1, 16, and the whole capacity of 32 with
# the kernel's largest group of 8 query heads a KV head
@pytest.mark.parametrize("groups,head_dim,column", [(3, 64, 20), (3, 8, 22), (2, 8, 0), (1, 16, 15), (8, 8, 31)])
def test_decode_attention_writes_the_new_token_and_is_grouped_sdpa_over_prompt_and_own_positions(
        kernels, groups, head_dim, column):
    torch.manual_seed(2)
    prompts, repeats, kv_heads, prompt_len, own_len = 2, 3, 2, 32, 32
    rows, heads = prompts * repeats, kv_heads * groups
    prompt_keys = torch.randn(prompts, kv_heads, prompt_len, head_dim)
    prompt_values = torch.randn(prompts, kv_heads, prompt_len, head_dim)
    prompt_bias = torch.zeros(prompts, prompt_len)
    prompt_bias[0, :3] = float("-inf")  # left padding of prompt 0
    prompt_bias[:, 29:] = float("-inf")  # the round-up to 16 positions
    own_keys = torch.randn(rows, kv_heads, own_len, head_dim)
    own_values = torch.randn(rows, kv_heads, own_len, head_dim)
    own_keys_t, own_values_buf = _blocked(own_keys), own_values.clone()
    qkv_rot = torch.randn(rows, heads + 2 * kv_heads, head_dim)
    out = kernels.decode_attention(qkv_rot, _blocked(prompt_keys), prompt_values, prompt_bias, own_keys_t,
                                   own_values_buf, torch.zeros(rows, own_len), column, head_dim ** -0.5)
    new_k, new_v = qkv_rot[:, heads:heads + kv_heads], qkv_rot[:, heads + kv_heads:]
    own_keys[:, :, column], own_values[:, :, column] = new_k, new_v  # what the kernel writes first
    assert torch.equal(own_keys_t, _blocked(own_keys)) and torch.equal(own_values_buf, own_values)
    # the float64 reference: each row's prompt (repeated) then its own first column + 1 positions
    keys = torch.cat([prompt_keys.repeat_interleave(repeats, 0), own_keys[:, :, :column + 1]], 2).double()
    values = torch.cat([prompt_values.repeat_interleave(repeats, 0), own_values[:, :, :column + 1]], 2).double()
    mask = torch.cat([torch.isfinite(prompt_bias).repeat_interleave(repeats, 0),
                      torch.ones(rows, column + 1, dtype=torch.bool)], 1).view(rows, 1, 1, -1)
    expected = F.scaled_dot_product_attention(qkv_rot[:, :heads].double().unsqueeze(2),
                                              keys.repeat_interleave(groups, 1), values.repeat_interleave(groups, 1),
                                              attn_mask=mask).reshape(rows, -1)
    assert out.shape == (rows, heads * head_dim) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    # torch's own fp32 SDPA is as far from float64 as the kernel is
    expected_fp32 = F.scaled_dot_product_attention(qkv_rot[:, :heads].unsqueeze(2),
                                                   keys.float().repeat_interleave(groups, 1),
                                                   values.float().repeat_interleave(groups, 1), attn_mask=mask)
    torch.testing.assert_close(out, expected_fp32.reshape(rows, -1), rtol=1e-5, atol=1e-5)


def test_decode_attention_over_a_subset_of_rows_is_the_full_calls_rows_and_writes_only_their_caches(kernels):
    torch.manual_seed(3)
    prompts, repeats, kv_heads, groups, head_dim, length, column = 2, 3, 2, 3, 16, 32, 7
    rows, heads = prompts * repeats, kv_heads * groups
    prompt = dict(prompt_keys_t=_blocked(torch.randn(prompts, kv_heads, length, head_dim)),
                  prompt_values=torch.randn(prompts, kv_heads, length, head_dim),
                  prompt_bias=torch.zeros(prompts, length))
    own_keys_t = _blocked(torch.randn(rows, kv_heads, length, head_dim))
    own_values = torch.randn(rows, kv_heads, length, head_dim)
    qkv_rot = torch.randn(rows, heads + 2 * kv_heads, head_dim)

    def call(qkv, rows_index=None):
        keys_t, values = own_keys_t.clone(), own_values.clone()
        out = kernels.decode_attention(qkv, own_keys_t=keys_t, own_values=values, own_bias=torch.zeros(rows, length),
                                       column=column, scale=head_dim ** -0.5, rows=rows_index, **prompt)
        return out, keys_t, values

    full, full_keys_t, full_values = call(qkv_rot)
    active = torch.tensor([0, 2, 5])  # rows of both prompts; rows 1, 3 and 4 have ended
    part, part_keys_t, part_values = call(qkv_rot[active].contiguous(), active)
    assert part.shape == (3, heads * head_dim)
    assert torch.equal(part, full[active])  # each row is computed on its own
    assert torch.equal(part_keys_t[active], full_keys_t[active])
    assert torch.equal(part_values[active], full_values[active])
    ended = torch.tensor([1, 3, 4])
    assert torch.equal(part_keys_t[ended], own_keys_t[ended]) and torch.equal(part_values[ended], own_values[ended])
    with pytest.raises(RuntimeError, match="rows: expected increasing indices in \\[0, 6\\), got 0 at 1"):
        call(qkv_rot[:2].contiguous(), torch.tensor([2, 0]))
    with pytest.raises(RuntimeError, match="rows: expected increasing indices in \\[0, 6\\), got 2 at 1"):
        call(qkv_rot[:2].contiguous(), torch.tensor([2, 2]))  # a row twice
    with pytest.raises(RuntimeError, match="rows: expected increasing indices in \\[0, 6\\), got 6 at 1"):
        call(qkv_rot[:2].contiguous(), torch.tensor([1, 6]))
    with pytest.raises(RuntimeError, match="rows: expected a contiguous \\(2\\) int64 CPU tensor"):
        call(qkv_rot[:2].contiguous(), torch.tensor([0, 1, 2]))
    with pytest.raises(RuntimeError, match="qkv_rot: expected 6 rows \\(the cache's\\), got 2"):
        call(qkv_rot[:2].contiguous())


def test_silu_mul_is_the_fp32_swiglu_product(kernels):
    torch.manual_seed(3)
    gate_up = torch.randn(6, 2 * 1003) * 4  # 1003: a tail after whole 8-lane chunks
    gate_up[0, :8] = torch.tensor([-100.0, -90.0, -30.0, -1e-3, 0.0, 1e-3, 30.0, 100.0])  # exp's clamped range
    gate_up[0, 1000:1003] = torch.tensor([-100.0, 0.0, 100.0])  # and in the tail
    gate, up = gate_up.chunk(2, -1)
    expected = F.silu(gate) * up
    out = kernels.silu_mul(gate_up)
    assert out.shape == (6, 1003) and out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)  # exp to ~1e-7 relative


@pytest.mark.parametrize("rows", [1, 5, 16])
@pytest.mark.parametrize("bias", [False, True])
def test_fp32_linears_is_the_concatenation_of_each_weights_linear(kernels, rows, bias):
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 45, generator=gen)  # 45: a tail after whole 8-lane chunks
    weights = [torch.randn(n, 45, generator=gen) for n in (7, 5, 13)]  # none a whole number of 3-row blocks
    biases = [torch.randn(n, generator=gen) for n in (7, 5, 13)] if bias else [None] * 3
    out = kernels.fp32_linears(x, weights, torch.cat(biases) if bias else None)
    expected = torch.cat([F.linear(x, w, b) for w, b in zip(weights, biases)], -1)
    assert out.shape == (rows, 25) and out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5 * 45 ** 0.5)
    exact = torch.cat([F.linear(x.double(), w.double(), b.double() if bias else None)
                       for w, b in zip(weights, biases)], -1)
    torch.testing.assert_close(out.double(), exact, rtol=1e-5, atol=1e-5 * 45 ** 0.5)
    # one weight: fp32_linear, the same sums
    assert torch.equal(kernels.fp32_linear(x, weights[1], biases[1]), out[:, 7:12])


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_sample_tokens_draws_what_sample_categorical_draws_for_the_same_uniforms(kernels, temperature, monkeypatch):
    torch.manual_seed(4)
    logits = torch.randn(32, 3001) * 3  # 3001: a tail after whole 8-lane chunks
    logits[0, 3000] = 40.0  # a draw that lands in the tail
    logits[1, 0] = 40.0  # and in the first chunk
    uniforms = torch.rand(32, 1, dtype=torch.float64)
    tokens, logprobs = kernels.sample_tokens(logits, temperature, uniforms)
    scores = logits / temperature
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: uniforms)  # sample_categorical's one draw
    expected_tokens = decode.sample_categorical(torch.softmax(scores, -1))
    monkeypatch.undo()
    assert tokens.dtype == torch.int64 and logprobs.dtype == torch.float32
    assert torch.equal(tokens, expected_tokens)
    assert tokens[0] == 3000 and tokens[1] == 0
    expected_lp = scores.gather(-1, tokens[:, None])[:, 0] - torch.logsumexp(scores, -1)
    torch.testing.assert_close(logprobs, expected_lp, atol=1e-5, rtol=0)


def _llama(tmp_path, head_dim=64):  # 3 query heads over 1 KV head
    torch.manual_seed(5)
    config = LlamaConfig(vocab_size=97, hidden_size=3 * head_dim, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=3, num_key_value_heads=1, max_position_embeddings=128,
                         initializer_range=0.2, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def _qwen2(tmp_path, hidden=32):  # 4 query heads over 2 KV heads, d = hidden / 4, q/k/v biases
    return AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / f"qwen2-{hidden}", hidden=hidden,
                                                                 init_std=0.2)).eval()


def _prefill(model, ids, mask):
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=pos,
                     past_key_values=DynamicCache(config=model.config), use_cache=True).past_key_values


@pytest.mark.parametrize("gemm", ["fp32_linear", "torch"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])  # d = 64 and G = 3; d = 8, G = 2 with q/k/v biases
def test_a_fused_fp32_step_is_transformers_fp32_step(tmp_path, kernels, family, gemm):
    model = _llama(tmp_path) if family == "llama" else _qwen2(tmp_path)
    fused = FusedDecoder(model, kernels, gemm=gemm)  # the model itself: nothing copied
    assert fused.dtype == torch.float32 and fused.model is model
    assert isinstance(fused.layers[0].qkv, _Fp32Projection)
    assert fused.layers[0].qkv.gemm == fused.lm_head.gemm == gemm
    ids = torch.tensor([[0, 0, 5, 9, 11, 3], [4, 8, 15, 16, 23, 7]])  # row 0 left-padded
    mask = (torch.arange(6) >= torch.tensor([[2], [0]])).long()
    steps, repeats = 6, 2
    with torch.no_grad():
        cache = decode.PreallocatedCache(_prefill(model, ids, mask), repeats, 6 + steps)
        state = fused.start(_prefill(model, ids, mask), mask, repeats, 6 + steps)
        assert state.prompt_keys[0].dtype == state.own_values[0].dtype == state.cos.dtype == torch.float32
        full_mask = torch.ones(4, 6 + steps, dtype=torch.long)
        full_mask[:, :6] = mask.repeat_interleave(repeats, 0)
        positions = mask.sum(-1).repeat_interleave(repeats, 0)
        tokens = torch.randint(1, 30, (4, steps), generator=torch.Generator().manual_seed(6))
        diffs = []
        for step in range(steps):
            ref = model(input_ids=tokens[:, step:step + 1], attention_mask=full_mask[:, :7 + step],
                        position_ids=positions[:, None], past_key_values=cache, use_cache=True).logits[:, -1]
            ours = fused.step(state, tokens[:, step], positions)
            assert ours.shape == (4, model.config.vocab_size) and ours.dtype == torch.float32
            diffs.append(float((ours - ref).abs().max()))
            positions = positions + 1
    assert max(diffs) < 1e-4, diffs
    assert state.length == steps


# F.linear's sums (MKL) are ordered by the row count: with gemm "torch" a row's logits are its all-rows logits only to
# fp32 rounding, with the kernel's GEMM bit for bit
@pytest.mark.parametrize("gemm", ["fp32_linear", "torch"])
def test_a_step_of_the_running_rows_gives_their_logits_of_a_step_of_all_rows(tmp_path, kernels, gemm):
    model = _llama(tmp_path)
    fused = FusedDecoder(model, kernels, gemm=gemm)
    ids = torch.tensor([[0, 3, 4, 5], [6, 7, 8, 9]])
    mask = (ids != 0).long()
    cache = _prefill(model, ids, mask)
    tokens, positions = torch.tensor([11, 12, 13, 14]), torch.tensor([3, 3, 4, 4])  # 2 prompts x 2 samples
    every, running = fused.start(cache, mask, 2, 8), fused.start(cache, mask, 2, 8)
    # rows end and never come back, as in a decode; later steps read earlier steps' keys/values from the own caches
    for active in (torch.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 3]), torch.tensor([1, 3]), torch.tensor([3])):
        all_logits = fused.step(every, tokens, positions)
        logits = fused.step(running, tokens[active], positions[active], active)
        assert logits.shape == (len(active), model.config.vocab_size)
        torch.testing.assert_close(logits, all_logits[active], atol=1e-4, rtol=0)
        assert gemm == "torch" or torch.equal(logits, all_logits[active])
        tokens, positions = tokens + 1, positions + 1
    assert running.length == every.length == 4


def test_the_fp32_step_reads_the_weights_as_they_change_with_nothing_to_refresh(tmp_path, kernels):
    model = _llama(tmp_path)
    fused = FusedDecoder(model, kernels, gemm="fp32_linear")
    ids, mask = torch.tensor([[3, 4, 5]]), torch.ones(1, 3, dtype=torch.long)
    cache = _prefill(model, ids, mask)  # before the change

    def one_step():
        return fused.step(fused.start(cache, mask, 1, 8), torch.tensor([6]), torch.tensor([3]))

    before = one_step()
    q_proj, gate = model.model.layers[0].self_attn.q_proj, model.model.layers[1].mlp.gate_proj
    with torch.no_grad():
        q_proj.weight.mul_(2.0)  # a bf16 step would keep its packed snapshot until refresh()
    changed = one_step()
    assert not torch.equal(changed, before)  # seen at once
    fused.refresh()  # a no-op in fp32
    assert torch.equal(one_step(), changed)
    with torch.no_grad():  # the step with the new weight is transformers' step with it
        expected = model(input_ids=torch.tensor([[6]]), attention_mask=torch.ones(1, 4, dtype=torch.long),
                         position_ids=torch.tensor([[3]]), past_key_values=decode.PreallocatedCache(cache, 1, 8),
                         use_cache=True).logits[:, -1]
    torch.testing.assert_close(changed, expected, atol=1e-4, rtol=0)
    with torch.no_grad():
        q_proj.weight.mul_(0.5)  # exactly back
        gate.weight.add_(0.1)  # another projection, read through the stacked gate/up call
    assert not torch.equal(one_step(), before)
    with torch.no_grad():
        gate.weight.sub_(0.1)
        model.model.norm.weight.mul_(-1.0)  # a norm's weight, read in place
    assert not torch.equal(one_step(), before)
    with torch.no_grad():
        model.model.norm.weight.mul_(-1.0)
    torch.testing.assert_close(one_step(), before, atol=1e-6, rtol=0)  # gate's +0.1 -0.1 may round


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_the_hf_engine_decodes_an_fp32_policy_through_the_fused_step_and_its_logprobs_match_a_forward(
        tmp_path, kernels, measured, family, monkeypatch):
    tok = build_tokenizer()
    model = _qwen2(tmp_path) if family == "qwen2" else _llama(tmp_path)
    engine = HFRolloutEngine(model, tok, [tok.eos_token_id], autocast_dtype=None)
    assert engine.fused is not None and engine.fused.dtype == torch.float32
    assert engine.fused.model is model and engine.generation_model is model  # the policy's own parameters
    assert engine.fp32_kernels is None  # the fused step replaces the linear-layer patch
    assert engine.fused.layers[0].qkv.gemm == "fp32_linear"  # as measured (faster here)
    steps = []
    step = engine.fused.step
    monkeypatch.setattr(engine.fused, "step", lambda *args: steps.append(1) or step(*args))
    prompts = [tok("12+3=?")["input_ids"], tok("7+1=?:")["input_ids"]]  # of two lengths: left padding
    torch.manual_seed(7)
    groups = engine.generate(prompts, 3, SamplingParams(temperature=0.8, max_new_tokens=8))
    assert len(steps) > 0
    for prompt, completions in zip(prompts, groups):
        for completion in completions:
            full = torch.tensor([prompt + completion.token_ids])
            with torch.no_grad():
                logits = model(input_ids=full).logits[0, len(prompt) - 1:-1] / 0.8
            expected = logits.log_softmax(-1).gather(-1, torch.tensor(completion.token_ids)[:, None])[:, 0]
            torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=1e-4, rtol=0)


def test_the_hf_engine_keeps_the_linear_layer_kernel_where_the_fused_step_does_not_run(tmp_path, kernels, measured):
    tok = build_tokenizer()
    narrow = _qwen2(tmp_path, hidden=16)  # head size 4
    engine = HFRolloutEngine(narrow, tok, [tok.eos_token_id], autocast_dtype=None)
    assert engine.fused is None and engine.fp32_kernels is kernels
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=4, n_positions=64)).eval()
    assert fused_decode_supported(gpt2)[1] == "model type 'gpt2' is not one of ('llama', 'mistral', 'qwen2')"
    assert HFRolloutEngine(gpt2, tok, [tok.eos_token_id], autocast_dtype=None).fused is None
    # autocast over the shared fp32 parameters (no copy): not the fp32 step
    autocast = HFRolloutEngine(_qwen2(tmp_path), tok, [tok.eos_token_id], autocast_dtype=BF16, generation_copy=False)
    assert autocast.fused is None


def test_support_of_fp32_models_is_decided_by_the_head_size_and_named(tmp_path, kernels, measured):
    assert fused_decode_supported(_llama(tmp_path)) == (True, "")
    assert fused_decode_supported(_qwen2(tmp_path)) == (True, "")  # d = 8
    narrow = _llama(tmp_path, head_dim=4)
    reason = "head size 4 is not a multiple of 8 (the fp32 attention kernel's vectors)"
    assert fused_decode_supported(narrow) == (False, reason)
    assert build_fused_decoder(narrow) is None
    with pytest.raises(ValueError, match="does not support this model: head size 4 is not a multiple of 8"):
        FusedDecoder(narrow, kernels)
    built = build_fused_decoder(_llama(tmp_path))  # the fp32 kernels for an fp32 model
    assert built is not None and built.kernels is kernels and built.dtype == torch.float32
    with pytest.raises(ValueError, match="gemm must be one of \\('fp32_linear', 'torch'\\) or None for "
                                         "torch.float32 parameters, got 'amx'"):
        FusedDecoder(_llama(tmp_path), kernels, gemm="amx")


def test_kernels_name_bad_input(kernels):
    with pytest.raises(RuntimeError, match="hidden: expected a contiguous 2-d fp32 CPU tensor, got BFloat16"):
        kernels.add_rms_norm(torch.zeros(2, 8, dtype=BF16), None, torch.zeros(8), 1e-5)
    with pytest.raises(RuntimeError, match="weight: expected a contiguous 1-d fp32 CPU tensor, got BFloat16"):
        kernels.add_rms_norm(torch.zeros(2, 8), None, torch.zeros(8, dtype=BF16), 1e-5)
    with pytest.raises(RuntimeError, match="delta: expected shape \\[2, 8\\], got \\[2, 7\\]"):
        kernels.add_rms_norm(torch.zeros(2, 8), torch.zeros(2, 7), torch.zeros(8), 1e-5)
    with pytest.raises(RuntimeError, match="hidden: expected a non-empty hidden size"):
        kernels.add_rms_norm(torch.zeros(2, 0), None, torch.zeros(0), 1e-5)
    with pytest.raises(RuntimeError, match="qkv: expected a contiguous 2-d fp32 CPU tensor, got BFloat16"):
        kernels.rope(torch.zeros(1, 32, dtype=BF16), torch.zeros(4, 8), torch.zeros(4, 8), torch.tensor([0]), 2, 1)
    with pytest.raises(RuntimeError, match="position 9 outside the RoPE table of 4"):
        kernels.rope(torch.zeros(1, 4 * 8), torch.zeros(4, 8), torch.zeros(4, 8), torch.tensor([9]), 2, 1)
    with pytest.raises(RuntimeError, match="gate_up: expected a contiguous 2-d fp32 CPU tensor, got BFloat16"):
        kernels.silu_mul(torch.zeros(2, 16, dtype=BF16))
    with pytest.raises(RuntimeError, match="weight: expected a contiguous 2-d fp32 CPU tensor, got BFloat16"):
        kernels.fp32_linears(torch.zeros(2, 8), [torch.zeros(3, 8), torch.zeros(3, 8, dtype=BF16)], None)
    with pytest.raises(RuntimeError, match="weight: expected 8 input features \\(x's\\), got 5"):
        kernels.fp32_linears(torch.zeros(2, 8), [torch.zeros(3, 8), torch.zeros(3, 5)], None)
    with pytest.raises(RuntimeError, match="bias: expected 6 entries, got 3"):
        kernels.fp32_linears(torch.zeros(2, 8), [torch.zeros(3, 8), torch.zeros(3, 8)], torch.zeros(3))
    with pytest.raises(RuntimeError, match="weights: expected at least one"):
        kernels.fp32_linears(torch.zeros(2, 8), [], None)
    with pytest.raises(RuntimeError, match="logits: expected a contiguous 2-d fp32 CPU tensor, got BFloat16"):
        kernels.sample_tokens(torch.zeros(1, 8, dtype=BF16), 1.0, torch.zeros(1, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="uniforms: expected 1 contiguous float64 CPU values, got 2"):
        kernels.sample_tokens(torch.zeros(1, 8), 1.0, torch.zeros(2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="temperature must be > 0"):
        kernels.sample_tokens(torch.zeros(1, 8), 0.0, torch.zeros(1, dtype=torch.float64))

    def cache(head_dim, dtype=torch.float32):
        return dict(prompt_keys_t=torch.zeros(1, 1, 1, head_dim, 16, dtype=dtype),
                    prompt_values=torch.zeros(1, 1, 16, head_dim, dtype=dtype), prompt_bias=torch.zeros(1, 16),
                    own_keys_t=torch.zeros(2, 1, 2, head_dim, 16, dtype=dtype),
                    own_values=torch.zeros(2, 1, 32, head_dim, dtype=dtype), own_bias=torch.zeros(2, 32))

    with pytest.raises(RuntimeError, match="qkv_rot: expected a contiguous 3-d fp32 CPU tensor, got BFloat16"):
        kernels.decode_attention(torch.zeros(2, 4, 8, dtype=BF16), column=0, scale=1.0, **cache(8, BF16))
    with pytest.raises(RuntimeError, match="own keys: expected a contiguous 5-d fp32 CPU tensor, got BFloat16"):
        kernels.decode_attention(torch.zeros(2, 4, 8), column=0, scale=1.0, **cache(8, BF16))
    with pytest.raises(RuntimeError, match="head size must be a multiple of 8, got 4"):
        kernels.decode_attention(torch.zeros(2, 4, 4), column=0, scale=1.0, **cache(4))
    with pytest.raises(RuntimeError, match="column 32 outside the cache capacity 32"):
        kernels.decode_attention(torch.zeros(2, 4, 8), column=32, scale=1.0, **cache(8))
    with pytest.raises(RuntimeError, match="at most 8 query heads per KV head, got 9"):
        kernels.decode_attention(torch.zeros(2, 11, 8), column=0, scale=1.0, **cache(8))
    with pytest.raises(RuntimeError, match=r"own bias: expected a contiguous \(2, 32\) fp32 CPU tensor, got Float of shape \[2, 31\]"):
        kernels.decode_attention(torch.zeros(2, 4, 8), column=0, scale=1.0,
                                 **{**cache(8), "own_bias": torch.zeros(2, 31)})
    with pytest.raises(RuntimeError, match="rows: expected increasing indices in \\[0, 2\\), got 0 at 1"):
        kernels.decode_attention(torch.zeros(2, 4, 8), column=0, scale=1.0, rows=torch.tensor([1, 0]), **cache(8))
