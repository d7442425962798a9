"""A torch extension build killed mid-way leaves its lock file; rlvr clears such a lock when it is old, so later runs
do not wait for it forever, and leaves a fresh one (a build in progress) alone."""

from __future__ import annotations

import os
import time

from rlvr import STALE_BUILD_LOCK_S, clear_stale_build_locks


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
