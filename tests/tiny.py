"""Tiny models and tasks for tests: a Qwen2-shaped model (~0.1M params) with a character-level tokenizer trained
locally (a 50k vocabulary would make tiny models ~4x slower), and a trivial verifiable task.

Verifiers here are named in recipes as ``tests.tiny:<function>`` (the repo root is on sys.path under pytest).
"""

from __future__ import annotations

import hashlib
import json
import string
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIALS = ["<pad>", "<eos>"]
CHARS = list(string.digits + string.ascii_lowercase + " +=?:.\n")


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level tokenizer: one id per character, plus <pad> and <eos>."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")


def build_tiny_model(dir_path: Path, seed: int = 0, hidden: int = 32, layers: int = 2, init_std: float = 0.02) -> Path:
    """Save a random-init Qwen2 causal LM and its tokenizer to ``dir_path``; returns the folder.

    ``init_std`` is the weights' normal std (``initializer_range``): at the default 0.02 the greedy completion is
    nearly the same text for every prompt; at 0.2 it differs from prompt to prompt."""
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.eos_token_id, initializer_range=init_std)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(dir_path)
    tokenizer.save_pretrained(dir_path)
    return dir_path


CHAT_SPECIALS = ["<pad>", "<|im_end|>", "<|im_start|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""ChatML without a default system turn: what the tiny chat model's tokenizer renders conversations with."""


def build_chat_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level tokenizer over printable ASCII with ChatML's control tokens (``<|im_end|>`` is eos) and a
    ChatML chat template."""
    chars = sorted(set(string.printable) - set("\x0b\x0c\r"))
    vocab = {tok: i for i, tok in enumerate(CHAT_SPECIALS + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    out = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>",
                                  additional_special_tokens=["<|im_start|>"])
    out.chat_template = CHAT_TEMPLATE
    return out


def build_tiny_chat_model(dir_path: Path, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:
    """Save a random-init Qwen2 causal LM with :func:`build_chat_tokenizer` (eos = ``<|im_end|>``) to ``dir_path``."""
    tokenizer = build_chat_tokenizer()
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.eos_token_id)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(dir_path)
    tokenizer.save_pretrained(dir_path)
    return dir_path


def write_addition_dataset(path: Path, n: int = 64) -> Path:
    """JSONL rows ``{"question": "a+b=?", "answer": "c"}`` with one-digit operands."""
    with path.open("w") as fh:
        for i in range(n):
            a, b = i % 10, (i // 10) % 10  # distinct pairs for n <= 100
            fh.write(json.dumps({"question": f"{a}+{b}=?", "answer": str(a + b)}) + "\n")
    return path


def digit_fraction(completion: str, sample: dict) -> float:
    """Fraction of the completion's characters that are digits (0 for an empty completion): a dense, trivially
    learnable reward."""
    text = completion.strip()
    return sum(ch.isdigit() for ch in text) / len(text) if text else 0.0


def starts_with_digit(completion: str, sample: dict) -> float:
    """1.0 when the completion starts with a digit (a binary reward with a solve rate)."""
    return 1.0 if completion[:1].isdigit() else 0.0


def text_hash_bit(completion: str, sample: dict) -> float:
    """One bit of the completion's SHA-1: a reward two engines agree on, prompt by prompt, only when they sampled the
    same text (a random model's 0 reward on every prompt would not tell them apart)."""
    return float(hashlib.sha1(completion.encode()).digest()[0] & 1)


def tiny_recipe(model_dir: Path, data_path: Path, **sections) -> dict:
    """A recipe dict for the tiny model: 4 prompts x 4 samples, 8 new tokens, fp32, no eval by default, the ``hf``
    engine (not ``auto``: a test of hf behaviour must not move to vLLM where vLLM is installed)."""
    raw = {
        "seed": 0,
        "model": {"name": str(model_dir)},
        "data": {"source": {"type": "jsonl", "path": str(data_path)}, "template": "chat", "eval_size": 8},
        "rollout": {"engine": "hf", "prompts_per_step": 4, "group_size": 4, "max_new_tokens": 8, "temperature": 1.0},
        "verifiers": [{"name": "tests.tiny:digit_fraction"}, {"name": "tests.tiny:starts_with_digit", "weight": 0.0}],
        "reward": {"num_workers": 1, "solved_verifier": "tests.tiny:starts_with_digit"},
        "algorithm": {"loss_agg": "token-mean"},
        "optim": {"lr": 3e-3, "micro_batch_size": 8},
        "trainer": {"steps": 3, "precision": "fp32", "num_threads": 1},
        "eval": {"enabled": False, "k": 2},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return raw


def skip_plots() -> None:
    """No PNG plots for any run of this process (~5 s per checkpoint on these CPUs): for a test's worker process, which
    does not check them (a test in the pytest process uses the ``no_plots`` fixture instead)."""
    import rlvr.trainer.run

    rlvr.trainer.run.write_plots = lambda *args, **kwargs: None
