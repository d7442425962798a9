"""Combine several verifiers into one weighted reward per completion, computed in a process pool.

Example::

    from rlvr.verifiers.reward import RewardFunction, VerifierSpec

    specs = [VerifierSpec("math", weight=1.0), VerifierSpec("format", weight=0.2)]
    with RewardFunction(specs, num_workers=2) as reward_fn:
        results = reward_fn.score([r"<think>1+1</think><answer>\\boxed{2}</answer>"], [{"answer": "2"}])
    results[0].total   # 1.2
    results[0].scores  # {"math": 1.0, "format": 1.0}

Every verifier call runs in a worker process with a hard wall-clock kill (:mod:`rlvr.verifiers.pool`). A verifier
that raises, returns NaN or an infinite score, returns a score outside its declared ``score_range``
(:func:`rlvr.verifiers.registry.verifier`) or runs past ``timeout_s`` costs that sample only: its score is ``None``,
the reason goes to ``failures`` and the counters. Such a failure is a fault of the machinery, not of the completion,
so it is not a score: by default (``failure_score=None``) it adds nothing to the total, and a trainer leaves a sample
with a failure out of its group's statistics and the loss (:attr:`RewardResult.failures`). A verifier reports a
failure of its own machinery (a sandbox that broke, a service that timed out) by raising.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlvr.verifiers.pool import OUTPUT_TAIL_BYTES, Call, Outcome, Status, VerifierPool
from rlvr.verifiers.registry import get_verifier


@dataclass
class VerifierSpec:
    """One verifier in a reward.

    Attributes:
        name: registry name (``"math"``) or import path (``"package.module:function"``).
        weight: multiplies the verifier's score in :attr:`RewardResult.total`; any finite float.
        kwargs: keyword arguments for the verifier (e.g. ``{"answer_field": "solution"}``).
        timeout_s: wall-clock limit per call in seconds (> 0); past it the worker is killed.
        memory_mb: MiB a call may allocate (beyond what its worker held at start); past it the call fails with a
            ``MemoryError``; ``None`` = the pool's ``memory_limit_mb``.
        label: key in ``scores``/``extras``/``failures``; default the name, then ``"name#2"``, ``"name#3"``
            for repeats of the same name.
        fallback_for: the label of another verifier (a rule verifier, e.g. ``"math"``): this one runs only on the
            samples that verifier could not decide (it scored None, or its ``undecided`` hook says so: the ``math``
            verifier's unparseable answer); elsewhere it scores None, adds nothing and costs nothing. A judge that
            only rescues what the rules cannot read. The named verifier must not itself have a ``fallback_for``.
    """

    name: str
    weight: float = 1.0
    kwargs: dict = field(default_factory=dict)
    timeout_s: float = 10.0
    label: str | None = None
    memory_mb: int | None = None
    fallback_for: str | None = None


@dataclass
class RewardResult:
    """The reward of one completion.

    Attributes:
        total: sum over verifiers of ``weight * score`` for judged scores; a failed verifier adds
            ``weight * failure_score`` (nothing when ``failure_score`` is ``None``); a skipped one adds 0.
        scores: verifier label -> score, ``None`` when the verifier skipped the sample or failed.
        extras: extra fields from dict returns, keyed ``"<label>/<field>"``.
        failures: verifier label -> ``"timeout"``, ``"nan"``, ``"inf"`` (``+inf`` or ``-inf``), ``"range: <score>
            outside [low, high]"`` or ``"error: <message>"``. The part before ``:`` is the counter's kind.
        origin: verifier label -> where its result came from: ``"called"`` (a worker ran it for this sample),
            ``"cached"`` (an earlier call with the same ``cache_key``, in this batch or before) or ``"not_needed"``
            (a ``fallback_for`` verifier whose rule verifier decided the sample). Empty where unknown.
    """

    total: float
    scores: dict[str, float | None]
    extras: dict[str, Any]
    failures: dict[str, str]
    origin: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Judged:
    score: float | None
    extras: dict[str, Any]
    failure: str | None


class _Progress:
    """``on_progress(done, total)`` bookkeeping for one ``score()`` call."""

    def __init__(self, total: int, callback: Callable[[int, int], None] | None) -> None:
        self.total, self.done, self.callback = total, 0, callback

    def add(self, n: int) -> None:
        self.done += n

    def report(self) -> None:
        if self.callback is not None:
            self.callback(self.done, self.total)


class RewardFunction:
    """Score completions with weighted verifiers in worker processes; also a context manager.

    Args:
        specs: the verifiers (at least one). Names are resolved now, so a typo fails here with a
            ``KeyError`` that names the closest registered verifier.
        num_workers: worker processes (>= 1).
        failure_score: score used in ``total`` for a verifier that timed out, raised, returned NaN/inf or a
            value of the wrong type; ``None`` (the default) leaves it out of the total: the failure is in
            ``failures``, and the caller decides (the trainer leaves the sample out of its group).
        start_method: multiprocessing start method for workers (see :class:`rlvr.verifiers.pool.VerifierPool`).
        memory_limit_mb: MiB a verifier call may allocate beyond what its worker held at start (a spec's
            ``memory_mb`` overrides it); ``None`` = no limit.
        cache_size: most entries kept in the result cache (verifiers that declare a ``cache_key``, such as
            ``math`` keyed by ``(gold, extracted answer)``); 0 disables caching.

    Raises:
        ValueError: no specs, a non-finite weight, a non-positive timeout, a duplicate label, or
            kwargs that are not a dict.
        KeyError: a verifier name that is neither registered nor importable.
    """

    def __init__(
        self,
        specs: list[VerifierSpec],
        num_workers: int = 2,
        failure_score: float | None = None,
        *,
        start_method: str = "fork",
        memory_limit_mb: int | None = None,
        cache_size: int = 100_000,
    ) -> None:
        if not specs:
            raise ValueError("RewardFunction needs at least one VerifierSpec")
        if failure_score is not None and not math.isfinite(failure_score):
            raise ValueError(f"failure_score must be a finite float or None, got {failure_score!r}")
        self.specs = list(specs)
        self.labels = _labels(self.specs)
        self._fns = []
        for spec, label in zip(self.specs, self.labels, strict=True):
            if not isinstance(spec.weight, (int, float)) or not math.isfinite(spec.weight):
                raise ValueError(f"verifier {label!r}: weight must be a finite number, got {spec.weight!r}")
            if not spec.timeout_s > 0:
                raise ValueError(f"verifier {label!r}: timeout_s must be > 0 seconds, got {spec.timeout_s!r}")
            if not isinstance(spec.kwargs, dict):
                raise ValueError(f"verifier {label!r}: kwargs must be a dict, got {type(spec.kwargs).__name__}")
            self._fns.append(get_verifier(spec.name))
        for spec, label in zip(self.specs, self.labels, strict=True):
            target = spec.fallback_for
            if target is None:
                continue
            if target not in self.labels or target == label:
                raise ValueError(f"verifier {label!r}: fallback_for names {target!r}, which is not another verifier "
                                 f"of this reward; verifiers: {', '.join(self.labels)}")
            if self.specs[self.labels.index(target)].fallback_for is not None:
                raise ValueError(f"verifier {label!r}: fallback_for names {target!r}, which has a fallback_for "
                                 "itself; a fallback must name a verifier that always runs")
        self.failure_score = failure_score
        self._pool = VerifierPool(num_workers, start_method=start_method, memory_limit_mb=memory_limit_mb)
        self._cache: OrderedDict[tuple[str, Hashable], _Judged] = OrderedDict()
        self._cache_size = cache_size
        self._counters: Counter[str] = Counter()

    def __enter__(self) -> RewardFunction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        self._pool.close()

    def verifier_fn(self, label: str) -> Callable[..., Any]:
        """The function behind verifier ``label`` (its registry attributes: ``score_range``, ``service_metrics``,
        ...). Raises KeyError for an unknown label."""
        if label not in self.labels:
            raise KeyError(f"no verifier labelled {label!r}; labels: {', '.join(self.labels)}")
        return self._fns[self.labels.index(label)]

    def counters(self) -> dict[str, int]:
        """Running totals since construction: ``"<label>/calls"`` (sent to a worker), ``"<label>/cache_hits"``,
        ``"<label>/skipped"``, ``"<label>/not_needed"`` (a ``fallback_for`` verifier not asked), and per failure kind ``"<label>/timeout"``, ``"<label>/error"``, ``"<label>/nan"``,
        ``"<label>/inf"``, ``"<label>/range"``; and ``"worker_restarts"``."""
        out = dict(self._counters)
        out["worker_restarts"] = self._pool.restarts
        return out

    def score(
        self,
        completions: list[str],
        samples: list[dict],
        on_progress: Callable[[int, int], None] | None = None,
    ) -> list[RewardResult]:
        """Score each completion against its sample; results keep the input order.

        Verifiers run in two rounds: first every verifier without ``fallback_for``, then each one with it, on the
        samples its rule verifier could not decide only (:attr:`VerifierSpec.fallback_for`).

        Args:
            completions: model completions (text after the prompt).
            samples: one dict per completion: the dataset row plus ``prompt``, ``completion_tokens``,
                ``max_new_tokens`` and ``finish_reason`` where known.
            on_progress: optional ``(done, total)`` callback; ``total`` counts completions x verifiers.

        Raises:
            ValueError: the two lists differ in length, or a sample is not a dict.
        """
        if len(completions) != len(samples):
            raise ValueError(f"got {len(completions)} completions but {len(samples)} samples; expected one each")
        for i, sample in enumerate(samples):
            if not isinstance(sample, dict):
                raise ValueError(f"samples[{i}] is a {type(sample).__name__}, expected a dict")
        progress = _Progress(len(completions) * len(self.specs), on_progress)
        judged: dict[tuple[int, int], _Judged] = {}
        origin: dict[tuple[int, int], str] = {}
        every = range(len(completions))
        first = [(s, list(every)) for s, spec in enumerate(self.specs) if spec.fallback_for is None]
        self._run(first, completions, samples, judged, origin, progress)
        second = []
        for s, spec in enumerate(self.specs):
            if spec.fallback_for is None:
                continue
            rule = self.labels.index(spec.fallback_for)
            needed = [i for i in every if self._undecided(rule, judged[(i, rule)])]
            for i in sorted(set(every) - set(needed)):
                judged[(i, s)] = _Judged(None, {}, None)
                origin[(i, s)] = "not_needed"
                self._counters[f"{self.labels[s]}/not_needed"] += 1
            progress.add(len(completions) - len(needed))
            second.append((s, needed))
        if second:
            self._run(second, completions, samples, judged, origin, progress)
        return [self._combine(i, judged, origin) for i in every]

    def _undecided(self, rule: int, result: _Judged) -> bool:
        """The rule verifier ``rule`` could not decide this sample: it scored None, or its own ``undecided`` hook
        says so (the ``math`` verifier: an answer it could not parse); a failure of the machinery is not undecided."""
        if result.failure is not None:
            return False
        hook = getattr(self._fns[rule], "undecided", None)
        return result.score is None or (hook is not None and bool(hook(result.score, result.extras)))

    def _run(self, work: list[tuple[int, list[int]]], completions: list[str], samples: list[dict],
             judged: dict[tuple[int, int], _Judged], origin: dict[tuple[int, int], str], progress: _Progress) -> None:
        """Score the (spec index, sample indices) pairs of ``work`` into ``judged``: cache hits first, then one round
        of worker calls."""
        calls: list[Call] = []
        call_slots: list[list[tuple[int, int]]] = []  # each call serves these (sample, spec) slots
        call_keys: list[tuple[str, Hashable] | None] = []
        by_key: dict[tuple[str, Hashable], int] = {}
        for s, indices in work:
            spec, label, fn = self.specs[s], self.labels[s], self._fns[s]
            key_fn = getattr(fn, "cache_key", None) if self._cache_size > 0 else None
            for i in indices:
                completion, sample = completions[i], samples[i]
                key = _cache_key(key_fn, label, completion, sample, spec.kwargs)
                if key is not None and key in self._cache:
                    self._cache.move_to_end(key)
                    judged[(i, s)] = self._cache[key]
                    origin[(i, s)] = "cached"
                    self._counters[f"{label}/cache_hits"] += 1
                    progress.add(1)
                    continue
                if key is not None and key in by_key:  # same key earlier in this batch
                    call_slots[by_key[key]].append((i, s))
                    origin[(i, s)] = "cached"
                    self._counters[f"{label}/cache_hits"] += 1
                    continue
                if key is not None:
                    by_key[key] = len(calls)
                calls.append(Call(spec.name, completion, sample, spec.kwargs, spec.timeout_s, memory_mb=spec.memory_mb))
                call_slots.append([(i, s)])
                origin[(i, s)] = "called"
                call_keys.append(key)
                self._counters[f"{label}/calls"] += 1
        progress.report()

        def record(index: int, outcome: Outcome) -> None:
            spec_index = call_slots[index][0][1]
            result = _judge(outcome, getattr(self._fns[spec_index], "score_range", None))
            label = self.labels[spec_index]
            self._count(label, result)
            for slot in call_slots[index]:
                judged[slot] = result
            key = call_keys[index]
            if key is not None and result.failure is None:  # a failure may pass: the next call tries again
                self._remember(key, result)
            progress.add(len(call_slots[index]))
            progress.report()

        pool_calls, members = self._batch_calls(calls, [slots[0][1] for slots in call_slots])
        output: list[str] = []
        output_bytes = 0

        def on_result(k: int, outcome: Outcome) -> None:
            nonlocal output_bytes
            if outcome.output_bytes:
                output.append(outcome.output)
                output_bytes += outcome.output_bytes
            if not pool_calls[k].batch:
                record(members[k][0], outcome)
                return
            n, value = len(members[k]), outcome.value
            if outcome.status is Status.OK and not (isinstance(value, list) and len(value) == n):
                got = f"a list of {len(value)}" if isinstance(value, list) else type(value).__name__
                outcome = Outcome(Status.ERROR, error=f"batch verifier returned {got}, expected a list of {n} results")
            for j, index in enumerate(members[k]):
                if outcome.status is not Status.OK:
                    record(index, outcome)
                elif isinstance(value[j], BaseException):  # the batch function's way to fail one sample
                    record(index, Outcome(Status.ERROR, None, f"{type(value[j]).__name__}: {value[j]}"[:500]))
                else:
                    record(index, Outcome(Status.OK, value[j], None, outcome.seconds / n))

        if pool_calls:
            self._pool.run(pool_calls, on_result)
        if output_bytes:
            self._report_output(output, output_bytes)

    def _report_output(self, tails: list[str], written: int) -> None:
        """Print the end of what this step's verifier calls wrote to stdout/stderr, bounded, on stderr."""
        text = "".join(tails)[-OUTPUT_TAIL_BYTES:]
        shown = len(text.encode("utf-8", errors="replace"))
        print(f"verifier output: {written} bytes from {len(tails)} call(s), the last {shown} shown "
              f"({max(0, written - shown)} dropped):\n{text.rstrip()}", file=sys.stderr, flush=True)

    def _batch_calls(self, calls: list[Call], spec_of: list[int]) -> tuple[list[Call], list[list[int]]]:
        """The calls the pool runs: one per call, except that all calls of a verifier with a ``batch``
        function (see :func:`rlvr.verifiers.registry.verifier`) become one batch call, whose time limit is the
        sum of theirs. Returns the pool calls and, for each, the indices of the calls it serves."""
        pool_calls: list[Call | None] = []
        members: list[list[int]] = []
        batch_at: dict[int, int] = {}  # spec index -> its batch call's position
        for index, (call, s) in enumerate(zip(calls, spec_of, strict=True)):
            if getattr(self._fns[s], "batch", None) is None:
                pool_calls.append(call)
                members.append([index])
                continue
            if s not in batch_at:
                batch_at[s] = len(pool_calls)
                pool_calls.append(None)
                members.append([])
            members[batch_at[s]].append(index)
        for s, k in batch_at.items():
            spec, idx = self.specs[s], members[k]
            pool_calls[k] = Call(spec.name, [calls[i].completion for i in idx], [calls[i].sample for i in idx],
                                 spec.kwargs, spec.timeout_s * len(idx), batch=True, memory_mb=spec.memory_mb)
        return [c for c in pool_calls if c is not None], members

    def _combine(self, i: int, judged: dict[tuple[int, int], _Judged],
                 origin: dict[tuple[int, int], str]) -> RewardResult:
        total = 0.0
        scores: dict[str, float | None] = {}
        extras: dict[str, Any] = {}
        failures: dict[str, str] = {}
        for s, (spec, label) in enumerate(zip(self.specs, self.labels, strict=True)):
            result = judged[(i, s)]
            scores[label] = result.score
            for name, value in result.extras.items():
                extras[f"{label}/{name}"] = value
            if result.failure is not None:
                failures[label] = result.failure
                if self.failure_score is not None:
                    total += spec.weight * self.failure_score
            elif result.score is not None:
                total += spec.weight * result.score
        return RewardResult(total=total, scores=scores, extras=extras, failures=failures,
                            origin={label: origin[(i, s)] for s, label in enumerate(self.labels)})

    def _count(self, label: str, result: _Judged) -> None:
        if result.failure is not None:
            self._counters[f"{label}/{result.failure.split(':')[0]}"] += 1
        elif result.score is None:
            self._counters[f"{label}/skipped"] += 1

    def _remember(self, key: tuple[str, Hashable], result: _Judged) -> None:
        self._cache[key] = result
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)


def _labels(specs: Sequence[VerifierSpec]) -> list[str]:
    labels: list[str] = []
    seen: Counter[str] = Counter()
    for spec in specs:
        if spec.label is not None:
            label = spec.label
        else:
            seen[spec.name] += 1
            label = spec.name if seen[spec.name] == 1 else f"{spec.name}#{seen[spec.name]}"
        if label in labels:
            raise ValueError(f"two verifiers share the label {label!r}; give one of them a distinct 'label'")
        labels.append(label)
    return labels


def _cache_key(
    key_fn: Callable[..., Hashable | None] | None, label: str, completion: str, sample: dict, kwargs: dict
) -> tuple[str, Hashable] | None:
    if key_fn is None:
        return None
    try:
        key = key_fn(completion, sample, **kwargs)
        if key is None:
            return None
        hash(key)
        return (label, key)
    except Exception:  # noqa: BLE001 - a bad key only disables caching; the worker reports the real error
        return None


def _judge(outcome: Outcome, score_range: tuple[float | None, float | None] | None = None) -> _Judged:
    """Turn a worker outcome into a score, extras and failure reason; ``score_range`` is the verifier's declared
    ``(low, high)`` (inclusive, ``None`` = open on that side)."""
    if outcome.status is Status.TIMEOUT:
        return _Judged(None, {}, "timeout")
    if outcome.status is Status.ERROR:
        return _Judged(None, {}, f"error: {outcome.error}")
    value = outcome.value
    extras: dict[str, Any] = {}
    if isinstance(value, dict):
        if "score" not in value:
            return _Judged(None, {}, f"error: returned a dict without 'score' (keys: {sorted(value)[:10]})")
        extras = {str(k): v for k, v in value.items() if k != "score"}
        value = value["score"]
    if value is None:
        return _Judged(None, extras, None)
    if not isinstance(value, numbers.Real):  # bool, int, float and numpy scalars are Real
        return _Judged(None, extras, f"error: returned {type(value).__name__}, expected float, None or dict")
    score = float(value)
    if math.isnan(score):
        return _Judged(None, extras, "nan")
    if math.isinf(score):  # reported as what it is: an overflowed log or 1/0 is not a NaN
        return _Judged(None, extras, "inf")
    if score_range is not None:
        low, high = score_range
        if (low is not None and score < low) or (high is not None and score > high):
            shown = f"[{'-inf' if low is None else low}, {'inf' if high is None else high}]"
            return _Judged(None, extras, f"range: {score:g} outside {shown}")
    return _Judged(score, extras, None)
