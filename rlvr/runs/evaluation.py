"""Held-out evaluation (`run_eval`: sample, verify, summarise): pass@1 with its standard error, pass@k, maj@k and mean
response length.

pass@k uses the unbiased estimator of Chen et al. 2107.03374 (eq. 1): ``1 - C(n - c, k) / C(n, k)`` for n samples of
which c are correct. maj@k: the most common extracted answer among the k samples (ties broken by first occurrence) is
correct (it is judged like the samples that gave it). The standard error of pass@1 is the std of the per-prompt mean
correctness over prompts / sqrt(#prompts).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import torch

from rlvr.data.prompts import Prompt
from rlvr.rollout.base import SamplingParams
from rlvr.runs.tool_rollouts import ToolSampler, verifier_samples
from rlvr.runs.verifier_inputs import sample_dict
from rlvr.trainer.distributed import all_gather_objects
from rlvr.verifiers.reward import RewardFunction


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


def run_eval(engine: Any, tokenizer: Any, prompts: list[Prompt], reward_fn: RewardFunction, solved_label: str, *,
             k: int, temperature: float, max_new_tokens: int, top_p: float = 1.0, top_k: int = 0, seed: int = 1234,
             rank: int = 0, world_size: int = 1, tools: ToolSampler | None = None) -> EvalResult:
    """Sample k completions per held-out prompt and summarise (greedy when temperature is 0, then k = 1).

    Each rank evaluates its share of prompts; results are gathered so every rank returns the same numbers.
    ``top_p``/``top_k`` should be the rollout's (the policy is evaluated as it was trained to sample; 0 = no top-k).
    ``tools``: the recipe's tool sampler (``rollout.tools``): multi-turn samples, the verifiers score each final text
    and lengths count sampled tokens.
    """
    from rlvr.verifiers.math_answer import extract_answer

    if temperature == 0:
        k = 1
    sampling = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=max_new_tokens)
    mine = prompts[rank::world_size]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + rank)
        if tools is None:
            groups = engine.generate([p.token_ids for p in mine], k, sampling) if mine else []
        else:
            out = tools.generate(mine, k, sampling) if mine else None
    if tools is None:
        comps = [c for grp in groups for c in grp]
        texts = tokenizer.batch_decode([c.token_ids for c in comps], skip_special_tokens=True)
        samples = [sample_dict(mine[i // k], c, max_new_tokens) for i, c in enumerate(comps)]
    else:
        comps, texts = (out.completions, out.texts) if out is not None else ([], [])
        samples = verifier_samples(out, k, max_new_tokens) if out is not None else []
    sampled = [s["completion_tokens"] for s in samples]
    results = reward_fn.score(texts, samples) if comps else []
    rows = []
    for j in range(len(mine)):
        sl = slice(j * k, (j + 1) * k)
        rows.append(dict(
            correct=[(res.scores.get(solved_label) or 0.0) >= 1.0 - 1e-9 for res in results[sl]],
            answers=[extract_answer(t) for t in texts[sl]],
            rewards=[res.total for res in results[sl]],
            lengths=sampled[sl],
            truncated=[c.finish_reason == "length" for c in comps[sl]]))
    rows = [row for part in all_gather_objects(rows) for row in part]
    return summarize(**{key: [row[key] for row in rows] for key in ("correct", "answers", "rewards", "lengths",
                                                                     "truncated")})
