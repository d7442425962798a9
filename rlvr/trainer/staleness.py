"""How old the samples of an asynchronous step are, and the groups too old to train on
(``rollout.max_off_policy_steps``).

A sample's staleness is the trainer's version when it trains on the sample minus the sample's ``policy_version``
(:class:`rlvr.rollout.base.Completion`): the optimizer steps between the weights that sampled its first token and the
weights being updated. The collector's admission control keeps it at most K for an engine that stamps the version it
holds; a sample found staler (an engine that reports an older version: a server that missed an update) is dropped here
with its whole group, so the group baselines of the kept groups are computed over the same samples as always.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.trainer.batch import RolloutBatch


def stamp_versions(batch: RolloutBatch, version: int) -> None:
    """Set ``policy_version = version`` on the completions of ``batch`` whose engine left it ``None`` (in place):
    ``version`` is the one at which the batch was started, the oldest its samples can come from."""
    for completion in batch.completions:
        if completion.policy_version is None:
            completion.policy_version = version


@dataclass
class StaleFilter:
    """The batch a step trains on and what it dropped.

    Attributes:
        batch: the groups whose samples are all at most K steps stale.
        staleness: (N,) staleness of every sample delivered, kept or dropped, in batch order (the histogram).
        dropped_samples: samples in the dropped groups. dropped_groups: groups dropped.
    """

    batch: RolloutBatch
    staleness: list[int]
    dropped_samples: int
    dropped_groups: int

    def metrics(self) -> dict[str, float]:
        """``rollout/staleness_mean`` and ``rollout/staleness_max`` over the samples delivered (0 without any),
        ``rollout/stale_samples_dropped``."""
        s = self.staleness
        return {"rollout/staleness_mean": sum(s) / len(s) if s else 0.0,
                "rollout/staleness_max": float(max(s, default=0)),
                "rollout/stale_samples_dropped": float(self.dropped_samples)}


def drop_stale_groups(batch: RolloutBatch, version: int, max_off_policy_steps: int) -> StaleFilter:
    """Keep the groups of ``batch`` whose every sample is at most ``max_off_policy_steps`` (K) versions older than
    ``version``, the trainer's version (optimizer steps done) as it trains on them.

    Raises:
        ValueError: a completion without ``policy_version`` (stamp the batch first), or one newer than ``version``
            (an engine counting versions differently from the trainer).
    """
    staleness = []
    for i, c in enumerate(batch.completions):
        if c.policy_version is None:
            raise ValueError(f"sample {i} has no policy_version: stamp_versions() the batch before filtering it")
        if c.policy_version > version:
            raise ValueError(f"sample {i} reports policy_version {c.policy_version}, newer than the trainer's "
                             f"{version}: the rollout engine must count versions as the trainer counts optimizer steps")
        staleness.append(version - c.policy_version)
    g = batch.group_size
    keep = [k for k in range(len(batch.prompts)) if max(staleness[k * g:(k + 1) * g]) <= max_off_policy_steps]
    dropped = len(batch.prompts) - len(keep)
    kept = batch if not dropped else batch.select_groups(keep)
    return StaleFilter(kept, staleness, dropped_samples=dropped * g, dropped_groups=dropped)
