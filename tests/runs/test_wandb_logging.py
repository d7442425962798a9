"""``logging.wandb``: the scalars TensorBoard gets, and the sample tables, logged to W&B (offline here)."""

from __future__ import annotations

import pytest

from rlvr.config.schema import WandbConfig
from rlvr.runs.metrics import MetricsLogger

pytest.importorskip("wandb")


def test_scalars_and_tables_reach_an_offline_wandb_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = MetricsLogger(tmp_path, wandb=WandbConfig(project="test", mode="auto"), config={"seed": 0})
    logger.log(1, {"reward/mean": 0.25, "train/kl": 0.5, "note": "text", "bad": float("nan")})
    logger.log(2, {"reward/mean": 0.75})
    logger.table("samples", [{"completion": "12", "reward": 1.0, "scores": {"math": 1.0}}], 2)
    logger.log(3, {"reward/mean": 1.0})  # W&B commits a step when the next begins
    summary = dict(logger._wandb.summary)  # what the offline run holds (uploaded by `wandb sync`)
    logger.close()
    assert summary["reward/mean"] == 0.75 and summary["train/kl"] == 0.5
    assert "note" not in summary and "bad" not in summary
    assert summary["samples"]["_type"] == "table-file" and summary["samples"]["nrows"] == 1
    (run,) = (tmp_path / "wandb").glob("offline-run-*")
    assert (tmp_path / "wandb-run-id").read_text().strip() in run.name
    assert list(run.glob("*.wandb"))[0].stat().st_size > 0
