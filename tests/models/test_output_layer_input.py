"""The output layer's GEMM runs over a contiguous input, whatever rows of the hidden states the model keeps."""

import torch
from transformers import AutoModelForCausalLM

from rlvr.models.loading import contiguous_output_input, use_fast_layers
from rlvr.rollout.hf import _low_precision_copy
from tests.tiny import build_tiny_model


def _inputs_seen(model: torch.nn.Module) -> tuple[list[torch.Tensor], object]:
    """The inputs the output layer's forward receives (after the pre-hooks added before this one), appended as they
    come; and the spy's handle."""
    seen: list[torch.Tensor] = []
    handle = model.get_output_embeddings().register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    return seen, handle


def test_the_kept_last_position_reaches_the_output_layer_contiguous_with_the_same_logits(tmp_path):
    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m")).eval()
    ids = torch.randint(3, model.config.vocab_size, (3, 7))
    with torch.no_grad():
        before = model(input_ids=ids, logits_to_keep=1).logits
    seen, spy = _inputs_seen(model)
    model(input_ids=ids, logits_to_keep=1)
    assert seen[-1].shape == (3, 1, 32) and not seen[-1].is_contiguous()  # what transformers hands it: a slice
    spy.remove()

    contiguous_output_input(model)
    contiguous_output_input(model)  # added once
    assert len(model.get_output_embeddings()._forward_pre_hooks) == 1
    seen, _ = _inputs_seen(model)
    with torch.no_grad():
        after = model(input_ids=ids, logits_to_keep=1).logits
        every = model(input_ids=ids).logits
    assert seen[0].is_contiguous() and seen[1].is_contiguous()
    torch.testing.assert_close(after, before, rtol=0, atol=1e-6)
    torch.testing.assert_close(after, every[:, -1:], rtol=0, atol=1e-6)


def test_the_trained_model_and_the_generation_copy_both_get_it(tmp_path):
    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m")).eval()
    use_fast_layers(model, torch.device("cpu"))
    gen = _low_precision_copy(model, torch.bfloat16)
    ids = torch.randint(3, model.config.vocab_size, (2, 5))
    for m in (model, gen):
        seen, _ = _inputs_seen(m)
        with torch.no_grad():
            m(input_ids=ids, logits_to_keep=1)
        assert seen[0].shape == (2, 1, 32) and seen[0].is_contiguous()
