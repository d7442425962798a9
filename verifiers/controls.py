"""Control rewards: what a run learns when its reward carries no information about correctness.

Shao et al. (2506.10947, "Spurious Rewards") lifted Qwen2.5-Math-7B's MATH-500 by 21 points with GRPO on *random*
rewards, against 29 with real ones: part of a gain can come from the training itself (the clipping bias toward the
model's own likely answers), not from the verifier. A gain is shown beside its controls, same recipe, same seeds:

- ``random_reward``: 1 with probability ``p`` (default 0.5), else 0, independently of the answer. The draw is a hash
  of the seed, the prompt and the completion, so the same run gets the same rewards.
- a format-only reward: ``boxed_format`` (a non-empty ``\\boxed{}``, :mod:`rlvr.verifiers.format_tags`) or ``format``
  (R1 think/answer tags): rewards the shape of an answer, never its value.

``reward.control`` in a recipe puts one of them in place of the recipe's optimised verifiers, which stay as gold
(logged, and the held-out pass@1 still uses them): ``rlvr/runs/verifier_inputs.py``.
"""

from __future__ import annotations

import hashlib

from rlvr.verifiers.registry import verifier


@verifier("random_reward", score_range=(0.0, 1.0))
def random_reward(completion: str, sample: dict, *, p: float = 0.5, seed: int = 0) -> float:
    """1.0 with probability ``p``, else 0.0, from a hash of ``seed``, the sample's prompt and the completion (the same
    completion of the same prompt always gets the same reward within a run). Reads ``sample["prompt"]`` when present.

    Raises:
        ValueError: ``p`` outside [0, 1].
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"random_reward: p must be in [0, 1], got {p!r}")
    digest = hashlib.sha256(f"{seed}\0{sample.get('prompt', '')}\0{completion}".encode()).digest()
    return 1.0 if int.from_bytes(digest[:8], "big") / 2**64 < p else 0.0
