"""The dependency rules of the layout, checked in a fresh interpreter each: the recipe schema imports no torch, the
verifiers and the sandbox neither torch nor the trainer, the RL math nothing of rlvr but itself, and the decode loop
and the hf engine load no CPU kernel code until an engine asks for it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _loaded_after(imports: str) -> set[str]:
    code = f"import sys; {imports}; import json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_config_imports_no_torch() -> None:
    loaded = _loaded_after("import rlvr.config, rlvr.config.loading, rlvr.config.resume, rlvr.config.presets")
    assert "torch" not in loaded


def test_verifiers_and_sandbox_import_neither_torch_nor_the_trainer() -> None:
    loaded = _loaded_after("import rlvr.verifiers, rlvr.sandbox")
    assert "torch" not in loaded
    assert not {m for m in loaded if m.startswith(("rlvr.trainer", "rlvr.rollout"))}


@pytest.mark.parametrize("module", ["advantages", "gae", "kl", "losses", "reward_shaping", "value_loss"])
def test_the_rl_math_imports_only_torch(module: str) -> None:
    loaded = _loaded_after(f"import rlvr.algo.{module}")
    assert {m for m in loaded if m.startswith("rlvr.")} <= {f"rlvr.algo.{module}", "rlvr.algo"}
    assert not {m for m in loaded if m.split(".")[0] in ("transformers", "deepspeed", "pydantic")}


def test_the_decode_loop_and_the_hf_engine_load_no_kernel_code() -> None:
    loaded = _loaded_after("import rlvr.rollout.decode, rlvr.rollout.hf")
    assert not {m for m in loaded if m.startswith("rlvr.rollout.cpu")}
