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
