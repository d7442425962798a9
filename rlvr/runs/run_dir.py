"""The folder a run writes: refused when it holds something the command was not told what to do with."""

from __future__ import annotations

from pathlib import Path


def check_run_dir(run_dir: Path, resume: bool, overwrite: bool, command: str = "rlvr train") -> None:
    """Refuse to write a run into a folder that holds anything (another run's ``metrics.jsonl`` would be appended to,
    its model and ``recipe.resolved.yaml`` overwritten) unless ``--resume`` or ``--overwrite`` says what to do with
    it. Every command that writes a run folder (``rlvr train``, ``rlvr sft``, ``rlvr dpo``, ``rlvr rm train``) calls
    this.

    Raises:
        FileExistsError: the folder exists, is not empty, and neither flag is given.
    """
    if resume or overwrite or not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise FileExistsError(f"-o {run_dir}: a file, not a folder")
    held = sorted(p.name for p in run_dir.iterdir())
    if held:
        shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
        finished = [p for p in (run_dir / "checkpoints").glob("step-*") if p.is_dir()]  # (no torch import here)
        resumes = command in ("rlvr train", "rlvr sft", "rlvr dpo")
        resumable = resumes and bool(finished)
        if resumes and not resumable and (run_dir / "metrics.jsonl").exists():
            raise FileExistsError(f"{run_dir} holds a run that stopped before its first checkpoint (it holds "
                                  f"{shown}), so there is nothing to resume: pass --overwrite to start it over, or -o "
                                  f"for another folder")
        resume_hint = "--resume to continue its run, " if resumable else ""
        raise FileExistsError(f"{run_dir} is not empty (it holds {shown}): pass {resume_hint}"
                              f"--overwrite to delete it and start over, or -o for another folder")
