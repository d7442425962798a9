"""``python -m tests.trainer.async_worker RECIPE RUN_DIR [--resume]``: a training run with the scripted slow engine of
:mod:`tests.trainer.slow_engine` injected (``rlvr train`` builds its engine from the recipe), for tests that kill a run
and resume it in another process."""

from __future__ import annotations

import sys
from pathlib import Path


def run(recipe_path: Path, run_dir: Path, resume: bool = False) -> None:
    """Train the recipe at ``recipe_path`` into ``run_dir`` with the scripted engine (20 ms a group)."""
    from rlvr.config import load_recipe
    from rlvr.models.loading import load_tokenizer
    from rlvr.trainer.trainer import RLTrainer
    from tests.trainer.slow_engine import SlowScriptedEngine

    recipe = load_recipe(recipe_path)
    engine = SlowScriptedEngine(load_tokenizer(recipe.model.name, recipe.model), delay_s=0.02)
    RLTrainer(recipe, run_dir, resume=resume, rollout_engine=engine).train()


def main(argv: list[str]) -> None:
    from tests.tiny import skip_plots

    skip_plots()
    run(Path(argv[0]), Path(argv[1]), resume="--resume" in argv)


if __name__ == "__main__":
    main(sys.argv[1:])
