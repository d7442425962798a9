"""Atomic, resumable checkpoints: ``checkpoints/step-N/`` is written as ``.tmp-step-N`` and renamed when complete, so a
crash (even ``kill -9``) mid-save leaves the previous checkpoint whole and no half folder that looks finished.

A checkpoint holds: ``model/`` (HF format, loadable with ``from_pretrained``, with the tokenizer; under ZeRO-3 saved
from gathered parameters; written in the run's last checkpoint, and in every one with
``trainer.export_every_checkpoint``: :func:`export_checkpoint_model` writes it later from the DeepSpeed state),
``deepspeed/``
(every rank's parameters, optimizer and LR-scheduler state, via ``engine.save_checkpoint``), ``rng-rank{r}.pt`` (Python,
NumPy and torch RNG states) and ``trainer_state.json`` (step, data order, curriculum and KL-controller state).

``manifest.json``, written last (after every rank's files, before the rename), lists every file of the checkpoint with
its size: :func:`check_checkpoint` compares a checkpoint with it before anything loads, so a missing or truncated file
is one line that names it and the newest whole checkpoint, not a DeepSpeed traceback after the model loaded.

A LoRA run (``adapters_only``) saves the adapters alone: ``model/`` is ``peft``'s adapter folder
(``adapter_config.json``, ``adapter_model.safetensors``, the tokenizer), and ``deepspeed/`` holds the adapters and their
optimizer state but not the frozen base weights (``exclude_frozen_parameters``), which a resume loads from the base
model as at the start.
"""

from __future__ import annotations

import errno
import json
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

_STEP_DIR = re.compile(r"^step-(\d+)$")


MANIFEST = "manifest.json"


class CheckpointError(FileNotFoundError):
    """A checkpoint to resume from is not whole (a file missing or shorter than written); the message names the file
    and the newest whole checkpoint of the run."""


def write_manifest(folder: Path) -> None:
    """Write ``folder/manifest.json``: the relative path and size in bytes of every file below ``folder``."""
    files = {str(p.relative_to(folder)): p.stat().st_size for p in sorted(Path(folder).rglob("*"))
             if p.is_file() and p.name != MANIFEST}
    (Path(folder) / MANIFEST).write_text(json.dumps({"files": files}, indent=0))


def checkpoint_problems(path: Path) -> list[str]:
    """What keeps ``path`` from being a whole checkpoint: files of its manifest that are missing or of another size
    (a checkpoint written before manifests: its DeepSpeed state, trainer state and rank-0 RNG state must exist)."""
    path = Path(path)
    manifest = path / MANIFEST
    if not manifest.is_file():
        needed = ["trainer_state.json", "rng-rank0.pt", "deepspeed"]
        return [f"{name} is missing" for name in needed if not (path / name).exists()]
    try:
        files = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return [f"{MANIFEST} is unreadable"]
    problems = []
    for name, size in files.items():
        f = path / name
        if not f.is_file():
            problems.append(f"{name} is missing")
        elif f.stat().st_size != size:
            problems.append(f"{name} is {f.stat().st_size:,} bytes, {size:,} when written")
        elif name.endswith(".pt") and not _zip_readable(f):
            problems.append(f"{name} is not a readable torch file (overwritten or corrupted)")
    return problems


def _zip_readable(path: Path) -> bool:
    """Whether ``path``, a file ``torch.save`` wrote (a zip archive), still has its archive directory: reads the end of
    the file only, so a file zeroed or overwritten at the same size is found before anything loads."""
    import zipfile

    try:
        with zipfile.ZipFile(path):
            return True
    except (OSError, zipfile.BadZipFile):
        return False


def check_checkpoint(path: Path, run_dir: Path) -> None:
    """Raise :class:`CheckpointError` when ``path`` is not whole, naming what is wrong and the run's newest whole
    checkpoint (or ``--overwrite`` when there is none). Reads file sizes only: nothing is loaded."""
    problems = checkpoint_problems(path)
    if not problems:
        return
    shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
    raise CheckpointError(f"checkpoint {Path(path).name} of {run_dir} is not whole ({shown}): "
                          f"{_offer_whole(path, run_dir)}")


def _offer_whole(path: Path, run_dir: Path) -> str:
    """What to resume from instead of ``path``: the run's newest other whole checkpoint, or --overwrite."""
    whole = [p for _, p in reversed(list_checkpoints(run_dir)) if p != Path(path) and not checkpoint_problems(p)]
    return (f"resume from the newest whole one with --resume-from {whole[0].name}" if whole else
            "no other checkpoint of the run is whole: start again with --overwrite")


class CheckpointSpaceError(ValueError):
    """The disk filled up while a checkpoint was written (the partial folder is removed; the user's to fix)."""


def _disk_full(exc: BaseException) -> bool:
    """A write that failed for lack of space: ENOSPC/EDQUOT, or torch's zip writer's short write (``unexpected pos``,
    which hides the ENOSPC)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return "No space left on device" in text or "unexpected pos" in text or "Disk quota exceeded" in text


def _space_error(run_dir: Path, step: int, tmp: Path, hf_model: torch.nn.Module, zero_stage: int, keep: int,
                 extra_engines: dict[str, Any] | None) -> CheckpointSpaceError:
    """The one-line error of a checkpoint save that ran out of space: the folder, the free space, what a checkpoint
    takes (the last finished one's size, else the estimate of :func:`rlvr.preflight.disk.checkpoint_bytes`)."""
    from rlvr.preflight.disk import checkpoint_bytes, folder_bytes, format_size, free_bytes

    finished = list_checkpoints(run_dir)
    if finished:
        size, how = folder_bytes(finished[-1][1]), f"{finished[-1][1].name} takes"
    else:
        critic = sum(p.numel() for e in (extra_engines or {}).values() for p in e.module.parameters())
        size = checkpoint_bytes(sum(p.numel() for p in hf_model.parameters()), zero_stage, critic)
        how = "a checkpoint takes about"
    free, _ = free_bytes(tmp.parent)
    return CheckpointSpaceError(
        f"saving checkpoint step-{step}: no space left on the disk of {tmp.parent} ({format_size(free)} free; {how} "
        f"{format_size(size)}, {format_size(size * (keep + 1))} with trainer.keep_checkpoints={keep} + the one being "
        f"written); removed the partial {tmp.name}; free space there or lower trainer.keep_checkpoints, then --resume")


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Finished checkpoints of a run, oldest first (temp folders of interrupted saves are ignored)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1][1] if ckpts else None


def find_checkpoint(run_dir: Path, where: str | Path) -> Path:
    """The finished checkpoint ``where`` names: ``checkpoints/step-N`` (relative to the run dir), ``step-N``, or a
    path to one of the run's ``checkpoints/step-N`` folders.

    Raises:
        FileNotFoundError: not one of ``run_dir``'s finished checkpoints (the message lists them).
    """
    run_dir = Path(run_dir)
    where = Path(where)
    candidates = [where, run_dir / where, run_dir / "checkpoints" / where]
    found = {p.resolve(): p for _, p in list_checkpoints(run_dir)}
    for c in candidates:
        if c.exists() and c.resolve() in found:
            return found[c.resolve()]
    names = ", ".join(p.name for _, p in list_checkpoints(run_dir)) or "none"
    raise FileNotFoundError(f"--resume-from {where}: not a finished checkpoint of {run_dir} (its checkpoints: {names})")


def step_of(checkpoint: Path) -> int:
    """N of a ``step-N`` folder. Raises ValueError for another name."""
    m = _STEP_DIR.match(Path(checkpoint).name)
    if m is None:
        raise ValueError(f"{checkpoint} is not a step-N checkpoint folder")
    return int(m.group(1))


def discard_checkpoints_after(run_dir: Path, step: int, rank: int) -> list[Path]:
    """Delete the run's checkpoints of steps after ``step`` (rank 0 deletes, every rank calls this): a run resumed from
    an older checkpoint redoes those steps, and a stale newer checkpoint would otherwise be the next ``--resume``'s.
    Returns the deleted folders."""
    newer = [p for n, p in list_checkpoints(run_dir) if n > step]
    if rank == 0:
        for p in newer:
            shutil.rmtree(p)
    _barrier()
    return newer


def gathered_state_dict(engine: Any) -> dict[str, torch.Tensor] | None:
    """The model's full state dict on rank 0 when ZeRO-3 partitions its parameters, else ``None`` (the HF model's own
    tensors are complete then).

    Under ZeRO-3 each rank's ``module.state_dict()`` holds empty partition stubs: saving it writes a model of
    zero-size tensors. DeepSpeed's ``_zero3_consolidated_16bit_state_dict`` gathers one layer at a time onto rank 0's
    CPU (in the parameters' own dtype, fp32 here, despite its name). A collective: every rank must call this.
    """
    partitioned = getattr(engine, "zero_optimization_partition_weights", None)
    if partitioned is None or not partitioned():
        return None
    return engine._zero3_consolidated_16bit_state_dict()


def save_checkpoint(run_dir: Path, step: int, engine: Any, hf_model: torch.nn.Module, tokenizer: Any,
                    trainer_state: dict[str, Any], keep: int, rank: int,
                    extra_engines: dict[str, Any] | None = None, adapters_only: bool = False,
                    export: bool = True) -> Path:
    """Save step ``step`` atomically (every rank calls this). Keeps the newest ``keep`` checkpoints, and the one with
    the best held-out pass@1 (``trainer_state["eval"]``, see :func:`best_by_eval`).

    ``export``: write ``model/`` (the HF folder); without it the checkpoint holds the DeepSpeed state alone (a LoRA
    run's ``model/`` is its small adapter folder, always written).

    ``adapters_only``: ``hf_model`` is a ``peft`` model; only its trainable parameters (the adapters) and their
    optimizer state are written, not the frozen base weights.

    ``extra_engines`` (name -> DeepSpeed engine, e.g. ``{"critic": ...}``) are saved beside the policy's state, in
    ``<name>/`` (parameters, optimizer, LR schedule); :func:`load_extra_engine` restores one.

    Returns:
        the final ``checkpoints/step-N`` path.

    Raises:
        CheckpointSpaceError: the disk filled up (one line: the folder, the free space and what is needed); the
            partial ``.tmp-step-N`` is removed and the previous checkpoints are left whole.
    """
    root = Path(run_dir) / "checkpoints"
    final = root / f"step-{step}"
    tmp = root / f".tmp-step-{step}"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier()
    try:
        engine.save_checkpoint(str(tmp / "deepspeed"), tag="state", save_latest=False,
                               exclude_frozen_parameters=adapters_only)
        if adapters_only:
            _barrier()  # every rank's state files written before rank 0 rewrites them (it reads them all)
            if rank == 0:
                _keep_trainable_only(tmp / "deepspeed", hf_model)
        for name, extra in (extra_engines or {}).items():
            # a LoRA critic: its adapters and head, not the frozen trunk (restored from where it was loaded)
            frozen = _has_frozen(extra.module)
            extra.save_checkpoint(str(tmp / name), tag="state", save_latest=False, exclude_frozen_parameters=frozen)
            if frozen:  # the trunk's second names (e.g. the critic's ``backbone`` alias) are left in by DeepSpeed
                _barrier()
                if rank == 0:
                    _keep_trainable_only(tmp / name, extra.module)
        torch.save(rng_state(), tmp / f"rng-rank{rank}.pt")
        export = export or adapters_only
        full_state = gathered_state_dict(engine) if export else None  # every rank takes part in the ZeRO-3 gathers
        if rank == 0:
            if export:
                hf_model.save_pretrained(tmp / "model", safe_serialization=True, state_dict=full_state)
                tokenizer.save_pretrained(tmp / "model")
            (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=1, default=str))
    except (OSError, RuntimeError) as exc:
        if not _disk_full(exc):
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # every rank: the space is needed, and a rank may hold its own files
        zero = getattr(engine, "zero_optimization_stage", lambda: 0)()
        raise _space_error(run_dir, step, tmp, hf_model, int(zero or 0), keep, extra_engines) from None
    _barrier()
    if rank == 0:
        try:
            write_manifest(tmp)  # last: every rank's files are written (the barrier above)
        except OSError as exc:
            if not _disk_full(exc):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            zero = getattr(engine, "zero_optimization_stage", lambda: 0)()
            raise _space_error(run_dir, step, tmp, hf_model, int(zero or 0), keep, extra_engines) from None
        if final.exists():  # re-saving the same step (e.g. resumed at the end): replace it whole
            shutil.rmtree(final)
        tmp.rename(final)
        best = best_by_eval(run_dir)
        for _, old in list_checkpoints(run_dir)[:-keep]:
            if old != best:
                shutil.rmtree(old, ignore_errors=True)
    _barrier()
    return final


def best_by_eval(run_dir: Path) -> Path | None:
    """The finished checkpoint whose step was evaluated with the highest held-out pass@1 (``trainer_state.json``'s
    ``eval.pass_at_1``; the newest of equals); ``None`` when no checkpoint holds an eval."""
    best: tuple[float, int, Path] | None = None
    for step, path in list_checkpoints(run_dir):
        try:
            score = json.loads((path / "trainer_state.json").read_text()).get("eval", {}).get("pass_at_1")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(score, (int, float)) and (best is None or (score, step) >= best[:2]):
            best = (float(score), step, path)
    return best[2] if best else None


def export_checkpoint_model(checkpoint: Path, base_model: Any, tokenizer_source: str) -> Path:
    """Write ``checkpoint/model/`` (HF format, with the tokenizer) from the checkpoint's DeepSpeed state, for a
    checkpoint saved without it: the parameters are loaded into ``base_model`` (the run's model as it was loaded,
    whose architecture they fit) and saved; written to a temporary folder and renamed. Returns the folder.

    Raises:
        FileNotFoundError: the checkpoint has no DeepSpeed state.
    """
    from transformers import AutoTokenizer

    checkpoint = Path(checkpoint)
    state_dir = checkpoint / "deepspeed" / "state"
    files = sorted(state_dir.glob("*model_states.pt"))
    if not files:
        raise FileNotFoundError(f"{checkpoint} holds neither model/ nor a DeepSpeed state to write it from")
    module = torch.load(files[0], map_location="cpu", weights_only=False)["module"]
    if any(t.numel() == 0 for t in module.values()):  # ZeRO-3 stubs: gather the fp32 partitions instead
        from rlvr.runtime.extensions import prepare_extension_builds

        prepare_extension_builds()  # DeepSpeed's first import on a machine may build its CPU ops
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        module = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint / "deepspeed"), tag="state")
    base_model.load_state_dict(module)
    tmp = checkpoint / ".tmp-model"
    shutil.rmtree(tmp, ignore_errors=True)
    base_model.save_pretrained(tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(tokenizer_source).save_pretrained(tmp)
    tmp.rename(checkpoint / "model")
    return checkpoint / "model"


def _has_frozen(module: torch.nn.Module) -> bool:
    """True for a module with frozen parameters (a LoRA model's base weights)."""
    return any(not p.requires_grad for p in module.parameters())


def _keep_trainable_only(ds_dir: Path, model: torch.nn.Module) -> None:
    """Drop every frozen tensor from this rank's DeepSpeed module states: ``exclude_frozen_parameters`` leaves the
    second name of a tied frozen weight in (e.g. ``lm_head.weight`` tied to the embedding: the whole embedding matrix
    in every LoRA checkpoint)."""
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    for f in Path(ds_dir).rglob("*model_states.pt"):
        state = torch.load(f, weights_only=False)
        module = state.get("module")
        if isinstance(module, dict) and set(module) - trainable:
            state["module"] = type(module)((k, v) for k, v in module.items() if k in trainable)
            torch.save(state, f)


def saved_zero_ranks(state_dir: Path) -> int:
    """Data-parallel ranks a ZeRO 1-3 checkpoint was saved with (one optimizer shard each); 0 for ZeRO-0, whose
    checkpoint loads on any number of ranks."""
    return len(list(Path(state_dir).glob("zero_pp_rank_*_mp_rank_00_optim_states.pt")))


def _to_universal(ds_dir: Path, rank: int) -> str:
    """Convert ``ds_dir/state`` (ZeRO shards of N ranks) into ``ds_dir/state_universal`` once, on rank 0, with
    DeepSpeed's ``ds_to_universal``: a layout any number of ranks can load. Returns the tag to load.

    Raises:
        RuntimeError: the conversion failed (its output is in the message).
    """
    out = ds_dir / "state_universal"
    if rank == 0 and not (out / "zero").is_dir():
        import subprocess
        import sys

        cmd = [sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", str(ds_dir / "state"),
               "--output_folder", str(out), "--num_extract_workers", "1", "--num_merge_workers", "1",
               "--inject_missing_state"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"converting {ds_dir / 'state'} to a universal checkpoint (to resume on a different "
                               f"number of ranks) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    _barrier()
    return "state_universal"


def load_extra_engine(path: Path, name: str, engine: Any) -> None:
    """Restore an engine saved by :func:`save_checkpoint`'s ``extra_engines`` (same number of ranks only).

    Raises:
        FileNotFoundError: the checkpoint has no ``name/`` state.
    """
    folder = Path(path) / name
    load_path = None
    if folder.is_dir():
        load_path, _ = engine.load_checkpoint(str(folder), tag="state", load_optimizer_states=True,
                                              load_lr_scheduler_states=True,
                                              load_module_strict=not _has_frozen(engine.module))
    if load_path is None:
        raise FileNotFoundError(f"{path} has no saved {name} state ({folder})")


def load_checkpoint(path: Path, engine: Any, rank: int, adapters_only: bool = False) -> dict[str, Any]:
    """Restore parameters, optimizer, LR schedule and this rank's RNG; returns the trainer state dict.

    ``adapters_only``: a LoRA checkpoint (see :func:`save_checkpoint`): the saved parameters are the adapters, the
    frozen base weights stay as loaded.

    Any number of ranks can resume: a ZeRO-0 checkpoint loads as it is; a ZeRO 1-3 checkpoint saved by a different
    number of ranks is first converted to DeepSpeed's universal format (``deepspeed/state_universal``, kept for later).

    Raises:
        FileNotFoundError: the checkpoint lacks its DeepSpeed state or trainer state (not a finished checkpoint).
        CheckpointError: DeepSpeed could not read the state (its files damaged): names the run's newest whole one.
    """
    path = Path(path)
    for needed in ("deepspeed", "trainer_state.json"):
        if not (path / needed).exists():
            raise FileNotFoundError(f"{path} is not a complete checkpoint: {needed} is missing")
    tag = "state"
    saved_ranks = saved_zero_ranks(path / "deepspeed" / "state")
    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if saved_ranks and saved_ranks != world:
        tag = _to_universal(path / "deepspeed", rank)
        engine._config.load_universal_checkpoint = True  # read by DeepSpeed at load time only
    try:
        load_path, _ = engine.load_checkpoint(str(path / "deepspeed"), tag=tag, load_optimizer_states=True,
                                              load_lr_scheduler_states=True, load_module_strict=not adapters_only)
    except (RuntimeError, OSError, ValueError, KeyError, EOFError, pickle.UnpicklingError) as exc:
        # content damaged in a way the manifest's sizes and archive check cannot see: one line, not DeepSpeed's trace
        run_dir = path.parent.parent
        raise CheckpointError(f"checkpoint {path.name} of {run_dir} could not be loaded ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else 'no message'}): "
                              f"{_offer_whole(path, run_dir)}") from exc
    finally:
        engine._config.load_universal_checkpoint = False
    if load_path is None:
        raise FileNotFoundError(f"DeepSpeed found no state in {path / 'deepspeed'}")
    rng_file = path / f"rng-rank{rank}.pt"
    if rng_file.exists():  # absent when resuming with more ranks than saved: fresh streams for the new ranks
        set_rng_state(torch.load(rng_file, weights_only=False))
    return json.loads((path / "trainer_state.json").read_text())
