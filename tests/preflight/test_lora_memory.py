"""The memory and disk estimate of a LoRA recipe: frozen base weights, gradients and Adam moments for the adapters
only, no reference copy, and checkpoints the size of the adapters."""

from rlvr.preflight.devices import GIB, DeviceMemory
from rlvr.preflight.disk import checkpoint_bytes
from rlvr.preflight.memory import estimate_memory, lora_params, trained_params
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


def test_lora_critic_counts_its_adapters_and_head_for_gradients_and_adam():
    """PPO's critic follows the policy's LoRA by default: its trunk is frozen, and only its adapters and scalar head
    have gradients and Adam moments. By hand on SHAPE (d 8, q 8, kv 4, I 16, 2 layers): rank-2 adapters on q_proj
    (8 + 8) and down_proj (16 + 8) are 2 x 2 x (16 + 24) = 160 parameters, plus the head's 8 weights = 168."""
    gpu = DeviceMemory("test GPU", 80 * GIB, "gpu")
    n = SHAPE.params
    recipe = _recipe(model={"lora": {"rank": 2, "target_modules": ["q_proj", "down_proj"]}},
                     algorithm={"name": "ppo"})
    assert trained_params(SHAPE, recipe, "critic") == 168
    parts = _parts(estimate_memory(recipe, {"policy": SHAPE}, gpu, ranks=1, max_prompt_tokens=32))
    assert parts["critic frozen base weights"] == 4 * n
    assert (parts["critic adapter weights"], parts["critic gradients"], parts["critic Adam moments"]) == \
        (4 * 168, 4 * 168, 8 * 168)
    assert (parts["policy gradients"], parts["policy Adam moments"]) == (4 * 160, 8 * 160)  # no head on the policy

    # the critic's own adapters under a fully trained policy: rank 4 on all seven linear layers of each block,
    # 2 x 4 x (16 + 12 + 12 + 16 + 24 + 24 + 24) = 1024, plus the head's 8
    own = _recipe(algorithm={"name": "ppo", "critic": {"lora": {"rank": 4}}})
    parts = _parts(estimate_memory(own, {"policy": SHAPE}, gpu, ranks=2, max_prompt_tokens=32))
    assert (parts["critic gradients"], parts["critic Adam moments"]) == (4 * 1032, 8 * 1032)
    assert (parts["policy gradients"], parts["policy Adam moments"]) == (4 * n, 8 * n)
    assert "critic frozen base weights" not in _parts(estimate_memory(
        _recipe(model={"lora": {"rank": 2}}, algorithm={"name": "ppo", "critic": {"lora": None}}), {"policy": SHAPE},
        gpu, ranks=1, max_prompt_tokens=32))  # critic.lora null: every critic weight trains, also under LoRA
