"""Presets: named algorithm settings that expand into explicit recipe keys (the user's own keys win).

Each preset is a partial recipe (a nested dict). ``rlvr config show`` prints what one expands to.

- ``grpo``: DeepSeekMath GRPO (2402.03300): group baseline divided by the group std, per-sequence mean of token losses,
  symmetric clip 0.2, k3 KL to the reference in the loss with beta 0.04.
- ``dr_grpo``: Dr. GRPO (2503.20783): no std normalisation and a constant length normaliser
  (``seq-mean-token-sum-norm``), no KL: removes the question-difficulty and response-length biases of GRPO.
- ``dapo``: DAPO (2503.14476): clip-higher (0.2 / 0.28), token-mean aggregation, dynamic sampling, soft overlong
  punishment, no KL.
- ``r1_zero``: DeepSeek-R1-Zero (2501.12948) as commonly reproduced: GRPO with the think/answer template, a math answer
  reward plus a format reward, token-mean aggregation, small KL.
- ``gspo``: GSPO (Qwen, 2507.18071): group-normalised advantages, the sequence-level importance ratio (length-
  normalised log-ratio) clipped per sample with the paper's ranges 3e-4 / 4e-4, per-sequence mean, no KL.
- ``cispo``: CISPO (MiniMax-M1, 2506.13585): a clipped, stop-gradient importance weight times the log-prob (no token's
  gradient dropped), no lower bound on the weight (clip_low 1) and an upper bound of 5 (clip_high 4: the eps_max = 5
  of ScaleRL, 2510.13786, which TRL recommends; MiniMax-M1 does not publish its value), token-mean, no KL.
- ``none``: schema defaults only.
"""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "none": {},
    "grpo": {
        "algorithm": {
            "advantage": {"type": "grpo", "std_normalize": True},
            "loss_agg": "seq-mean-token-mean",
            "clip_low": 0.2, "clip_high": 0.2,
            "kl": {"beta": 0.04, "estimator": "k3", "placement": "loss"},
            "entropy_coef": 0.0,
            "dynamic_sampling": {"enabled": False},
            "overlong": {"enabled": False},
        },
    },
    "dr_grpo": {
        "algorithm": {
            "advantage": {"type": "grpo", "std_normalize": False},
            "loss_agg": "seq-mean-token-sum-norm",
            "clip_low": 0.2, "clip_high": 0.2,
            "kl": {"beta": 0.0},
            "entropy_coef": 0.0,
            "dynamic_sampling": {"enabled": False},
            "overlong": {"enabled": False},
        },
    },
    "dapo": {
        "algorithm": {
            "advantage": {"type": "grpo", "std_normalize": True},
            "loss_agg": "token-mean",
            "clip_low": 0.2, "clip_high": 0.28,
            "kl": {"beta": 0.0},
            "entropy_coef": 0.0,
            "dynamic_sampling": {"enabled": True, "max_rounds": 3},
            "overlong": {"enabled": True, "buffer_tokens": 256, "penalty": 1.0},
        },
    },
    "gspo": {
        "algorithm": {
            "advantage": {"type": "grpo", "std_normalize": True},
            "policy_loss": "ppo_clip", "importance_sampling_level": "sequence",
            "loss_agg": "seq-mean-token-mean",
            "clip_low": 3e-4, "clip_high": 4e-4,
            "kl": {"beta": 0.0},
            "entropy_coef": 0.0,
            "dynamic_sampling": {"enabled": False},
            "overlong": {"enabled": False},
        },
    },
    "cispo": {
        "algorithm": {
            "advantage": {"type": "grpo", "std_normalize": True},
            "policy_loss": "cispo", "importance_sampling_level": "token",
            "loss_agg": "token-mean",
            "clip_low": 1.0, "clip_high": 4.0,
            "kl": {"beta": 0.0},
            "entropy_coef": 0.0,
            "dynamic_sampling": {"enabled": False},
            "overlong": {"enabled": False},
        },
    },
    "r1_zero": {
        "data": {"template": "r1"},
        "verifiers": [
            {"name": "math", "weight": 1.0},
            {"name": "format", "weight": 0.1, "kwargs": {"prefilled_think": True}},
        ],
        "algorithm": {
            "advantage": {"type": "grpo", "std_normalize": True},
            "loss_agg": "token-mean",
            "clip_low": 0.2, "clip_high": 0.2,
            "kl": {"beta": 0.001, "estimator": "k3", "placement": "loss"},
            "entropy_coef": 0.0,
            "dynamic_sampling": {"enabled": False},
            "overlong": {"enabled": False},
        },
    },
}
