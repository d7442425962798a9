"""Nothing tracked in the repository names an absolute path of the machine it was made on: a user's clone has
only the repository, so such a path is a test that cannot run or a document that points nowhere."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The workplace's folders (the checkout, its worktrees and the folder beside it) and this checkout's own path; the
# root folder's name is assembled so that this file does not name it itself.
WORKPLACE = "/" + "work" + "/"
MACHINE_PATHS = re.compile(re.escape(WORKPLACE) + r"[A-Za-z0-9_.-]+|" + re.escape(str(ROOT)) + r"(?![A-Za-z0-9_.-])")


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout ({e})")
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_no_tracked_file_names_an_absolute_machine_path() -> None:
    offenders = []
    for path in _tracked_files():
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:4096]:
            continue  # binary (PNG)
        for lineno, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            match = MACHINE_PATHS.search(line)
            if match:
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {match.group()}")
    assert not offenders, "tracked files name absolute paths of this machine:\n" + "\n".join(offenders[:20])


def test_the_pattern_finds_a_machine_path() -> None:
    assert MACHINE_PATHS.search('CASES = Path("' + WORKPLACE + 'shared/cases/math_dev.jsonl")')
    assert MACHINE_PATHS.search(f"see {ROOT}/README.md")
    assert not MACHINE_PATHS.search("open('/root/.ssh/id_rsa')")  # a sandbox test's hostile target
