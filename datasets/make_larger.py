"""Writes datasets/larger_2d.jsonl: "Which number is larger, a or b?" for distinct two-digit a, b.

The larger number is first in exactly half of the rows, so "always pick the first" scores 0.5 and no constant answer
scores above 1/89: a held-out gain above 0.5 needs the comparison itself. Deterministic (seed 0).
    python datasets/make_larger.py
"""

import json
import random
from pathlib import Path

rng = random.Random(0)
pairs = [(a, b) for a in range(10, 100) for b in range(a + 1, 100)]  # a < b: 4005 unordered pairs
rng.shuffle(pairs)
rows = []
for i, (small, large) in enumerate(pairs):
    a, b = (large, small) if i % 2 == 0 else (small, large)
    rows.append({"question": f"Which number is larger, {a} or {b}?", "answer": str(large)})
out = Path(__file__).with_name("larger_2d.jsonl")
out.write_text("".join(json.dumps(r) + "\n" for r in rows))
print(f"wrote {len(rows)} rows to {out}")
