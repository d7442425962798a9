"""Length shaping as verifiers that read the sample's token count.

Both read ``sample["completion_tokens"]`` (int, tokens the policy generated) and, unless given a length
explicitly, ``sample["max_new_tokens"]`` (the generation budget). Both return values <= 0, meant to be
added to a correctness reward with a weight.
"""

from __future__ import annotations

from rlvr.verifiers.registry import verifier


def overlong_penalty(length_tokens: int, max_length_tokens: int, buffer_tokens: int) -> float:
    """DAPO soft overlong punishment (Yu et al., arXiv 2503.14476, eq. 13), in [-1, 0].

    With ``L_max = max_length_tokens`` and ``L_cache = buffer_tokens``::

        0                                  if |y| <= L_max - L_cache
        ((L_max - L_cache) - |y|) / L_cache if L_max - L_cache < |y| <= L_max
        -1                                 if |y| > L_max

    Raises:
        ValueError: negative length, ``max_length_tokens < 1``, or ``buffer_tokens`` not in
            ``[1, max_length_tokens]``.
    """
    if length_tokens < 0:
        raise ValueError(f"length must be >= 0 tokens, got {length_tokens}")
    if max_length_tokens < 1:
        raise ValueError(f"max length must be >= 1 token, got {max_length_tokens}")
    if not 1 <= buffer_tokens <= max_length_tokens:
        raise ValueError(f"buffer must be in [1, {max_length_tokens}] tokens, got {buffer_tokens}")
    expected = max_length_tokens - buffer_tokens
    if length_tokens <= expected:
        return 0.0
    if length_tokens <= max_length_tokens:
        return (expected - length_tokens) / buffer_tokens
    return -1.0


def _tokens(sample: dict, name: str) -> int:
    if name not in sample:
        raise KeyError(f"length verifiers need sample[{name!r}] (int tokens); the sample has {sorted(sample)}")
    value = sample[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"sample[{name!r}] must be an int number of tokens, got {value!r}")
    return value


@verifier("overlong", score_range=(None, 0.0))
def overlong(
    completion: str,
    sample: dict,
    *,
    max_length_tokens: int | None = None,
    buffer_tokens: int | None = None,
    penalty: float = 1.0,
) -> float:
    """DAPO soft overlong punishment of this sample, ``penalty`` times a value in [-1, 0] (see
    :func:`overlong_penalty`).

    Args:
        max_length_tokens: ``L_max``; default ``sample["max_new_tokens"]``.
        buffer_tokens: ``L_cache``, the soft zone before ``L_max``; default a fifth of ``L_max`` (DAPO used
            L_max = 20480 with L_cache = 4096). Capped at ``L_max`` (a short generation budget must not make a
            recipe's buffer invalid).
        penalty: the punishment at and past ``L_max`` (>= 0).

    Raises ``KeyError``/``ValueError`` when the token counts are missing or not ints, or ``penalty < 0``.
    """
    if penalty < 0:
        raise ValueError(f"penalty must be >= 0, got {penalty}")
    length = _tokens(sample, "completion_tokens")
    limit = max_length_tokens if max_length_tokens is not None else _tokens(sample, "max_new_tokens")
    buffer = min(buffer_tokens, limit) if buffer_tokens is not None else max(1, limit // 5)
    return penalty * overlong_penalty(length, limit, buffer)


@verifier("length_penalty", score_range=(-1.0, 0.0))
def length_penalty(
    completion: str,
    sample: dict,
    *,
    free_tokens: int = 0,
    max_length_tokens: int | None = None,
) -> float:
    """Linear length penalty in [-1, 0]: ``-(|y| - free) / (L_max - free)``, 0 up to ``free_tokens``.

    A per-sample penalty: group-relative variants (Kimi k1.5, arXiv 2501.12599, section 2.3.3) need the
    other samples of the prompt and belong in the advantage stage, not in a verifier.

    Args:
        free_tokens: tokens allowed without penalty (>= 0, below ``L_max``).
        max_length_tokens: ``L_max``; default ``sample["max_new_tokens"]``. Lengths past it give -1.

    Raises ``KeyError``/``ValueError`` for missing token counts or ``free_tokens`` outside ``[0, L_max)``.
    """
    length = _tokens(sample, "completion_tokens")
    limit = max_length_tokens if max_length_tokens is not None else _tokens(sample, "max_new_tokens")
    if not 0 <= free_tokens < limit:
        raise ValueError(f"free_tokens must be in [0, {limit}) tokens, got {free_tokens}")
    if length <= free_tokens:
        return 0.0
    return -min(1.0, (length - free_tokens) / (limit - free_tokens))
