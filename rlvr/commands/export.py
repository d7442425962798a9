"""``rlvr export RUN_DIR [--step N] --merge -o DIR``: a run's checkpoint as a plain HF model folder.

A LoRA run's checkpoints hold the adapters alone (``checkpoints/step-N/model`` is ``peft``'s adapter folder);
``--merge`` loads the base model the adapter names, folds the adapters into its weights (``W + (alpha / r) B A``,
``peft``'s ``merge_and_unload``) and writes the result with the tokenizer: a model any tool loads with
``from_pretrained`` or serves with vLLM. A full fine-tuning run's ``model/`` folder is copied as it is.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path


def checkpoint_model_folder(run_dir: Path, step: int | None) -> Path:
    """``RUN_DIR/checkpoints/step-N/model`` (the newest checkpoint when ``step`` is None); a checkpoint or model folder
    given directly is accepted too.

    Raises:
        FileNotFoundError: no such checkpoint (the message lists the run's checkpoints).
    """
    from rlvr.runs.checkpoint import list_checkpoints

    run_dir = Path(run_dir)
    for folder in (run_dir, run_dir / "model"):
        if step is None and ((folder / "config.json").is_file() or (folder / "adapter_config.json").is_file()):
            return folder
    found = dict(list_checkpoints(run_dir))
    if not found:
        raise FileNotFoundError(f"{run_dir} has no finished checkpoint (checkpoints/step-N)")
    if step is None:
        step = max(found)
    if step not in found:
        raise FileNotFoundError(f"{run_dir} has no checkpoint of step {step} (its checkpoints: "
                                f"{', '.join(f'step-{n}' for n in sorted(found))})")
    return found[step] / "model"


def export_model(source: Path, out: Path, merge: bool) -> Path:
    """Write ``source`` (a checkpoint's ``model/`` folder) to ``out`` as a plain HF model with its tokenizer.

    Raises:
        rlvr.models.loading.ModelLoadError: ``source`` holds an adapter and ``merge`` is False.
        FileExistsError: ``out`` exists and is not empty.
    """
    from rlvr.models.loading import ModelLoadError
    from rlvr.models.lora import is_adapter_folder

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")
    if not is_adapter_folder(source):
        shutil.copytree(source, out, dirs_exist_ok=True)
        return out
    if not merge:
        raise ModelLoadError(f"{source} holds a LoRA adapter: pass --merge to write a plain model (base + adapters)")
    from transformers import AutoTokenizer

    from rlvr.config import ModelConfig
    from rlvr.models.lora import load_merged_adapter

    model = load_merged_adapter(source, ModelConfig(name=str(source)))
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    _default_modes(out)
    return out


def _default_modes(folder: Path) -> None:
    """Give every file the mode a new file gets here (0644 under the usual umask): some writers go through a private
    temporary file (0600), which would leave the exported weights readable by their owner only."""
    umask = os.umask(0)
    os.umask(umask)
    for f in Path(folder).rglob("*"):
        if f.is_file():
            f.chmod(0o666 & ~umask)


def _cmd_export(args: argparse.Namespace) -> int:
    source = checkpoint_model_folder(Path(args.run_dir), args.step)
    out = export_model(source, Path(args.output), args.merge)
    print(f"exported {source} -> {out}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``rlvr export`` on the CLI's sub-command parser."""
    p = sub.add_parser("export", help="write a run's checkpoint as a plain HF model folder (LoRA: --merge)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a run directory (or a checkpoint folder)")
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: the newest)")
    p.add_argument("--merge", action="store_true", help="fold a LoRA adapter into the base model's weights")
    p.add_argument("-o", "--output", required=True, help="the folder to write (must be new or empty)")
    p.set_defaults(func=_cmd_export)
