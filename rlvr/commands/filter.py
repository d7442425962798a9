"""``rlvr filter``: each training prompt's solve rate from k samples, and the prompts of useful difficulty kept.

    rlvr filter recipes/demo.yaml --k 8 --min 0.1 --max 0.9 --out filtered.jsonl [--model PATH] [--kept FILE]

Writes ``filtered.jsonl`` (every training row plus ``solve_rate`` and ``n_samples``) and ``filtered.kept.jsonl`` (the
rows in [min, max]), prints a histogram of solve rates and how many prompts were kept. Rerun the same command after an
interruption to continue where it stopped. Train on the kept prompts with
``--set 'data.source={type: jsonl, path: filtered.kept.jsonl}'``. See :mod:`rlvr.curriculum.offline`.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _cmd_filter(args: argparse.Namespace) -> int:
    from rlvr.config import load_recipe
    from rlvr.runs.verifier_inputs import add_recipe_import_paths

    overrides = list(args.set) + ([f"model.name={args.model}"] if args.model else [])
    recipe = load_recipe(args.recipe, overrides)  # validated before torch is imported
    add_recipe_import_paths(args.recipe)
    from rlvr.curriculum.offline import filter_prompts

    result = filter_prompts(recipe, Path(args.out), k=args.k, min_rate=args.min, max_rate=args.max,
                            kept_path=Path(args.kept) if args.kept else None, chunk_size=args.chunk_size)
    print(result.report())
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rlvr filter`` on the CLI's sub-command parser."""
    p = sub.add_parser("filter", help="measure each training prompt's solve rate and keep those in [--min, --max]",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe")
    p.add_argument("--k", type=int, default=8, help="samples per prompt (default 8)")
    p.add_argument("--min", type=float, default=0.1, help="lowest solve rate kept, inclusive (default 0.1)")
    p.add_argument("--max", type=float, default=0.9, help="highest solve rate kept, inclusive (default 0.9)")
    p.add_argument("--out", required=True, help="JSONL of every training row with solve_rate and n_samples")
    p.add_argument("--kept", help="JSONL of the kept rows (default: OUT with .kept before the suffix)")
    p.add_argument("--model", help="model to measure with (default: the recipe's model.name)")
    p.add_argument("--chunk-size", type=int, default=16, help="prompts per flush to OUT (default 16)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe key")
    p.set_defaults(func=_cmd_filter)
