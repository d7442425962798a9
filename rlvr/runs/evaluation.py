"""Held-out evaluation (`run_eval`: sample, verify, summarise): pass@1 with its standard error, pass@k, maj@k and mean
response length.

pass@k uses the unbiased estimator of Chen et al. 2107.03374 (eq. 1): ``1 - C(n - c, k) / C(n, k)`` for n samples of
which c are correct. maj@k: the most common extracted answer among the k samples (ties broken by first occurrence) is
correct (it is judged like the samples that gave it). The standard error of pass@1 is the std of the per-prompt mean
correctness over prompts / sqrt(#prompts).

A sample whose solved verifier failed for the machinery (raised, timed out, its sandbox broke) has no verdict: it is
left out of every rate (a prompt's rates use its scored samples; pass@k then uses min(k, scored) of them, and a prompt
with none is left out) and counted in ``infra_failures``, never scored as unsolved.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import torch

from rlvr.data.prompts import Prompt
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.tool_sampler import ToolSampler
from rlvr.runs.verifier_inputs import sample_dict, tool_verifier_samples
from rlvr.runtime.distributed import all_gather_objects
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
    infra_failures: int = 0
    """Samples left out of the rates because their solved verifier failed for the machinery."""
    tools: dict[str, float] | None = None
    """Held-out tool use of a recipe with tools (:func:`tool_use`), else None."""

    def as_dict(self) -> dict[str, Any]:
        """The fields as a flat dict; tool use as ``tools/<name>`` keys (none without tools)."""
        out = asdict(self)
        tools = out.pop("tools") or {}
        return {**out, **{f"tools/{k}": v for k, v in tools.items()}}


def tool_use(samples: list[tuple[int, int, int]]) -> dict[str, float]:
    """Held-out tool use from one ``(calls, failed calls, turns)`` triple per sample: ``fraction_of_samples_calling``,
    ``calls_per_sample``, ``error_rate`` (failed calls over calls; 0 without calls) and ``turns_per_sample``, defined
    as training's ``tools/*`` metrics are.

    Raises:
        ValueError: no samples.
    """
    if not samples:
        raise ValueError("tool use needs at least one sample")
    n = len(samples)
    calls = sum(c for c, _, _ in samples)
    return {"fraction_of_samples_calling": sum(c > 0 for c, _, _ in samples) / n, "calls_per_sample": calls / n,
            "error_rate": sum(e for _, e, _ in samples) / calls if calls else 0.0,
            "turns_per_sample": sum(t for _, _, t in samples) / n}


def summarize(correct: list[list[bool]], answers: list[list[str | None]],
              rewards: list[list[float]], lengths: list[list[int]], truncated: list[list[bool]],
              scored: list[list[bool]] | None = None) -> EvalResult:
    """Aggregate per-sample results, each given as one list per prompt of k entries.

    Args:
        correct: whether each sample solved its prompt. answers: each sample's extracted answer (None = none).
        rewards: total rewards. lengths: response tokens. truncated: cut at max_new_tokens.
        scored: False for a sample without a verdict (a failure of the machinery): left out of the rates (see the
            module docstring); None = every sample scored.
    Raises:
        ValueError: no prompts, prompts with different sample counts, or no scored sample at all.
    """
    if not correct:
        raise ValueError("evaluation needs at least one prompt")
    k = len(correct[0])
    if any(len(c) != k for c in correct):
        raise ValueError("every prompt needs the same number of samples")
    failed = 0
    if scored is not None:  # keep the scored samples of each prompt, then the prompts with any
        failed = sum(not s for row in scored for s in row)
        rows = [[(c, a, r) for c, a, r, s in zip(*cols, strict=True) if s]
                for cols in zip(correct, answers, rewards, scored, strict=True)]
        rows = [row for row in rows if row]
        if not rows:
            raise ValueError(f"evaluation: no sample could be scored ({failed} failures of the machinery)")
        correct, answers, rewards = ([[x[j] for x in row] for row in rows] for j in range(3))
    per_prompt = [sum(c) / len(c) for c in correct]
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
        pass_at_k=sum(pass_at_k(len(c), sum(c), min(k, len(c))) for c in correct) / n,
        maj_at_k=sum(maj) / n,
        mean_reward=sum(flat(rewards)) / len(flat(rewards)),
        mean_length=sum(flat(lengths)) / len(flat(lengths)),
        truncated=sum(flat(truncated)) / len(flat(truncated)),
        infra_failures=failed,
    )


def run_eval(engine: Any, tokenizer: Any, prompts: list[Prompt], reward_fn: RewardFunction, solved_label: str, *,
             k: int, temperature: float, max_new_tokens: int, top_p: float = 1.0, top_k: int = 0, seed: int = 1234,
             rank: int = 0, world_size: int = 1, tools: ToolSampler | None = None) -> EvalResult:
    """Sample k completions per held-out prompt and summarise (greedy when temperature is 0, then k = 1).

    Each rank evaluates its share of prompts; results are gathered so every rank returns the same numbers.
    ``top_p``/``top_k`` should be the rollout's (the policy is evaluated as it was trained to sample; 0 = no top-k).
    ``tools``: the recipe's tool sampler (``rollout.tools``, ``rollout.environment``): multi-turn samples, the
    verifiers score each final text (the environment's episode rewards join them as ``env``) and lengths count
    sampled tokens; the result's ``tools`` is their tool use (:func:`tool_use`, every sample).
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
        samples = tool_verifier_samples(out, k, max_new_tokens) if out is not None else []
        use = [(len(s.calls), sum(c.status != "ok" for c in s.calls), len(s.turns))
               for g in (out.rollout.groups if out is not None else []) for s in g]
    sampled = [s["completion_tokens"] for s in samples]
    results = reward_fn.score(texts, samples) if comps else []
    if tools is not None and comps:
        tools.add_episode_rewards(results, out)
    rows = []
    for j in range(len(mine)):
        sl = slice(j * k, (j + 1) * k)
        rows.append(dict(
            correct=[(res.scores.get(solved_label) or 0.0) >= 1.0 - 1e-9 for res in results[sl]],
            answers=[extract_answer(t) for t in texts[sl]],
            rewards=[res.total for res in results[sl]],
            lengths=sampled[sl],
            truncated=[c.finish_reason == "length" for c in comps[sl]],
            scored=[solved_label not in res.failures for res in results[sl]],
            tool_use=use[sl] if tools is not None else []))
    rows = [row for part in all_gather_objects(rows) for row in part]
    result = summarize(**{key: [row[key] for row in rows] for key in ("correct", "answers", "rewards", "lengths",
                                                                       "truncated", "scored")})
    if tools is not None:
        result.tools = tool_use([u for row in rows for u in row["tool_use"]])
    return result
