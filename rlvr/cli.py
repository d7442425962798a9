"""rlvr command line.

    rlvr train recipes/demo.yaml [-o runs/demo] [--set optim.lr=2e-6 ...] [--resume]
    rlvr eval  runs/demo --recipe recipes/demo.yaml [--k 8]       # or a model folder instead of a run dir
    rlvr config show recipes/demo.yaml [--set ...]               # the resolved recipe, every default filled in
    rlvr config check recipes/*.yaml
    rlvr verify math --gold '\\frac12' --pred 'so \\boxed{0.5}'    # see `rlvr verify -h`
    rlvr rm train recipes/rm_demo.yaml -o runs/rm_demo               # reward models: see `rlvr rm -h`

`make demo` runs the CPU demo (about 15 minutes on 2 cores): a progress line per step, then ``runs/demo/summary.json``
with the held-out pass@1 before and after, and ``runs/demo/plots/curves.png``.
Under a launcher (``torchrun --nproc_per_node 8 -m rlvr.cli train ...``) every rank runs the same command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that are the user's to fix: printed as one line, no traceback."""
    from rlvr.config import RecipeError
    from rlvr.data.sources import DataError
    from rlvr.embedded import EmbeddedModelError
    from rlvr.models import ModelLoadError
    from verifiers.registry import UnknownVerifierError

    return (RecipeError, DataError, ModelLoadError, EmbeddedModelError, UnknownVerifierError, FileNotFoundError)


def _cmd_train(args: argparse.Namespace) -> int:
    from rlvr.config import load_recipe

    recipe = load_recipe(args.recipe, args.set)  # validated before anything heavy is imported
    run_dir = Path(args.output or Path("runs") / Path(args.recipe).stem)
    if run_dir.exists() and any(run_dir.glob("checkpoints/step-*")) and not args.resume and not args.overwrite:
        raise FileNotFoundError(f"{run_dir} already holds checkpoints: pass --resume to continue it, --overwrite to "
                                f"start over, or -o for another folder")
    if args.overwrite and not args.resume:
        import shutil
        shutil.rmtree(run_dir, ignore_errors=True)
    from rlvr.trainer.grpo import GRPOTrainer

    trainer = GRPOTrainer(recipe, run_dir, resume=args.resume)
    summary = trainer.train()
    if trainer.dist.is_main:
        _print_summary(summary, run_dir)
    trainer.engine.destroy()
    return 0


def _print_summary(summary: dict, run_dir: Path) -> None:
    before, after = summary.get("eval_before"), summary.get("eval_after")
    print(f"\nrun: {run_dir}  steps: {summary['steps']}  wall time: {summary['wall_time_s']:.0f} s")
    if before and after:
        print(f"held-out pass@1: {before['pass_at_1']:.3f} ± {before['pass_at_1_se']:.3f} -> "
              f"{after['pass_at_1']:.3f} ± {after['pass_at_1_se']:.3f}  (change {summary['pass_at_1_change']:+.3f}, "
              f"{summary['pass_at_1_change_z']:.1f} standard errors; {after['num_prompts']} prompts x {after['k']})")
    print(f"model: {summary['model']}\nplots: {run_dir / 'plots' / 'curves.png'}")


def _cmd_eval(args: argparse.Namespace) -> int:
    from rlvr.config import load_recipe

    overrides = list(args.set)
    target = Path(args.target)
    if (target / "checkpoints").is_dir() or target.name.startswith("step-"):
        from rlvr.checkpoint import latest_checkpoint

        ckpt_dir = target if target.name.startswith("step-") else latest_checkpoint(target)
        if ckpt_dir is None:
            raise FileNotFoundError(f"{target} has no finished checkpoint")
        target = ckpt_dir / "model"
    overrides.append(f"model.name={target}" if target.exists() else f"model.name={args.target}")
    recipe = load_recipe(args.recipe, overrides)
    from rlvr.eval_model import evaluate_recipe

    result = evaluate_recipe(recipe, k=args.k)
    print(json.dumps(result, indent=2))
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    from rlvr.config import dump_recipe, load_any_recipe

    for path in args.recipes:
        recipe = load_any_recipe(path, args.set)
        if args.action == "show":
            print(dump_recipe(recipe))
        else:
            print(f"{path}: ok")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr", description="Reinforcement learning from verifiable rewards.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a policy with a recipe")
    p.add_argument("recipe")
    p.add_argument("-o", "--output", help="run directory (default: runs/<recipe name>)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe key")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in the run directory")
    p.add_argument("--overwrite", action="store_true", help="delete the run directory first")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("eval", help="pass@1 / pass@k / maj@k of a run or model on the recipe's held-out prompts")
    p.add_argument("target", help="a run directory, a checkpoint folder, a model folder or a hub name")
    p.add_argument("--recipe", required=True)
    p.add_argument("--k", type=int, default=None, help="samples per prompt (default: the recipe's eval.k)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=_cmd_eval)

    p = sub.add_parser("config", help="show or check recipes")
    p.add_argument("action", choices=["show", "check"])
    p.add_argument("recipes", nargs="+")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.set_defaults(func=_cmd_config)

    from rlvr.commands.verify import add_parser as add_verify
    add_verify(sub)
    from rlvr.commands.rm import add_parser as add_rm
    add_rm(sub)
    try:
        from rlvr.commands.filter import add_parser as add_filter
        add_filter(sub)
    except ImportError:
        pass
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except _user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # bad values found after validation (e.g. batch vs ranks)
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
