"""A plain command prints rlvr's lines and real warnings only; ``rlvr --verbose`` shows the libraries' own output
(transformers' load report and progress bars, DeepSpeed's accelerator notice)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny import build_tiny_model

REPO = Path(__file__).resolve().parents[1]
NOISE = ("MISSING", "\x1b[", "Loading weights", "Writing model shards", "Setting accelerator to CPU")


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # (and no rendezvous of an in-process trainer of an earlier test: the child picks its own port)
    env = {k: v for k, v in os.environ.items() if k not in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS",
                                                            "TRANSFORMERS_NO_ADVISORY_WARNINGS", "TQDM_DISABLE",
                                                            "WANDB_SILENT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                            "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def rm_recipe(tmp_path_factory):
    d = tmp_path_factory.mktemp("rm")
    model = build_tiny_model(d / "model")
    pairs = d / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"{a}+1=?\n", "responses": [str(a + 1), "x"]}) + "\n"
                             for a in range(12)))
    recipe = d / "rm.yaml"
    recipe.write_text(json.dumps({
        "kind": "reward_model", "model": {"name": str(model)},
        "data": {"source": {"type": "jsonl", "path": str(pairs)}, "eval_fraction": 0.25, "max_length": 16},
        "train": {"epochs": 1, "prompts_per_step": 4, "bf16": False, "num_threads": 1}}))
    return recipe


def test_rm_train_prints_one_line_for_the_new_head_and_no_library_noise(rm_recipe, tmp_path):
    quiet = _run(["-m", "rlvr.cli", "rm", "train", str(rm_recipe), "-o", str(tmp_path / "quiet")], tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    out = quiet.stdout + quiet.stderr
    assert [n for n in NOISE if n in out] == [], out
    assert "plus a new scalar head (score), initialised at random" in quiet.stderr
    loud = _run(["-m", "rlvr.cli", "--verbose", "rm", "train", str(rm_recipe), "-o", str(tmp_path / "loud")],
                tmp_path)
    assert loud.returncode == 0, loud.stderr
    assert "MISSING" in loud.stdout + loud.stderr  # the library's own report, shown on request


def test_deepspeed_accelerator_notice_is_dropped_unless_verbose(tmp_path):
    code = "import sys; from rlvr.library_output import configure; configure(verbose=sys.argv[1] == 'v'); import deepspeed"
    quiet = _run(["-c", code, "q"], tmp_path)
    assert quiet.returncode == 0 and "Setting accelerator" not in quiet.stdout + quiet.stderr, quiet.stderr
    loud = _run(["-c", code, "v"], tmp_path)
    import torch

    if not torch.cuda.is_available():  # the notice is DeepSpeed's on a machine without a GPU
        assert "Setting accelerator to CPU" in loud.stdout + loud.stderr


def test_deepspeed_built_successfully_line_is_dropped_unless_verbose(tmp_path):
    code = ("import sys; from rlvr.library_output import configure; configure(verbose=sys.argv[1] == 'v'); "
            "from rlvr.runtime.distributed import init_distributed; init_distributed()")
    quiet = _run(["-c", code, "q"], tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert "built successfully" not in quiet.stdout + quiet.stderr
    loud = _run(["-c", code, "v"], tmp_path)
    assert loud.returncode == 0, loud.stderr
    assert "built successfully" in loud.stdout  # DeepSpeed's own line, shown on request


def test_quiet_turns_off_library_progress_bars_and_wandb_output():
    from rlvr.library_output import QUIET_ENV

    assert QUIET_ENV["TQDM_DISABLE"] == "1" and QUIET_ENV["WANDB_SILENT"] == "true"
    code = ("import os, sys; from rlvr.library_output import configure; configure(); "
            "from tqdm.auto import tqdm; list(tqdm(range(3), desc='GGUF-like bar'))")
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    out = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(REPO)}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "GGUF-like bar" not in out.stderr + out.stdout, out.stderr
