"""The same pairs, policy and reference through TRL's DPOTrainer and through ``rlvr dpo``: the loss before the first
update agrees to 1e-5, and so do the implicit rewards, the preference accuracy and the responses' summed log-probs
(DPO's sigmoid loss and IPO's per-token normalised one). The reference is a second tiny model (another seed), so the
loss is not the trivial log 2 of a policy equal to its reference. TRL runs in a subprocess
(``tests/trainer/trl_dpo_loss.py``); the test skips where TRL is not installed."""

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.config import load_stage_recipe
from rlvr.runs.metrics import read_metrics
from tests import limits
from tests.tiny import build_tiny_model

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    d = tmp_path_factory.mktemp("trl")
    build_tiny_model(d / "policy", seed=0, init_std=0.2)
    build_tiny_model(d / "reference", seed=1, init_std=0.2)
    rows = [{"prompt": f"{i % 10}+{3 * i % 10}=?", "chosen": f" {i % 10 + 3 * i % 10}",
             "rejected": f" {i % 10 + 3 * i % 10 + 2} no"} for i in range(8)]
    (d / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


@pytest.mark.parametrize("loss_type, name", [("sigmoid", "dpo"), ("ipo", "ipo")])
def test_the_loss_at_step_0_equals_trls(pairs, tmp_path, no_plots, loss_type, name):
    pytest.importorskip("trl")
    spec = {"model": str(pairs / "policy"), "reference": str(pairs / "reference"), "pairs": str(pairs / "pairs.jsonl"),
            "loss_type": loss_type, "beta": 0.5, "output_dir": str(tmp_path / "trl")}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    dist_vars = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in dist_vars}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = limits.run([sys.executable, "-m", "tests.trainer.trl_dpo_loss", str(tmp_path / "spec.json")], 300,
                      cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trl = json.loads(proc.stdout.strip().splitlines()[-1])

    recipe = {"kind": "dpo", "model": {"name": str(pairs / "policy")},
              "data": {"source": {"type": "jsonl", "path": str(pairs / "pairs.jsonl")}, "eval_size": 0,
                       "pairs_per_step": 8},
              "algorithm": {"name": name, "beta": 0.5, "reference": str(pairs / "reference")},
              "optim": {"lr": 1e-3, "micro_batch_size": 4},
              "trainer": {"steps": 1, "precision": "fp32", "num_threads": 1}, "eval": {"enabled": False}}
    path = tmp_path / "dpo.yaml"
    path.write_text(yaml.safe_dump(recipe))
    from rlvr.trainer.stage_trainer import StageTrainer

    trainer = StageTrainer(load_stage_recipe(path, "dpo"), tmp_path / "run")
    trainer.train()
    trainer.engine.destroy()
    ours = next(m for m in read_metrics(tmp_path / "run") if m["step"] == 1)
    assert abs(ours["train/loss"] - trl["loss"]) < 1e-5, (ours["train/loss"], trl["loss"])
    assert ours["train/loss"] != pytest.approx(0.6931472 if name == "dpo" else 1.0, abs=1e-3)  # not a trivial value
    for mine, theirs in (("train/rewards_chosen", "rewards/chosen"), ("train/rewards_rejected", "rewards/rejected"),
                         ("train/margin", "rewards/margins"), ("train/logps_chosen", "logps/chosen"),
                         ("train/logps_rejected", "logps/rejected")):
        assert ours[mine] == pytest.approx(trl[theirs], abs=1e-4), mine
    assert ours["train/accuracy"] == trl["rewards/accuracies"]
