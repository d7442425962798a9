"""The repository speaks of the product only: no tracked text file tells how it was developed.

Development-history wording (a numbered work stop or round, "the" + "issue", a colleague who wrote something) means
nothing to a reader of the manual, the docs, the code or the benchmark reports. Labelled data (``tests/data/*.jsonl``)
is exempt: its strings are inputs, not prose.
"""

import re
import subprocess
from fnmatch import fnmatch
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXEMPT = ("tests/data/*.jsonl",)

# Written with \s+ and groups so that this file does not match its own patterns.
PATTERNS = [re.compile(p, re.IGNORECASE) for p in (
    r"\bstop\s\d+\b",
    r"\bround\s\d+\b",
    r"\b(first|second|third|fourth|fifth)\sround\b",
    r"\bthe\sissue\b",
    r"\banother\sengineer\b",
    r"\bthis\sstop\b",
)]


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = []
    for name in out.decode().split("\0"):
        path = REPO / name
        if not name or any(fnmatch(name, pattern) for pattern in EXEMPT) or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary (images, archives)
        files.append(path)
    return files


def test_the_patterns_catch_what_they_are_for():
    # "_" stands for the space, so that these examples do not match in this file itself
    for text in ("as of stop_12", "Fourth_round: decode", "the_issue's 30 minutes", "Another_engineer adds",
                 "dead code until this_stop", "round_3 of profiling"):
        text = text.replace("_", " ")
        assert any(p.search(text) for p in PATTERNS), text
    for text in ("the step stops at 12 tokens", "max_rounds: 3", "a refill round", "issue a warning",
                 "round(x, 2)", "the first turn"):
        assert not any(p.search(text) for p in PATTERNS), text


def test_no_tracked_file_tells_development_history():
    files = _tracked_text_files()
    assert len(files) > 50
    found = []
    for path in files:
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for pattern in PATTERNS:
                match = pattern.search(line)
                if match:
                    found.append(f"{path.relative_to(REPO)}:{number}: {match.group(0)!r} in {line.strip()[:100]!r}")
    assert not found, "development history in tracked files (say what the product does instead):\n" + "\n".join(found)
