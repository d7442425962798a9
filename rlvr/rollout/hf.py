"""The ``hf`` rollout engine: rlvr's own decode loop (:func:`rlvr.rollout.decode.sample`) over a transformers model,
the training model itself or a low-precision copy of it (any device).

Low precision (``autocast_dtype``, e.g. bf16, over fp32 master weights): generation runs on a bf16 *copy* of the policy,
refreshed by :meth:`HFRolloutEngine.sync_weights` after every optimizer step (one cast of the weights, ~0.1 s for
135M parameters). Autocast over the fp32 model is slower for decoding even when one context wraps the whole decode
loop (so each weight is cast once): RoPE multiplies bf16 queries/keys by fp32 cos/sin, so the KV cache is
stored in fp32 and SDPA casts the whole cache back to bf16, in every layer at every decode step (py-spy on SmolLM2-135M,
2 x 8 x 128 tokens: 20% of the rollout in those casts, another 9% in GQA's ``repeat_kv`` copies of the twice-as-large
cache). Where the parameters are ZeRO-3 partitions (no full tensor to copy) or already in ``autocast_dtype``, the
engine shares the policy's parameters under one autocast context instead, and weight sync is free.

Decoding is rlvr's own loop (:mod:`rlvr.rollout.decode`), not transformers' ``generate``: a preallocated KV cache,
grouped-query attention that never copies the cache per query head (on the generation copy), log-probs of the sampled
tokens only, an inverse-CDF draw instead of ``torch.multinomial``, and (bf16 copy on a CPU) linear layers over weights
prepacked for oneDNN (:mod:`rlvr.kernels.packed_linear`; a decode step 110.6 -> 82.0 ms on SmolLM2) or, for
Llama-style models where the fused kernels build (AVX-512), each decode step through them
(:mod:`rlvr.kernels.fused_decode`; 22-27 ms a step at 2 threads with AMX); in fp32 on a CPU, Llama-style models decode
through the same fused step in fp32 (AVX2 kernels), other models with their linear layers through an AVX2 GEMM where it
measures faster than ``F.linear`` (:mod:`rlvr.kernels.fp32_decode`). Each prompt is prefilled once and its KV cache
repeated for the G samples of its group (``generate`` with ``num_return_sequences`` would recompute the prompt G times;
with few-shot prompts ten times longer than the answers, that prefill is most of the rollout's compute).
"""

from __future__ import annotations

import contextlib
import copy
from types import ModuleType
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedTokenizerBase

from rlvr.models.attention import use_grouped_query_attention
from rlvr.models.loading import contiguous_output_input
from rlvr.models.lora import is_lora_model, merged_weights
from rlvr.rollout import decode
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.stop import StopStrings

if TYPE_CHECKING:
    from rlvr.kernels.cpu_decode import CpuDecode
    from rlvr.kernels.fused_decode import FusedDecoder


class HFRolloutEngine:
    """Batched sampling through rlvr's decode loop (:func:`rlvr.rollout.decode.sample`), G samples per prompt.

    Args:
        model: the HF causal LM (unwrapped; the same object the trainer optimises).
        tokenizer: for its pad id. eos_ids: every id that ends a response.
        batch_size: sequences decoded together (a memory knob; whole groups stay together).
        autocast_dtype: the generation dtype, e.g. ``torch.bfloat16`` (``PrecisionChoice.generation_dtype``: it may
            be bf16 while training runs in fp32); ``None`` = the model's own dtype.
        generation_copy: generate with a copy of the weights in ``autocast_dtype`` (see the module docstring);
            ``None`` = whenever ``autocast_dtype`` differs from the parameters' dtype and they are not ZeRO-3
            partitions. The copy costs ``autocast_dtype``-sized memory for the weights (270 MB for 135M in bf16).
    Raises:
        ValueError: ``generation_copy=True`` without an ``autocast_dtype``, or on ZeRO-3 partitioned parameters.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, eos_ids: list[int],
                 batch_size: int = 64, autocast_dtype: torch.dtype | None = torch.bfloat16,
                 generation_copy: bool | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer  # decodes response tails for SamplingParams.stop
        self.pad_id = int(tokenizer.pad_token_id)
        self.eos_ids = list(eos_ids)
        self.batch_size = batch_size
        self.autocast_dtype = autocast_dtype
        partitioned = any(hasattr(p, "ds_id") for p in model.parameters())  # DeepSpeed ZeRO-3
        # ZeRO-3 forwards gather weights from every rank: all ranks must decode the same number of steps
        self.synced = (partitioned and torch.distributed.is_available() and torch.distributed.is_initialized()
                       and torch.distributed.get_world_size() > 1)
        # a LoRA policy decodes on a plain copy with the adapters merged in (base + s B A), in autocast_dtype or fp32
        self.lora = is_lora_model(model)
        if generation_copy is None:
            generation_copy = not partitioned and (self.lora or (
                autocast_dtype is not None and any(p.dtype != autocast_dtype for p in model.parameters())))
        if generation_copy and ((autocast_dtype is None and not self.lora) or partitioned):
            raise ValueError("generation_copy=True needs an autocast_dtype (or a LoRA model) and full (not ZeRO-3 "
                             f"partitioned) parameters; got autocast_dtype={autocast_dtype}, partitioned={partitioned}")
        copy_dtype = autocast_dtype or next(model.parameters()).dtype
        self.generation_model: torch.nn.Module = (_low_precision_copy(model, copy_dtype) if generation_copy
                                                  else model)
        # a bf16 copy on a CPU with native bf16: decode steps through fused kernels, which pack their own weights;
        # where those do not run, its linear layers read oneDNN-packed weights (rlvr.kernels.cpu_decode decides, once)
        self.cpu_decode: CpuDecode | None = None
        if generation_copy and autocast_dtype is not None:
            from rlvr.kernels.cpu_decode import accelerate

            self.cpu_decode = accelerate(self.generation_model)
        self.fused: FusedDecoder | None = self.cpu_decode.fused if self.cpu_decode is not None else None
        # fp32 generation on a CPU: the fused fp32 step (Llama-style models) over the parameters as they are, or
        # else the decode steps' linear layers through the AVX2 GEMM where it measures faster
        self.fp32_kernels: ModuleType | None = None
        params = list(self.generation_model.parameters())
        if (self.cpu_decode is None and not partitioned and params
                and all(p.device.type == "cpu" and p.dtype == torch.float32 for p in params)):
            from rlvr.kernels.fp32_decode import measured_fp32_decode
            from rlvr.kernels.fused_decode import build_fused_decoder

            if autocast_dtype is None or generation_copy:  # (not autocast over the shared fp32 parameters)
                self.fused = build_fused_decoder(self.generation_model)
            if self.fused is None:
                self.fp32_kernels = measured_fp32_decode(self.generation_model)

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy ``model``'s weights into the generation copy (cast to its dtype, packed weights re-packed); a no-op when
        parameters are shared. A LoRA policy's adapters are merged into its base weights on the way
        (:func:`rlvr.models.lora.merged_weights`: ``W + (alpha / r) B A`` per adapted layer, computed in fp32).

        Raises:
            KeyError: ``model`` lacks a parameter of the copy (not the policy this engine was built from).
        """
        if self.generation_model is self.model:
            return
        src = _source_weights(model)
        with torch.no_grad():
            for name, dst in self.generation_model.named_parameters():
                dst.copy_(src[name])
        if self.cpu_decode is not None:
            self.cpu_decode.refresh()

    @torch.no_grad()
    def generate(self, prompt_token_ids: list[list[int]], n: int,
                 sampling: SamplingParams) -> list[list[Completion]]:
        """Sample ``n`` completions for each prompt. Returns groups in prompt order, each of ``n`` completions.

        Raises:
            ValueError: ``n`` < 1 or an empty prompt.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if any(len(p) == 0 for p in prompt_token_ids):
            raise ValueError("every prompt needs at least one token")
        per_call = max(self.batch_size // n, 1)  # prompts per generate call; whole groups stay together
        groups: list[list[Completion]] = []
        model = self.generation_model
        was_training = model.training
        model.eval()
        try:
            for start in range(0, len(prompt_token_ids), per_call):
                flat = self._generate_batch(model, prompt_token_ids[start:start + per_call], n, sampling)
                groups.extend(flat[i * n:(i + 1) * n] for i in range(len(flat) // n))
        finally:
            model.train(was_training)
        return groups

    def _generate_batch(self, model: torch.nn.Module, prompts: list[list[int]], n: int,
                        sampling: SamplingParams) -> list[Completion]:
        device = next(model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every response starts at column `width`
            input_ids[i, width - len(p):] = torch.tensor(p)
            attention_mask[i, width - len(p):] = 1
        # autocast only when generating with the shared fp32 parameters (a copy is already in the low precision)
        use_autocast = self.autocast_dtype is not None and model is self.model
        stops = StopStrings(self.tokenizer, sampling.stop) if sampling.stop else None
        stopped: dict[int, tuple[int, str]] = {}  # row -> (its sampled tokens, the stop string the last completed)

        def stop_when(row: int, ids: list[int]) -> bool:
            hit = stops.matched(ids)
            if hit is not None:
                stopped[row] = (len(ids), hit)
            return hit is not None

        fp32_linears: contextlib.AbstractContextManager = contextlib.nullcontext()
        if self.fp32_kernels is not None:
            from rlvr.kernels.fp32_decode import fp32_decode_linears

            fp32_linears = fp32_decode_linears(model, self.fp32_kernels)
        with torch.autocast(device_type=device.type, dtype=self.autocast_dtype or torch.float32,
                            enabled=use_autocast), fp32_linears:
            new_tokens, logprobs = decode.sample(
                model, input_ids.to(device), attention_mask.to(device), n, max_new_tokens=sampling.max_new_tokens,
                temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p, eos_ids=self.eos_ids,
                pad_id=self.pad_id, synced=self.synced, fused=self.fused,
                stop_when=stop_when if stops else None)
        eos = set(self.eos_ids)
        completions = []
        for index, (row, lp) in enumerate(zip(new_tokens.cpu().tolist(), logprobs.cpu().tolist(), strict=True)):
            end = next((i for i, t in enumerate(row) if t in eos), None)
            if index in stopped:  # ended by a stop string (the pad fed after it may equal an eos id)
                length, hit = stopped[index]
                completions.append(Completion(row[:length], lp[:length], "stop_sequence", hit))
            elif end is None:
                completions.append(Completion(row, lp, "length"))
            else:
                completions.append(Completion(row[:end + 1], lp[:end + 1], "stop"))
        return completions


def _source_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every full weight of ``model`` by name (tied weights under each of their names); a LoRA model's adapters merged
    into its base weights, under the base model's names."""
    if is_lora_model(model):
        base = model.get_base_model()
        merged = dict(merged_weights(model, ((n, p.detach()) for n, p in model.named_parameters())))
        # a tied weight's second name (e.g. lm_head.weight) points at the same merged tensor
        by_id = {id(p): n for n, p in base.named_parameters()}
        for name, p in base.named_parameters(remove_duplicate=False):
            if "lora_" not in name and ".base_layer." not in name:
                merged.setdefault(name, merged[by_id[id(p)]])
        return merged
    return {n: p.detach() for n, p in model.named_parameters(remove_duplicate=False)}


def _low_precision_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A frozen eval-mode copy of an HF causal LM with its parameters in ``dtype`` and its buffers (e.g. RoPE's
    ``inv_freq``) kept in their own dtype and values.

    Built from the config on the meta device and filled in, never ``copy.deepcopy``: DeepSpeed hangs bound methods of
    its optimizer on the parameters (ZeRO-1/2) and hooks on the modules, which a deep copy would duplicate. Its
    linear layers are plain; :class:`HFRolloutEngine` packs them (:mod:`rlvr.kernels.packed_linear`) where the fused
    decode step does not run.
    """
    device = next(model.parameters()).device
    src_params = _source_weights(model)
    if is_lora_model(model):  # a plain model of the base class, the adapters merged into its weights
        model = model.get_base_model()
    with torch.device("meta"):
        gen = type(model)(copy.deepcopy(model.config))
    gen.to_empty(device=device)
    src_buffers = {n.replace(".base_layer.", "."): b for n, b in model.named_buffers()}
    with torch.no_grad():
        for name, p in gen.named_parameters():
            p.data = src_params[name].detach().to(device=device, dtype=dtype, copy=True)
        for name, b in gen.named_buffers():
            b.copy_(src_buffers[name])
    if getattr(gen.config, "tie_word_embeddings", False) and hasattr(gen, "tie_weights"):
        gen.tie_weights()
    if getattr(model, "generation_config", None) is not None:
        gen.generation_config = copy.deepcopy(model.generation_config)
    gen.requires_grad_(False)
    use_grouped_query_attention(gen)  # its own config copy: the trainer's model keeps its attention
    contiguous_output_input(gen)  # the prefill keeps one logit a prompt: a strided slice
    return gen.eval()
