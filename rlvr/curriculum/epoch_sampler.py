"""The order in which training prompts are drawn: seeded epochs, resumable from a saved position."""

from __future__ import annotations

import random


class EpochSampler:
    """Draws prompt indices without replacement, one seeded permutation per epoch.

    The state is ``(epoch, position)``, so a resumed run continues the exact order of one that never stopped.

    Args:
        num_prompts: training prompts (> 0). seed: base seed; epoch e uses ``seed + e``.
    Raises:
        ValueError: ``num_prompts`` < 1.
    """

    def __init__(self, num_prompts: int, seed: int) -> None:
        if num_prompts < 1:
            raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
        self.num_prompts = num_prompts
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.num_prompts))
        random.Random(self.seed + epoch).shuffle(order)
        return order

    def sample(self, k: int) -> list[int]:
        """The next ``k`` prompt indices (crossing into the next epoch when this one runs out)."""
        out: list[int] = []
        while len(out) < k:
            if self.position == self.num_prompts:
                self.epoch += 1
                self.position = 0
                self._order = self._permutation(self.epoch)
            take = min(k - len(out), self.num_prompts - self.position)
            out.extend(self._order[self.position:self.position + take])
            self.position += take
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)
