"""The sizes of a model that its memory depends on, read from its ``config.json`` without loading any weight.

The parameter count is exact: the model is built on PyTorch's ``meta`` device (no storage) and its parameters counted.
For the hub models the shipped GPU recipes name, :data:`KNOWN_CONFIGS` holds the few config fields that matter, so
``rlvr check`` can size those recipes on a machine without the hub (every field is from the model's public
``config.json``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-Math-1.5B": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                                   num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                                   max_position_embeddings=4096, tie_word_embeddings=True),
    "Qwen/Qwen2.5-Math-7B": dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                 num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                                 max_position_embeddings=4096, tie_word_embeddings=False),
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864,
                                             num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                                             vocab_size=151936, max_position_embeddings=32768,
                                             tie_word_embeddings=True),
}
"""Hub name -> the ``config.json`` fields that size the model (Qwen2.5 model cards, huggingface.co/Qwen)."""


@dataclass(frozen=True)
class ModelShape:
    """What memory depends on. ``params`` counts every parameter once (tied embeddings once)."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_positions: int | None
    source: str
    """Where the numbers come from (a config path, or rlvr's table of known models)."""

    @property
    def layer_params(self) -> int:
        """Parameters of one transformer block (attention + MLP), for ZeRO-3's gathered-layer buffer."""
        d, kv = self.hidden, self.kv_heads * self.head_dim
        return d * (self.heads * self.head_dim) * 2 + 2 * d * kv + 3 * d * self.intermediate

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token over all layers in 16-bit (vLLM's and bf16 generation's cache dtype)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


def shape_from_config(config: Any, source: str) -> ModelShape:
    """:class:`ModelShape` of a transformers ``PretrainedConfig`` (a causal LM with the usual field names).

    Raises:
        ValueError: the config lacks ``hidden_size``/``num_hidden_layers``/``num_attention_heads``/``vocab_size``.
    """
    import torch
    from transformers import AutoModelForCausalLM

    text = getattr(config, "text_config", None) or config  # multimodal configs keep the LM under text_config
    needed = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    missing = [k for k in needed if getattr(text, k, None) is None]
    if missing:
        raise ValueError(f"{source}: the model config has no {', '.join(missing)}; cannot size the model")
    with torch.device("meta"):  # no storage: a 7B model is counted in about a second
        model = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    heads = int(text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    return ModelShape(params=params, layers=int(text.num_hidden_layers), hidden=int(text.hidden_size),
                      intermediate=int(getattr(text, "intermediate_size", None) or 4 * text.hidden_size), heads=heads,
                      kv_heads=int(getattr(text, "num_key_value_heads", None) or heads), head_dim=head_dim,
                      vocab=int(text.vocab_size), max_positions=getattr(text, "max_position_embeddings", None),
                      source=source)


def model_shape(name_or_path: str, *, trust_remote_code: bool = False) -> ModelShape:
    """The shape of the model at a local folder or hub name; a hub name the hub cannot give (offline) falls back to
    :data:`KNOWN_CONFIGS`.

    Raises:
        ValueError: neither the config can be read nor the name is a known model.
    """
    from transformers import AutoConfig

    from rlvr.models.lora import config_folder

    try:
        config = AutoConfig.from_pretrained(config_folder(name_or_path), trust_remote_code=trust_remote_code)
        return shape_from_config(config, f"{name_or_path}/config.json")
    except (OSError, ValueError) as exc:
        known = KNOWN_CONFIGS.get(name_or_path)
        if known is None:
            raise ValueError(f"cannot read the config of {name_or_path!r} ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:160]}) and it is not among rlvr's known models "
                             f"({', '.join(KNOWN_CONFIGS)})") from None
        fields = dict(known)
        config = AutoConfig.for_model(fields.pop("model_type"), **fields)
        return shape_from_config(config, f"rlvr's table of known models ({name_or_path}; hub not reachable)")
