"""Preference pairs from a verifiable task, made from the policy's own samples (``rlvr rm pairs RECIPE.yaml``).

For each training prompt of a GRPO recipe, the recipe's rollout engine samples G completions and the recipe's verifiers
score them; a completion whose solved-verifier score is 1 is *correct*, any other judged one *incorrect*. Every prompt
with both kinds gives pairs (a correct completion chosen over an incorrect one, distinct texts only, at most
``max_pairs_per_prompt``, drawn with a seeded shuffle). Such pairs are on-policy for that model and carry a label the
verifier guarantees, so a reward model trained on them can be scored against the verifier ("gold") later.

Rows written: ``prompt`` (the rendered prompt text the policy saw, chat template included), ``chosen``, ``rejected``
(decoded completions without special tokens), ``question``, ``answer``, ``chosen_score``, ``rejected_score``.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from pathlib import Path
from typing import Any

import torch

from rlvr.config import Recipe
from rlvr.rollout.base import SamplingParams


def pairs_from_group(texts: list[str], correct: list[bool | None], max_pairs: int, rng: random.Random
                     ) -> list[tuple[str, str]]:
    """(chosen, rejected) texts of one prompt's group: correct x incorrect, distinct texts, at most ``max_pairs``.

    ``correct[i]`` is None for a completion that could not be judged (it is left out).
    """
    good = sorted({t for t, c in zip(texts, correct, strict=True) if c is True})
    bad = sorted({t for t, c in zip(texts, correct, strict=True) if c is False} - set(good))
    pairs = list(itertools.product(good, bad))
    rng.shuffle(pairs)
    return pairs[:max_pairs]


def build_pairs(recipe: Recipe, out_path: Path, *, num_prompts: int | None = None, group_size: int | None = None,
                max_pairs_per_prompt: int = 4, split: str = "train", progress: bool = True) -> dict[str, Any]:
    """Sample, verify and write preference pairs for ``num_prompts`` prompts of the recipe's ``split``.

    Args:
        recipe: a GRPO recipe (model, data, rollout sampling settings, verifiers).
        out_path: JSONL file to write. num_prompts: default all prompts of the split.
        group_size: samples per prompt (default ``rollout.group_size``).
        max_pairs_per_prompt: cap on pairs per prompt (their responses are shared, so a cap keeps prompts balanced).
        split: ``train`` or ``eval`` (the recipe's held-out prompts).
    Returns:
        stats: prompts, samples, solve rate, prompts with mixed groups, pairs, wall time.
    Raises:
        DataError, ModelLoadError, UnknownVerifierError: as the trainer does; ValueError: an unknown split, or a
        recipe without verifiers.
    """
    from rlvr.runs.recipe_inputs import load_sampling_engine, recipe_inputs
    from rlvr.runs.verifier_inputs import sample_dict

    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if recipe.solved_verifier is None:
        raise ValueError("rlvr rm pairs labels pairs with the recipe's solved verifier, and the recipe lists no "
                         "verifiers: add one (e.g. verifiers: [{name: math}])")
    t0 = time.time()
    torch.manual_seed(recipe.seed)
    rng = random.Random(recipe.seed)
    g = group_size or recipe.rollout.group_size
    ro = recipe.rollout
    sampling = SamplingParams(temperature=ro.temperature, top_p=ro.top_p, top_k=ro.top_k,
                              max_new_tokens=ro.max_new_tokens)
    stats = {"prompts": 0, "samples": 0, "correct": 0, "mixed_prompts": 0, "pairs": 0}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with recipe_inputs(recipe) as inputs, out_path.open("w") as fh:
        prompts = getattr(inputs.prompt_set, split)[:num_prompts]
        engine = load_sampling_engine(recipe, inputs.model_path, inputs.tokenizer)
        chunk = max(1, ro.generation_batch_size // g)
        for start in range(0, len(prompts), chunk):
            batch = prompts[start:start + chunk]
            groups = engine.generate([p.token_ids for p in batch], g, sampling)
            for prompt, group in zip(batch, groups, strict=True):
                texts = inputs.tokenizer.batch_decode([c.token_ids for c in group], skip_special_tokens=True)
                results = inputs.reward_fn.score(texts, [sample_dict(prompt, c, ro.max_new_tokens) for c in group])
                scores = [r.scores.get(recipe.solved_verifier) for r in results]
                correct = [None if s is None else s >= 1.0 - 1e-9 for s in scores]
                stats["prompts"] += 1
                stats["samples"] += len(group)
                stats["correct"] += sum(c is True for c in correct)
                pairs = pairs_from_group(texts, correct, max_pairs_per_prompt, rng)
                stats["mixed_prompts"] += bool(pairs)
                score_of = dict(zip(texts, scores, strict=True))
                for chosen, rejected in pairs:
                    fh.write(json.dumps({"prompt": prompt.text, "chosen": chosen, "rejected": rejected,
                                         "question": prompt.row.get(recipe.data.prompt_field),
                                         "answer": prompt.row.get(recipe.data.answer_field or "", None),
                                         "chosen_score": score_of[chosen], "rejected_score": score_of[rejected]})
                             + "\n")
                stats["pairs"] += len(pairs)
            if progress:
                print(f"pairs: {stats['prompts']}/{len(prompts)} prompts, {stats['pairs']} pairs, "
                      f"{time.time() - t0:.0f} s", flush=True)
    stats["solve_rate"] = stats["correct"] / max(1, stats["samples"])
    stats["wall_time_s"] = time.time() - t0
    stats["file"] = str(out_path)
    return stats
