"""The verifier registry: built-ins, lookup by name or import path, helpful errors, no heavy imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlvr import verifiers
from rlvr.verifiers.registry import UnknownVerifierError, get_verifier, registered_names, verifier


def test_builtins_are_registered() -> None:
    assert {"math", "format", "boxed_format", "countdown", "overlong", "length_penalty"} <= set(registered_names())
    assert get_verifier("math") is verifiers.math_answer.math_reward


def test_unknown_name_is_a_key_error_naming_the_closest_match() -> None:
    with pytest.raises(KeyError) as info:
        get_verifier("fromat")
    message = str(info.value)
    assert "Did you mean 'format'?" in message and "boxed_format" in message
    assert isinstance(info.value, UnknownVerifierError)


def test_import_path() -> None:
    assert get_verifier("rlvr.verifiers.countdown:countdown") is verifiers.countdown.countdown
    with pytest.raises(KeyError, match="cannot import module"):
        get_verifier("no_such_module_xyz:fn")
    with pytest.raises(KeyError, match="Did you mean 'countdown'"):
        get_verifier("rlvr.verifiers.countdown:countdwn")


def test_a_name_cannot_be_taken_twice() -> None:
    @verifier("test_registry_once")
    def first(completion: str, sample: dict) -> float:
        return 1.0

    with pytest.raises(ValueError, match="already registered"):
        verifier("test_registry_once")(lambda completion, sample: 0.0)
    with pytest.raises(ValueError, match="no ':'"):
        verifier("a:b")


def test_importing_verifiers_loads_no_torch_transformers_or_the_rest_of_rlvr() -> None:
    code = ("import sys; import rlvr.verifiers; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'deepspeed') "
            "or m.startswith('rlvr.') and not m.startswith(('rlvr.verifiers', 'rlvr.sandbox'))]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
