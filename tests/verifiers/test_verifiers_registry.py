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
    """Only the sandbox and the leaf name-suggestion and import-path modules (pure Python) come along."""
    code = ("import sys; import rlvr.verifiers; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'deepspeed') "
            "or m.startswith('rlvr.') and not m.startswith(('rlvr.verifiers', 'rlvr.sandbox', 'rlvr.did_you_mean', "
            "'rlvr.import_paths'))]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("source, message", [
    ("def f(completion, sample):\n    return 1.0 +\n",
     r"^verifier module 'broken_mod_{i}' does not parse: .*broken_mod_{i}\.py:2: invalid syntax"),
    ("x = 1\nraise RuntimeError('no data here')\n",
     r"^verifier module 'broken_mod_{i}' raised while importing at .*broken_mod_{i}\.py:2: RuntimeError: no data here$"),
    ("import sys\nsys.exit(3)\n",
     r"^verifier module 'broken_mod_{i}' called sys.exit\(3\) while importing at .*broken_mod_{i}\.py:2$"),
    ("import os\nos._exit(3)\n",
     r"^verifier module 'broken_mod_{i}' exited with code 3 while importing \(os._exit at import\?\)$"),
    ("import missing_dependency_xyz\n",
     r"^verifier module 'broken_mod_{i}' raised while importing at .*broken_mod_{i}\.py:1: ModuleNotFoundError: "
     r"No module named 'missing_dependency_xyz'$"),
])
def test_a_module_that_fails_at_import_is_one_line_and_rlvr_lives_on(tmp_path, monkeypatch, source, message) -> None:
    import re

    from rlvr.verifiers.registry import VerifierImportError

    i = abs(hash(source)) % 10**8
    (tmp_path / f"broken_mod_{i}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(VerifierImportError) as e:
        get_verifier(f"broken_mod_{i}:f")
    assert re.match(message.format(i=i), str(e.value)), str(e.value)
    assert f"broken_mod_{i}" not in sys.modules  # the parent never ran it


def test_sys_exit_at_import_names_the_modules_line_when_a_library_wraps_sys_exit(tmp_path, monkeypatch) -> None:
    """wandb.init replaces sys.exit with its own hook: the line named is still the module's, not the hook's."""
    from rlvr.verifiers.registry import VerifierImportError

    real_exit = sys.exit

    def hooked_exit(code=None):
        real_exit(code)

    monkeypatch.setattr(sys, "exit", hooked_exit)
    (tmp_path / "exits_through_hook.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(VerifierImportError, match=r"called sys.exit\(3\) while importing at .*exits_through_hook\.py:2$"):
        get_verifier("exits_through_hook:f")


def test_a_module_that_hangs_at_import_is_stopped(tmp_path, monkeypatch) -> None:
    from rlvr.verifiers import registry

    (tmp_path / "hangs_at_import.py").write_text("import time\nwhile True:\n    time.sleep(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(registry.VerifierImportError, match=r"^verifier module 'hangs_at_import' did not finish "
                                                            r"importing in 1 s \(a loop or a wait at import\?\)$"):
        registry.probe_import("hangs_at_import", timeout_s=1.0)
