"""``rlvr rm``: reward models trained on preference pairs.

    rlvr rm pairs recipes/demo.yaml --out runs/rm_pairs.jsonl [--prompts 200] [--max-pairs 4]   # pairs from a policy
    rlvr rm train recipes/rm_demo.yaml -o runs/rm_demo [--set data.source.path=runs/rm_pairs.jsonl]
    rlvr rm eval runs/rm_demo --file pairs.jsonl     # one JSON object: pairwise_accuracy, ece, n_pairs, ...

``pairs`` samples the GRPO recipe's policy on its training prompts and pairs a verified-correct completion (chosen)
with an incorrect one (rejected) of the same prompt. ``train`` writes ``RUN_DIR/model`` (HF format, head included),
``summary.json`` (``eval.pairwise_accuracy``, ``eval.ece``, ``eval.length_correlation``), ``metrics.jsonl`` and
``plots/reward_vs_length.png``. See :mod:`rlvr.reward_model`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _cmd_train(args: argparse.Namespace) -> int:
    from rlvr.config import load_reward_model_recipe
    from rlvr.runs.run_dir import check_run_dir

    recipe = load_reward_model_recipe(args.recipe, args.set)  # validated before torch is imported
    run_dir = Path(args.output or Path("runs") / Path(args.recipe).stem)
    check_run_dir(run_dir, resume=False, overwrite=args.overwrite, command="rlvr rm train")
    if args.overwrite:
        import shutil
        shutil.rmtree(run_dir, ignore_errors=True)
    from rlvr.reward_model.train import train_reward_model

    summary = train_reward_model(recipe, run_dir)
    ev, before = summary["eval"], summary.get("eval_before")
    if before:
        print(f"untrained (random head): pairwise accuracy {before['pairwise_accuracy']:.3f}  ECE {before['ece']:.3f}")
    if ev:
        print(f"held-out pairs: {ev['n_pairs']} ({ev['n_prompts']} prompts)  pairwise accuracy "
              f"{ev['pairwise_accuracy']:.3f}  ECE {ev['ece']:.3f}  length correlation "
              f"{'n/a' if ev['length_correlation'] is None else format(ev['length_correlation'], '.3f')}  "
              f"(best of step {summary['best_step']}/{summary['steps']})")
    print(f"model: {summary['model']}  wall time: {summary['wall_time_s']:.0f} s  summary: {run_dir / 'summary.json'}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from rlvr.reward_model.train import evaluate_saved

    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    print(json.dumps(evaluate_saved(args.target, args.file, micro_batch_size=args.micro_batch_size, bf16=args.bf16),
                     indent=2))
    return 0


def _cmd_pairs(args: argparse.Namespace) -> int:
    from rlvr.config import load_recipe

    recipe = load_recipe(args.recipe, args.set)
    from rlvr.reward_model.pairs import build_pairs

    stats = build_pairs(recipe, Path(args.out), num_prompts=args.prompts, group_size=args.group_size,
                        max_pairs_per_prompt=args.max_pairs, split=args.split)
    print(json.dumps(stats, indent=2))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rlvr rm {pairs,train,eval}`` on the CLI's sub-command parser."""
    rm = sub.add_parser("rm", help="reward models: build preference pairs, train, evaluate",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = rm.add_subparsers(dest="rm_command", required=True)

    p = actions.add_parser("train", help="train a reward model with a reward-model recipe")
    p.add_argument("recipe")
    p.add_argument("-o", "--output", help="run directory (default: runs/<recipe name>)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe key")
    p.add_argument("--overwrite", action="store_true", help="delete the run directory first (a folder that holds "
                                                            "anything is refused otherwise)")
    p.set_defaults(func=_cmd_train)

    p = actions.add_parser("eval", help="pairwise accuracy and ECE of a reward model on a file of pairs (JSON out)")
    p.add_argument("target", help="an `rlvr rm train` run directory or its model folder")
    p.add_argument("--file", required=True, help="JSONL preference rows (prompt + chosen/rejected, or responses)")
    p.add_argument("--micro-batch-size", type=int, default=16)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (CPUs with native bf16, GPUs)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.set_defaults(func=_cmd_eval)

    p = actions.add_parser("pairs", help="preference pairs (correct vs incorrect) from a GRPO recipe's policy")
    p.add_argument("recipe", help="a GRPO recipe: its model, prompts, sampling settings and verifiers are used")
    p.add_argument("--out", required=True, help="JSONL file to write")
    p.add_argument("--prompts", type=int, default=None, help="prompts to sample (default: all of the split)")
    p.add_argument("--group-size", type=int, default=None, help="samples per prompt (default rollout.group_size)")
    p.add_argument("--max-pairs", type=int, default=4, help="pairs per prompt at most (default 4)")
    p.add_argument("--split", choices=["train", "eval"], default="train")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe key")
    p.set_defaults(func=_cmd_pairs)
