"""Free disk space for the run's checkpoints, before anything is loaded: ``trainer.keep_checkpoints`` finished
checkpoints, the best by eval where evals run during the run, plus the one being written (the oldest is deleted only
after the new one is complete).

A checkpoint's size, from the parameter count N of each trained model (rlvr keeps fp32 weights, so every copy is 4
bytes a parameter): ``model/`` (the policy in HF format; in the last checkpoint only, unless
``trainer.export_every_checkpoint``) 4N, DeepSpeed's module states 4N, Adam's two moments 8N, and
under ZeRO >= 1 the optimizer's own fp32 copy of the weights 4N; PPO's critic is saved the same way without the HF
folder. The tokenizer, RNG and trainer state are small and left out.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rlvr.config import Recipe
from rlvr.preflight.devices import GIB
from rlvr.preflight.report import Report


def checkpoint_bytes(policy_params: int, zero_stage: int, critic_params: int = 0, export: bool = True) -> int:
    """Estimated bytes of one ``checkpoints/step-N`` folder (see the module docstring); ``export``: with ``model/``."""
    state = 4 + 8 + (4 if zero_stage >= 1 else 0)  # DeepSpeed: module, Adam moments, fp32 partition copy
    return policy_params * ((4 if export else 0) + state) + critic_params * state


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder`` (0 when it does not exist)."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) if Path(folder).is_dir() else 0


def free_bytes(path: Path) -> tuple[int, Path]:
    """Free bytes on the file system that holds ``path`` (or would: its nearest existing parent), and that parent."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free, probe


def format_size(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 2**20:.1f} MiB"


def check_disk(report: Report, recipe: Recipe, run_dir: Path, policy_params: int, critic_params: int = 0) -> None:
    """``info`` with the checkpoint size, or an ``error`` when the disk holding ``run_dir`` has less free space than
    (``keep_checkpoints`` + 1) checkpoints need, less what the run's own checkpoints (a resume) already take."""
    t = recipe.trainer
    keep = t.keep_checkpoints
    last = checkpoint_bytes(policy_params, t.zero_stage, critic_params)
    export = t.export_every_checkpoint or recipe.model.lora is not None  # LoRA: always its small adapter folder
    size = checkpoint_bytes(policy_params, t.zero_stage, critic_params, export=export)
    best = int(bool(recipe.eval.enabled and recipe.eval.every and t.save_every))  # the best by eval is kept too
    held = sum(folder_bytes(p) for p in (Path(run_dir) / "checkpoints").glob("step-*"))
    needed = max(last, (keep + best) * size + last - held)
    free, where = free_bytes(run_dir)
    each = f"about {format_size(size)} per checkpoint" + (
        "" if size == last else f" ({format_size(last)} for the last, which holds the HF model/ folder)")
    kept = f"trainer.keep_checkpoints={keep}" + (" + the best by eval" if best else "")
    line = (f"{each}; {kept} + the one being written need {format_size(needed)} more on the disk of {where} "
            f"({format_size(free)} free)")
    if free < needed:
        report.add("error", "disk", f"{line}: free {format_size(needed - free)} there, lower "
                   "trainer.keep_checkpoints, or write the run elsewhere (-o)")
    else:
        report.add("info", "disk", line)
