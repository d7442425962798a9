"""Writes datasets/guessing.jsonl: number-guessing games for the environment example (recipes/guessing_demo.yaml).

Each row is one game: ``question`` ("I picked a whole number from 23 to 30. ..."), ``low`` and ``high`` (the range:
8, 10 or 12 numbers starting anywhere from 1 to 90) and ``answer``, the secret, drawn uniformly from the range. The
environment (rlvr/tools/envs/number_guessing.py) answers each wrong guess with "My number is higher (lower) than
<guess>." and rewards the game 1.0 when the secret is named within GUESSES guesses. Binary search always wins a range
of up to 15 numbers in 4 guesses; guessing at random without repeats wins with probability 4/8, 4/10 or 4/12. Every
(start, width) pair appears once, so no two questions are the same (the prompt split keeps one row per distinct
question). Deterministic (seed 0).

    python datasets/make_guessing.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

GUESSES = 4
"""Guesses a game allows (the question says so; the recipe's ``environment_kwargs.max_guesses`` must match)."""
WIDTHS = (8, 10, 12)
STARTS = range(1, 91)


def question(low: int, high: int) -> str:
    """The game as the model is asked it."""
    return (f"I picked a whole number from {low} to {high}. Guess it: reply with one number. After each wrong guess "
            f"I will tell you whether my number is higher or lower. You have {GUESSES} guesses.")


def make_rows(seed: int = 0) -> list[dict]:
    """One row per (start, width) pair, shuffled: ``question``, ``low``, ``high``, ``answer`` (the secret, an int)."""
    rng = random.Random(seed)
    ranges = [(low, low + width - 1) for low in STARTS for width in WIDTHS]
    rng.shuffle(ranges)
    return [{"question": question(low, high), "low": low, "high": high, "answer": rng.randint(low, high)}
            for low, high in ranges]


def main() -> None:
    out = Path(__file__).with_name("guessing.jsonl")
    rows = make_rows()
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} rows to {out}")


if __name__ == "__main__":
    main()
