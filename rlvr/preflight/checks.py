"""Run every pre-flight check on a recipe whose inputs are open (or partly open: ``rlvr check`` goes on past a missing
piece and says what it skipped)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.config import Recipe
from rlvr.data.prompts import PromptSet
from rlvr.data.sources import row_origin
from rlvr.preflight.batch import check_batch
from rlvr.preflight.devices import DeviceMemory, local_device_memory
from rlvr.preflight.disk import check_disk
from rlvr.preflight.gold import check_gold
from rlvr.preflight.memory import estimate_memory, held_models, judge_memory, trained_params
from rlvr.preflight.model_shape import model_shape
from rlvr.preflight.report import Report
from rlvr.preflight.sandbox_check import check_sandbox
from rlvr.preflight.server_check import check_servers
from rlvr.preflight.template_checks import check_eos, check_prefill
from rlvr.verifiers.reward import RewardFunction, VerifierSpec


@dataclass
class CheckOptions:
    """How to check. ``ranks``: data-parallel ranks (default ``WORLD_SIZE`` or 1); ``device``: the memory one rank
    has (default the visible GPU, else the host's RAM); ``training``: include the batch and memory checks (off for
    ``rlvr eval``/``rlvr filter``); ``gold_rows``: training rows whose gold is verified; ``command``: named in the
    printed verdict; ``run_dir``: the run's folder, whose disk must hold its checkpoints."""

    ranks: int | None = None
    device: DeviceMemory | None = None
    training: bool = True
    gold_rows: int = 16
    command: str = "train"
    run_dir: Path | None = None
    """Where the run writes its checkpoints (for the free-space check); default ``runs/``."""
    probe_servers: bool = False
    """Call the rollout servers of ``rollout.servers.urls`` (``rlvr check``; a run's engine checks them as it
    connects)."""

    def world(self) -> int:
        return self.ranks or int(os.environ.get("WORLD_SIZE", "1"))


def run_checks(recipe: Recipe, specs: list[VerifierSpec], options: CheckOptions, *, rows: list[dict] | None = None,
               tokenizer: Any = None, prompt_set: PromptSet | None = None, reward_fn: RewardFunction | None = None,
               model_path: str | None = None, report: Report | None = None) -> Report:
    """Template and prefill, EOS, gold answers, batch arithmetic and memory, each on what it needs; a check whose
    input is ``None`` is left out (the caller says why with a ``skip``). Never raises for a recipe problem: every
    problem is a finding."""
    report = report or Report()
    first = prompt_set.train[0] if prompt_set is not None and prompt_set.train else None
    if first is not None:
        check_prefill(report, recipe, first, specs)
    if tokenizer is not None and model_path is not None:
        _guarded(report, "eos", check_eos, report, recipe, tokenizer, model_path)
    if prompt_set is not None and reward_fn is not None and rows is not None:
        numbers = {id(row): i for i, row in enumerate(rows)}
        _guarded(report, "gold", check_gold, report, recipe, prompt_set.train, specs, reward_fn, numbers,
                 options.gold_rows)
    _guarded(report, "sandbox", check_sandbox, report, specs, recipe, rows)
    _guarded(report, "servers", check_servers, report, recipe, options.probe_servers)
    check_attention(report, recipe)
    check_cores(report, recipe)
    if options.training:
        if recipe.model.lora is not None and model_path is not None:
            _guarded(report, "lora", check_lora_targets, report, recipe, model_path)
        check_batch(report, recipe, options.world())
        check_reward_model_folders(report, recipe)
        _check_memory(report, recipe, options, model_path, prompt_set, rows)
    return report


MAX_WORKERS_PER_CORE = 16
"""Verifier worker processes per core above which a recipe is refused (each is a process: a few per core is plenty;
thousands fork until the machine's process limit)."""


def check_cores(report: Report, recipe: Recipe) -> None:
    """``reward.num_workers`` and the thread counts against this machine's cores: an ``error`` past
    :data:`MAX_WORKERS_PER_CORE` workers a core, a ``warn`` past 4 a core or past one torch thread a core."""
    cores = os.cpu_count() or 1
    workers = recipe.reward.num_workers
    if workers > MAX_WORKERS_PER_CORE * cores:
        report.add("error", "cores", f"reward.num_workers={workers} verifier processes on {cores} core(s): more than "
                                     f"{MAX_WORKERS_PER_CORE} a core only waits for the cores (and may hit the process "
                                     f"limit); use at most {cores * 4}")
    elif workers > 4 * cores:
        report.add("warn", "cores", f"reward.num_workers={workers} verifier processes on {cores} core(s): a few a "
                                    f"core is plenty")
    threads = recipe.trainer.num_threads
    if threads is not None and threads > cores:
        report.add("warn", "cores", f"trainer.num_threads={threads} on {cores} core(s): torch threads beyond the cores "
                                    f"slow every matmul down")


FLASH_ATTENTION = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}
"""``model.attn_implementation`` values that need a CUDA GPU, and the package each needs."""


def check_attention(report: Report, recipe: Recipe) -> None:
    """``model.attn_implementation`` against this machine: FlashAttention needs a CUDA GPU and its package; an
    ``error`` naming what is missing and what to use instead, before the model loads."""
    import importlib.util

    name = recipe.model.attn_implementation
    package = FLASH_ATTENTION.get(name or "")
    if package is None:
        return
    import torch

    if not torch.cuda.is_available():
        report.add("error", "attention", f"model.attn_implementation: {name} runs on CUDA GPUs only, and this "
                                         f"machine has none: use sdpa (or leave it unset) on a CPU")
    elif importlib.util.find_spec(package) is None:
        report.add("error", "attention", f"model.attn_implementation: {name} needs the {package} package, which is "
                                         f"not installed: pip install flash-attn, or use sdpa")


def check_lora_targets(report: Report, recipe: Recipe, model_path: str) -> None:
    """``model.lora.target_modules`` against the model's linear layers, on a meta-device model built from its config
    (no weights read): an ``error`` naming the unknown modules and listing the model's linear layers, else ``ok`` with
    the adapted layers and the adapters' parameter count."""
    from rlvr.models.lora import LoraTargetError, check_target_modules, meta_model

    lora = recipe.model.lora
    model = meta_model(model_path, recipe.model)
    try:
        targets = check_target_modules(model, lora)
    except LoraTargetError as exc:
        report.add("error", "lora", str(exc))
        return
    params = sum(lora.rank * (m.in_features + m.out_features) for name, m in model.named_modules()
                 if name.rsplit(".", 1)[-1] in targets and hasattr(m, "in_features"))
    report.add("ok", "lora", f"rank {lora.rank} adapters on {', '.join(targets)}: {params / 1e6:.2f}M trainable "
                             f"parameters; the reference policy is the model with its adapters off")


def check_reward_model_folders(report: Report, recipe: Recipe) -> None:
    """An ``error`` for each reward-model folder the run would load whose folder has no ``config.json``: the reward
    models under ``reward.source: reward_model | both`` and PPO's critic when it starts from the reward model (which
    it does under ``reward.source: verifiers`` too), as :func:`rlvr.preflight.memory.held_models` lists them. The
    trainer would fail there after loading the policy. Nothing is added when the recipe loads no reward model."""
    folders = list(dict.fromkeys(  # each already resolved to RUN_DIR/model where that holds the config
        name for role, name, _ in held_models(recipe)
        if role.startswith("reward model") or (role == "critic" and name != recipe.model.name)))
    key = "reward_model.path" if recipe.reward_model is not None and recipe.reward_model.path else "reward_model.paths"
    missing = [f for f in folders if not (Path(f) / "config.json").is_file()]
    for folder in missing:
        what = "no such folder" if not Path(folder).exists() else "no config.json in it (nor in its model/)"
        report.add("error", "reward model", f"{key}: {folder!r}: {what}; expected a folder written by `rlvr rm train` "
                   "(its RUN_DIR/model, or the run directory itself)")
    if folders and not missing:
        report.add("ok", "reward model", f"{len(folders)} reward model folder(s) found: {', '.join(folders)}")


def _guarded(report: Report, name: str, fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - a check that cannot run is reported, never a crash of the command
        report.add("warn", name, f"could not run this check: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


def _check_memory(report: Report, recipe: Recipe, options: CheckOptions, model_path: str | None,
                  prompt_set: PromptSet | None, rows: list[dict] | None = None) -> None:
    try:
        shapes = {"policy": model_shape(model_path or recipe.model.name,
                                        trust_remote_code=recipe.model.trust_remote_code)}
        for role, name, _ in held_models(recipe)[1:]:
            shapes[role] = shapes["policy"] if name == recipe.model.name else model_shape(name)
    except ValueError as exc:
        report.add("skip", "memory", str(exc))
        return
    critic = shapes.get("critic")
    policy = shapes["policy"]  # what a checkpoint holds of it: LoRA saves the adapters alone (a critic, its head too)
    check_disk(report, recipe, options.run_dir or Path("runs"), trained_params(policy, recipe, "policy"),
               trained_params(critic, recipe, "critic") if critic is not None else 0)
    if prompt_set is not None and _check_context(report, recipe, shapes["policy"].max_positions, prompt_set, rows):
        return  # a prompt past the context: that, not the memory it would take, is the problem
    longest = max((len(p.token_ids) for p in prompt_set.train), default=None) if prompt_set else None
    device = options.device or local_device_memory()
    est = estimate_memory(recipe, shapes, device, ranks=options.world(), max_prompt_tokens=longest)
    level, message = judge_memory(est, recipe)
    policy = shapes["policy"]
    count = f"{policy.params / 1e9:.3g}B" if policy.params >= 1e8 else f"{policy.params / 1e6:.3g}M"
    head = f"per rank, {options.world()} rank(s), ZeRO-{recipe.trainer.zero_stage}; policy {count} parameters " \
           f"({policy.source})"
    report.add(level, "memory", f"{message}\n{head}" if level == "error" else f"{head}\n{message}")


def _check_context(report: Report, recipe: Recipe, context: int | None, prompt_set: PromptSet,
                   rows: list[dict] | None) -> bool:
    """An ``error`` naming the longest prompt (by file line, or row number) whose tokens plus
    ``rollout.max_new_tokens`` exceed the model's context; returns whether there was one."""
    if not context:
        return False
    room = context - recipe.rollout.max_new_tokens
    over = [p for p in prompt_set.train + prompt_set.eval if len(p.token_ids) > room]
    if not over:
        return False
    worst = max(over, key=lambda p: len(p.token_ids))
    index = {id(r): i for i, r in enumerate(rows or [])}.get(id(worst.row))
    more = f" ({len(over) - 1} more prompt(s) too)" if len(over) > 1 else ""
    report.add("error", "context", f"{row_origin(worst.row, index)} is longer than the model's context ({context:,} "
               f"tokens): its prompt is {len(worst.token_ids):,} tokens, and rollout.max_new_tokens="
               f"{recipe.rollout.max_new_tokens:,} must fit after it{more}; shorten or drop it")
    return True


def print_run_findings(report: Report, command: str) -> None:
    """What ``rlvr train/eval/filter`` print (rank 0 only): warnings and errors, then one verdict line."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    shown = report.render(levels=("warn",))
    if shown:
        print(shown, file=sys.stderr)
    print(f"pre-flight checks ({command}): {report.summary()}; `rlvr check RECIPE` shows them all", file=sys.stderr,
          flush=True)
