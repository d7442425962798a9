"""A silent model hub costs one line, not a minute of retries; offline, a model that is nowhere is an error; the
torch extension cache defaults to rlvr's cache."""

import os
import socket
import subprocess
import sys
import time

import pytest

from rlvr.models import hub


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once the socket is: a connection is refused at once


@pytest.fixture
def silent_hub(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(hub, "_probed", None)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    yield
    os.environ.pop("HF_HUB_OFFLINE", None)  # set by the code under test; monkeypatch restores the rest


def test_a_silent_hub_turns_offline_mode_on_with_one_line(silent_hub, capsys):
    import huggingface_hub.constants

    assert not hub.ensure_hub_or_offline("model.name='x/y'")
    assert not hub.ensure_hub_or_offline("model.name='x/z'")  # probed once
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not answer: working offline (HF_HUB_OFFLINE=1)" in err, err
    assert os.environ["HF_HUB_OFFLINE"] == "1" and huggingface_hub.constants.HF_HUB_OFFLINE is True


def test_a_hub_model_that_is_nowhere_fails_at_once_when_the_hub_is_silent(silent_hub, tmp_path, monkeypatch, capsys):
    from rlvr.models.loading import ModelLoadError, resolve_model_path

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty local hub cache
    start = time.monotonic()
    with pytest.raises(ModelLoadError) as info:
        resolve_model_path("no-such-org/no-such-model")
    assert time.monotonic() - start < 15
    assert "not a local folder, not in the local hub cache" in str(info.value)
    assert "hf download no-such-org/no-such-model" in str(info.value)


def test_rlvr_check_offline_errors_on_a_model_that_is_nowhere(tmp_path, monkeypatch, capsys):
    import yaml

    from rlvr.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "d.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n')
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"model": {"name": "no-such-org/no-such-model"},
                                      "data": {"source": {"type": "jsonl", "path": "d.jsonl"}},
                                      "verifiers": [{"name": "math"}]}))
    assert main(["check", str(recipe)]) == 1
    out = capsys.readouterr().out
    assert "error   model: model.name='no-such-org/no-such-model': not a local folder, not in the local hub cache" \
        in out and "FAILED" in out, out


@pytest.mark.parametrize("rlvr_cache", [None, "custom"])
def test_torch_extensions_default_to_rlvrs_cache_where_something_is_built(tmp_path, rlvr_cache):
    """Importing rlvr sets no variable; the build set-up points torch's builder into rlvr's cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_EXTENSIONS_DIR", "RLVR_CACHE")}
    env["HOME"] = str(tmp_path)
    if rlvr_cache:
        env["RLVR_CACHE"] = str(tmp_path / rlvr_cache)
    code = ("import os, rlvr; print(os.environ.get('TORCH_EXTENSIONS_DIR', 'unset')); print(rlvr.cache_dir()); "
            "from rlvr.runtime.extensions import prepare_extension_builds; print(prepare_extension_builds()); "
            "print(os.environ['TORCH_EXTENSIONS_DIR'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    root = tmp_path / rlvr_cache if rlvr_cache else tmp_path / ".cache" / "rlvr"
    assert out.split() == ["unset", str(root), str(root / "torch_extensions"), str(root / "torch_extensions")]
