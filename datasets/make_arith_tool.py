"""Writes datasets/arith_tool_train.jsonl and datasets/arith_tool_heldout.jsonl: multi-term sums and differences,
"What is 47 + 385 - 96?", 3 or 4 terms of 2 or 3 digits each, joined by + and -, never below 0; and
datasets/arith_tool_sft.jsonl: transcripts of the tool solving such questions, for an SFT cold start.

A task for tool use: the embedded SmolLM2-135M-Instruct cannot add such numbers in its head, but it can copy the
expression into a ```python block. Every row carries ``solution``, the worked assistant turn a few-shot example shows
(``data.shot_field: solution``): the python block, its output block as the rollout appends it, and the boxed answer.
The two files share no question. Deterministic (seed 0).

The transcripts (``messages``: the system paragraph the fenced tool format adds to a prompt, the question with the
boxed instruction as recipes/tool_demo.yaml shows it, and the ``solution`` turn) are written by this script from the
same generator (seed 1), never by a model, and share no question with the two files above.

    python datasets/make_arith_tool.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TRAIN_ROWS = 2000
HELDOUT_ROWS = 300
SFT_ROWS = 400


def expression(rng: random.Random) -> str:
    """3-4 terms of 2-3 digits, + and - between them, whose value is not negative."""
    while True:
        terms = [rng.randint(10, 99) if rng.random() < 0.5 else rng.randint(100, 999)
                 for _ in range(rng.choice((3, 4)))]
        text = str(terms[0])
        for t in terms[1:]:
            text += f" {rng.choice('+-')} {t}"
        if eval(text) >= 0:  # noqa: S307 - digits, spaces, + and - only
            return text


def row(expr: str) -> dict[str, str]:
    """One prompt row: ``question``, ``answer`` (the value), ``solution`` (the tool-use turn that solves it)."""
    answer = str(eval(expr))  # noqa: S307 - digits, spaces, + and - only
    solution = f"```python\nprint({expr})\n```\n```output\n{answer}\n```\n\\boxed{{{answer}}}"
    return {"question": f"What is {expr}?", "answer": answer, "solution": solution}


def make_rows(seed: int = 0, train: int = TRAIN_ROWS, heldout: int = HELDOUT_ROWS
              ) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(train rows, held-out rows): distinct expressions, the held-out ones drawn first."""
    rng = random.Random(seed)
    seen: set[str] = set()
    exprs: list[str] = []
    while len(exprs) < train + heldout:
        expr = expression(rng)
        if expr not in seen:
            seen.add(expr)
            exprs.append(expr)
    rows = [row(e) for e in exprs]
    return rows[heldout:], rows[:heldout]


def transcripts(n: int, exclude: set[str], seed: int = 1) -> list[dict]:
    """``n`` SFT rows: ``messages`` of a conversation in which the model solves a fresh question with the python tool
    (fenced format: the ```output block inside the turn is the tool's, masked by ``data.mask_fenced_outputs``), and
    ``answer``. Questions in ``exclude`` are never used."""
    from rlvr.data.templates import BOXED_INSTRUCTION
    from rlvr.tools.formats import CallFormat

    system = CallFormat("fenced").instructions([{"type": "function", "function": {"name": "python"}}])
    rng = random.Random(seed)
    out: list[dict] = []
    seen = set(exclude)
    while len(out) < n:
        expr = expression(rng)
        if expr in seen:
            continue
        seen.add(expr)
        r = row(expr)
        out.append({"messages": [{"role": "system", "content": system},
                                 {"role": "user", "content": f"{r['question']}\n{BOXED_INSTRUCTION}"},
                                 {"role": "assistant", "content": r["solution"]}], "answer": r["answer"]})
    return out


def main() -> None:
    here = Path(__file__).parent
    train, heldout = make_rows()
    sft = transcripts(SFT_ROWS, {r["question"][8:-1] for r in train + heldout})
    for name, rows in (("arith_tool_train.jsonl", train), ("arith_tool_heldout.jsonl", heldout),
                       ("arith_tool_sft.jsonl", sft)):
        (here / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {len(rows)} rows to {here / name}")


if __name__ == "__main__":
    main()
