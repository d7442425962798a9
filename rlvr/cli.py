"""rlvr command line.

    rlvr train recipes/demo.yaml [-o runs/demo] [--set optim.lr=2e-6 ...] [--resume | --resume-from
               checkpoints/step-N] [--allow-changed trainer.steps ...]
    rlvr eval  runs/demo [--recipe recipes/demo.yaml] [--k 8]     # or a model folder (then --recipe) instead
    rlvr check recipes/demo.yaml [--show-prompt] [--resolved]    # pre-flight: data, model, verifiers, EOS, gold, memory
    rlvr check recipes/r1_zero_qwen2.5_math_7b.yaml --ranks 8 --gpu-memory H100-80GB
    rlvr config show recipes/demo.yaml [--set ...]               # the resolved recipe, every default filled in
    rlvr config check recipes/*.yaml                             # the schema only (instant)
    rlvr verify math --gold '\\frac12' --pred 'so \\boxed{0.5}'    # see `rlvr verify -h`
    rlvr sft recipes/sft_tool_demo.yaml -o runs/sft                 # supervised fine-tuning (kind: sft)
    rlvr dpo recipes/dpo_demo.yaml -o runs/dpo                      # DPO / cDPO / IPO on preference pairs (kind: dpo)
    rlvr rm train recipes/rm_demo.yaml -o runs/rm_demo               # reward models: see `rlvr rm -h`
    rlvr sandbox serve --port 8080                                  # this machine's sandbox for remote trainers
    rlvr judge serve --port 8001                                    # a judge model over an OpenAI-compatible API
    rlvr serve embedded:smollm2-135m-instruct --port 8100           # a vLLM server for rollout.engine: server

`make demo` runs the CPU demo (about 15 minutes on 2 cores): a progress line per step, then ``runs/demo/summary.json``
with the held-out pass@1 before and after, and ``runs/demo/plots/curves.png``.
Under a launcher (``torchrun --nproc_per_node 8 -m rlvr.cli train ...``) every rank runs the same command.

A command that seems stuck prints every thread's stack to stderr on ``kill -USR1 PID`` and goes on.
"""

from __future__ import annotations

import argparse
import errno
import faulthandler
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from rlvr.runtime.interrupts import latch_sigint


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that are the user's to fix: printed as one line, no traceback."""
    from rlvr.config import RecipeError
    from rlvr.data.sources import DataError
    from rlvr.models.embedded import EmbeddedModelError
    from rlvr.models.loading import ModelLoadError
    from rlvr.preflight import PreflightError
    from rlvr.verifiers.registry import UnknownVerifierError

    return (RecipeError, DataError, ModelLoadError, EmbeddedModelError, UnknownVerifierError, PreflightError,
            FileNotFoundError, FileExistsError)


def _load(path: str, overrides: list[str]):  # noqa: ANN202 - Recipe; the import stays lazy
    """The validated recipe, with its folder and the working directory on the import path (for ``module:function``
    verifiers saved next to the recipe)."""
    from rlvr.config import load_recipe
    from rlvr.runs.verifier_inputs import add_recipe_import_paths

    recipe = load_recipe(path, overrides)
    add_recipe_import_paths(path)
    return recipe


def _cmd_train(args: argparse.Namespace) -> int:
    from rlvr.config import RecipeError, load_stage_recipe
    from rlvr.runs.run_dir import check_run_dir

    kind = getattr(args, "kind", None)
    if kind is None:
        recipe = _load(args.recipe, args.set)  # validated before anything heavy is imported
    else:
        from rlvr.runs.verifier_inputs import add_recipe_import_paths

        recipe = load_stage_recipe(args.recipe, kind, args.set)
        add_recipe_import_paths(args.recipe)
    run_dir = Path(args.output or Path("runs") / Path(args.recipe).stem)
    resume = args.resume or args.resume_from is not None
    if args.allow_changed and not resume:
        raise RecipeError("--allow-changed only applies with --resume or --resume-from")
    check_run_dir(run_dir, resume, args.overwrite, command=_command(args))
    complete = args.resume and completed_steps(run_dir, recipe.trainer.steps)
    if complete:
        print(f"{run_dir}: the run is complete ({complete} of trainer.steps={recipe.trainer.steps} steps, summary.json "
              f"written): nothing to resume. To train it further: --resume --set trainer.steps=N "
              f"--allow-changed trainer.steps", file=sys.stderr)
        return 0
    if args.overwrite and not resume:
        import shutil
        shutil.rmtree(run_dir, ignore_errors=True)
    if kind is None:
        from rlvr.trainer.trainer import RLTrainer as Trainer
    else:
        from rlvr.trainer.stage_trainer import StageTrainer as Trainer

    trainer = None
    try:
        trainer = Trainer(recipe, run_dir, resume=resume, resume_from=args.resume_from,
                          allow_changed=args.allow_changed)
        summary = trainer.train()
    except KeyboardInterrupt:
        print(interrupted_line(args, run_dir, trainer), file=sys.stderr, flush=True)
        return 130
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT) and not exc.filename:
            exc.filename = str(run_dir)  # a write through a file object (a plot, an event file) names no file
        raise
    if trainer.dist.is_main:
        _print_summary(summary, run_dir)
    trainer.engine.destroy()
    return 0


def _command(args: argparse.Namespace) -> str:
    """The command that was run (``rlvr train``, ``rlvr sft``, ``rlvr dpo``), for messages."""
    return f"rlvr {getattr(args, 'kind', None) or 'train'}"


def completed_steps(run_dir: Path, steps: int) -> int | None:
    """The steps of a finished run in ``run_dir`` (its ``summary.json`` names its newest checkpoint and at least
    ``steps`` steps), else None. Reads two small files: nothing is loaded."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        done, final = int(summary["steps"]), Path(summary["final_checkpoint"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    newest = max((int(p.name[5:]) for p in (run_dir / "checkpoints").glob("step-*") if p.name[5:].isdigit()),
                 default=None)
    return done if done >= steps and newest == done and final.name == f"step-{done}" else None


def interrupted_line(args: argparse.Namespace, run_dir: Path, trainer: Any) -> str:
    """What a Ctrl-C of ``rlvr train`` left: the step reached, the newest checkpoint and the command that continues."""
    finished = sorted((p for p in (run_dir / "checkpoints").glob("step-*") if p.is_dir()),
                      key=lambda p: int(p.name.split("-")[1]) if p.name.split("-")[1].isdigit() else -1)
    again = f"{_command(args)} {args.recipe} -o {run_dir}"
    if trainer is None:
        where = "before training started"
    else:
        where = f"at step {getattr(trainer, 'step_done', 0)} of {trainer.recipe.trainer.steps}"
    if finished:
        return (f"interrupted {where}; the newest checkpoint is {finished[-1].name}: `{again} --resume` continues from "
                f"it (the steps after it are redone, with the same numbers)")
    return f"interrupted {where}; no checkpoint was written: `{again} --overwrite` starts the run again"


def _print_summary(summary: dict, run_dir: Path) -> None:
    before, after = summary.get("eval_before"), summary.get("eval_after")
    print(f"\nrun: {run_dir}  steps: {summary['steps']}  wall time: {summary['wall_time_s']:.0f} s")
    if before and after and "loss" in after and "loss" in before:
        line = f"held-out loss: {before['loss']:.4f} -> {after['loss']:.4f}"
        if "accuracy" in after:
            line += f"  preference accuracy: {before['accuracy']:.3f} -> {after['accuracy']:.3f}"
        print(line)
    if before and after and "pass_at_1" in after and "pass_at_1" in before:
        print(f"held-out pass@1: {before['pass_at_1']:.3f} ± {before['pass_at_1_se']:.3f} -> "
              f"{after['pass_at_1']:.3f} ± {after['pass_at_1_se']:.3f}  (change {summary['pass_at_1_change']:+.3f}, "
              f"{summary['pass_at_1_change_z']:.1f} standard errors; {after['num_prompts']} prompts x {after['k']})")
    print(f"model: {summary['model']}\nplots: {'  '.join(map(str, run_plots(run_dir)))}")


def run_plots(run_dir: Path) -> list[Path]:
    """The plots a finished run names in its last line: ``plots/curves.png``, and beside it ``plots/tools.png``
    (a run with tools) and ``plots/curriculum.png`` where the run drew them."""
    plots = run_dir / "plots"
    return [plots / "curves.png"] + [p for p in (plots / "tools.png", plots / "curriculum.png") if p.exists()]


def default_eval_recipe(target: Path) -> Path:
    """The recipe ``rlvr eval TARGET`` uses without ``--recipe``: the run's ``recipe.resolved.yaml`` (TARGET a run
    directory, or one of its ``checkpoints/step-N`` folders).

    Raises:
        FileNotFoundError: TARGET is not inside a run directory that holds one.
    """
    for folder in (target, target.parent.parent) if target.name.startswith("step-") else (target,):
        if (folder / "recipe.resolved.yaml").is_file():
            return folder / "recipe.resolved.yaml"
    raise FileNotFoundError(f"rlvr eval {target}: no --recipe given, and {target} is not a run directory with a "
                            f"recipe.resolved.yaml: pass --recipe RECIPE.yaml")


def _cmd_eval(args: argparse.Namespace) -> int:
    overrides = list(args.set)
    target = Path(args.target)
    recipe_path = args.recipe or str(default_eval_recipe(target))
    if (target / "checkpoints").is_dir() or target.name.startswith("step-"):
        from rlvr.runs.checkpoint import latest_checkpoint

        ckpt_dir = target if target.name.startswith("step-") else latest_checkpoint(target)
        if ckpt_dir is None:
            raise FileNotFoundError(f"{target} has no finished checkpoint")
        if not (ckpt_dir / "model").is_dir():  # saved without the HF folder: write it from the DeepSpeed state
            _export_checkpoint(ckpt_dir, recipe_path, args.set)
        target = ckpt_dir / "model"
    overrides.append(f"model.name={target}" if target.exists() else f"model.name={args.target}")
    recipe = _load(recipe_path, overrides)
    from rlvr.commands.eval import evaluate_recipe

    result = evaluate_recipe(recipe, k=args.k)
    print(json.dumps(result, indent=2))
    return 0


def _export_checkpoint(ckpt_dir: Path, recipe_path: str, overrides: list[str]) -> None:
    """Write ``ckpt_dir/model`` from its DeepSpeed state, into the run's model as the recipe loads it."""
    from rlvr.models.loading import load_causal_lm, resolve_model_path
    from rlvr.runs.checkpoint import export_checkpoint_model

    recipe = _load(recipe_path, overrides)
    path = resolve_model_path(recipe.model.name)
    print(f"{ckpt_dir} holds no model/ folder (trainer.export_every_checkpoint is off): writing it from its "
          f"DeepSpeed state", file=sys.stderr, flush=True)
    export_checkpoint_model(ckpt_dir, load_causal_lm(path, recipe.model), path)


def _cmd_config(args: argparse.Namespace) -> int:
    from rlvr.config import Recipe, describe_algorithm, dump_recipe, load_any_recipe

    for path in args.recipes:
        recipe = load_any_recipe(path, args.set)
        if args.action == "show":
            if isinstance(recipe, Recipe):
                print(f"# {describe_algorithm(recipe)}")
            print(dump_recipe(recipe))
        else:
            print(f"{path}: schema ok (keys, types, values; `rlvr check {path}` also checks the data, model, "
                  f"verifiers, template, EOS, gold answers and memory)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr", description="Reinforcement learning from verifiable rewards.")
    parser.add_argument("--verbose", action="store_true",
                        help="show the libraries' own output (transformers' and DeepSpeed's logs, progress bars)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a policy with a recipe")
    p.add_argument("recipe")
    p.add_argument("-o", "--output", help="run directory (default: runs/<recipe name>)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe key")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in the run directory (the recipe must be the run's own)")
    p.add_argument("--resume-from", metavar="CHECKPOINT",
                   help="continue from this checkpoint of the run (checkpoints/step-N); later steps' metrics, "
                        "TensorBoard events and checkpoints are dropped")
    p.add_argument("--allow-changed", action="append", default=[], metavar="KEY",
                   help="on resume, accept a recipe that differs from the run's recipe.resolved.yaml in KEY "
                        "(a dotted key or a section; repeat for several)")
    p.add_argument("--overwrite", action="store_true", help="delete the run directory first")
    p.set_defaults(func=_cmd_train)

    for kind, helptext in (("sft", "supervised fine-tuning with an SFT recipe (kind: sft)"),
                           ("dpo", "DPO / cDPO / IPO on preference pairs with a preference recipe (kind: dpo)")):
        p = sub.add_parser(kind, help=helptext)
        p.add_argument("recipe")
        p.add_argument("-o", "--output", help="run directory (default: runs/<recipe name>)")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe key")
        p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in the run directory")
        p.add_argument("--resume-from", metavar="CHECKPOINT", help="continue from this checkpoint of the run")
        p.add_argument("--allow-changed", action="append", default=[], metavar="KEY",
                       help="on resume, accept a recipe that differs from the run's recipe.resolved.yaml in KEY")
        p.add_argument("--overwrite", action="store_true", help="delete the run directory first")
        p.set_defaults(func=_cmd_train, kind=kind)

    p = sub.add_parser("eval", help="pass@1 / pass@k / maj@k of a run or model on the recipe's held-out prompts")
    p.add_argument("target", help="a run directory, a checkpoint folder, a model folder or a hub name")
    p.add_argument("--recipe", help="the recipe whose held-out prompts and verifiers are used (default: a run "
                                    "directory's recipe.resolved.yaml)")
    p.add_argument("--k", type=int, default=None, help="samples per prompt (default: the recipe's eval.k)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("config", help="show a resolved recipe, or check recipes against the schema only (keys, types, "
                                      "values: no data, model or verifier is looked at; see `rlvr check`)")
    p.add_argument("action", choices=["show", "check"])
    p.add_argument("recipes", nargs="+")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=_cmd_config)

    from rlvr.commands.check import add_parser as add_check
    add_check(sub)
    from rlvr.commands.verify import add_parser as add_verify
    add_verify(sub)
    from rlvr.commands.rm import add_parser as add_rm
    add_rm(sub)
    from rlvr.commands.filter import add_parser as add_filter
    add_filter(sub)
    from rlvr.commands.export import add_parser as add_export
    add_export(sub)
    from rlvr.commands.sandbox import add_parser as add_sandbox
    add_sandbox(sub)
    from rlvr.commands.judge import add_parser as add_judge
    add_judge(sub)
    from rlvr.serving.vllm_server import add_parser as add_serve
    add_serve(sub)
    return parser


def _disk_full_is_the_main_threads_to_report(args: threading.ExceptHookArgs) -> None:
    """A library's writer thread (TensorBoard's event writer) that meets a full disk prints nothing: the error comes
    back to the main thread at its next write or flush, which says it in one line. Anything else: Python's hook."""
    if isinstance(args.exc_value, OSError) and args.exc_value.errno in (errno.ENOSPC, errno.EDQUOT):
        return
    threading.__excepthook__(args)


def stacks_on_sigusr1() -> bool:
    """``kill -USR1 PID`` prints every thread's Python stack to stderr (``faulthandler``) and the command goes on:
    where a run that seems stuck waits. Not where SIGUSR1 already has a handler (a launcher's, a library's) or the
    platform has no SIGUSR1; returns whether it was registered."""
    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is None or signal.getsignal(usr1) not in (signal.SIG_DFL, None):
        return False
    for stream in (sys.stderr, sys.__stderr__):  # a replaced stderr (captured output) may have no file descriptor
        try:
            faulthandler.register(usr1, file=stream, all_threads=True, chain=False)
            return True
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
            continue
    return False


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    from rlvr.library_output import configure

    configure(verbose=args.verbose)
    threading.excepthook = _disk_full_is_the_main_threads_to_report
    stacks_on_sigusr1()
    latch_sigint()
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `rlvr config show ... | head -1`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0
    except _user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # bad values found after validation (e.g. batch vs ranks)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f" while writing {exc.filename}" if exc.filename else ""
        print(f"error: no space left on the disk{where}: free space there, then --resume (checkpoints are written "
              f"whole or not at all, so the newest one is intact)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
