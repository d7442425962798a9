"""Log-probs of response tokens: the shared-prefix forward equals the per-row forward, values and gradients."""

import torch
from transformers import AutoModelForCausalLM

from rlvr.models.logprobs import response_logprobs, shared_prefix_logprobs
from tests.tiny import build_tiny_model


def test_shared_prefix_matches_per_row_forward_and_gradient(tmp_path):
    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m", hidden=32)).eval()
    pad = 0
    prompts = [[5, 6, 7, 8], [9, 10]]                      # two groups, different prompt lengths
    responses = [[11, 12, 1], [13, 1, 0], [14, 15, 16], [17, 1, 0]]  # rows 0,1 -> prompt 0; rows 2,3 -> prompt 1
    resp_len = [3, 2, 3, 2]
    row_prompt = torch.tensor([0, 0, 1, 1])
    p_ids = torch.tensor([[5, 6, 7, 8], [pad, pad, 9, 10]])
    p_mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    r_ids = torch.tensor(responses)
    r_mask = torch.tensor([[1] * n + [0] * (3 - n) for n in resp_len])

    lp_shared, ent_shared = shared_prefix_logprobs(model, p_ids, p_mask, row_prompt, r_ids, r_mask, temperature=0.8)
    (lp_shared * r_mask).sum().backward()
    grad_shared = model.model.embed_tokens.weight.grad.clone()
    model.zero_grad()

    ids = torch.cat([p_ids[row_prompt], r_ids], dim=1)
    am = torch.cat([p_mask[row_prompt], r_mask], dim=1)
    lp_rows, ent_rows = response_logprobs(model, ids, am, 3, temperature=0.8)
    (lp_rows * r_mask).sum().backward()
    grad_rows = model.model.embed_tokens.weight.grad.clone()

    m = r_mask.bool()
    assert torch.allclose(lp_shared[m], lp_rows[m], atol=1e-5)
    assert torch.allclose(ent_shared[m], ent_rows[m], atol=1e-5)
    assert torch.allclose(grad_shared, grad_rows, atol=1e-5)
    assert grad_rows.abs().sum() > 0


def test_output_layer_skips_right_padding_through_a_wrapper(tmp_path):
    """The LM head of the response forward sees only the scored positions (a next token that is real): S rows of
    (S, H), not (R, T - 1, H); also through a ``.module`` wrapper (a DeepSpeed engine). Padding gets 0, real positions
    equal the padded forward's."""
    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m", hidden=32)).eval()

    class Engine(torch.nn.Module):  # what the trainer passes: a wrapper whose .module is the HF model
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, **kw):
            return self.module(**kw)

    seen = []
    model.lm_head.register_forward_hook(lambda _m, args, _out: seen.append(tuple(args[0].shape)))  # its input
    p_ids, p_mask = torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.long)
    r_ids = torch.tensor([[11, 12, 13, 14], [15, 16, 0, 0], [17, 0, 0, 0]])
    r_mask = (r_ids > 0).long()
    lp, ent = shared_prefix_logprobs(Engine(model), p_ids, p_mask, torch.zeros(3, dtype=torch.long), r_ids, r_mask)
    hidden = model.config.hidden_size
    assert seen == [(1, 1, hidden), (4, hidden)]  # the prompt's last position; 3 + 1 + 0 scored response positions
    assert lp[1, 2:].eq(0).all() and lp[2, 1:].eq(0).all() and ent[2, 1:].eq(0).all()
    ids = torch.cat([p_ids.expand(3, 3), r_ids], dim=1)
    lp_rows, _ = response_logprobs(model, ids, torch.cat([p_mask.expand(3, 3), r_mask], dim=1), 4)
    m = r_mask.bool()
    assert torch.allclose(lp[m], lp_rows[m], atol=1e-5)


def _grouped_inputs():
    p_ids = torch.tensor([[5, 6, 7, 8], [0, 0, 9, 10]])
    p_mask = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    r_ids = torch.tensor([[11, 12, 1], [13, 1, 0], [14, 15, 16], [17, 0, 0]])
    r_mask = (r_ids > 0).long()
    return p_ids, p_mask, torch.tensor([0, 0, 1, 1]), r_ids, r_mask


def test_packed_row_matches_per_row_forward_values_and_gradients(tmp_path):
    """With rlvr's attention the shared-prefix forward runs one packed row (prompts, then responses, no padding): its
    log-probs, entropies and gradients equal the per-row padded forward's (fp32), and padding gets 0."""
    from rlvr.models.attention import use_grouped_query_attention
    from rlvr.models.logprobs import packed_layers

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m", hidden=32)).eval()
    p_ids, p_mask, row_prompt, r_ids, r_mask = _grouped_inputs()
    ids = torch.cat([p_ids[row_prompt], r_ids], dim=1)
    am = torch.cat([p_mask[row_prompt], r_mask], dim=1)
    lp_rows, ent_rows = response_logprobs(model, ids, am, 3, temperature=0.8)
    (lp_rows * r_mask).sum().backward()
    grads_rows = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    assert packed_layers(model) == 0 and use_grouped_query_attention(model)
    assert packed_layers(model) == model.config.num_hidden_layers == 2
    seen = []
    model.lm_head.register_forward_hook(lambda _m, args, _out: seen.append(tuple(args[0].shape)))
    lp, ent = shared_prefix_logprobs(model, p_ids, p_mask, row_prompt, r_ids, r_mask, temperature=0.8)
    (lp * r_mask).sum().backward()
    assert seen == [(1, 4 + 5, 32)]  # one forward; 4 prompt-last rows + 2 + 1 + 2 + 0 scored positions
    m = r_mask.bool()
    torch.testing.assert_close(lp[m], lp_rows[m], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent[m], ent_rows[m], atol=1e-5, rtol=1e-5)
    assert lp[~m].eq(0).all()
    for got, want in zip((p.grad for p in model.parameters()), grads_rows, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_packed_row_refuses_a_model_whose_attention_drops_the_segments(tmp_path, monkeypatch):
    """If the attention never reads the packed segments (a model that does not pass its keywords on), the forward
    raises instead of attending across the packed row."""
    import pytest

    import rlvr.models.attention as attention
    from rlvr.models.attention import use_grouped_query_attention

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m", hidden=32)).eval()
    use_grouped_query_attention(model)
    real = attention.segment_attention
    monkeypatch.setattr(attention, "segment_attention", lambda q, k, v, segs, scaling=None: real(
        q, k, v, attention.PackedSegments(segs.spans), scaling))  # computes, but the caller's count stays 0
    with pytest.raises(RuntimeError, match="0 of 2 attention layers read the packed segments"):
        shared_prefix_logprobs(model, *_grouped_inputs())


def test_packed_rows_give_way_to_the_kv_cache_when_scores_would_be_too_large(tmp_path, monkeypatch):
    """Past MAX_SCORES_BYTES of attention scores a layer (long responses), the forward takes the KV-cache path (two
    forwards: prompts, then responses) with the same results."""
    import rlvr.models.logprobs as logprobs
    from rlvr.models.attention import use_grouped_query_attention

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m", hidden=32)).eval()
    use_grouped_query_attention(model)
    calls = []
    model.lm_head.register_forward_hook(lambda _m, args, _out: calls.append(1))
    packed, _ = shared_prefix_logprobs(model, *_grouped_inputs())
    assert len(calls) == 1
    shared_prefix_logprobs(model, *_grouped_inputs(), packed=False)  # the caller's choice (ZeRO-3 over ranks)
    assert len(calls) == 3
    calls.clear()
    monkeypatch.setattr(logprobs, "MAX_SCORES_BYTES", 1)
    cached, _ = shared_prefix_logprobs(model, *_grouped_inputs())
    assert len(calls) == 2
    m = _grouped_inputs()[4].bool()
    torch.testing.assert_close(cached[m], packed[m], atol=1e-5, rtol=1e-5)
