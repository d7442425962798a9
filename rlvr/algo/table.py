"""The algorithm table: one row per algorithm (``algorithm.name``), one per policy loss (``algorithm.policy_loss``), one
per correction for stale and mismatched tokens (``algorithm.correction.type``) and one per objective of the stages
trained on fixed data (``algorithm.name`` of an ``sft`` or ``dpo`` recipe).

A row says everything the rest of rlvr needs to know about a choice: the function that computes it (named by import
path, so this module imports no torch and the recipe schema can read it), where it normalises, its defaults, and what
a step of it needs (a reference model, a critic, the policy's own log-probs before the update). The schema validates
``algorithm.name``, ``algorithm.policy_loss`` and ``algorithm.correction.type`` against these tables and fills defaults
from them, the trainer builds its advantage stage and loss from them, the pre-flight memory estimate counts the models
they need, and ``docs/recipe-reference.md`` lists them.

Adding an estimator (or a loss) is one function and one row::

    # rlvr/algo/advantages.py: a pure tensor function, (B, G) rewards -> (B, G) advantages
    def max_baseline_advantages(rewards, *, valid=None, std_normalize=False, eps=1e-6): ...

    # here, below the others
    ALGORITHMS.add(AlgorithmRow(
        "max_baseline", advantages="rlvr.algo.advantages:max_baseline_advantages", baseline="group",
        normalisation="group", std_normalize=False, summary="the group's best reward as the baseline"))

Supervised fine-tuning and the preference losses (DPO, cDPO, IPO) are rows of :data:`OBJECTIVES`: they run in the same
loop, on the same model workers and checkpoints as the RL algorithms, on batches read from data instead of sampled.

Every table refuses a second row of the same name and names the valid ones (with the closest) for an unknown name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from rlvr.did_you_mean import closest


class _Row(Protocol):
    name: str


R = TypeVar("R", bound=_Row)


class Table(Generic[R]):
    """Rows by name, in the order they were added.

    Args:
        kind: what a row is, in messages (``algorithm``, ``policy loss``).
        key: the recipe key that names a row, in messages (``algorithm.name``).
    """

    def __init__(self, kind: str, key: str) -> None:
        self.kind, self.key = kind, key
        self._rows: dict[str, R] = {}

    def add(self, row: R) -> R:
        """Add ``row``; returns it. Raises ValueError when a row of that name is already in the table."""
        if row.name in self._rows:
            raise ValueError(f"{self.kind} {row.name!r} is already in the table: a second row of the same name would "
                             f"replace it silently; pick another name")
        self._rows[row.name] = row
        return row

    def remove(self, name: str) -> R:
        """Take the row ``name`` out again (a test's toy row). Raises KeyError as :meth:`__getitem__`."""
        row = self[name]
        del self._rows[name]
        return row

    def __getitem__(self, name: str) -> R:
        """The row ``name``. Raises KeyError naming the valid names and the closest one."""
        if name not in self._rows:
            raise KeyError(self.unknown(name))
        return self._rows[name]

    def unknown(self, name: object) -> str:
        """The message for an unknown name: the closest valid one, and all of them."""
        close = closest(str(name), self._rows)
        hint = f"; did you mean {close!r}?" if close else ""
        return f"unknown {self.kind} {name!r}{hint} (valid {self.key}: {', '.join(self._rows)})"

    def check(self, name: str) -> str:
        """``name`` when it is a row's name (a pydantic validator). Raises ValueError as :meth:`unknown`."""
        if name not in self._rows:
            raise ValueError(self.unknown(name))
        return name

    def names(self) -> tuple[str, ...]:
        return tuple(self._rows)

    def __contains__(self, name: object) -> bool:
        return name in self._rows

    def __iter__(self) -> Iterator[R]:
        return iter(list(self._rows.values()))


def load_function(path: str) -> Callable[..., Any]:
    """The function at ``package.module:function``. Raises ValueError when it cannot be imported or found."""
    module, _, name = path.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot load {path!r} ({type(err).__name__}: {err}); a row names its function as "
                         "'package.module:function'") from None
    if not callable(fn):
        raise ValueError(f"{path!r} is a {type(fn).__name__}, not a function")
    return fn


# ------------------------------------------------------------------------------------------------------ algorithms
@dataclass(frozen=True)
class AlgorithmRow:
    """One algorithm: how its advantages are computed and what it implies.

    Attributes:
        name: the recipe's ``algorithm.name``.
        advantages: ``package.module:function`` of its advantage estimator. ``baseline: group``: a function of
            ``(rewards (B, G), *, valid (B, G) bool | None, std_normalize, eps) -> (B, G)``
            (:mod:`rlvr.algo.advantages`); ``baseline: critic``: GAE's ``(rewards (N, T), values (N, T), mask (N, T),
            *, gamma, lam) -> (advantages, returns)`` (:mod:`rlvr.algo.gae`).
        baseline: ``group``, the other samples of the prompt's group (an outcome reward per sample, broadcast over its
            tokens), or ``critic``, a value model trained beside the policy (per-token rewards, GAE).
        normalisation: where advantages are divided by a std (``advantage.std_normalize``): ``group``, inside the
            estimator; ``batch``, over all ranks' response tokens after any KL-in-reward penalty
            (:func:`rlvr.algo.advantages.whiten`).
        std_normalize: ``advantage.std_normalize`` when the recipe leaves it out (the paper's choice).
        kl_placement, kl_estimator: ``kl.placement`` / ``kl.estimator`` when the recipe leaves them out.
        always_reference: load the reference model even at ``kl.beta: 0`` (PPO measures the KL from the initial
            policy, ``train/sqrt_kl_from_init``).
        summary: one line for the recipe reference and ``rlvr config show``.
    """

    name: str
    advantages: str
    baseline: Literal["group", "critic"]
    normalisation: Literal["group", "batch"]
    std_normalize: bool
    summary: str
    kl_placement: Literal["loss", "reward"] = "loss"
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    always_reference: bool = False

    def advantage_function(self) -> Callable[..., Any]:
        """The estimator itself (imports its module, and with it torch)."""
        return load_function(self.advantages)


ALGORITHMS: Table[AlgorithmRow] = Table("algorithm", "algorithm.name")
ALGORITHMS.add(AlgorithmRow(
    "grpo", advantages="rlvr.algo.advantages:grpo_advantages", baseline="group", normalisation="group",
    std_normalize=True,
    summary="GRPO (2402.03300): the group's mean reward as the baseline, divided by the group's std"))
ALGORITHMS.add(AlgorithmRow(
    "rloo", advantages="rlvr.algo.advantages:rloo_advantages", baseline="group", normalisation="group",
    std_normalize=False, summary="REINFORCE leave-one-out (2402.14740): the mean of the group's other rewards"))
ALGORITHMS.add(AlgorithmRow(
    "reinforce_pp", advantages="rlvr.algo.advantages:reinforce_pp_advantages", baseline="group",
    normalisation="batch", std_normalize=True,
    summary="REINFORCE++-baseline (2501.03262): the group mean subtracted, then whitened over the global batch"))
ALGORITHMS.add(AlgorithmRow(
    "ppo", advantages="rlvr.algo.gae:gae_advantages", baseline="critic", normalisation="batch", std_normalize=True,
    kl_placement="reward", kl_estimator="k1", always_reference=True,
    summary="PPO (InstructGPT 2203.02155): a critic, per-token rewards with the KL penalty in them, GAE"))


# ---------------------------------------------------------------------------------------------------- policy losses
@dataclass(frozen=True)
class PolicyLossRow:
    """One per-token policy objective.

    Attributes:
        name: the recipe's ``algorithm.policy_loss``.
        loss: ``package.module:function`` of ``(inputs: PolicyLossInputs, **settings) -> PolicyLossOutput``
            (:mod:`rlvr.algo.losses`).
        settings: the ``algorithm`` keys it reads, passed to it as keyword arguments of the same names; a recipe that
            sets another loss's setting away from its default is refused (it would do nothing).
        summary: one line for the recipe reference.
    """

    name: str
    loss: str
    settings: tuple[str, ...]
    summary: str

    def loss_function(self) -> Callable[..., Any]:
        """The loss itself (imports its module, and with it torch)."""
        return load_function(self.loss)


POLICY_LOSSES: Table[PolicyLossRow] = Table("policy loss", "algorithm.policy_loss")
POLICY_LOSSES.add(PolicyLossRow(
    "ppo_clip", loss="rlvr.algo.losses:ppo_clip_loss",
    settings=("clip_low", "clip_high", "clip_ratio_c", "importance_sampling_level"),
    summary="PPO's clipped surrogate (a clipped token gets no gradient); GSPO at importance_sampling_level sequence"))
POLICY_LOSSES.add(PolicyLossRow(
    "cispo", loss="rlvr.algo.losses:cispo_loss", settings=("clip_low", "clip_high"),
    summary="CISPO (2506.13585): a clipped, stop-gradient importance weight times the log-prob"))


# ------------------------------------------------------------------------------------------------------ corrections
@dataclass(frozen=True)
class CorrectionRow:
    """One correction for tokens sampled by another policy than the trainer's old one (stale weights, another engine's
    numerics): a weight per token on the policy-gradient term from the behaviour ratio pi_old / pi_behav.

    Attributes:
        name: the recipe's ``algorithm.correction.type``.
        weights: ``package.module:function`` of ``(old_logprobs, rollout_logprobs, mask, **settings) -> Correction``
            (:mod:`rlvr.algo.corrections`); ``None``: no correction (the policy loss unchanged).
        settings: the ``algorithm.correction`` keys it reads and their defaults (a recipe that sets another key is
            refused: it would do nothing).
        summary: one line for the recipe reference.
    """

    name: str
    weights: str | None
    settings: dict[str, float]
    summary: str

    @property
    def needs_old_logprobs(self) -> bool:
        """A correction weighs by pi_old / pi_behav: it needs the policy's log-probs before the update."""
        return self.weights is not None

    def weight_function(self) -> Callable[..., Any]:
        """The correction itself (imports its module, and with it torch). Raises ValueError for the ``none`` row."""
        if self.weights is None:
            raise ValueError(f"correction {self.name!r} has no weights: the policy loss is used unchanged")
        return load_function(self.weights)


CORRECTIONS: Table[CorrectionRow] = Table("correction", "algorithm.correction.type")
CORRECTIONS.add(CorrectionRow("none", weights=None, settings={}, summary="no correction: the policy loss as it is"))
CORRECTIONS.add(CorrectionRow(
    "tis", weights="rlvr.algo.corrections:truncated_is", settings={"cap": 2.0},
    summary="truncated importance sampling: each token's loss times min(pi_old/pi_behav, cap); for the rollout "
            "engine's numerical mismatch (cap 2: verl's rollout_is_threshold)"))
CORRECTIONS.add(CorrectionRow(
    "seq_mask", weights="rlvr.algo.corrections:sequence_mask", settings={"low": 0.5, "high": 2.0},
    summary="drop every token of a sample whose geometric-mean ratio pi_old/pi_behav is outside [low, high] "
            "(verl's geometric rejection sampling, prime-rl's geo_mask)"))
CORRECTIONS.add(CorrectionRow(
    "icepop", weights="rlvr.algo.corrections:icepop", settings={"low": 0.5, "high": 5.0},
    summary="IcePop (Ring-1T, 2510.18855): a token's loss times its ratio pi_old/pi_behav inside [low, high], "
            "masked outside"))
CORRECTIONS.add(CorrectionRow(
    "decoupled", weights="rlvr.algo.corrections:truncated_is", settings={"cap": 5.0},
    summary="decoupled PPO (2110.00641, AReaL): the clip against pi_old times min(pi_old/pi_behav, cap); for stale "
            "samples (cap 5: AReaL's behav_imp_weight_cap)"))


# -------------------------------------------------------------------------------------------- stages without rollouts
@dataclass(frozen=True)
class ObjectiveRow:
    """One objective of a stage trained on fixed data (no rollouts, no rewards): supervised fine-tuning, or a
    preference loss on (chosen, rejected) pairs.

    Attributes:
        name: the recipe's ``algorithm.name`` (in a recipe of ``kind`` :attr:`stage`).
        stage: the recipe kind and the command that trains it: ``sft`` (``rlvr sft``) or ``dpo`` (``rlvr dpo``).
        loss: ``package.module:function`` of the loss: SFT's ``(logprobs (R, T), mask (R, T), num_tokens) -> scalar``
            (:mod:`rlvr.algo.sft`); a preference loss's ``(inputs: PreferenceInputs, **settings) ->
            PreferenceLossOutput`` (:mod:`rlvr.algo.preference`).
        data: what a batch holds: ``examples`` (one sequence each, a mask on the tokens to learn) or ``pairs`` (a
            prompt with a chosen and a rejected response).
        settings: the ``algorithm`` keys the loss reads (passed as keyword arguments of the same names); a recipe
            that sets another row's setting away from its default is refused.
        reference: the loss compares the policy with a reference policy: its log-probs are computed once before
            training and stored with the run, so no second model is resident while training.
        summary: one line for the recipe reference.
    """

    name: str
    stage: Literal["sft", "dpo"]
    loss: str
    data: Literal["examples", "pairs"]
    settings: tuple[str, ...]
    reference: bool
    summary: str

    def loss_function(self) -> Callable[..., Any]:
        """The loss itself (imports its module, and with it torch)."""
        return load_function(self.loss)


OBJECTIVES: Table[ObjectiveRow] = Table("objective", "algorithm.name")
OBJECTIVES.add(ObjectiveRow(
    "sft", stage="sft", loss="rlvr.algo.sft:sft_loss", data="examples", settings=(), reference=False,
    summary="supervised fine-tuning: the token-mean negative log-likelihood of the completion or assistant turns"))
OBJECTIVES.add(ObjectiveRow(
    "dpo", stage="dpo", loss="rlvr.algo.preference:dpo_loss", data="pairs", settings=("beta",), reference=True,
    summary="DPO (2305.18290): -log sigmoid(beta x the chosen minus the rejected log-ratio to the reference)"))
OBJECTIVES.add(ObjectiveRow(
    "cdpo", stage="dpo", loss="rlvr.algo.preference:cdpo_loss", data="pairs", settings=("beta", "label_smoothing"),
    reference=True, summary="conservative DPO: DPO with the label flipped with probability label_smoothing"))
OBJECTIVES.add(ObjectiveRow(
    "ipo", stage="dpo", loss="rlvr.algo.preference:ipo_loss", data="pairs", settings=("beta",), reference=True,
    summary="IPO (2310.12036) on per-token normalised log-ratios, as TRL and AReaL: (h - 1 / (2 beta))^2"))


# ------------------------------------------------------------------------------------------------------------ needs
@dataclass(frozen=True)
class Needs:
    """The models and forwards a training step needs before its update.

    Attributes:
        reference: a frozen reference policy (KL to it, in the loss or in the reward).
        critic: a value model (GAE).
        old_logprobs: the policy's own pre-update log-probs (several optimizer steps per batch, a correction for
            stale or mismatched tokens, KL in the reward, a critic's per-token rewards), one extra forward pass per
            step.
    """

    reference: bool
    critic: bool
    old_logprobs: bool


class _KL(Protocol):
    beta: float
    placement: str


class _Correction(Protocol):
    type: str


class _AlgorithmSettings(Protocol):
    """What :func:`needs` reads of a recipe's ``algorithm`` section (:class:`rlvr.config.AlgorithmConfig`)."""

    name: str
    kl: _KL
    ppo_epochs: int
    mini_batches: int
    correction: _Correction


def objective_needs(name: str) -> Needs:
    """What a step of the objective ``name`` (:data:`OBJECTIVES`) needs: its reference log-probs are computed once
    before training (``reference``), never by a resident reference model; no critic, no old log-probs (one optimizer
    step per batch). Raises KeyError for an unknown name."""
    return Needs(reference=OBJECTIVES[name].reference, critic=False, old_logprobs=False)


def needs(config: _AlgorithmSettings, reference: bool | None = None) -> Needs:
    """What a step of ``config``'s algorithm needs: read by the trainer (which models it builds, which forwards it
    runs) and by the pre-flight memory estimate (which models it counts).

    Args:
        config: the recipe's ``algorithm`` section.
        reference: whether a reference model is loaded; ``None``: the recipe's need (``kl.beta > 0``, or a row with
            ``always_reference``).
    Raises:
        KeyError: ``config.name`` is not in :data:`ALGORITHMS`.
    """
    row = ALGORITHMS[config.name]
    if reference is None:
        reference = config.kl.beta > 0 or row.always_reference
    critic = row.baseline == "critic"
    old_logprobs = (critic or config.ppo_epochs > 1 or config.mini_batches > 1
                    or CORRECTIONS[config.correction.type].needs_old_logprobs
                    or (reference and config.kl.placement == "reward"))
    return Needs(reference=reference, critic=critic, old_logprobs=old_logprobs)
