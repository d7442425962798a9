"""The fused bf16 decode step (rlvr/kernels/fused_decode.py, decode_kernels.cpp): each kernel against the torch ops
it replaces (bit for bit where the same roundings happen in the same order), the whole step against transformers'
bf16 forward (as close to the fp32 model as that forward is), weight refresh, the sampler's draws, the support test,
and bad input named. Needs a CPU with native bf16 and AVX-512 (the kernels' build); elsewhere it is skipped and the
hf engine keeps transformers' modules."""

import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from rlvr.kernels import fused_decode
from rlvr.kernels.build import amx_supported, decode_kernels, kernels_supported
from rlvr.kernels.fused_decode import FusedDecoder, TileLinear, build_fused_decoder, fused_decode_supported, pack_amx
from rlvr.kernels.machine import cpu_native_bf16
from rlvr.rollout import decode
from rlvr.rollout.hf import _low_precision_copy
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
def test_rope_rotates_queries_and_keys_like_transformers_and_copies_values(kernels, head_dim):
    torch.manual_seed(1)
    rows, heads, kv_heads = 3, 4, 2
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * head_dim).to(BF16)
    angles = torch.rand(40, head_dim // 2) * 6.0
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(BF16)  # the (positions, d) tables transformers builds
    sin = torch.cat([angles.sin(), angles.sin()], -1).to(BF16)
    positions = torch.tensor([5, 39, 0])
    out = kernels.rope(qkv, cos, sin, positions, heads, kv_heads)
    q, k, v = qkv.view(rows, heads + 2 * kv_heads, head_dim).split([heads, kv_heads, kv_heads], 1)
    expected_q, expected_k = apply_rotary_pos_emb(q.unsqueeze(2), k.unsqueeze(2), cos[positions].unsqueeze(1),
                                                  sin[positions].unsqueeze(1))
    assert out.shape == (rows, heads + 2 * kv_heads, head_dim)
    assert torch.equal(out[:, :heads], expected_q.squeeze(2))  # the same bf16 roundings in the same order
    assert torch.equal(out[:, heads:heads + kv_heads], expected_k.squeeze(2))
    assert torch.equal(out[:, heads + kv_heads:], v)


def _blocked(keys: torch.Tensor) -> torch.Tensor:  # (N, H_kv, C, d) -> (N, H_kv, C / 16, d, 16)
    n, h, c, d = keys.shape
    return keys.view(n, h, c // 16, 16, d).transpose(3, 4).contiguous()


@pytest.mark.parametrize("groups,head_dim,column", [(3, 64, 20), (2, 8, 0), (1, 16, 15)])
def test_decode_attention_writes_the_new_token_and_is_grouped_sdpa_over_prompt_and_own_positions(
        kernels, groups, head_dim, column):
    torch.manual_seed(2)
    prompts, repeats, kv_heads, prompt_len, own_len = 2, 3, 2, 32, 32
    rows, heads = prompts * repeats, kv_heads * groups
    prompt_keys = torch.randn(prompts, kv_heads, prompt_len, head_dim).to(BF16)
    prompt_values = torch.randn(prompts, kv_heads, prompt_len, head_dim).to(BF16)
    prompt_bias = torch.zeros(prompts, prompt_len)
    prompt_bias[0, :3] = float("-inf")  # left padding of prompt 0
    prompt_bias[:, 29:] = float("-inf")  # the round-up to 16 positions
    own_keys = torch.randn(rows, kv_heads, own_len, head_dim).to(BF16)
    own_values = torch.randn(rows, kv_heads, own_len, head_dim).to(BF16)
    own_keys_t, own_values_buf = _blocked(own_keys), own_values.clone()
    qkv_rot = torch.randn(rows, heads + 2 * kv_heads, head_dim).to(BF16)
    out = kernels.decode_attention(qkv_rot, _blocked(prompt_keys), prompt_values, prompt_bias, own_keys_t,
                                   own_values_buf, torch.zeros(rows, own_len), column, head_dim ** -0.5)
    new_k, new_v = qkv_rot[:, heads:heads + kv_heads], qkv_rot[:, heads + kv_heads:]
    own_keys[:, :, column], own_values[:, :, column] = new_k, new_v  # what the kernel writes first
    assert torch.equal(own_keys_t, _blocked(own_keys)) and torch.equal(own_values_buf, own_values)
    # the fp32 reference: each row's prompt (repeated) then its own first column + 1 positions
    keys = torch.cat([prompt_keys.repeat_interleave(repeats, 0), own_keys[:, :, :column + 1]], 2).float()
    values = torch.cat([prompt_values.repeat_interleave(repeats, 0), own_values[:, :, :column + 1]], 2).float()
    mask = torch.cat([torch.isfinite(prompt_bias).repeat_interleave(repeats, 0),
                      torch.ones(rows, column + 1, dtype=torch.bool)], 1).view(rows, 1, 1, -1)
    expected = F.scaled_dot_product_attention(qkv_rot[:, :heads].float().unsqueeze(2),
                                              keys.repeat_interleave(groups, 1), values.repeat_interleave(groups, 1),
                                              attn_mask=mask)
    assert out.shape == (rows, heads * head_dim)
    torch.testing.assert_close(out.float(), expected.reshape(rows, -1), atol=8e-3, rtol=8e-3)  # bf16 output


def test_decode_attention_over_a_subset_of_rows_is_the_full_calls_rows_and_writes_only_their_caches(kernels):
    torch.manual_seed(3)
    prompts, repeats, kv_heads, groups, head_dim, length, column = 2, 3, 2, 3, 16, 32, 7
    rows, heads = prompts * repeats, kv_heads * groups
    prompt = dict(prompt_keys_t=_blocked(torch.randn(prompts, kv_heads, length, head_dim).to(BF16)),
                  prompt_values=torch.randn(prompts, kv_heads, length, head_dim).to(BF16),
                  prompt_bias=torch.zeros(prompts, length))
    own_keys_t = _blocked(torch.randn(rows, kv_heads, length, head_dim).to(BF16))
    own_values = torch.randn(rows, kv_heads, length, head_dim).to(BF16)
    qkv_rot = torch.randn(rows, heads + 2 * kv_heads, head_dim).to(BF16)

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
    with pytest.raises(RuntimeError, match="rows: expected increasing indices in \\[0, 6\\), got 6 at 1"):
        call(qkv_rot[:2].contiguous(), torch.tensor([1, 6]))
    with pytest.raises(RuntimeError, match="rows: expected a contiguous \\(2\\) int64 CPU tensor"):
        call(qkv_rot[:2].contiguous(), torch.tensor([0, 1, 2]))
    with pytest.raises(RuntimeError, match="qkv_rot: expected 6 rows \\(the cache's\\), got 2"):
        call(qkv_rot[:2].contiguous())


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


def test_drawing_from_the_running_rows_only_gives_them_the_draws_of_every_row_drawn(kernels):
    """The decode loop hands the sampler only the rows still running: each draws with its own uniform, as when every
    row's logits are given; the rows not given get token 0 and log-prob 0."""
    decoder = SimpleNamespace(kernels=kernels)  # sample_tokens reads only the kernels
    torch.manual_seed(5)
    logits = (torch.randn(8, 3001) * 3).to(BF16)
    running = torch.tensor([1, 4, 5])
    torch.manual_seed(6)
    every_token, every_lp = FusedDecoder.sample_tokens(decoder, logits, 1.0)
    torch.manual_seed(6)
    tokens, lp = FusedDecoder.sample_tokens(decoder, logits[running], 1.0, rows=running, total=8)
    assert torch.equal(tokens[running], every_token[running]) and torch.equal(lp[running], every_lp[running])
    after = torch.rand(1)
    ended = torch.tensor([0, 2, 3, 6, 7])
    assert not tokens[ended].any() and not lp[ended].any()
    torch.manual_seed(6)
    torch.rand(8, 1, dtype=torch.float64)
    assert torch.equal(after, torch.rand(1))  # a uniform was drawn for every row: the later draws are unchanged


@pytest.mark.skipif(not amx_supported(), reason="needs AMX tiles")
@pytest.mark.parametrize("rows,out_features,bias", [(16, 960, False), (5, 80, True), (20, 64, False), (1, 200, True)])
def test_amx_linear_is_onednns_bf16_linear(kernels, rows, out_features, bias):
    torch.manual_seed(8)
    weight = (torch.randn(out_features, 576) * 0.05).to(BF16)
    b = torch.randn(out_features).to(BF16) if bias else None
    x = torch.randn(rows, 576).to(BF16)
    out = kernels.amx_linear(x, pack_amx([weight], kernels), b, out_features)
    expected = torch.ops.mkldnn._linear_pointwise(x, torch.ops.mkldnn._reorder_linear_weight(weight, 16), b, "none",
                                                  [], "")
    assert out.shape == (rows, out_features)
    if rows == 16 and not bias:
        assert torch.equal(out, expected)  # oneDNN's AMX kernel: the same tile products in the same order
    assert _ulps(out, expected).max() <= 1.0  # other row counts and the bias may round once differently
    torch.testing.assert_close(out.float(), x.float() @ weight.float().T + (b.float() if bias else 0), atol=0.05,
                               rtol=0.02)


@pytest.mark.parametrize("gemm", ["amx", "dot"])
def test_the_prefill_linears_read_their_slice_of_the_stacked_tile_pack(tmp_path, kernels, gemm):
    if gemm == "amx" and not amx_supported():
        pytest.skip("needs AMX tiles")
    gen = _low_precision_copy(_llama(tmp_path), BF16)  # q 192, k/v 64 wide: whole groups of 64 columns
    fused = FusedDecoder(gen, kernels, gemm=gemm)
    attn = gen.model.layers[1].self_attn
    assert all(isinstance(m, TileLinear) for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj))
    assert attn.k_proj.tile_groups == (3, 4) and attn.v_proj.tile_projection is fused.layers[1].qkv
    x = torch.randn(2, 57, 192).to(BF16)  # a prefill's (U, P, D) input
    with torch.no_grad():
        for module in (attn.q_proj, attn.k_proj, attn.v_proj):
            expected = F.linear(x, module.weight, module.bias)
            out = module(x)
            assert out.shape == expected.shape
            assert _ulps(out, expected).max() <= 1.0
    with torch.no_grad():
        attn.k_proj.weight.mul_(-1.0)
    fused.refresh()  # the slices follow the new pack
    with torch.no_grad():
        assert _ulps(attn.k_proj(x), F.linear(x, attn.k_proj.weight)).max() <= 1.0


def _reference_layout(weight: torch.Tensor) -> torch.Tensor:
    """pack_amx's layout by torch ops: rows padded to 64 with zeros, then permuted."""
    n, k = weight.shape
    padded = weight.new_zeros((-(-n // 64) * 64, k))
    padded[:n] = weight
    return padded.view(-1, 4, 16, k // 32, 16, 2).permute(0, 3, 1, 4, 2, 5).reshape(-1, k // 32, 4, 16, 32)


def test_pack_amx_layout_and_its_limit(kernels):
    weight = torch.arange(70 * 64, dtype=torch.float32).view(70, 64).to(BF16)
    packed = pack_amx([weight], kernels)
    assert packed.shape == (2, 2, 4, 16, 32)  # 70 columns -> 2 groups of 64 (zero rows after 70)
    g, c, t, pair, j, e = 1, 1, 0, 3, 5, 1  # element [g, c, t, p, 2 j + e] = weight[64 g + 16 t + j, 32 c + 2 p + e]
    assert packed[g, c, t, pair, 2 * j + e] == weight[64 * g + 16 * t + j, 32 * c + 2 * pair + e]
    assert packed[1, :, 0, :, 12:].abs().sum() == 0  # row 64 + 6 = 70 and beyond: padding
    with pytest.raises(ValueError, match="multiples of 32, got 40"):
        pack_amx([torch.zeros(16, 40, dtype=BF16)], kernels)


@pytest.mark.parametrize("rows", [(128, 64), (70, 20)])  # aligned (written in place), and stacked + zero-padded
def test_the_amx_pack_kernel_writes_pack_amx_layout(kernels, rows):
    torch.manual_seed(9)
    weights = [torch.randn(n, 96).to(BF16) for n in rows]
    assert torch.equal(pack_amx(weights, kernels), _reference_layout(torch.cat(weights)))


def test_kernels_name_bad_input(kernels):
    with pytest.raises(RuntimeError, match="hidden: expected a contiguous 2-d bf16"):
        kernels.add_rms_norm(torch.zeros(2, 8), None, torch.zeros(8, dtype=BF16), 1e-5)
    with pytest.raises(RuntimeError, match="position 9 outside the RoPE table of 4"):
        kernels.rope(torch.zeros(1, 4 * 8, dtype=BF16), torch.zeros(4, 8, dtype=BF16), torch.zeros(4, 8, dtype=BF16),
                     torch.tensor([9]), 2, 1)
    cache = dict(prompt_keys_t=torch.zeros(1, 1, 1, 8, 16, dtype=BF16), prompt_values=torch.zeros(1, 1, 16, 8,
                                                                                                    dtype=BF16),
                 prompt_bias=torch.zeros(1, 16), own_keys_t=torch.zeros(2, 1, 2, 8, 16, dtype=BF16),
                 own_values=torch.zeros(2, 1, 32, 8, dtype=BF16), own_bias=torch.zeros(2, 32))
    with pytest.raises(RuntimeError, match="column 32 outside the cache capacity 32"):
        kernels.decode_attention(torch.zeros(2, 4, 8, dtype=BF16), column=32, scale=1.0, **cache)
    bad_bias = "own bias: expected a contiguous \\(2, 32\\) fp32 CPU tensor, got Float of shape \\[2, 31\\]"
    with pytest.raises(RuntimeError, match=bad_bias):
        kernels.decode_attention(torch.zeros(2, 4, 8, dtype=BF16), column=0, scale=1.0,
                                 **{**cache, "own_bias": torch.zeros(2, 31)})
    with pytest.raises(RuntimeError, match="hidden: expected a non-empty hidden size"):
        kernels.add_rms_norm(torch.zeros(2, 0, dtype=BF16), None, torch.zeros(0, dtype=BF16), 1e-5)
    with pytest.raises(RuntimeError, match="uniforms: expected 1 contiguous float64 CPU values, got 2"):
        kernels.sample_tokens(torch.zeros(1, 8, dtype=BF16), 1.0, torch.zeros(2, dtype=torch.float64))
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


@pytest.mark.parametrize("rows,out_features,bias", [(16, 960, False), (5, 80, True), (20, 64, False), (1, 200, True)])
def test_dot_linear_is_the_bf16_linear_over_the_amx_pack(kernels, rows, out_features, bias):
    torch.manual_seed(8)
    weight = (torch.randn(out_features, 576) * 0.05).to(BF16)
    b = torch.randn(out_features).to(BF16) if bias else None
    x = torch.randn(rows, 576).to(BF16)
    out = kernels.dot_linear(x, pack_amx([weight], kernels), b, out_features)
    assert out.shape == (rows, out_features) and out.dtype == BF16
    # fp32 sums of exact bf16 products in another order than oneDNN's: the same bf16 result up to one rounding
    exact = x.double() @ weight.double().T + (b.double() if bias else 0)
    expected = torch.ops.mkldnn._linear_pointwise(x, torch.ops.mkldnn._reorder_linear_weight(weight, 16), b, "none",
                                                  [], "")
    assert (out.double() - exact).abs().max() <= (expected.double() - exact).abs().max() * 1.01 + 1e-6
    assert _ulps(out, expected).max() <= 1.0
    with pytest.raises(RuntimeError, match="does not fit"):
        kernels.dot_linear(x, pack_amx([weight], kernels), None, out_features + 64)


@pytest.mark.parametrize("rows,out_features", [(16, 576), (13, 960), (7, 960), (3, 576)])
def test_dot_linear_on_several_threads_is_the_same_bits_as_on_one(kernels, rows, out_features):
    """The threads share (group, row block) tasks, so a group can be split between two; each row's sums stay in one
    order, so the result may not depend on the thread count."""
    torch.manual_seed(9)
    weight = (torch.randn(out_features, 576) * 0.05).to(BF16)
    x = torch.randn(rows, 576).to(BF16)
    packed = pack_amx([weight], kernels)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernels.dot_linear(x, packed, None, out_features)
        torch.set_num_threads(2)
        two = kernels.dot_linear(x, packed, None, out_features)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    assert _ulps(one, x.float().matmul(weight.float().T).to(BF16)).max() <= 1.0


@pytest.mark.parametrize("rows,next_in,next_out", [(16, 576, 960), (3, 1536, 576), (1, 576, 64)])
def test_dot_linear_given_the_next_gemms_weights_is_the_same_bits(kernels, rows, next_in, next_out):
    """The next GEMM's pack is only prefetched: of any shape, on one thread or two, the output is the same bits."""
    torch.manual_seed(10)
    weight = (torch.randn(576, 576) * 0.05).to(BF16)
    x = torch.randn(rows, 576).to(BF16)
    packed = pack_amx([weight], kernels)
    following = pack_amx([(torch.randn(next_out, next_in) * 0.05).to(BF16)], kernels)
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            alone = kernels.dot_linear(x, packed, None, 576)
            assert torch.equal(kernels.dot_linear(x, packed, None, 576, following), alone)
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(RuntimeError, match="next_packed"):
        kernels.dot_linear(x, packed, None, 576, following.float())


@pytest.mark.parametrize("dot_s,onednn_s,chosen", [(1e-4, 2e-4, "dot"), (3e-4, 2e-4, "onednn")])
def test_without_amx_the_decode_gemm_is_the_faster_one_measured_once_per_machine(tmp_path, kernels, monkeypatch,
                                                                                 capsys, dot_s, onednn_s, chosen):
    measured = []

    def timings(kernels, out_features, in_features):
        measured.append((out_features, in_features))
        return {"dot": dot_s, "onednn": onednn_s}

    monkeypatch.setattr(fused_decode, "decode_gemm_timings", timings)
    monkeypatch.setattr(fused_decode, "amx_supported", lambda: False)
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))
    model = _llama(tmp_path)
    shape = (2 * model.config.intermediate_size, model.config.hidden_size)

    def decoders_in_new_processes(processes: int) -> FusedDecoder:
        for _ in range(processes):
            fused_decode.measured_decode_gemm.cache_clear()  # what a new process starts with
            for _ in range(2):
                fused = FusedDecoder(_low_precision_copy(model, BF16), kernels)
        fused_decode.measured_decode_gemm.cache_clear()
        return fused

    fused = decoders_in_new_processes(2)
    assert measured == [shape]  # the second process read the first one's measurement
    assert fused.layers[0].gate_up.gemm == fused.lm_head.gemm == chosen
    err = capsys.readouterr().err
    assert f"using {'dot_linear' if chosen == 'dot' else 'oneDNN'}" in err
    assert "measured, saved to" in err and "cached:" in err
    (cache_file,) = (tmp_path / "cache").glob("decode-gemm-*.json")
    assert json.loads(cache_file.read_text())["seconds"] == {"dot": dot_s, "onednn": onednn_s}
    cache_file.write_text("{not json")  # a corrupt file is measured again and rewritten
    decoders_in_new_processes(1)
    assert measured == [shape, shape] and json.loads(cache_file.read_text())["key"]["shape"] == list(shape)
    with pytest.raises(ValueError, match="gemm must be one of"):
        FusedDecoder(_low_precision_copy(model, BF16), kernels, gemm="avx2")


def test_decode_gemm_timings_times_both_kernels(kernels):
    seconds = fused_decode.decode_gemm_timings(kernels, 128, 64, reps=2)
    assert set(seconds) == {"dot", "onednn"} and all(0 < s < 1 for s in seconds.values())


def _kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    p = p_logits.float().log_softmax(-1)
    return float((p.exp() * (p - q_logits.float().log_softmax(-1))).sum(-1).mean())


@pytest.mark.parametrize("gemm", ["amx", "dot", "onednn"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])  # d = 64 (vector paths); d = 8 with q/k/v biases
def test_a_fused_step_is_as_close_to_the_fp32_model_as_transformers_bf16_step(tmp_path, kernels, family, gemm):
    if gemm == "amx" and not amx_supported():
        pytest.skip("needs AMX tiles")
    model = _llama(tmp_path) if family == "llama" else _qwen2(tmp_path)
    hf_bf16 = _low_precision_copy(model, BF16)
    fused = FusedDecoder(_low_precision_copy(model, BF16), kernels, gemm=gemm)
    assert fused.layers[0].qkv.gemm == fused.lm_head.gemm == (gemm if model.config.hidden_size % 32 == 0 else "onednn")
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
    assert state.length == steps


def test_refresh_follows_a_weight_change(tmp_path, kernels):
    model = _llama(tmp_path)
    gen = _low_precision_copy(model, BF16)
    fused = FusedDecoder(gen, kernels, gemm="dot")
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
    packs = [p.packed for layer in fused.layers for p in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    fused.refresh()
    assert not torch.equal(one_step(), before)
    qkv = fused.layers[0].qkv
    assert qkv.packed is packs[0]  # re-packed in place, in the arena
    assert torch.equal(qkv.packed, pack_amx([lin.weight for lin in qkv.linears], kernels))


def test_the_packs_lie_in_one_2mb_aligned_block_in_the_order_a_step_reads_them(tmp_path, kernels):
    fused = FusedDecoder(_low_precision_copy(_llama(tmp_path), BF16), kernels, gemm="dot")
    packs = [p.packed for layer in fused.layers for p in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    packs.append(fused.lm_head.packed)
    assert packs[0].data_ptr() % (2 << 20) == 0
    for pack, following in zip(packs, packs[1:]):  # each slice right after the last (sizes are whole 64-byte lines)
        assert following.data_ptr() == pack.data_ptr() + pack.numel() * pack.element_size()


def test_pack_amx_into_a_given_tensor_checks_its_shape(kernels):
    weights = [torch.randn(70, 64).to(BF16), torch.randn(20, 64).to(BF16)]  # stacked, then padded to 128 rows
    out = torch.zeros(2, 2, 4, 16, 32, dtype=BF16)
    assert pack_amx(weights, kernels, out=out) is out
    assert torch.equal(out, _reference_layout(torch.cat(weights)))
    with pytest.raises(ValueError, match=r"out: expected a torch.bfloat16 tensor of shape \(2, 2, 4, 16, 32\), got "
                                         r"torch.bfloat16 \(1, 2, 4, 16, 32\)"):
        pack_amx(weights, kernels, out=torch.zeros(1, 2, 4, 16, 32, dtype=BF16))


def test_a_step_of_the_running_rows_gives_their_logits_of_a_step_of_all_rows(tmp_path, kernels):
    model = _llama(tmp_path)
    gen = _low_precision_copy(model, BF16)
    fused = FusedDecoder(gen, kernels)
    ids = torch.tensor([[0, 3, 4, 5], [6, 7, 8, 9]])
    mask = (ids != 0).long()
    with torch.no_grad():
        cache = gen(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                    past_key_values=DynamicCache(config=gen.config), use_cache=True).past_key_values
    tokens, positions = torch.tensor([11, 12, 13, 14]), torch.tensor([3, 3, 4, 4])  # 2 prompts x 2 samples
    every, running = fused.start(cache, mask, 2, 8), fused.start(cache, mask, 2, 8)
    for _ in range(2):  # the second step reads the first one's keys/values from the rows' own caches
        all_logits = fused.step(every, tokens, positions)
        active = torch.tensor([1, 2])
        logits = fused.step(running, tokens[active], positions[active], active)
        assert logits.shape == (2, model.config.vocab_size)
        assert torch.equal(logits, all_logits[active])
        tokens, positions = tokens + 1, positions + 1
    assert running.length == every.length == 2


@pytest.mark.parametrize("gemm", ["amx", "dot"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])  # d = 64; d = 8 with q/k/v biases
def test_a_step_in_one_kernel_call_is_the_python_loop_of_kernel_calls_bit_for_bit(tmp_path, kernels, family, gemm):
    if gemm == "amx" and not amx_supported():
        pytest.skip("needs AMX tiles")
    model = _llama(tmp_path) if family == "llama" else _qwen2(tmp_path)
    fused = FusedDecoder(_low_precision_copy(model, BF16), kernels, gemm=gemm)
    assert fused.one_call
    ids = torch.tensor([[0, 0, 5, 9, 11, 3], [4, 8, 15, 16, 23, 7]])  # row 0 left-padded
    mask = (ids != 0).long()
    with torch.no_grad():
        cache = fused.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                            past_key_values=DynamicCache(config=model.config), use_cache=True).past_key_values
    states = {True: fused.start(cache, mask, 2, 12), False: fused.start(cache, mask, 2, 12)}
    tokens, positions = torch.tensor([11, 12, 13, 14]), torch.tensor([4, 4, 6, 6])
    for step in range(3):
        rows = torch.tensor([0, 2, 3]) if step == 2 else None  # the last step: row 1 has ended
        logits = {}
        for one_call, state in states.items():
            fused.one_call = one_call
            logits[one_call] = (fused.step(state, tokens, positions) if rows is None
                                else fused.step(state, tokens[rows], positions[rows], rows))
        assert torch.equal(logits[True], logits[False])
        tokens, positions = tokens + 1, positions + 1
    for name in ("own_keys", "own_values"):
        for ours, theirs in zip(getattr(states[True], name), getattr(states[False], name), strict=True):
            assert torch.equal(ours, theirs)
    assert not FusedDecoder(_low_precision_copy(model, BF16), kernels, gemm="onednn").one_call


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
    assert fused_decode_supported(model) == (True, "")  # fp32 parameters: the AVX2 kernels
    model.half()
    assert fused_decode_supported(model) == (False, "parameters neither fp32 nor bf16 on a CPU with native bf16")
    gen = _low_precision_copy(model, BF16)
    assert fused_decode_supported(gen) == (True, "")
    gen.config.hidden_act = "gelu"
    ok, reason = fused_decode_supported(gen)
    assert not ok and "gelu" in reason
    gen.config.hidden_act = "silu"
    gen.config.model_type = "gemma"
    assert fused_decode_supported(gen) == (False, "model type 'gemma' is not one of ('llama', 'mistral', 'qwen2')")
    assert build_fused_decoder(gen) is None
    gen.config.model_type = "llama"
    gen.config.num_attention_heads, gen.config.num_key_value_heads = 16, 1  # multi-query: 16 heads a KV head
    ok, reason = fused_decode_supported(gen)
    assert not ok and "16 query heads over 1 KV heads" in reason
    with pytest.raises(ValueError, match="does not support this model: 16 query heads over 1 KV heads"):
        FusedDecoder(gen, object())
