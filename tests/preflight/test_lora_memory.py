"""The memory and disk estimate of a LoRA recipe: frozen base weights, gradients and Adam moments for the adapters
only, no reference copy, and checkpoints the size of the adapters."""

from rlvr.preflight.devices import GIB, DeviceMemory
from rlvr.preflight.disk import checkpoint_bytes
from rlvr.preflight.memory import estimate_memory, lora_params
from tests.preflight.test_preflight import SHAPE, _parts, _recipe


def test_lora_counts_adapters_for_gradients_and_adam_and_holds_no_reference():
    gpu = DeviceMemory("test GPU", 80 * GIB, "gpu")
    n = SHAPE.params
    recipe = _recipe(model={"lora": {"rank": 2, "target_modules": ["q_proj", "down_proj"]}},
                     algorithm={"kl": {"beta": 0.01}})
    d, q, i = SHAPE.hidden, SHAPE.heads * SHAPE.head_dim, SHAPE.intermediate
    a = lora_params(SHAPE, recipe.model.lora)
    assert a == SHAPE.layers * 2 * ((d + q) + (i + d))  # A: r x d_in, B: d_out x r per adapted layer
    parts = _parts(estimate_memory(recipe, {"policy": SHAPE}, gpu, ranks=1, max_prompt_tokens=32))
    assert parts["policy frozen base weights"] == 4 * n
    assert (parts["policy adapter weights"], parts["policy gradients"], parts["policy Adam moments"]) == \
        (4 * a, 4 * a, 8 * a)
    assert "reference weights" not in parts  # the policy with its adapters off is the reference
    assert checkpoint_bytes(a, 0) == 16 * a  # adapter folder + DeepSpeed module states + Adam moments
