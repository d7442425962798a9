"""``rlvr check``: every pre-flight check of a recipe, in seconds, without loading the model's weights.

    rlvr check recipes/demo.yaml [--show-prompt] [--resolved] [--set KEY=VALUE ...]
    rlvr check recipes/r1_zero_qwen2.5_math_7b.yaml --ranks 8 --gpu-memory H100-80GB

Prints one line per finding (``ok``, ``info``, ``skip``, ``warn``, ``error``) and a verdict; exits 1 when any check
failed. It goes on past a missing piece (a hub dataset the offline hub cannot give is a ``skip``; a model that is
neither a local folder, nor in the local hub cache, nor ``embedded:`` is an error, and the memory estimate still runs
from the known model shapes), so one run lists every problem. The same checks run at the start of ``rlvr train``,
``rlvr eval`` and ``rlvr filter``: there an error stops the command before the model is loaded, and a warning is
printed.
Checks: verifiers resolve (a registered name, or ``module:function`` importable with the recipe's folder and the
working directory on the import path) and their kwargs match their signatures; the data file exists and parses; the
model exists; the prompt template (and tags it prefills that a format verifier wants in the completion); EOS and stop
ids; every answer verifier scores the dataset's own gold answers as correct; batch arithmetic; memory per rank.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

_USER_ERRORS_NOTE = "a recipe that does not load stops here: nothing else can be checked"


def _hub_offline(name: str) -> bool:
    from rlvr.models.hub import hub_offline

    looks_like_path = name.startswith((".", "/", "~")) or Path(name).expanduser().exists() or name.count("/") > 1
    return hub_offline() and not looks_like_path


def _shown(path: str) -> str:
    """A data file as the user would type it: relative to the working directory when it lies under it."""
    try:
        return str(Path(path).relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


def check_recipe_file(path: str, overrides: list[str], options: Any) -> tuple[Any, Any, str | None]:
    """(report, recipe or None, the first training prompt or None) for the recipe at ``path``."""
    from rlvr.config import RecipeError, load_recipe, load_recipe_dict
    from rlvr.preflight import Report, run_checks

    report = Report()
    try:
        kind = load_recipe_dict(path).get("kind")
        if kind == "reward_model":
            return _check_reward_model_recipe(path, overrides, report), None, None
        if kind in ("sft", "dpo"):
            return _check_stage_recipe(path, kind, overrides, report, options)
        recipe = load_recipe(path, overrides)
    except RecipeError as exc:
        report.add("error", "schema", f"{exc}\n({_USER_ERRORS_NOTE})")
        return report, None, None
    report.add("ok", "schema", "the recipe validates (presets expanded)")

    from rlvr.data.prompts import build_prompt_set
    from rlvr.data.sources import DataError, load_rows
    from rlvr.models.loading import ModelLoadError, load_tokenizer, resolve_model_path
    from rlvr.runs.verifier_inputs import (
        VerifierKwargsError,
        add_recipe_import_paths,
        check_verifier_kwargs,
        open_reward_pool,
        verifier_specs,
    )
    from rlvr.verifiers.registry import UnknownVerifierError, get_verifier

    add_recipe_import_paths(path)
    specs = verifier_specs(recipe)
    verifiers_ok = True
    for spec in specs:
        try:
            fn = get_verifier(spec.name)
            check_verifier_kwargs(spec.name, fn, spec.kwargs)
            module = sys.modules.get(getattr(fn, "__module__", ""), None)
            where = f" (from {getattr(module, '__file__', '?')})" if ":" in spec.name else ""
            report.add("ok", "verifiers", f"{spec.name} resolves{where}; kwargs {spec.kwargs or '{}'} fit its "
                                          f"signature")
        except (UnknownVerifierError, VerifierKwargsError) as exc:
            verifiers_ok = False
            report.add("error", "verifiers", str(exc))
    if recipe.rollout.environment is not None:
        _check_environment(report, recipe)

    rows = None
    src = recipe.data.source
    try:
        rows = load_rows(recipe.data)
        fields = ", ".join(repr(f) for f in (recipe.data.prompt_field, recipe.data.answer_field) if f)
        report.add("ok", "data", f"{len(rows)} rows from {src.type} "
                                 f"{_shown(src.path) if src.type == 'jsonl' else getattr(src, 'name', '')}, "
                                 f"each with {fields}")
    except DataError as exc:
        if src.type == "hf" and _hub_offline(src.name):
            report.add("skip", "data", f"hub dataset {src.name!r} not loadable with HF_HUB_OFFLINE=1: the prompt, "
                                       f"EOS and gold checks need it")
        else:
            report.add("error", "data", str(exc))

    model_path = tokenizer = None
    try:
        model_path = resolve_model_path(recipe.model.name)
        tokenizer = load_tokenizer(model_path, recipe.model)
        report.add("ok", "model", f"{recipe.model.name} -> {model_path}")
    except (ModelLoadError, OSError, ValueError) as exc:
        model_path = None  # offline, a hub name that is not in the local hub cache is an error: the run would fail
        report.add("error", "model", str(exc))

    prompt_set = None
    if rows is not None and tokenizer is not None:
        try:
            prompt_set = build_prompt_set(rows, tokenizer, recipe.data, seed=recipe.seed)
            report.add("ok", "data", f"split: {len(prompt_set.train)} training prompts, {len(prompt_set.eval)} held "
                                     f"out, {len(prompt_set.shots)} few-shot")
        except DataError as exc:
            report.add("error", "data", str(exc))
    reward_fn = None
    if prompt_set is not None and verifiers_ok:
        reward_fn = open_reward_pool(recipe, specs, num_workers=min(recipe.reward.num_workers, 2))
    elif prompt_set is not None:
        report.add("skip", "gold", "not checked: a verifier does not resolve or its kwargs do not fit (above)")
    try:
        run_checks(recipe, specs, options, rows=rows, tokenizer=tokenizer, prompt_set=prompt_set, reward_fn=reward_fn,
                   model_path=model_path, report=report)
    finally:
        if reward_fn is not None:
            reward_fn.close()
    first = prompt_set.train[0].text if prompt_set is not None and prompt_set.train else None
    return report, recipe, first


def _check_environment(report: Any, recipe: Any) -> None:
    """``rollout.environment`` resolves to an Environment subclass whose constructor takes ``environment_kwargs`` (and
    the tools, with ``rollout.tools``); it is not built here (:func:`rlvr.tools.loading.environment_class`)."""
    from rlvr.import_paths import ImportPathError
    from rlvr.tools.loading import EnvironmentLoadError, environment_class

    path = recipe.rollout.environment
    try:
        cls = environment_class(recipe.rollout.tools_config())
    except (ImportPathError, EnvironmentLoadError) as exc:
        report.add("error", "environment", str(exc))
        return
    module = sys.modules.get(cls.__module__)
    gold = "the whole row" if recipe.rollout.environment_sees_gold else "the row without its gold"
    report.add("ok", "environment", f"{path} resolves (from {getattr(module, '__file__', '?')}); environment_kwargs "
                                    f"{recipe.rollout.environment_kwargs or '{}'} fit its constructor; it sees {gold}")


def _check_stage_recipe(path: str, kind: str, overrides: list[str], report: Any, options: Any
                        ) -> tuple[Any, Any, str | None]:
    """The checks of an SFT or preference recipe (:mod:`rlvr.preflight.stage_checks`), and its verifiers."""
    from rlvr.preflight.stage_checks import check_stage_recipe
    from rlvr.runs.verifier_inputs import VerifierKwargsError, add_recipe_import_paths, check_verifier_kwargs
    from rlvr.verifiers.registry import UnknownVerifierError, get_verifier

    add_recipe_import_paths(path)
    recipe, shown = check_stage_recipe(path, kind, overrides, report, options)
    for v in recipe.verifiers if recipe is not None else []:
        try:
            check_verifier_kwargs(v.name, get_verifier(v.name), v.kwargs)
            report.add("ok", "verifiers", f"{v.name} resolves (the generation eval on the held-out prompts)")
        except (UnknownVerifierError, VerifierKwargsError) as exc:
            report.add("error", "verifiers", str(exc))
    return report, recipe, shown


def _check_reward_model_recipe(path: str, overrides: list[str], report: Any) -> Any:
    """The checks that apply to a reward-model recipe (``kind: reward_model``): schema, preference data, model."""
    from rlvr.config import RecipeError, load_reward_model_recipe
    from rlvr.data.sources import DataError
    from rlvr.models.loading import ModelLoadError, resolve_model_path
    from rlvr.reward_model.data import load_preference_groups

    try:
        recipe = load_reward_model_recipe(path, overrides)
    except RecipeError as exc:
        report.add("error", "schema", f"{exc}\n({_USER_ERRORS_NOTE})")
        return report
    report.add("ok", "schema", "the reward-model recipe validates")
    for source in filter(None, (recipe.data.source, recipe.data.eval_source)):
        try:
            groups = load_preference_groups(source.path, source._searched)
            pairs = sum(len(g.pairs) for g in groups)
            report.add("ok", "data", f"{_shown(source.path)}: {len(groups)} prompts, {pairs} preference pairs")
        except (DataError, OSError) as exc:
            report.add("error", "data", str(exc))
    try:
        report.add("ok", "model", f"{recipe.model.name} -> {resolve_model_path(recipe.model.name)}")
    except (ModelLoadError, OSError, ValueError) as exc:
        report.add("error", "model", str(exc))
    return report


def _cmd_check(args: argparse.Namespace) -> int:
    from rlvr.config import dump_recipe
    from rlvr.preflight import CheckOptions
    from rlvr.preflight.devices import parse_device_memory

    if args.ranks is not None and args.ranks < 1:
        raise ValueError(f"--ranks must be >= 1, got {args.ranks}")
    device = parse_device_memory(args.gpu_memory) if args.gpu_memory else None
    failed = False
    for path in args.recipes:
        options = CheckOptions(ranks=args.ranks, device=device, gold_rows=args.gold_rows, probe_servers=True)
        report, recipe, prompt = check_recipe_file(path, args.set, options)
        print(f"== {path}")
        print(report.render())
        if args.show_prompt:
            stage = getattr(recipe, "kind", None) in ("sft", "dpo")
            print(("-- one training example, the learned tokens between \u00ab and \u00bb:" if stage else
                   "-- one training prompt, as the policy sees it:") if prompt is not None else
                  "-- no prompt to show (the data or the tokenizer did not load)")
            if prompt is not None:
                print(prompt)
        if args.resolved and recipe is not None:
            print("-- the resolved recipe (presets expanded, every default filled in):")
            print(dump_recipe(recipe), end="")
        print(f"{path}: {report.summary()}")
        failed = failed or bool(report.errors)
    return 1 if failed else 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rlvr check`` on the CLI's sub-command parser."""
    p = sub.add_parser("check", help="pre-flight checks of a recipe: data, model, verifiers, template, EOS, gold "
                                     "answers, batch arithmetic, memory",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipes", nargs="+")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe key")
    p.add_argument("--show-prompt", action="store_true", help="print one training prompt rendered by the template")
    p.add_argument("--resolved", action="store_true", help="print the recipe with presets expanded")
    p.add_argument("--ranks", type=int, default=None,
                   help="data-parallel ranks (GPUs) the run will use (default: $WORLD_SIZE or 1)")
    p.add_argument("--gpu-memory", default=None, metavar="NAME|SIZE",
                   help="memory of one GPU for the estimate: a name (H100-80GB, A100-40GB, H200-141GB, ...) or a size "
                        "(80GB, 79.2GiB); default: the visible GPU, else this host's RAM")
    p.add_argument("--gold-rows", type=int, default=16, help="training rows whose gold answer is verified (16)")
    p.set_defaults(func=_cmd_check)
