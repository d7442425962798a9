"""The recipes of the stages trained on fixed data: supervised fine-tuning (``kind: sft``, ``rlvr sft``) and direct
preference optimisation (``kind: dpo``, ``rlvr dpo``: DPO, conservative DPO, IPO).

Both run in the RL recipes' loop, on the same model workers, checkpoints and run folder; they share the ``model``,
``optim``, ``trainer`` (:class:`rlvr.config.schema.RunConfig`), ``logging`` and ``verifiers`` sections with them.
``algorithm.name`` names a row of :data:`rlvr.algo.table.OBJECTIVES`, which says what it needs.

This module imports no torch.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from rlvr.algo.table import OBJECTIVES
from rlvr.config.schema import (
    MAX_COUNT,
    MAX_SAMPLES_PER_PROMPT,
    MAX_SEED,
    HFSource,
    JsonlSource,
    LoggingConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    VerifierConfig,
    _Section,
)

ObjectiveName = Annotated[str, AfterValidator(OBJECTIVES.check), OBJECTIVES]
"""A row of :data:`rlvr.algo.table.OBJECTIVES` (the recipe reference lists them)."""

TextSource = JsonlSource | HFSource


class StageDataConfig(_Section):
    """What the SFT and DPO data sections share: sources, the held-out split, lengths, the chat template."""

    source: TextSource = Field(discriminator="type")
    """The training rows: a JSONL/parquet file or a datasets hub name or folder, chosen by ``type``."""
    eval_source: TextSource | None = Field(None, discriminator="type")
    """Held-out rows; ``None``: ``eval_size`` rows (SFT) or prompts (DPO) are held out of ``source``."""
    eval_size: int = Field(32, ge=0, le=MAX_COUNT)
    """Held out of ``source`` when there is no ``eval_source`` (a seeded shuffle; a DPO prompt's pairs stay on one
    side): the held-out loss, preference accuracy and generation eval read them. 0 = none."""
    max_length: int = Field(1024, gt=1, le=MAX_COUNT)
    """Tokens of a whole sequence (prompt and response) at most; longer rows are dropped (their count is printed) or
    refused (``overlong``)."""
    overlong: Literal["drop", "error"] = "drop"
    """A row longer than ``max_length``: ``drop`` it (the count is printed at start), or ``error`` naming it."""
    chat_template: str | None = None
    """The chat template that renders conversations, in place of the tokenizer's: Jinja text, or the path of a
    ``.jinja`` file (relative: the recipe's folder, then the working directory). It is saved with the run's
    checkpoints, so a run started from them renders the same way. ``None`` = the tokenizer's own."""
    special_tokens_in_text: Literal["refuse", "split"] = "refuse"
    """Text of the data holding the string of a special token (``<|im_end|>``): ``refuse`` the row (an error naming
    it), or ``split`` it into ordinary tokens so it never becomes a control token."""
    answer_field: str | None = "answer"
    """Row field the verifiers of the generation eval read (``verifiers``); ``None`` when they need none."""


class SFTDataConfig(StageDataConfig):
    """SFT rows: a conversation (``messages``, with an optional ``tools`` column), or a ``prompt`` and a
    ``completion``. Text is taken as it is (a completion gets the eos token); lists of messages go through the chat
    template. The loss is on the completion or the assistant turns only (``assistant_turns``)."""

    messages_field: str = "messages"
    """Row field of a conversation: a list of ``{"role", "content"}`` messages (system, user, assistant with optional
    ``tool_calls`` in the OpenAI format, tool)."""
    prompt_field: str = "prompt"
    """Row field of a prompt (text, or a list of messages) when a row has no ``messages_field``."""
    completion_field: str = "completion"
    """Row field of the completion to learn (text, or a list of messages holding an assistant turn)."""
    tools_field: str = "tools"
    """Row field with the tools (OpenAI function format) the chat template shows, where a row has it."""
    assistant_turns: Literal["all", "last"] = "all"
    """Which assistant turns of a conversation are learned: ``all`` (every assistant turn, its tool calls included),
    or ``last`` (the final one; earlier turns are context). Prompt/completion rows: the completion's."""
    mask_fenced_outputs: bool = False
    """Mask the fenced ``output`` blocks inside assistant turns: the tool answers of the fenced call format
    (``rollout.call_format: fenced``), which a rollout appends after the model's closed ``python`` block; the model
    never writes them, so they are not learned (the code before and the answer after are)."""
    examples_per_step: int = Field(16, gt=0, le=MAX_COUNT)
    """Rows per optimizer step (over all ranks), in micro-batches of ``optim.micro_batch_size`` rows and at most
    ``optim.micro_batch_tokens`` tokens (packed rows: the tokens themselves, without padding)."""
    max_train_examples: int | None = Field(None, gt=0)
    """Use at most this many training rows (after the held-out split); ``None`` = all."""


class DPODataConfig(StageDataConfig):
    """Preference rows, the format ``rlvr rm train`` reads: ``prompt``, ``chosen``, ``rejected``; or ``prompt`` and
    ``responses`` ranked best first (every one of the K(K-1)/2 pairs). A text prompt is taken as it is (``rlvr rm
    pairs`` writes the rendered chat prompt) and a text response gets the eos token; a prompt that is a list of
    messages goes through the chat template, with responses as text or lists of assistant messages."""

    pairs_per_step: int = Field(8, gt=0, le=MAX_COUNT)
    """Pairs per optimizer step (over all ranks); a micro-batch never splits a pair."""
    max_train_pairs: int | None = Field(None, gt=0)
    """Use at most this many training pairs (after the held-out split); ``None`` = all."""


class SFTObjectiveConfig(_Section):
    """The objective of an SFT recipe."""

    name: ObjectiveName = "sft"
    """A row of the objective table (``rlvr/algo/table.py``) whose stage is ``sft``."""

    @model_validator(mode="after")
    def _validate_stage(self) -> "SFTObjectiveConfig":
        _check_stage(self.name, "sft")
        return self


class PreferenceObjectiveConfig(_Section):
    """The preference loss of a DPO recipe and its settings."""

    name: ObjectiveName = "dpo"
    """``dpo`` (sigmoid), ``cdpo`` (DPO with label smoothing) or ``ipo`` (per-token normalised log-ratios): a row of
    the objective table (``rlvr/algo/table.py``) whose stage is ``dpo``."""
    beta: float = Field(0.1, gt=0, allow_inf_nan=False)
    """How far the policy may move from the reference: DPO's beta (the implicit reward is beta times the log-ratio);
    IPO's tau (the target margin of the per-token log-ratios is 1 / (2 beta))."""
    label_smoothing: float = Field(0.0, ge=0, lt=0.5)
    """``cdpo``: the probability that a pair's label is flipped (conservative DPO); the other losses refuse a value
    other than 0."""
    nll_weight: float = Field(0.0, ge=0, allow_inf_nan=False)
    """Weight of the chosen response's negative log-likelihood per token added to the loss (RPO, 2404.19733): it keeps
    the chosen response's probability from falling with the rejected one's; 0 = none."""
    reference: str | None = None
    """The reference policy: ``None`` = the policy as training starts (``model.name``; under ``model.lora`` the same
    weights, adapters off); or a model folder or run. Its log-probs of every pair are computed once before the first
    step and stored in the run (``reference_logprobs.pt``); the model is freed before training."""

    @model_validator(mode="after")
    def _validate_settings(self) -> "PreferenceObjectiveConfig":
        row = _check_stage(self.name, "dpo")
        for key in sorted({k for r in OBJECTIVES for k in r.settings} - set(row.settings)):
            value, default = getattr(self, key), type(self).model_fields[key].default
            if value != default:
                raise ValueError(f"algorithm.{key}={value!r} has no meaning with algorithm.name={self.name!r}, which "
                                 f"reads {', '.join('algorithm.' + k for k in row.settings)}: remove it (default "
                                 f"{default!r})")
        return self


def _check_stage(name: str, stage: str) -> Any:
    row = OBJECTIVES[name]
    if row.stage != stage:
        fitting = [r.name for r in OBJECTIVES if r.stage == stage]
        raise ValueError(f"algorithm.name={name!r} is an objective of a {row.stage} recipe (`rlvr {row.stage}`); a "
                         f"{stage} recipe takes {', '.join(map(repr, fitting))}")
    return row


class StageEvalConfig(_Section):
    """Held-out evaluation of an SFT or DPO run: the loss (and for DPO the preference accuracy) on the held-out split
    before training, every ``every`` steps and at the end; with ``verifiers``, also pass@1 of generations from the
    held-out prompts."""

    enabled: bool = True
    """Evaluate before the first step and after the last."""
    every: int = Field(0, ge=0)
    """Also evaluate every N steps (0 = only before and after)."""
    k: int = Field(1, ge=1, le=MAX_SAMPLES_PER_PROMPT)
    """Generations per held-out prompt (with ``verifiers``): pass@1 is averaged over them."""
    temperature: float = Field(0.0, ge=0)
    """Sampling temperature of the generation eval; 0 = greedy (then k is 1)."""
    max_new_tokens: int = Field(256, gt=0, le=MAX_COUNT)
    """Most tokens generated per held-out prompt."""
    max_prompts: int | None = Field(None, gt=0)
    """Generate for at most this many held-out prompts (the held-out loss reads them all); ``None`` = all."""
    seed: int = Field(1234, ge=0, le=MAX_SEED)
    """Seed of evaluation sampling (independent of training)."""


class _StageRecipe(_Section):
    kind: Literal["sft", "dpo"]
    """The recipe's kind (each kind's class narrows it)."""
    seed: int = Field(0, ge=0, le=MAX_SEED)
    """Seeds the data split and order and the initialisation; the same seed and recipe give the same run."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy to train (a run folder of an earlier stage is accepted: its newest model)."""
    verifiers: list[VerifierConfig] = Field(default_factory=list)
    """Verifiers of the generation eval (pass@1 on the held-out prompts; the first listed decides "solved"); empty =
    no generation eval. They never enter the loss."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """The policy's optimizer (one optimizer step per training step)."""
    trainer: RunConfig = Field(default_factory=RunConfig)
    """Steps, parallelism, precision, checkpoints and limits of the run."""
    eval: StageEvalConfig = Field(default_factory=StageEvalConfig)
    """Held-out loss and, with verifiers, generation eval."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Where metrics go besides ``metrics.jsonl`` and TensorBoard."""

    @property
    def solved_verifier(self) -> str | None:
        """The verifier whose score 1 means solved (the first listed), or ``None`` without verifiers."""
        return self.verifiers[0].name if self.verifiers else None


class SFTRecipe(_StageRecipe):
    """A supervised fine-tuning recipe (``rlvr sft RECIPE.yaml -o RUN_DIR``)."""

    kind: Literal["sft"]
    """Marks the file as an SFT recipe (``rlvr check`` and the commands tell the kinds apart by it)."""
    data: SFTDataConfig
    """The examples to learn and how their loss mask is made."""
    algorithm: SFTObjectiveConfig = Field(default_factory=SFTObjectiveConfig)
    """The objective (``sft``)."""


class DPORecipe(_StageRecipe):
    """A direct preference optimisation recipe (``rlvr dpo RECIPE.yaml -o RUN_DIR``): DPO, cDPO or IPO."""

    kind: Literal["dpo"]
    """Marks the file as a preference recipe (``rlvr check`` and the commands tell the kinds apart by it)."""
    data: DPODataConfig
    """The preference pairs."""
    algorithm: PreferenceObjectiveConfig = Field(default_factory=PreferenceObjectiveConfig)
    """The preference loss and its settings."""


StageRecipe = SFTRecipe | DPORecipe
