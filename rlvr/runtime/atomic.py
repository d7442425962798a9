"""Files of the run directory rewritten whole: written to a temporary file beside the target, flushed to disk, then
renamed over it, so a kill or a full disk mid-write leaves the old file (or none), never a truncated one."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform that cannot open folders: the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file for ``path`` (mode ``w`` or ``wb``); on a clean exit it is fsynced and renamed onto
    ``path``, on an error it is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def remove_leftovers(folder: str | Path) -> list[Path]:
    """Delete what killed writers left in ``folder`` (and its sub-folders): ``.NAME.tmp-PID`` files of
    :func:`atomic_open` whose process is gone, and ``checkpoints/.tmp-step-N`` folders of interrupted saves (a run
    folder has one writer, so at start none of them is being written). Returns what was removed."""
    import re
    import shutil

    folder = Path(folder)
    gone = []
    for p in folder.rglob(".*.tmp-*"):
        m = re.fullmatch(r"\..+\.tmp-(\d+)", p.name)
        if m and p.is_file() and not _alive(int(m.group(1))):
            p.unlink(missing_ok=True)
            gone.append(p)
    for p in (folder / "checkpoints").glob(".tmp-step-*"):
        shutil.rmtree(p, ignore_errors=True)
        gone.append(p)
    return gone


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path``'s contents with ``text`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path) as fh:
        fh.write(text)
