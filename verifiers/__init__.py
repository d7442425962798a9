"""Rule-based reward functions for RLVR: math answers, R1 format tags, countdown equations, length shaping.

Quick use::

    from rlvr.verifiers import get_verifier, math_equal
    math_equal("\\frac{1}{2}", "so the answer is \\boxed{0.5}")        # True
    get_verifier("format")("<think>x</think><answer>4</answer>", {})   # {"score": 1.0, "reason": "ok"}

Importing the package registers the built-ins: ``math``, ``format``, ``boxed_format``, ``countdown``,
``overlong``, ``length_penalty``, ``code``, ``judge`` (a model behind a chat endpoint) and the control
``random_reward``. This package never imports torch, transformers or the rest of :mod:`rlvr` (trainer, rollout
engines).

The folder ``verifiers/`` installs as ``rlvr.verifiers`` (pyproject's package-dir): a top-level ``verifiers``
is not this project's (on the package index that name is prime-rl's environments library).
"""

from rlvr.verifiers import code as _code  # noqa: F401  (registers "code")
from rlvr.verifiers import controls as _controls  # noqa: F401  (registers "random_reward")
from rlvr.verifiers import countdown as _countdown  # noqa: F401  (registers "countdown")
from rlvr.verifiers import format_tags as _format_tags  # noqa: F401  (registers "format", "boxed_format")
from rlvr.verifiers import judge as _judge  # noqa: F401  (registers "judge")
from rlvr.verifiers import length as _length  # noqa: F401  (registers "overlong", "length_penalty")
from rlvr.verifiers import math_answer as _math_answer  # noqa: F401  (registers "math")
from rlvr.verifiers.math_answer import extract_answer, judge_math, math_equal
from rlvr.verifiers.registry import get_verifier, registered_names, verifier

__all__ = ["extract_answer", "get_verifier", "judge_math", "math_equal", "registered_names", "verifier"]
