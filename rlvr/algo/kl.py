"""KL estimators between the policy and the frozen reference policy, per token, and the adaptive KL coefficient.

Shapes: ``logprobs``, ``ref_logprobs``: (N, T) log-probabilities (nats) of the sampled tokens under the current policy
and the reference policy. Estimators from Schulman, "Approximating KL Divergence" (joschu.net/blog/kl-approx.html),
with ``log r = ref_logprobs - logprobs`` and samples drawn from the policy:

- ``k1 = -log r``: unbiased, high variance, can be negative per token.
- ``k2 = (log r)^2 / 2``: biased, low variance, >= 0.
- ``k3 = r - 1 - log r``: unbiased and >= 0 (used in the GRPO loss, 2402.03300 eq. 4).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

KLEstimator = Literal["k1", "k2", "k3"]


def kl_per_token(logprobs: Tensor, ref_logprobs: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """Per-token KL(pi || pi_ref) estimate, (N, T) nats. Raises ValueError for an unknown estimator."""
    log_ratio = ref_logprobs.float() - logprobs.float()
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        # clamp: exp of a large log-ratio overflows; 20 nats is far outside any healthy run
        log_ratio = log_ratio.clamp(-20.0, 20.0)
        return torch.exp(log_ratio) - 1.0 - log_ratio
    raise ValueError(f"unknown KL estimator {estimator!r}; expected 'k1', 'k2' or 'k3'")


class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al. 1909.08593, sec. 2.2): proportional control of beta toward a target KL.

    ``beta <- beta * (1 + clip((kl - target) / target, -0.2, 0.2) * n_steps / horizon)``.

    Args:
        beta: initial coefficient. target: target KL in nats per token. horizon: steps over which the error is
            corrected (larger = slower).
    """

    def __init__(self, beta: float, target: float | None, horizon: int = 100) -> None:
        self.beta = float(beta)
        self.target = target
        self.horizon = horizon

    def update(self, measured_kl: float, n_steps: int = 1) -> float:
        """Move beta after a step whose mean KL was ``measured_kl`` (nats/token); returns the new beta."""
        if self.target is not None and self.beta > 0:
            error = max(-0.2, min(0.2, (measured_kl - self.target) / self.target))
            self.beta *= 1.0 + error * n_steps / self.horizon
        return self.beta

    def state_dict(self) -> dict:
        return {"beta": self.beta}

    def load_state_dict(self, state: dict) -> None:
        self.beta = float(state["beta"])
