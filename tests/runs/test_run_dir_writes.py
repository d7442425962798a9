"""Run-directory files rewritten whole survive a write cut short (a kill, a full disk): the old contents stay until
the new ones are complete; a torn last line of ``metrics.jsonl`` is dropped with a warning before a resume, any other
bad line is named by file and line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlvr.runs.metrics import MetricsFileError, parse_metrics, read_metrics, repair_metrics
from rlvr.runtime.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parents[2]


def _metrics(run: Path, steps: int) -> str:
    text = "".join(json.dumps({"step": s, "reward/mean": s / 10, "pad": "x" * 40}) + "\n" for s in range(1, steps + 1))
    (run / "metrics.jsonl").write_text(text)
    return text


def test_truncate_after_cut_short_keeps_the_old_file(tmp_path):
    """A resume's rewrite of metrics.jsonl that fails midway (here: the file-size limit, as a full disk would) leaves
    the file as it was, not empty or half-written."""
    text = _metrics(tmp_path, 20)
    script = textwrap.dedent(f"""
        import resource, signal, sys, types
        from pathlib import Path
        class Writer:  # TensorBoard stand-in: the test is about metrics.jsonl
            def __init__(self, log_dir=None, purge_step=None):
                self.log_dir = log_dir
            def close(self):
                pass
        for name in ("torch", "torch.utils"):
            sys.modules[name] = types.ModuleType(name)
        sys.modules["torch.utils.tensorboard"] = types.SimpleNamespace(SummaryWriter=Writer)
        from rlvr.runs.metrics import MetricsLogger
        logger = MetricsLogger(Path({str(tmp_path)!r}))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))
        try:
            logger.truncate_after(15)
        except OSError as exc:
            print("write failed:", exc.strerror)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "write failed" in out.stdout, out.stderr
    assert (tmp_path / "metrics.jsonl").read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]  # no temporary file left behind


def test_atomic_write_text_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    atomic_write_text(target, "old")

    def boom(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", boom)
    with pytest.raises(OSError):
        atomic_write_text(target, "new" * 1000)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_run_dir_files_are_not_rewritten_in_place():
    """Every writer of a run-directory file goes through rlvr.runtime.atomic (summary, resolved recipe, samples, plots,
    metrics rewrite); appends to metrics.jsonl are the one exception, handled by the torn-line check."""
    files = ["rlvr/trainer/run.py", "rlvr/trainer/trainer.py", "rlvr/trainer/step_metrics.py",
             "rlvr/runs/metrics.py", "rlvr/runs/plots.py", "rlvr/curriculum/plot.py"]
    in_place = re.compile(r"\.write_text\(|\.write_bytes\(|\.open\(\s*\"w|(?<!\w)open\([^)]*,\s*\"w|savefig\(out_path")
    found = [f"{f}:{i}" for f in files for i, line in enumerate((ROOT / f).read_text().splitlines(), 1)
             if in_place.search(line)]
    assert found == []


def test_a_torn_last_line_is_dropped_with_a_warning(tmp_path):
    text = _metrics(tmp_path, 3)
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 4, "reward/mean": "0.')  # an append cut short by a full disk
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    warning = repair_metrics(tmp_path)
    assert warning == (f"warning: {tmp_path / 'metrics.jsonl'}:4: dropped a torn last line (an append cut short, "
                       "e.g. by a full disk or a kill)")
    assert (tmp_path / "metrics.jsonl").read_text() == text
    assert repair_metrics(tmp_path) is None


def test_a_torn_multibyte_character_and_nul_tail_are_a_torn_line(tmp_path):
    _metrics(tmp_path, 2)
    with (tmp_path / "metrics.jsonl").open("ab") as fh:
        fh.write('{"step": 3, "note": "é'.encode()[:-1] + b"\x00" * 8)
    records, torn = parse_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2] and torn == 3


def test_a_bad_line_before_the_last_is_named(tmp_path):
    _metrics(tmp_path, 2)
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 3, "reward\n{"step": 4}\n')
    with pytest.raises(MetricsFileError, match=re.escape(f"{tmp_path / 'metrics.jsonl'}:3: not valid JSON "
                                                         "(Unterminated string starting at: column 13); fix or delete "
                                                         "that line to resume")):
        repair_metrics(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n[1, 2]\n{"step": 3}\n')
    with pytest.raises(MetricsFileError, match=r"metrics.jsonl:2: a JSON list, not an object"):
        read_metrics(tmp_path)
