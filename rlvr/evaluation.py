"""Held-out evaluation: pass@1 with its standard error, pass@k, maj@k and mean response length.

pass@k uses the unbiased estimator of Chen et al. 2107.03374 (eq. 1): ``1 - C(n - c, k) / C(n, k)`` for n samples of
which c are correct. maj@k: the most common extracted answer among the k samples (ties broken by first occurrence) is
correct (it is judged like the samples that gave it). The standard error of pass@1 is the std of the per-prompt mean correctness over prompts / sqrt(#prompts).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one prompt with ``n`` samples, ``c`` correct. Raises ValueError when k > n or c > n."""
    if not 0 <= c <= n or k > n or k < 1:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


@dataclass
class EvalResult:
    """Held-out metrics of one eval pass (rates in [0, 1], lengths in tokens)."""

    num_prompts: int
    k: int
    pass_at_1: float
    pass_at_1_se: float
    pass_at_k: float
    maj_at_k: float
    mean_reward: float
    mean_length: float
    truncated: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(correct: list[list[bool]], answers: list[list[str | None]],
              rewards: list[list[float]], lengths: list[list[int]], truncated: list[list[bool]]) -> EvalResult:
    """Aggregate per-sample results, each given as one list per prompt of k entries.

    Args:
        correct: whether each sample solved its prompt. answers: each sample's extracted answer (None = none).
        rewards: total rewards. lengths: response tokens. truncated: cut at max_new_tokens.
    Raises:
        ValueError: no prompts, or prompts with different sample counts.
    """
    if not correct:
        raise ValueError("evaluation needs at least one prompt")
    k = len(correct[0])
    if any(len(c) != k for c in correct):
        raise ValueError("every prompt needs the same number of samples")
    per_prompt = [sum(c) / k for c in correct]
    n = len(per_prompt)
    mean = sum(per_prompt) / n
    var = sum((p - mean) ** 2 for p in per_prompt) / (n - 1) if n > 1 else 0.0
    maj = []
    for i, ans in enumerate(answers):
        votes = Counter(a for a in ans if a is not None)
        if not votes:
            maj.append(0.0)
            continue
        top = max(votes.values())
        winner = next(a for a in ans if a is not None and votes[a] == top)
        # the voted answer is correct iff some sample that gave it was judged correct
        maj.append(float(any(c for c, a in zip(correct[i], ans, strict=True) if a == winner)))
    flat = lambda xs: [x for row in xs for x in row]  # noqa: E731
    return EvalResult(
        num_prompts=n, k=k, pass_at_1=mean, pass_at_1_se=math.sqrt(var / n),
        pass_at_k=sum(pass_at_k(k, sum(c), k) for c in correct) / n,
        maj_at_k=sum(maj) / n,
        mean_reward=sum(flat(rewards)) / (n * k),
        mean_length=sum(flat(lengths)) / (n * k),
        truncated=sum(flat(truncated)) / (n * k),
    )
