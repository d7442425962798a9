"""The "write your own verifier" guide (docs/verifiers.md): its example runs and prints what it says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_guide_example_runs(tmp_path: Path) -> None:
    guide = (ROOT / "docs" / "verifiers.md").read_text(encoding="utf-8")
    example = re.findall(r"```python\n(.*?)```", guide, re.S)[0]
    (tmp_path / "my_rewards.py").write_text(example, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "my_rewards.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert out[0].startswith("1.2 {'math_with_unit': 1.2, 'length_penalty': 0.0}")
    assert out[1].startswith("0.2 {'math_with_unit': 0.2, 'length_penalty': 0.0}")
    # the recipe form: the function named by import path
    check = ("from rlvr.verifiers.registry import get_verifier; "
             "print(get_verifier('my_rewards:math_with_unit')('so \\\\boxed{12} cm', {'answer': '12'})['score'])")
    got = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.strip()
    assert got == "1.2"
