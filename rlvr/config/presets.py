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
- ``ppo``: PPO with a critic as in InstructGPT (2203.02155) / Ziegler et al. (1909.08593), with TRL's ``PPOConfig``
  defaults (trl 0.11-0.2x, ``trl/trainer/ppo_config.py``): GAE gamma 1.0 lambda 0.95 over per-token rewards, the
  advantages whitened over the global batch, clip 0.2 / 0.2, value clip 0.2, a fixed KL penalty in the reward with k1
  and beta 0.05 (``kl_coef``), 4 optimisation epochs per batch (``num_ppo_epochs``), token-mean. Two deliberate
  departures from TRL: ``vf_coef`` 1.0, not TRL's 0.1, because TRL adds the value loss to the policy's loss under one
  optimizer while here the critic has its own (OpenRLHF's layout, which has no vf_coef at all), so the coefficient
  would only rescale the critic's learning rate and gradient clipping; and the critic starts from the reward model
  (``critic.init``, resolved per recipe). ``rollout.group_size: 1`` is allowed (TRL samples one completion per prompt)
  but not set: a preset sets algorithm keys.
- ``none``: schema defaults only.
"""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "none": {},
    "grpo": {
        "algorithm": {
            "name": "grpo",
            "advantage": {"std_normalize": True},
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
            "name": "grpo",
            "advantage": {"std_normalize": False},
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
            "name": "grpo",
            "advantage": {"std_normalize": True},
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
            "name": "grpo",
            "advantage": {"std_normalize": True},
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
            "name": "grpo",
            "advantage": {"std_normalize": True},
            "policy_loss": "cispo", "importance_sampling_level": "token",
            "loss_agg": "token-mean",
            "clip_low": 1.0, "clip_high": 4.0,
            "kl": {"beta": 0.0},
            "entropy_coef": 0.0,
            "dynamic_sampling": {"enabled": False},
            "overlong": {"enabled": False},
        },
    },
    "ppo": {
        "algorithm": {
            "name": "ppo",
            "advantage": {"gamma": 1.0, "lam": 0.95, "std_normalize": True},
            "policy_loss": "ppo_clip", "importance_sampling_level": "token",
            "loss_agg": "token-mean",
            "clip_low": 0.2, "clip_high": 0.2,
            "kl": {"beta": 0.05, "estimator": "k1", "placement": "reward", "target": None},
            "critic": {"value_clip": 0.2, "vf_coef": 1.0},
            "ppo_epochs": 4,
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
            "name": "grpo",
            "advantage": {"std_normalize": True},
            "loss_agg": "token-mean",
            "clip_low": 0.2, "clip_high": 0.2,
            "kl": {"beta": 0.001, "estimator": "k3", "placement": "loss"},
            "entropy_coef": 0.0,
            "dynamic_sampling": {"enabled": False},
            "overlong": {"enabled": False},
        },
    },
}
