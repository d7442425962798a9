"""A scripted rollout engine for the asynchronous trainer's tests: fixed completions after a configurable delay, the
weight version of every call recorded, and optionally a version stamped on each group, an engine that reports an old
version for chosen calls, or one that fails at a chosen call.

Versions count ``sync_weights`` calls from ``start_version`` (the trainer syncs once after each optimizer step), so the
engine's version is the trainer's as long as the run is not resumed (a resume syncs once more)."""

from __future__ import annotations

import threading
import time
from typing import Any

TEXTS = ("12", "3", "ab", "4a")
"""Completion texts (tiny tokenizer characters): digit fractions 1, 1, 0, 0.5, so every group's rewards vary."""


class SlowScriptedEngine:
    """Sample ``j`` of the group of a prompt gets ``TEXTS[(sum(prompt ids) + j) % 4]``, ending with eos, log-prob -1
    per token; every ``generate`` call sleeps ``delay_s`` per group.

    Args:
        tokenizer: the tiny tokenizer (characters to ids).
        delay_s: seconds per group of every call (a slow engine).
        stamp: set ``Completion.policy_version`` to the version the engine holds when each group starts (a group
            begun after a sync within a call carries the newer version, as a server's requests do).
        reported_lag: ``{(call index, group index): lag}``: that group reports ``lag`` versions older than the engine
            holds (a server that missed updates); needs ``stamp``.
        fail_at_call: raise ``RuntimeError`` at this call index (0-based).
        start_version: the version before the first sync.
    """

    def __init__(self, tokenizer: Any, delay_s: float = 0.0, stamp: bool = False,
                 reported_lag: dict[tuple[int, int], int] | None = None, fail_at_call: int | None = None,
                 start_version: int = 0) -> None:
        self.tok = tokenizer
        self.delay_s = delay_s
        self.stamp = stamp
        self.reported_lag = reported_lag or {}
        self.fail_at_call = fail_at_call
        self.version = self.start_version = start_version
        self.calls: list[int] = []
        """The version held at the start of each ``generate`` call."""
        self.sizes: list[int] = []
        """The group size ``n`` of each call (evaluations sample ``eval.k``, training ``rollout.group_size``)."""
        self.stamped: list[list[int]] = []
        """Per call, the version stamped on each group (with ``stamp``)."""
        self._lock = threading.Lock()

    def generate(self, prompt_token_ids: list[list[int]], n: int, sampling: Any) -> list[list[Any]]:
        from rlvr.rollout.base import Completion

        with self._lock:
            call = len(self.calls)
            self.calls.append(self.version)
            self.sizes.append(n)
        if call == self.fail_at_call:
            raise RuntimeError(f"scripted engine failure at call {call}")
        groups, stamped = [], []
        for k, ids in enumerate(prompt_token_ids):
            version = self.version - self.reported_lag.get((call, k), 0)  # the group's first token comes first
            time.sleep(self.delay_s)
            extra = {"policy_version": version} if self.stamp else {}
            group = []
            for j in range(n):
                text = TEXTS[(sum(ids) + j) % len(TEXTS)][:sampling.max_new_tokens - 1]
                token_ids = [self.tok.convert_tokens_to_ids(c) for c in text] + [self.tok.eos_token_id]
                group.append(Completion(token_ids, [-1.0] * len(token_ids), "stop", **extra))
            groups.append(group)
            stamped.append(version)
        self.stamped.append(stamped)
        return groups

    @property
    def syncs(self) -> int:
        """``sync_weights`` calls so far (as the other scripted engines count them)."""
        return self.version - self.start_version

    def sync_weights(self, model: Any) -> None:
        with self._lock:
            self.version += 1
