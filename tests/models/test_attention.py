"""rlvr's grouped-query attention: the training path (several queries, gradients, CPU) equals transformers' repeat_kv +
SDPA in values and gradients, with left padding, and a fully masked query row gives no NaN."""

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from rlvr.models.attention import GQA_ATTENTION, grouped_query_attention, use_grouped_query_attention


class _Attn(torch.nn.Module):  # what sdpa_attention_forward reads from an attention module
    num_key_value_groups = 3
    is_causal = True


def _inputs(dtype=torch.bfloat16):
    torch.manual_seed(0)
    r, kv_heads, groups, q, length, d = 3, 2, 3, 4, 6, 8
    query = torch.randn(r, kv_heads * groups, q, d, dtype=dtype, requires_grad=True)
    key = torch.randn(r, kv_heads, length, d, dtype=dtype, requires_grad=True)
    value = torch.randn(r, kv_heads, length, d, dtype=dtype, requires_grad=True)
    # causal over a 2-token cache + 4 queries; row 1 has 3 left-padding columns, so its first query sees nothing
    mask = torch.ones(q, length, dtype=torch.bool).tril(length - q).expand(r, 1, q, length).clone()
    mask[1, :, :, :3] = False
    return query, key, value, mask


def test_training_path_equals_repeat_kv_sdpa_values_and_gradients():
    query, key, value, mask = _inputs()  # bf16, as under autocast
    weights = torch.randn(3, 4, 6, 8, dtype=torch.bfloat16)
    out, _ = grouped_query_attention(_Attn(), query, key, value, mask, scaling=0.3)
    assert out.shape == (3, 4, 6, 8) and not out.isnan().any()
    valid = mask.any(-1).squeeze(1)  # (R, Q) queries that see at least one key
    (out * weights * valid[..., None, None]).sum().backward()
    ours = [t.grad.clone() for t in (query, key, value)]
    for t in (query, key, value):
        t.grad = None
    ref, _ = sdpa_attention_forward(_Attn(), query, key, value, mask, scaling=0.3)
    (ref.nan_to_num() * weights * valid[..., None, None]).sum().backward()
    bf16 = dict(atol=2e-2, rtol=2e-2)  # a few bf16 roundings (2^-8 relative each) apart
    torch.testing.assert_close(out[valid].float(), ref[valid].float(), **bf16)
    for got, t in zip(ours, (query, key, value)):
        torch.testing.assert_close(got.float(), t.grad.float(), **bf16)
    # by hand: row 0, query 0 (causal: keys 0..2), head 5 (KV head 1)
    qf, kf, vf = query.float(), key.float(), value.float()
    w = torch.softmax(qf[0, 5, 0] @ kf[0, 1, :3].T * 0.3, -1)
    torch.testing.assert_close(out[0, 0, 5].float(), w @ vf[0, 1, :3], **bf16)


def test_fp32_queries_under_cpu_autocast_take_the_bf16_training_path(monkeypatch):
    """The trainer's case: autocast over fp32 weights, where RoPE's fp32 cos/sin hand over fp32 queries and keys.
    They are cast to bf16 and go through the matmul path (not SDPA), giving the bf16 inputs' output exactly, with
    fp32 gradients back to the fp32 inputs."""
    import rlvr.models.attention as attention

    bf16_inputs = _inputs()
    expected, _ = grouped_query_attention(_Attn(), *bf16_inputs, scaling=0.3)
    query, key, value = (t.detach().float().requires_grad_() for t in bf16_inputs[:3])
    mask = bf16_inputs[3]

    def no_sdpa(*args, **kwargs):
        raise AssertionError("SDPA was called: the fp32 queries under autocast missed the training path")

    monkeypatch.setattr(attention, "sdpa_attention_forward", no_sdpa)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = grouped_query_attention(_Attn(), query, key, value, mask, scaling=0.3)
    assert out.dtype == torch.bfloat16 and torch.equal(out, expected)
    out.float().sum().backward()
    assert query.grad.dtype == torch.float32 and query.grad.abs().sum() > 0
    # outside autocast, fp32 stays on SDPA (fp32 runs keep their exact numerics)
    with pytest.raises(AssertionError, match="SDPA was called"):
        grouped_query_attention(_Attn(), query, key, value, mask, scaling=0.3)


def test_fp32_training_keeps_transformers_sdpa_exactly():
    query, key, value, mask = _inputs(torch.float32)
    out, _ = grouped_query_attention(_Attn(), query, key, value, mask, scaling=0.3)
    ref, _ = sdpa_attention_forward(_Attn(), query, key, value, mask, scaling=0.3)
    assert torch.equal(out.nan_to_num(), ref.nan_to_num())


def test_switch_only_touches_sdpa_models():
    class M(torch.nn.Module):
        def __init__(self, impl):
            super().__init__()
            self.config = type("C", (), {"_attn_implementation": impl})()

    sdpa, eager = M("sdpa"), M("eager")
    assert use_grouped_query_attention(sdpa) and sdpa.config._attn_implementation == GQA_ATTENTION
    assert not use_grouped_query_attention(eager) and eager.config._attn_implementation == "eager"


def test_no_mask_with_several_queries_is_causal_as_in_transformers_sdpa():
    query, key, value, _ = _inputs(torch.float32)
    key, value = key[:, :, :4], value[:, :, :4]  # Q = L = 4, no padding: transformers passes no mask, is_causal
    out, _ = grouped_query_attention(_Attn(), query, key, value, None, scaling=0.3)
    ref, _ = sdpa_attention_forward(_Attn(), query, key, value, None, scaling=0.3)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    w = torch.softmax(query[2, 1, 1] @ key[2, 0, :2].T * 0.3, -1)  # query 1 sees keys 0 and 1 only
    torch.testing.assert_close(out[2, 1, 1], w @ value[2, 0, :2], atol=1e-5, rtol=1e-5)


def test_long_sequences_keep_sdpa_so_no_large_score_tensor_is_kept(monkeypatch):
    """Above MAX_SCORES_BYTES a layer (here lowered to 1 byte) the CPU training path hands over to SDPA's flash kernel,
    which keeps no (Q, L) scores for the backward."""
    import rlvr.models.attention as attention

    query, key, value, mask = _inputs()
    assert attention.scores_bytes(3, 6, 4, 6) == 6 * 3 * 6 * 4 * 6  # fp32 scores + bf16 probabilities
    calls = []
    monkeypatch.setattr(attention, "sdpa_attention_forward", lambda *a, **k: calls.append(1) or (None, None))
    grouped_query_attention(_Attn(), query, key, value, mask, scaling=0.3)
    assert calls == []
    monkeypatch.setattr(attention, "MAX_SCORES_BYTES", 1)
    grouped_query_attention(_Attn(), query, key, value, mask, scaling=0.3)
    assert calls == [1]


def test_bf16_training_prefill_without_mask_takes_the_matmul_path_causally(monkeypatch):
    """A prefill without padding (transformers passes no mask: causal) under training in bf16 goes through the
    matmul path with the causal mask written out, not through torch's flash kernel, and equals SDPA's causal result."""
    import rlvr.models.attention as attention

    query, key, value, _ = _inputs()
    key, value = key[:, :, :4], value[:, :, :4]  # Q = L = 4
    ref, _ = sdpa_attention_forward(_Attn(), query, key, value, None, scaling=0.3)

    def no_sdpa(*args, **kwargs):
        raise AssertionError("SDPA was called for a mask-less bf16 training prefill")

    monkeypatch.setattr(attention, "sdpa_attention_forward", no_sdpa)
    out, _ = grouped_query_attention(_Attn(), query, key, value, None, scaling=0.3)
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)
    qf, kf, vf = query.float(), key.float(), value.float()
    w = torch.softmax(qf[2, 1, 1] @ kf[2, 0, :2].T * 0.3, -1)  # query 1 sees keys 0 and 1 only
    torch.testing.assert_close(out[2, 1, 1].float(), w @ vf[2, 0, :2], atol=2e-2, rtol=2e-2)
    # a mask-less call with fewer queries than keys is not ours to read (no causal offset is implied): SDPA
    with pytest.raises(AssertionError, match="SDPA was called"):
        grouped_query_attention(_Attn(), query[:, :, :2], key, value, None, scaling=0.3)


def _segment_reference(query, key, value, spans, scale):
    """Each segment by hand: softmax over its prefix's keys and its own causal keys, query head h on KV head h // G."""
    h, kv_heads = query.shape[1], key.shape[1]
    out = torch.zeros(query.shape[2], h, query.shape[3])
    for start, length, prefix_start, prefix_length in spans:
        keys = list(range(prefix_start, prefix_start + prefix_length)) + list(range(start, start + length))
        for i in range(length):
            seen = keys[:prefix_length + i + 1]
            for head in range(h):
                kv = head // (h // kv_heads)
                w = torch.softmax(query[0, head, start + i] @ key[0, kv, seen].T * scale, -1)
                out[start + i, head] = w @ value[0, kv, seen]
    return out


@pytest.mark.parametrize("spans", [
    [(0, 4, 0, 0), (4, 3, 0, 0), (7, 3, 0, 4), (10, 2, 4, 3), (12, 1, 0, 4)],  # prompts, then responses
    [(0, 4, 0, 0), (4, 3, 0, 4), (7, 3, 0, 0), (10, 2, 7, 3)],                 # interleaved: reordered back
    [(0, 4, 0, 0), (4, 3, 1, 2)],                                              # a prefix inside a segment
])
def test_segment_attention_and_its_gradients_equal_each_segment_by_hand(spans):
    from rlvr.models.attention import PackedSegments, segment_attention

    torch.manual_seed(0)
    n = sum(s[1] for s in spans)
    inputs = [torch.randn(1, 6, n, 8), torch.randn(1, 2, n, 8), torch.randn(1, 2, n, 8)]
    ours, theirs = [x.clone().requires_grad_() for x in inputs], [x.clone().requires_grad_() for x in inputs]
    segments = PackedSegments(spans)
    out = segment_attention(*ours, segments, scaling=0.3)
    assert out.shape == (1, n, 6, 8) and segments.layers_seen == 1
    reference = _segment_reference(*theirs, spans, 0.3)
    torch.testing.assert_close(out[0], reference, atol=1e-5, rtol=1e-5)
    weights = torch.randn(n, 6, 8)
    (out[0] * weights).sum().backward()
    (reference * weights).sum().backward()
    for name, a, b in zip(("query", "key", "value"), ours, theirs, strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
    with pytest.raises(ValueError, match=f"do not cover the {n - 1} positions"):
        segment_attention(inputs[0][:, :, :-1], inputs[1][:, :, :-1], inputs[2][:, :, :-1], PackedSegments(spans))


def test_segment_attention_refuses_spans_out_of_order():
    from rlvr.models.attention import PackedSegments, segment_attention

    query, key, value = torch.randn(1, 6, 7, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
    with pytest.raises(ValueError, match=r"\(4, 3\), \(0, 4\)\] do not cover the 7 positions in order"):
        segment_attention(query, key, value, PackedSegments([(4, 3, 0, 0), (0, 4, 0, 0)]))
