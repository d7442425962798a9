"""A torch extension build killed mid-way leaves its lock file; rlvr clears such a lock when it is old (or idle), where
it builds (so later runs do not wait for it forever), leaves a fresh one (a build in progress) alone, and does neither
on import; every build uses the environment's own ninja."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from rlvr.runtime.extensions import IDLE_BUILD_LOCK_S, STALE_BUILD_LOCK_S, clear_stale_build_locks, use_one_ninja


def test_an_old_build_lock_is_removed_and_a_fresh_one_kept(tmp_path, capsys) -> None:
    fresh, old = tmp_path / "rlvr_decode_kernels" / "lock", tmp_path / "deepspeed_shm_comm" / "lock"
    for lock in (fresh, old):
        lock.parent.mkdir()
        lock.touch()
    past = time.time() - STALE_BUILD_LOCK_S - 60
    os.utime(old, (past, past))
    assert clear_stale_build_locks(tmp_path) == [old]
    assert fresh.exists() and not old.exists()
    assert f"removed a build lock left by a killed build: {old}" in capsys.readouterr().err


def test_a_missing_extensions_folder_is_no_error(tmp_path) -> None:
    assert clear_stale_build_locks(tmp_path / "none") == []


def test_importing_rlvr_deletes_no_lock_and_the_build_set_up_does(tmp_path) -> None:
    """Every verifier worker imports rlvr: that must touch no file. The set-up before a build clears the old lock."""
    old = tmp_path / "rlvr_logprob_kernels" / "lock"
    old.parent.mkdir()
    old.touch()
    past = time.time() - STALE_BUILD_LOCK_S - 60
    os.utime(old, (past, past))
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", "import rlvr, rlvr.verifiers, rlvr.sandbox"], env=env, check=True)
    assert old.exists()
    done = subprocess.run([sys.executable, "-c", "from rlvr.runtime.extensions import prepare_extension_builds as p; "
                           "print(p())"], env=env, check=True, capture_output=True, text=True)
    assert done.stdout.strip() == str(tmp_path) and not old.exists()
    assert f"removed a build lock left by a killed build: {old}" in done.stderr


def test_every_build_uses_the_environments_own_ninja(monkeypatch, tmp_path):
    """A system ninja-build first on PATH (or no ninja at all) would make builds flip between two ninjas, each
    rebuilding every extension; the venv's ninja goes first, once."""
    import shutil

    import ninja

    other = tmp_path / "bin"
    other.mkdir()
    (other / "ninja").write_text("#!/bin/sh\nexit 1\n")
    (other / "ninja").chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(other), "/usr/bin", "/bin"]))
    assert use_one_ninja() == str(ninja.BIN_DIR)
    assert shutil.which("ninja") == os.path.join(ninja.BIN_DIR, "ninja")
    before = os.environ["PATH"]
    use_one_ninja()
    assert os.environ["PATH"] == before  # once: no growing PATH
    monkeypatch.setenv("PATH", "/nonexistent")  # no ninja anywhere on PATH
    use_one_ninja()
    assert shutil.which("ninja") == os.path.join(ninja.BIN_DIR, "ninja")


def test_a_lock_with_no_build_running_is_removed_after_a_minute(tmp_path) -> None:
    """DeepSpeed's op builds go through the same lock: a build killed mid-way must not make the next one wait."""
    idle, busy, young = (tmp_path / name / "lock" for name in ("deepspeed_shm_comm", "rlvr_logprobs", "rlvr_layers"))
    for lock in (idle, busy, young):
        lock.parent.mkdir()
        lock.touch()
    past = time.time() - IDLE_BUILD_LOCK_S - 30
    for lock in (idle, busy):
        os.utime(lock, (past, past))
    builder = subprocess.Popen(["sleep", "30"], cwd=busy.parent)  # stands in for a ninja working in that folder
    try:
        assert clear_stale_build_locks(tmp_path) == [idle]
    finally:
        builder.kill()
        builder.wait()
    assert busy.exists() and young.exists()
