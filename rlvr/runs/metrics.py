"""Per-step metrics: one JSON line per step in ``metrics.jsonl`` and the same scalars in TensorBoard, and in Weights &
Biases with ``logging.wandb`` (with the sample tables).

Metric names are grouped by stage prefix (``rollout/``, ``reward/``, ``train/``, ``time/``, ``eval/``), the stage names
of the training step, so one grep finds a stage's code, timer and curves.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from rlvr.runtime.atomic import atomic_write_text


class MetricsFileError(ValueError):
    """``metrics.jsonl`` holds a line that is not a JSON record, other than a torn last line (named by file and
    line)."""


class MetricsLogger:
    """Writes metrics of rank 0 (other ranks pass ``enabled=False`` and write nothing).

    On resume, :meth:`truncate_after` drops lines of steps after the checkpoint, so the file holds each step once, and
    restarts TensorBoard with ``purge_step``: TensorBoard then discards the old events of those steps.
    """

    def __init__(self, run_dir: Path, enabled: bool = True, wandb: Any = None, config: dict | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.enabled = enabled
        self._tb = None
        self._wandb = None
        if enabled:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
            if wandb is not None:
                self._wandb = start_wandb(run_dir, wandb, config)

    def truncate_after(self, step: int) -> None:
        """Keep only lines (and TensorBoard events) with ``step <= step``: steps lost in a crash, or after an older
        checkpoint resumed with ``--resume-from``, are redone by the resumed run."""
        if not self.enabled:
            return
        from torch.utils.tensorboard import SummaryWriter

        log_dir = self._tb.log_dir
        self._tb.close()
        # a SessionLog.START at step+1: TensorBoard drops every earlier-written event of steps >= step + 1
        self._tb = SummaryWriter(log_dir=log_dir, purge_step=step + 1)
        if not self.path.exists():
            return
        records, _ = parse_metrics(self.path)
        kept = [r for r in records if r.get("step", 0) <= step]
        atomic_write_text(self.path, "".join(json.dumps(r, default=float) + "\n" for r in kept))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": step, **metrics}
        with self.path.open("a") as fh:
            fh.write(json.dumps(record, default=float) + "\n")
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self._tb.add_scalar(key, value, step)
        self._tb.flush()
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))
                             and not isinstance(v, bool) and math.isfinite(v)}, step=step)

    def table(self, tag: str, rows: list[dict[str, Any]], step: int) -> None:
        """A table of rows (the step's samples) in W&B; nothing without it."""
        if self._wandb is None or not rows:
            return
        import wandb

        columns = list(rows[0])
        data = [[r.get(c) if isinstance(r.get(c), (int, float, str, type(None))) else json.dumps(r.get(c), default=str)
                 for c in columns] for r in rows]
        self._wandb.log({tag: wandb.Table(columns=columns, data=data)}, step=step)

    def histogram(self, tag: str, values: list[float], step: int) -> None:
        if self.enabled and values:
            import numpy as np

            self._tb.add_histogram(tag, np.asarray(values, dtype=np.float32), step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def wandb_reachable(timeout_s: float = 2.0) -> bool:
    """Whether the W&B server answers (a TCP connection to its API host within ``timeout_s``)."""
    import socket

    try:
        socket.create_connection(("api.wandb.ai", 443), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def start_wandb(run_dir: Path, cfg: Any, config: dict | None = None) -> Any:
    """A W&B run for ``run_dir`` (``cfg``: :class:`rlvr.config.schema.WandbConfig`), resumed by the id saved in
    ``run_dir/wandb-run-id`` on a resume. ``mode: auto`` is ``WANDB_MODE`` where set, else online where the server
    answers, else offline."""
    import os
    import uuid

    import wandb

    mode = cfg.mode
    if mode == "auto":
        mode = os.environ.get("WANDB_MODE") or ("online" if wandb_reachable() else "offline")
    id_file = Path(run_dir) / "wandb-run-id"
    run_id = id_file.read_text().strip() if id_file.is_file() else uuid.uuid4().hex[:8]
    atomic_write_text(id_file, run_id + "\n")
    return wandb.init(project=cfg.project, entity=cfg.entity, mode=mode, dir=str(run_dir), id=run_id,
                      name=Path(run_dir).name, resume="allow", config=config)


def parse_metrics(path: Path) -> tuple[list[dict[str, Any]], int | None]:
    """The records of a ``metrics.jsonl`` and the line number of a torn last line (``None`` when there is none).

    A torn last line is what an append cut short leaves (a kill, a full disk): the file's last line, not a JSON
    record. It is skipped. Any other line that is not a JSON object raises.

    Raises:
        MetricsFileError: naming the file and the line (1-based).
    """
    lines = Path(path).read_bytes().split(b"\n")
    while lines and not lines[-1].strip(b" \t\r\x00"):
        lines.pop()
    records: list[dict[str, Any]] = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip(b" \t\r\x00"):
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
            problem = None if isinstance(record, dict) else f"a JSON {type(record).__name__}, not an object"
        except UnicodeDecodeError as exc:
            problem = f"not UTF-8 ({exc.reason} at byte {exc.start} of the line)"
        except json.JSONDecodeError as exc:
            problem = f"not valid JSON ({exc.msg}: column {exc.colno})"
        if problem is None:
            records.append(record)
        elif number == len(lines):
            return records, number
        else:
            raise MetricsFileError(f"{path}:{number}: {problem}; fix or delete that line to resume")
    return records, None


def repair_metrics(run_dir: Path) -> str | None:
    """Before a resume: drop a torn last line of ``run_dir/metrics.jsonl`` (rewritten atomically) and return a
    warning naming it; ``None`` when the file is whole or missing.

    Raises:
        MetricsFileError: another line is not a JSON record (file and line named).
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return None
    records, torn = parse_metrics(path)
    if torn is None:
        return None
    atomic_write_text(path, "".join(json.dumps(r, default=float) + "\n" for r in records))
    return f"warning: {path}:{torn}: dropped a torn last line (an append cut short, e.g. by a full disk or a kill)"


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All records of ``run_dir/metrics.jsonl`` (empty when the file is missing; a torn last line is skipped)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return parse_metrics(path)[0]


def check_metrics_before_resume(run_dir: Path, is_main: bool = True) -> None:
    """:func:`repair_metrics` on rank 0, its warning printed (to stderr). Raises MetricsFileError."""
    if is_main:
        warning = repair_metrics(run_dir)
        if warning:
            print(warning, file=sys.stderr, flush=True)
