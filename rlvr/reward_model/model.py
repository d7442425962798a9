"""The reward model: an HF causal-LM backbone with a scalar head, read at each sequence's last real token.

Stored as HF's ``AutoModelForSequenceClassification`` with ``num_labels=1`` (its ``score`` linear layer is the head),
so ``save_pretrained`` writes the head with the backbone and ``from_pretrained`` loads both back. HF's own
``forward`` is not used to read the score: it finds the last token by comparing ids with ``pad_token_id``, which reads
the token before the eos when pad == eos (SmolLM2, Qwen) and, in older versions, a pad under left padding (TRL #2778,
#3750). Here the index comes from the attention mask alone (:func:`last_token_index`), and positions skip left
padding, so a sequence scores the same however it is padded.

With LoRA (``model.lora`` of an ``rlvr rm train`` recipe, or a PPO critic's trunk) the trunk's linear layers get
adapters and the head is trained whole beside them (peft's ``modules_to_save``): :meth:`RewardModel.add_lora`. Such a
model is saved as its adapter folder (adapters and head, a few MB, plus the model's ``config.json``), and
:meth:`RewardModel.load` reads it back as the base model with the adapters merged in.

Shapes: N sequences, L padded length, d hidden size.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from rlvr.algo.reward_shaping import last_token_index
from rlvr.models.loading import disable_dropout
from rlvr.models.logprobs import position_ids_from_mask

MARKER = "rlvr_reward_model.json"
"""File written next to the weights; its presence marks a folder as an rlvr reward model."""


def pad_sequences(sequences: list[list[int]], pad_id: int, side: Literal["left", "right"] = "right"
                  ) -> tuple[Tensor, Tensor]:
    """``input_ids`` and ``attention_mask``, both (N, L) int64, padded with ``pad_id`` on ``side``.

    Raises:
        ValueError: no sequences, an empty sequence, or an unknown side.
    """
    if not sequences or any(len(s) == 0 for s in sequences):
        raise ValueError("pad_sequences needs at least one sequence and no empty ones")
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        cols = slice(width - len(s), width) if side == "left" else slice(0, len(s))
        ids[i, cols] = torch.tensor(s, dtype=torch.long)
        mask[i, cols] = 1
    return ids, mask


def _head_name(hf_model: torch.nn.Module) -> str:
    return "score" if getattr(hf_model, "score", None) is not None else "classifier"


def _head(hf_model: torch.nn.Module) -> torch.nn.Linear:
    head = getattr(hf_model, _head_name(hf_model), None)
    if not isinstance(head, torch.nn.Linear) or head.out_features != 1:
        raise ValueError(f"{type(hf_model).__name__} has no scalar linear head ('score' or 'classifier' with one "
                         f"output); not a reward model")
    return head


class RewardModel(torch.nn.Module):
    """Scalar reward r(prompt, response) from an HF sequence-classification model with one label.

    Args:
        hf_model: an ``AutoModelForSequenceClassification`` with ``num_labels == 1`` (use :meth:`from_backbone` to
            build one from a causal LM, :meth:`load` to read a saved one).
    """

    def __init__(self, hf_model: torch.nn.Module) -> None:
        super().__init__()
        self.hf = hf_model
        self.head = _head(hf_model)
        self.backbone = getattr(hf_model, hf_model.base_model_prefix)
        self._peft: list[torch.nn.Module] = []  # the peft wrapper after add_lora (a list: not a second submodule)

    @property
    def is_lora(self) -> bool:
        """True after :meth:`add_lora`: the trunk has adapters, the head is a trainable copy."""
        return bool(self._peft)

    def add_lora(self, cfg: Any, base_name: str | None = None) -> "RewardModel":
        """LoRA adapters on the trunk's linear layers (``cfg``: a :class:`rlvr.config.LoraConfig`); the trunk's
        weights freeze, the scalar head stays whole and trainable (peft's ``modules_to_save``: a copy of the head,
        which :meth:`forward` then reads and :meth:`save` writes with the adapters). ``base_name`` is written into
        the saved ``adapter_config.json`` (the backbone any machine can resolve, e.g. the recipe's ``model.name``).
        Returns self.

        Raises:
            rlvr.models.lora.LoraTargetError: a target module the trunk does not have.
        """
        from rlvr.models.lora import ADAPTER, apply_lora

        name = _head_name(self.hf)
        wrapped = apply_lora(self.hf, cfg, base_name=base_name, modules_to_save=[name])
        self.head = getattr(self.hf, name).modules_to_save[ADAPTER]  # peft put a wrapper where the head was
        self._peft = [wrapped]
        return self

    # ------------------------------------------------------------------------------------------------ building
    @classmethod
    def from_backbone(cls, path: str, *, revision: str | None = None, trust_remote_code: bool = False,
                      seed: int = 0) -> "RewardModel":
        """A new reward model: the causal LM at ``path`` without its LM head, plus a scalar head initialised
        normal(0, 1/sqrt(d + 1)) with zero bias (OpenRLHF's init, scaled to the hidden size d). Dropout is off."""
        from transformers import AutoModelForSequenceClassification

        hf = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=1, dtype=torch.float32, revision=revision, trust_remote_code=trust_remote_code)
        disable_dropout(hf)
        head = _head(hf)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            head.weight.copy_(torch.randn(head.weight.shape, generator=generator) / math.sqrt(head.in_features + 1))
            if head.bias is not None:
                head.bias.zero_()
        return cls(hf)

    @classmethod
    def load(cls, path: str | Path) -> "RewardModel":
        """A reward model saved by :meth:`save`; ``path`` may be the model folder or an ``rlvr rm train`` run
        directory (its ``model/``).

        Raises:
            FileNotFoundError: no reward model there (no ``rlvr_reward_model.json``).
        """
        from transformers import AutoModelForSequenceClassification

        from rlvr.models.lora import adapter_base_name, is_adapter_folder

        folder = resolve_reward_model_dir(path)
        if is_adapter_folder(folder):  # a LoRA reward model: the base backbone, adapters and trained head merged in
            from peft import PeftModel

            from rlvr.models.loading import resolve_model_path

            base = AutoModelForSequenceClassification.from_pretrained(
                resolve_model_path(adapter_base_name(folder)), num_labels=1, dtype=torch.float32)
            hf = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
            info = json.loads((folder / MARKER).read_text())
            if info.get("pad_token_id") is not None:
                hf.config.pad_token_id = int(info["pad_token_id"])
        else:
            hf = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32)
        disable_dropout(hf)
        return cls(hf)

    def save(self, folder: str | Path, tokenizer: Any, extra: dict[str, Any] | None = None) -> Path:
        """Write the weights (backbone and head), config, tokenizer and the rlvr marker into ``folder`` (HF format,
        loadable with ``AutoModelForSequenceClassification.from_pretrained``). After :meth:`add_lora`: the adapter
        folder instead (``adapter_config.json``, ``adapter_model.safetensors`` with the adapters and the head), with
        the model's ``config.json`` beside it (for ``rlvr check``'s shape and memory estimates); :meth:`load` merges
        it into the base model."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.hf.config.pad_token_id = int(tokenizer.pad_token_id)
        if self.is_lora:
            self._peft[0].save_pretrained(folder, safe_serialization=True)
            self.hf.config.save_pretrained(folder)
        else:
            self.hf.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
        info = {"format": 1, "hidden_size": self.head.in_features, "eos_token_id": int(tokenizer.eos_token_id),
                "pad_token_id": int(tokenizer.pad_token_id), "score_at": "last real token (attention mask)",
                **({"lora": "adapters and head; loaded merged into the base model"} if self.is_lora else {}),
                **(extra or {})}
        (folder / MARKER).write_text(json.dumps(info, indent=2) + "\n")
        return folder

    # ------------------------------------------------------------------------------------------------- scoring
    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """(N,) fp32 rewards of (N, L) padded sequences, read at each row's last real token.

        Padding may be on either side (or mixed); positions are counted over real tokens only.
        """
        return score_at_last_token(self.backbone, self.head, input_ids, attention_mask)

    @torch.no_grad()
    def score(self, sequences: list[list[int]], pad_id: int, micro_batch_size: int = 16,
              autocast_dtype: torch.dtype | None = None) -> Tensor:
        """(M,) fp32 rewards of token-id sequences (prompt + response, eos included), ``micro_batch_size`` at a time."""
        device = next(self.parameters()).device
        out = []
        was_training = self.training
        self.eval()
        try:
            for start in range(0, len(sequences), micro_batch_size):
                ids, mask = pad_sequences(sequences[start:start + micro_batch_size], pad_id)
                with torch.autocast(device_type=device.type, dtype=autocast_dtype or torch.float32,
                                    enabled=autocast_dtype is not None):
                    out.append(self(ids.to(device), mask.to(device)).float().cpu())
        finally:
            self.train(was_training)
        return torch.cat(out) if out else torch.zeros(0)


def score_at_last_token(backbone: torch.nn.Module, head: torch.nn.Module, input_ids: Tensor,
                        attention_mask: Tensor) -> Tensor:
    """(N,) fp32: ``head`` (fp32, outside autocast) on ``backbone``'s hidden state at each row's last real token
    (:func:`last_token_index`) of (N, L) padded sequences; positions skip padding. :meth:`RewardModel.forward`, and
    the ZeRO-3 sharded copy of :mod:`rlvr.trainer.sharded_inference`."""
    index = last_token_index(attention_mask)
    hidden = backbone(input_ids=input_ids, attention_mask=attention_mask,
                      position_ids=position_ids_from_mask(attention_mask), use_cache=False).last_hidden_state
    last = hidden[torch.arange(hidden.shape[0], device=hidden.device), index]  # (N, d)
    with torch.autocast(device_type=last.device.type, enabled=False):  # the head in fp32
        return head(last.float()).squeeze(-1)


def resolve_reward_model_dir(path: str | Path) -> Path:
    """The folder holding a saved reward model: ``path`` itself or ``path/model``. Raises FileNotFoundError."""
    path = Path(path).expanduser()
    for folder in (path, path / "model"):
        if (folder / MARKER).is_file():
            return folder
    raise FileNotFoundError(f"no reward model at {path}: expected {MARKER} in it or in {path / 'model'} (written by "
                            f"`rlvr rm train`)")
