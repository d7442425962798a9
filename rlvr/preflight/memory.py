"""Memory per rank of a recipe, before anything is loaded: what each model, optimizer state, activation and the rollout
engine's cache take, compared with the device's memory.

The model (bytes per rank; N parameters, R ranks, ZeRO stage Z; rlvr keeps fp32 master weights and trains under
autocast, so DeepSpeed holds fp32 weights and gradients):

- each trainable model (the policy; a critic): weights 4N (/R under Z = 3), gradients 4N (/R under Z >= 2), Adam's two
  moments 8N (/R under Z >= 1; on the host with ``trainer.offload_optimizer``), and under Z = 3 two gathered blocks
  (the current layer and the prefetched one) in fp32. ZeRO: Rajbhandari et al., 1910.02054, section 5.
- each frozen model (the reference policy; each reward model of an ensemble): fp32 weights 4N, whole below ZeRO-3;
  under Z = 3 a ZeRO-3 inference engine partitions it too (4N/R, :mod:`rlvr.trainer.sharded_inference`); the layers it
  gathers in its own forwards are transient and counted with the policy's.
- activations of one micro-batch at the longest sequence (prompt + ``rollout.max_new_tokens``), rows as the micro-batch
  planner would put together (``optim.micro_batch_size``, ``optim.micro_batch_tokens``): the tensors autograd keeps
  per block of a Llama-style layer (:func:`block_activation_bytes_per_token`; SDPA/flash attention keeps no L x L
  scores; rlvr's bf16 CPU training attention keeps them while they are small,
  :data:`rlvr.models.attention.MAX_SCORES_BYTES`
  a layer), or with ``model.gradient_checkpointing`` one fp32 hidden state per layer plus one block recomputed; plus
  the output layer's logits over the response, (rows, T, V) in the compute dtype, and their gradient
  (:mod:`rlvr.models.logprobs` chunks the fp32 log-softmax, not the logits).
- generation: vLLM takes ``rollout.vllm_gpu_memory_utilization`` of the GPU for its bf16 weights and KV cache (freed
  during training with ``rollout.vllm_sleep_mode``); the ``hf`` engine holds the KV cache of
  ``rollout.generation_batch_size`` sequences.
- under bf16 autocast, the bf16 casts of the weights that autocast caches while its region lasts (2N; /R under Z = 3),
  in the forward and backward, and the ``hf`` engine's bf16 generation copy (2N), on a CPU with its linear layers'
  weights packed for oneDNN once more (2N, :mod:`rlvr.kernels.packed_linear`).
- a fixed 1.5 GiB for the CUDA context and allocator fragmentation on a GPU.
- with ``model.lora``: the policy's base weights frozen (4N, no gradient, no Adam state), gradients and Adam moments
  for the adapters only (:func:`lora_params`), and no reference copy (the reference is the policy with its adapters
  off). A LoRA critic (``algorithm.critic.lora``, by default the policy's) likewise: its trunk frozen, gradients and
  Adam moments for its adapters and scalar head (:func:`trained_params`).

Peak = resident (models and optimizer states) + the larger of the training and the generation phase; an error when it
exceeds the device, a warning above 90%. Measured on a CPU (SmolLM2-135M, 4 x 128 tokens, bf16 autocast), the bytes
autograd saves for backward are 2.5% below this count without checkpointing and 1.3% below with it
(``benchmarks/bench_activation_memory.py``); the CPU demo's count (bf16, AVX-512 + AMX Xeon), 4.24 GiB, plus the
~0.4-0.5 GiB the interpreter and libraries take, matches its measured peak RSS of 4.75 GiB (2 steps, /usr/bin/time).
Not compared with a GPU yet.

The models held beside the policy are read from the recipe as the trainer reads it (:data:`EXTRA_MODELS`, from the
algorithm's needs, :func:`rlvr.algo.table.needs`): the reference when ``algorithm.kl.beta > 0`` or for PPO (which
always loads it, to measure the KL from the initial policy), each reward model under ``reward.source: reward_model |
both``, and PPO's critic (trained: a copy of the first reward model with ``algorithm.critic.init: reward_model``, else
of the policy). A reward model's size is read from its
``config.json`` as a causal LM's, so an untied LM head it does not have is counted too (a slight overestimate). Adding a
model is one line in :data:`EXTRA_MODELS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.algo.table import ALGORITHMS, needs
from rlvr.config import Recipe
from rlvr.preflight.devices import GIB, DeviceMemory
from rlvr.preflight.model_shape import ModelShape

if TYPE_CHECKING:
    from rlvr.models.precision import PrecisionChoice

CUDA_OVERHEAD_BYTES = int(1.5 * GIB)
ASSUMED_PROMPT_TOKENS = 512
"""Prompt length assumed when the data is not loaded (``rlvr check`` without the dataset)."""


def _key(recipe: Any, dotted: str) -> Any:
    """``recipe.a.b`` or ``None`` when any part is missing."""
    obj = recipe
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def model_folder(path: str) -> str:
    """The folder with a reward model's ``config.json``: ``path``, or ``path/model`` for an ``rlvr rm train`` run
    directory (``reward_model.path`` may name either)."""
    if not (Path(path) / "config.json").is_file() and (Path(path) / "model" / "config.json").is_file():
        return str(Path(path) / "model")
    return path


def reward_model_paths(recipe: Recipe) -> list[str]:
    """The reward models the trainer loads: ``reward_model.path`` or every one of ``paths`` (an ensemble), when
    ``reward.source`` uses them; else none."""
    rm = recipe.reward_model
    if rm is None or recipe.reward.source == "verifiers":
        return []
    return [model_folder(p) for p in (rm.paths or [rm.path])]


def critic_path(recipe: Recipe) -> list[str]:
    """The critic of an algorithm with one (:func:`rlvr.algo.table.needs`, PPO's): the first reward model
    (``critic.init: reward_model``) or the policy; none for other algorithms."""
    a = recipe.algorithm
    if not needs(a).critic:
        return []
    if a.critic.init == "reward_model" and recipe.reward_model is not None:
        rm = recipe.reward_model
        return [model_folder(rm.path or rm.paths[0])]
    return [recipe.model.name]


EXTRA_MODELS: tuple[tuple[str, Callable[[Recipe], list[str]], bool], ...] = (
    # (role, the models the recipe holds in it (none, one, or an ensemble's members), trained?)
    # a LoRA policy's reference is the policy itself with its adapters off: no second copy
    ("reference", lambda r: [r.model.name] if needs(r.algorithm).reference and r.model.lora is None else [], False),
    ("reward model", reward_model_paths, False),
    ("critic", critic_path, True),
)
"""Models held beside the policy, read from the recipe as the trainer builds them (:mod:`rlvr.trainer.trainer`)."""


def lora_params(shape: ModelShape, lora: Any) -> int:
    """Parameters of rank-``lora.rank`` adapters (A: r x d_in, B: d_out x r) on the Llama/Qwen2-style linear layers
    ``lora.target_modules`` names (``all-linear``: the seven of each block), over every layer."""
    d, q, kv, i = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.intermediate
    dims = {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d), "gate_proj": (d, i),
            "up_proj": (d, i), "down_proj": (i, d)}
    names = dims if lora.target_modules == "all-linear" else [n for n in lora.target_modules if n in dims]
    return shape.layers * sum(lora.rank * sum(dims[n]) for n in names)


def trained_lora(recipe: Recipe, role: str) -> Any:
    """The adapters a trained model of ``role`` takes (a ``LoraConfig``), or ``None`` when its every weight trains:
    the policy's ``model.lora``; PPO's critic's ``algorithm.critic.lora``, ``policy`` meaning ``model.lora`` (as
    :func:`rlvr.trainer.critic.critic_lora` reads it); other roles are never trained with adapters."""
    if role == "policy":
        return recipe.model.lora
    if role == "critic":
        lora = recipe.algorithm.critic.lora
        return recipe.model.lora if lora == "policy" else lora
    return None


def trained_params(shape: ModelShape, recipe: Recipe, role: str) -> int:
    """Parameters of a trained model of ``role`` that have gradients and Adam moments: all of ``shape`` without
    LoRA; with it the adapters (:func:`lora_params`), plus a critic's scalar head trained whole beside them
    (``hidden`` weights: Llama/Qwen2 sequence-classification heads have no bias)."""
    lora = trained_lora(recipe, role)
    if lora is None:
        return shape.params
    return lora_params(shape, lora) + (shape.hidden if role == "critic" else 0)


def held_models(recipe: Recipe) -> list[tuple[str, str, bool]]:
    """``(role, model name or folder, trained)`` of every model a run of ``recipe`` holds, the policy first; an
    ensemble's members are ``reward model 1``, ``reward model 2``, ..."""
    held = [("policy", recipe.model.name, True)]
    for role, names_of, trained in EXTRA_MODELS:
        names = names_of(recipe)
        held += [(role if len(names) == 1 else f"{role} {i + 1}", name, trained) for i, name in enumerate(names)]
    return held


def compute_bytes(recipe: Recipe, device_kind: str, shape: ModelShape | None = None) -> tuple[int, int, str | None]:
    """Bytes of an activation in each stage's dtype, ``(training, generation)``: 2 in bf16, 4 in fp32, as
    ``trainer.precision`` resolves (:func:`rlvr.models.precision.choose_precision`): ``auto`` is bf16 on a GPU, fp32 on
    a CPU without native bf16, and on a CPU with native bf16 what its cached measurement chose per stage (measured now,
    ~1-2 s, under ``trainer.num_threads``, where this CPU has none cached for ``shape``). Recipes with the old
    ``trainer.bf16`` switch are read by it. The third item is the measured choice's line, else ``None``."""
    precision = _key(recipe, "trainer.precision")
    if precision is None:
        act = 2 if getattr(recipe.trainer, "bf16", True) else 4
        return act, act, None
    if precision == "auto" and device_kind == "cpu":
        if not _cpu_native_bf16():
            return 4, 4, None
        choice = _measured_cpu_choice(recipe, shape)
        return (2 if choice.name == "bf16" else 4), (2 if choice.generation == "bf16" else 4), choice.reason
    act = 4 if precision == "fp32" else 2
    return act, act, None


def _cpu_native_bf16() -> bool:
    from rlvr.kernels.machine import cpu_native_bf16

    return cpu_native_bf16()[0]


def _measured_cpu_choice(recipe: Recipe, shape: ModelShape | None) -> PrecisionChoice:
    """``auto``'s choice on this CPU for the policy's shape, with the run's thread count (a run measures under
    ``trainer.num_threads``, and the cache is keyed by it)."""
    import torch

    from rlvr.models.precision import choose_precision

    threads = torch.get_num_threads()
    if recipe.trainer.num_threads:
        torch.set_num_threads(recipe.trainer.num_threads)
    try:
        return choose_precision("auto", "cpu", (shape.hidden, shape.intermediate) if shape is not None else None)
    finally:
        torch.set_num_threads(threads)


@dataclass(frozen=True)
class Part:
    """One line of the estimate: ``phase`` is ``resident``, ``train`` or ``generate``; ``knob`` is what shrinks it."""

    name: str
    bytes: float
    phase: str
    knob: str


@dataclass
class MemoryEstimate:
    """Bytes per rank by part, and the peak against the device."""

    parts: list[Part]
    device: DeviceMemory
    host_bytes: float = 0.0
    """Optimizer states offloaded to the host, per rank."""
    notes: list[str] = field(default_factory=list)
    kv_cache_tokens: int | None = None
    """Tokens vLLM's cache holds after its weights (None: not vLLM on a GPU)."""

    def phase_bytes(self, phase: str) -> float:
        return sum(p.bytes for p in self.parts if p.phase == phase)

    @property
    def peak_bytes(self) -> float:
        return self.phase_bytes("resident") + max(self.phase_bytes("train"), self.phase_bytes("generate"))

    @property
    def peak_phase(self) -> str:
        return "training" if self.phase_bytes("train") >= self.phase_bytes("generate") else "generation"

    @property
    def fraction(self) -> float:
        return self.peak_bytes / self.device.bytes if self.device.bytes else float("nan")

    def biggest(self) -> Part:
        """The largest part in play at the peak: the first thing to shrink."""
        phase = "train" if self.peak_phase == "training" else "generate"
        return max((p for p in self.parts if p.phase in ("resident", phase)), key=lambda p: p.bytes)

    def table(self) -> str:
        lines = [f"{p.name:<66} {p.bytes / GIB:8.2f} GiB  ({p.phase})" for p in self.parts if p.bytes > 0]
        lines.append(f"{'peak (' + self.peak_phase + ')':<66} {self.peak_bytes / GIB:8.2f} GiB  of "
                     f"{self.device.gib:.1f} GiB ({self.device.name}): {100 * self.fraction:.0f}%")
        if self.host_bytes:
            lines.append(f"{'host RAM for offloaded optimizer states':<66} {self.host_bytes / GIB:8.2f} GiB")
        return "\n".join(lines + self.notes)


def activation_rows(recipe: Recipe, seq_tokens: int) -> int:
    """Rows of the largest micro-batch at ``seq_tokens`` per row (as :func:`rlvr.trainer.micro_batches.
    plan_micro_batches` packs them: at most ``micro_batch_size`` rows and ``micro_batch_tokens`` padded tokens)."""
    o = recipe.optim
    rows = o.micro_batch_size
    if o.micro_batch_tokens is not None:
        rows = min(rows, max(1, o.micro_batch_tokens // seq_tokens))
    per_rank = recipe.rollout.prompts_per_step * recipe.rollout.group_size
    return max(1, min(rows, per_rank))


def block_activation_bytes_per_token(shape: ModelShape, act_bytes: int) -> int:
    """What autograd keeps for one token of one block of a Llama/Qwen2-style layer (see the module docstring).

    Two RMSNorms keep their fp32 input and normalised output (4d x 4 bytes) and their output in the compute dtype (2d);
    attention keeps q and k before and after the rotary embedding (2q + 2kv), SDPA's q and the k, v repeated to every
    head plus its output (4q), and o_proj's input (q); the MLP keeps gate, up, act(gate) and their product (4I).
    Measured on SmolLM2-135M (saved-tensor hooks, 4 x 128 tokens, bf16 autocast, CPU): the count is 2.5% above what
    autograd saved (`benchmarks/bench_activation_memory.py`).
    """
    d, kv, i = shape.hidden, shape.kv_heads * shape.head_dim, shape.intermediate
    q = shape.heads * shape.head_dim
    fp32_norms = 4 * d * 4
    compute = (2 * d + 2 * q + 2 * kv + 4 * q + q + 4 * i) * act_bytes
    return fp32_norms + compute


VLLM_DEFAULT_GPU_SHARE = 0.9
"""vLLM's ``--gpu-memory-utilization`` where a launched server's ``extra_args`` do not set it."""


def _launched_server_parts(r: Recipe, policy: ModelShape, device: DeviceMemory) -> list[Part]:
    """What the servers of ``rollout.servers.launch`` take of this rank's device: on a CPU machine each holds the bf16
    weights and ``rlvr serve``'s KV cache in the host's RAM; on a GPU machine those on the trainer's GPU take vLLM's
    share of it (servers on other GPUs and servers given by URL take nothing here)."""
    launch = r.rollout.servers.launch
    if launch.count == 0:
        return []
    knob = "rollout.servers.launch (devices, count), or servers elsewhere (rollout.servers.urls)"
    if device.kind != "gpu":
        from rlvr.serving.vllm_server import DEFAULT_CPU_KV_CACHE_GIB as kv

        return [Part(f"{launch.count} rollout server(s) here (bf16 weights + {kv} GiB KV cache each)",
                     launch.count * (2 * policy.params + kv * GIB), "resident", knob)]
    from rlvr.rollout.server_launch import on_trainer_gpu

    shared = sum(on_trainer_gpu(launch.devices, launch.count)[1])
    if not shared:
        return []
    args, share = list(launch.extra_args), VLLM_DEFAULT_GPU_SHARE
    for i, arg in enumerate(args):
        if arg.startswith("--gpu-memory-utilization"):
            try:
                share = float(arg.split("=", 1)[1] if "=" in arg else args[i + 1])
            except (ValueError, IndexError):
                pass  # vLLM refuses the argument itself, naming it
    return [Part(f"{shared} rollout server(s) on the trainer's GPU ({share:.2f} of it each: vLLM's "
                 f"--gpu-memory-utilization)", shared * share * device.bytes, "resident",
                 "rollout.servers.launch.extra_args: ['--gpu-memory-utilization', '0.3'], or other GPUs (devices)")]


def estimate_memory(recipe: Recipe, shapes: dict[str, ModelShape], device: DeviceMemory, *, ranks: int,
                    max_prompt_tokens: int | None) -> MemoryEstimate:
    """Bytes per rank of ``recipe`` on ``device`` with ``ranks`` data-parallel ranks.

    Args:
        shapes: each role of :func:`held_models` (``policy``, ``reference``, ``reward model`` or ``reward model 1``,
            ..., ``critic``), by role; a role whose model is the policy's (the reference) may be left out.
        max_prompt_tokens: the longest training prompt; ``None``: :data:`ASSUMED_PROMPT_TOKENS` (noted).
    Raises:
        KeyError: a role the recipe holds without its shape in ``shapes``.
    """
    r, z, gpu = recipe, recipe.trainer.zero_stage, device.kind == "gpu"
    act, gen_act, measured = compute_bytes(recipe, device.kind, shapes["policy"])
    parts: list[Part] = []
    notes: list[str] = [f"({measured})"] if measured else []
    host = 0.0
    for role, name, trained in held_models(r):
        shape = shapes[role] if role in shapes or name != r.model.name else shapes["policy"]  # the reference: policy
        n = shape.params
        if not trained:
            knob = "a smaller reward model, or fewer in the ensemble"
            if role == "reference":
                always = ALGORITHMS[r.algorithm.name].always_reference
                knob = (f"a smaller policy ({r.algorithm.name} always holds the reference)" if always
                        else "algorithm.kl.beta: 0 (no reference model)")
            parts.append(Part(f"{role} weights (fp32, {'ZeRO-3 / %d ranks' % ranks if z == 3 else 'whole'})",
                              4 * n / (ranks if z == 3 else 1), "resident",
                              knob if z == 3 else f"{knob}, or trainer.zero_stage: 3 (shards it)"))
            continue
        lora = trained_lora(r, role)
        if lora is not None:  # frozen base weights; gradients and Adam for the adapters (and a critic's head) only
            adapters = trained_params(shape, r, role)
            parts.append(Part(f"{role} frozen base weights (fp32{', ZeRO-3 / %d ranks' % ranks if z == 3 else ''})",
                              4 * n / (ranks if z == 3 else 1), "resident", "trainer.zero_stage: 3 (shards weights)"))
            notes.append(f"(LoRA: {adapters / 1e6:.1f}M adapter parameters train; the base's {n / 1e9:.2f}B stay "
                         f"frozen, and the reference is the policy with its adapters off)" if role == "policy" else
                         f"(LoRA {role}: {adapters / 1e6:.2f}M parameters train, its adapters and scalar head; the "
                         f"trunk's {n / 1e9:.2f}B stay frozen)")
            n = adapters
        parts.append(Part(f"{role} {'adapter ' if lora is not None else ''}weights "
                          f"(fp32{', ZeRO-3 / %d ranks' % ranks if z == 3 else ''})",
                          4 * n / (ranks if z == 3 else 1), "resident", "trainer.zero_stage: 3 (shards weights)"))
        parts.append(Part(f"{role} gradients (fp32{', ZeRO-%d / %d ranks' % (z, ranks) if z >= 2 else ''})",
                          4 * n / (ranks if z >= 2 else 1), "resident", "trainer.zero_stage: 2 or 3"))
        adam = 8 * n / (ranks if z >= 1 else 1)
        if r.trainer.offload_optimizer:
            host += adam + (4 * n / (ranks if z >= 1 else 1))  # DeepSpeed's CPU Adam keeps an fp32 master copy too
            parts.append(Part(f"{role} Adam moments (offloaded to the host)", 0.0, "resident", ""))
        else:
            parts.append(Part(f"{role} Adam moments (fp32 x 2{', ZeRO-%d / %d ranks' % (z, ranks) if z >= 1 else ''})",
                              adam, "resident", "trainer.offload_optimizer: true, or trainer.zero_stage >= 1"))
        if z == 3:
            parts.append(Part(f"{role} ZeRO-3 gathered blocks (2, fp32)", 2 * 4 * shape.layer_params, "train",
                              "trainer.deepspeed_config (stage3_prefetch_bucket_size)"))

    policy = shapes["policy"]
    # autocast caches a bf16 cast of every weight it multiplies with, until its region ends (forward, hf generate)
    casts = 2 * policy.params / (ranks if z == 3 else 1) if act == 2 else 0.0
    if casts:
        parts.append(Part("bf16 weight casts cached by autocast", casts, "train",
                          "trainer.bf16: false (fp32: no casts, but 2x activations)"))
    prompt = max_prompt_tokens if max_prompt_tokens is not None else ASSUMED_PROMPT_TOKENS
    if max_prompt_tokens is None:
        notes.append(f"(prompts assumed {ASSUMED_PROMPT_TOKENS} tokens long: the data was not loaded)")
    seq = prompt + r.rollout.max_new_tokens
    if r.rollout.vllm_max_model_len is not None:
        seq = min(seq, r.rollout.vllm_max_model_len)
    response = min(r.rollout.max_new_tokens, seq)
    rows = activation_rows(recipe, seq)
    tokens = rows * seq
    if r.model.gradient_checkpointing:
        kept = policy.layers * tokens * policy.hidden * 4 + tokens * block_activation_bytes_per_token(policy, act)
        how = "checkpointed: a hidden state per layer + one block"
    else:
        kept = policy.layers * tokens * block_activation_bytes_per_token(policy, act)
        how = "every block"
    parts.append(Part(f"activations ({rows} rows x {seq} tokens, {how})", kept, "train",
                      "optim.micro_batch_tokens / optim.micro_batch_size, or model.gradient_checkpointing: true"))
    if act == 2 and not gpu:  # rlvr.models.attention's CPU training path keeps (Q, L) scores while they stay small
        from rlvr.models.attention import MAX_SCORES_BYTES, scores_bytes

        per_layer = scores_bytes(rows, policy.heads, seq, seq)
        if per_layer <= MAX_SCORES_BYTES:
            parts.append(Part(f"attention scores ({rows} rows x {policy.heads} heads x {seq}^2, fp32 + bf16, CPU)",
                              policy.layers * per_layer, "train", "optim.micro_batch_size"))
    parts.append(Part(f"logits + their gradient ({rows} x {response} x {policy.vocab} vocab)",
                      2 * rows * response * policy.vocab * act, "train",
                      "optim.micro_batch_tokens / optim.micro_batch_size"))

    kv_tokens = None
    engine = r.rollout.engine
    if engine == "auto":  # `rollout.engine: auto` (being added): vLLM where a GPU is, else hf; the estimate's guess
        engine = "vllm" if gpu else "hf"
    if engine == "vllm":
        share = r.rollout.vllm_gpu_memory_utilization * device.bytes if gpu else (
            2 * policy.params + 2 * GIB)  # vLLM's CPU backend: bf16 weights + VLLM_CPU_KVCACHE_SPACE (rlvr sets 2)
        phase = "generate" if (r.rollout.vllm_sleep_mode and gpu) else "resident"
        parts.append(Part(f"vLLM ({r.rollout.vllm_gpu_memory_utilization:.2f} of the GPU: bf16 weights + KV cache"
                          f"{', freed while training' if phase == 'generate' else ''})" if gpu else
                          "vLLM CPU backend (bf16 weights + 2 GiB KV cache)", share, phase,
                          "rollout.vllm_gpu_memory_utilization, or rollout.vllm_sleep_mode: true"))
        if gpu:
            kv_tokens = int(max(0.0, share - 2 * policy.params - 0.5 * GIB) // policy.kv_bytes_per_token)
    elif engine == "server":
        parts += _launched_server_parts(r, policy, device)
    elif engine == "hf":
        seqs = min(r.rollout.generation_batch_size, r.rollout.prompts_per_step * r.rollout.group_size)
        # a bf16 generation copy of the fp32 weights; on a CPU with native bf16 its linear layers also hold
        # oneDNN-packed weights (rollout.packed_linear.packing_supported: not where bf16 is forced on a CPU that
        # emulates it)
        copy = 2 * policy.params / (ranks if z == 3 else 1) if gen_act == 2 else 0.0  # ZeRO-3: autocast's casts
        packed = copy if copy and not gpu and _cpu_native_bf16() else 0.0
        parts.append(Part(f"hf generation KV cache ({seqs} sequences x {seq} tokens)"
                          f"{' + bf16 weight copy' if copy else ''}{' + its packed weights' if packed else ''}",
                          seqs * seq * policy.kv_bytes_per_token * gen_act / 2 + copy + packed, "generate",
                          "rollout.generation_batch_size"))
    if gpu:
        parts.append(Part("CUDA context + allocator slack", CUDA_OVERHEAD_BYTES, "resident", ""))
    return MemoryEstimate(parts=parts, device=device, host_bytes=host, notes=notes, kv_cache_tokens=kv_tokens)


def judge_memory(est: MemoryEstimate, recipe: Recipe) -> tuple[str, str]:
    """(level, message): ``error`` past the device's memory or when vLLM's share holds no whole sequence after its
    weights (vLLM refuses to start), ``warn`` above 90% of the device, else ``info``; the message is what is wrong
    (with the knob to turn), then the table."""
    table = est.table()
    problems: list[str] = []
    if est.kv_cache_tokens is not None:
        max_len = recipe.rollout.vllm_max_model_len or (ASSUMED_PROMPT_TOKENS + recipe.rollout.max_new_tokens)
        seqs = est.kv_cache_tokens / max_len
        table += f"\nvLLM KV cache: {est.kv_cache_tokens:,} tokens = {seqs:.1f} sequences of {max_len} at once"
        if seqs < 1:
            problems.append("vLLM's share of the GPU cannot hold its bf16 weights and one whole sequence (vLLM "
                            "refuses to start): raise rollout.vllm_gpu_memory_utilization or lower "
                            "rollout.vllm_max_model_len")
    if est.device.bytes and est.fraction > 1.0:
        big = est.biggest()
        problems.insert(0, f"{est.peak_bytes / GIB:.1f} GiB per rank at the peak of {est.peak_phase} does not fit in "
                           f"{est.device.gib:.1f} GiB ({est.device.name}); the largest part is {big.name} "
                           f"({big.bytes / GIB:.1f} GiB): turn {big.knob or 'it down'}")
    if problems:
        return "error", "\n".join(problems + [table])
    if est.device.bytes and est.fraction > 0.9:
        return "warn", f"above 90% of the device's memory: little room for fragmentation\n{table}"
    return "info", table


def tokens_per_step(recipe: Recipe) -> int:
    """Response tokens one step generates at the cap (every sample at ``max_new_tokens``; with dynamic sampling,
    every round)."""
    ds = recipe.algorithm.dynamic_sampling
    rounds = ds.max_rounds if ds.enabled else 1
    return recipe.rollout.prompts_per_step * recipe.rollout.group_size * recipe.rollout.max_new_tokens * rounds
