"""A full disk during a checkpoint save ends the run with one line (the folder, the free space, what a checkpoint
needs), the partial ``.tmp-step-N`` removed and the previous checkpoint whole; ``rlvr check`` (and every run's
pre-flight) compares the free space with (keep_checkpoints + 1) checkpoints."""

from __future__ import annotations

import errno
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from rlvr.config import resolve
from rlvr.preflight.disk import check_disk, checkpoint_bytes
from rlvr.preflight.report import Report
from rlvr.runs.checkpoint import CheckpointSpaceError, list_checkpoints, save_checkpoint

Usage = namedtuple("Usage", "total used free")


class Engine:
    """DeepSpeed stand-in: writes part of its state, then the disk is full (or not)."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail

    def zero_optimization_stage(self) -> int:
        return 0

    def zero_optimization_partition_weights(self) -> bool:
        return False

    def save_checkpoint(self, folder: str, tag: str, save_latest: bool, **_: object) -> None:
        Path(folder, tag).mkdir(parents=True)
        torch.save({"module": torch.zeros(1000)}, Path(folder, tag, "mp_rank_00_model_states.pt"))
        if self.fail is not None:
            raise self.fail


class Model(torch.nn.Linear):
    def save_pretrained(self, folder: Path, **_: object) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "model.safetensors").write_bytes(b"\0" * 1000)


class Tokenizer:
    def save_pretrained(self, folder: Path) -> None:
        (Path(folder) / "tokenizer.json").write_text("{}")


def _save(run: Path, step: int, engine: Engine) -> Path:
    return save_checkpoint(run, step, engine, Model(10, 10), Tokenizer(), {"step": step}, keep=2, rank=0)


@pytest.mark.parametrize("fail", [OSError(errno.ENOSPC, "No space left on device"),
                                  RuntimeError("[enforce fail at inline_container.cc:783] . PytorchStreamWriter "
                                               "failed writing file data/3: file write failed; unexpected pos "
                                               "313843648 vs 313843536")])
def test_a_full_disk_during_a_save_is_one_line_and_leaves_no_partial_folder(tmp_path, monkeypatch, fail):
    run = tmp_path / "run"
    _save(run, 1, Engine())
    monkeypatch.setattr("shutil.disk_usage", lambda p: Usage(10**9, 10**9, 3 * 2**20))
    with pytest.raises(CheckpointSpaceError) as caught:
        _save(run, 2, Engine(fail))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"saving checkpoint step-2: no space left on the disk of {run / 'checkpoints'} "
                              "(3.0 MiB free; step-1 takes ")
    assert "with trainer.keep_checkpoints=2 + the one being written); removed the partial .tmp-step-2;" in message
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1"]
    assert [n for n, _ in list_checkpoints(run)] == [1]
    assert (run / "checkpoints/step-1/trainer_state.json").read_text() == '{\n "step": 1\n}'


def test_a_full_disk_on_the_first_save_estimates_the_size(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(CheckpointSpaceError, match=r"a checkpoint takes about 0.0 MiB"):
        _save(run, 1, Engine(OSError(errno.ENOSPC, "No space left on device")))
    assert list((run / "checkpoints").iterdir()) == []


def test_another_error_during_a_save_is_not_hidden(tmp_path):
    with pytest.raises(PermissionError):
        _save(tmp_path / "run", 1, Engine(PermissionError(errno.EACCES, "Permission denied")))


def test_checkpoint_size_estimate():
    n = 135_000_000  # SmolLM2-135M: 4N HF + 4N module + 8N Adam (+ 4N fp32 partition under ZeRO >= 1)
    assert checkpoint_bytes(n, zero_stage=0) == 16 * n
    assert checkpoint_bytes(n, zero_stage=2) == 20 * n
    assert checkpoint_bytes(n, zero_stage=2, critic_params=n) == 36 * n


def _recipe(keep: int):
    return resolve({"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}],
                    "trainer": {"keep_checkpoints": keep}})


def test_preflight_free_space_for_the_kept_checkpoints(tmp_path, monkeypatch):
    size = checkpoint_bytes(10**9, 0)  # 16 GB with model/, 12 GB without
    assert checkpoint_bytes(10**9, 0, export=False) == 12 * 10**9
    monkeypatch.setattr("shutil.disk_usage", lambda p: Usage(10**12, 0, int(2.2 * size)))
    report = Report()
    check_disk(report, _recipe(keep=2), tmp_path / "runs/new", 10**9)  # needs 2 x 12 GB + the last's 16 GB
    (finding,) = report.findings
    assert finding.level == "error" and finding.check == "disk"
    assert finding.message == (f"about 11.2 GiB per checkpoint (14.9 GiB for the last, which holds the HF model/ "
                               f"folder); trainer.keep_checkpoints=2 + the one being written need 37.3 GiB more on "
                               f"the disk of {tmp_path} (32.8 GiB free): free 4.5 GiB there, lower "
                               "trainer.keep_checkpoints, or write the run elsewhere (-o)")
    every = resolve({"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}],
                     "trainer": {"save_every": 5, "export_every_checkpoint": True}, "eval": {"every": 5}})
    report = Report()
    check_disk(report, every, tmp_path / "runs/new", 10**9)
    assert report.findings[0].message.startswith("about 14.9 GiB per checkpoint; trainer.keep_checkpoints=2 + the "
                                                 "best by eval + the one being written need 59.6 GiB more")
    report = Report()
    check_disk(report, _recipe(keep=1), tmp_path / "runs/new", 10**9)
    assert [(f.level, f.check) for f in report.findings] == [("info", "disk")]


def test_a_checkpoint_missing_or_truncating_a_file_is_named_with_the_newest_whole_one(tmp_path):
    """manifest.json (written last) lists every file and its size; a resume checks it before anything loads."""
    from rlvr.runs.checkpoint import CheckpointError, check_checkpoint, checkpoint_problems

    run = tmp_path / "run"
    for step in (1, 2, 3):
        save_checkpoint(run, step, Engine(), Model(10, 10), Tokenizer(), {"step": step}, keep=3, rank=0)
    first, second, third = (p for _, p in list_checkpoints(run))
    assert checkpoint_problems(third) == []
    check_checkpoint(third, run)  # whole: nothing raised
    states = third / "deepspeed" / "state" / "mp_rank_00_model_states.pt"
    written = states.stat().st_size
    (third / "rng-rank0.pt").unlink()
    with open(states, "r+b") as fh:
        fh.truncate(100)
    with pytest.raises(CheckpointError) as e:
        check_checkpoint(third, run)
    assert str(e.value) == (f"checkpoint step-3 of {run} is not whole (deepspeed/state/mp_rank_00_model_states.pt is "
                            f"100 bytes, {written:,} when written; rng-rank0.pt is missing): resume from the newest "
                            f"whole one with --resume-from step-2")
    states.write_bytes(b"\0" * written)  # overwritten at the same size: the sizes agree, the archive is gone
    assert checkpoint_problems(third) == ["deepspeed/state/mp_rank_00_model_states.pt is not a readable torch file "
                                          "(overwritten or corrupted)", "rng-rank0.pt is missing"]
    (second / "trainer_state.json").unlink()
    (first / "manifest.json").unlink()  # a checkpoint written before manifests: its key files are checked
    assert checkpoint_problems(first) == []
    with pytest.raises(CheckpointError, match="trainer_state.json is missing\\): resume from the newest whole one "
                                              "with --resume-from step-1$"):
        check_checkpoint(second, run)
    (first / "rng-rank0.pt").unlink()
    with pytest.raises(CheckpointError, match="no other checkpoint of the run is whole: start again with --overwrite"):
        check_checkpoint(third, run)


def test_leftovers_of_killed_writers_are_removed_at_start(tmp_path):
    import os
    import subprocess

    from rlvr.runtime.atomic import remove_leftovers

    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid names no process now
    run = tmp_path / "run"
    (run / "checkpoints" / ".tmp-step-4").mkdir(parents=True)
    (run / "samples").mkdir()
    stale = [run / f".metrics.jsonl.tmp-{dead.pid}", run / "samples" / f".step-2.jsonl.tmp-{dead.pid}"]
    for p in stale:
        p.write_text("half")
    live = run / f".summary.json.tmp-{os.getpid()}"
    live.write_text("being written")
    assert sorted(remove_leftovers(run)) == sorted(stale + [run / "checkpoints" / ".tmp-step-4"])
    assert live.exists() and not any(p.exists() for p in stale)


def test_a_checkpoint_deepspeed_cannot_read_is_one_line_naming_the_newest_whole_one(tmp_path):
    """Damage the sizes and the archive check cannot see still ends in one line, not DeepSpeed's traceback."""
    from rlvr.runs.checkpoint import CheckpointError, load_checkpoint

    class Unreadable(Engine):
        _config = type("Config", (), {"load_universal_checkpoint": False})()

        def load_checkpoint(self, folder: str, **_: object) -> tuple[None, None]:
            raise RuntimeError("PytorchStreamReader failed reading zip archive: failed finding central directory\n"
                               "more detail")

    run = tmp_path / "run"
    for step in (1, 2):
        save_checkpoint(run, step, Engine(), Model(10, 10), Tokenizer(), {"step": step}, keep=2, rank=0)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(run / "checkpoints" / "step-2", Unreadable(), rank=0)
    assert str(e.value) == (f"checkpoint step-2 of {run} could not be loaded (RuntimeError: PytorchStreamReader "
                            f"failed reading zip archive: failed finding central directory): resume from the newest "
                            f"whole one with --resume-from step-1")
