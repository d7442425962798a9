"""A recipe whose sandboxed programs need a Python module or a language that a backend it uses lacks fails the
pre-flight that `rlvr check` and `rlvr train` run, with one line naming the module (or language), the backend and
what to do; `rlvr check` reports what each available backend offers. Stand-in backends: no sandbox needed."""

from __future__ import annotations

import json

import pytest

from rlvr.config import Recipe
from rlvr.data.sources import load_rows
from rlvr.preflight import CheckOptions, PreflightError, run_checks
from rlvr.runs.verifier_inputs import verifier_specs
from rlvr.sandbox import ExecStatus
from tests.sandbox.fake_backend import FakeBackend

NO_JAVA = ("python3", "gcc", "g++", "node")


@pytest.fixture
def backends(monkeypatch):
    """Stand-ins for docker (the image: numpy, every toolchain) and bwrap (a host python3 without numpy, no JDK);
    `auto` is docker, as where an engine answers."""
    monkeypatch.delenv("RLVR_SANDBOX_PROBE_MODULES", raising=False)
    fakes = {"docker": FakeBackend("docker", modules={"numpy"}), "bwrap": FakeBackend("bwrap", tools=NO_JAVA)}
    fakes["docker"].memory_enforced = True
    monkeypatch.setattr("rlvr.sandbox.get_backend", lambda name="auto": fakes["docker" if name == "auto" else name])
    return fakes


def _recipe(backend: str | None = "bwrap", modules: tuple[str, ...] = ("numpy",), tool: str | None = None,
            verifier: str = "code", path: str = "rows.jsonl") -> Recipe:
    kwargs = {"backend": backend} if backend else {}
    tools = [{"name": "python", "kwargs": {"backend": tool}}] if tool else []
    return Recipe(data={"source": {"type": "jsonl", "path": str(path)}, "answer_field": None},
                  verifiers=[{"name": verifier, "kwargs": kwargs}], sandbox={"python_modules": list(modules)},
                  rollout={"tools": tools})


def _rows(tmp_path, languages: list[str | None]) -> tuple[str, list[dict]]:
    """A JSONL file of code rows in `languages` (None: no language field) and its rows, as the pre-flight gets them."""
    path = tmp_path / "rows.jsonl"
    rows = [{"question": "add", "tests": [{"input": "1 2\n", "output": "3\n"}], **({"language": lang} if lang else {})}
            for lang in languages]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path), load_rows(_recipe(path=path).data)


def _check(recipe: Recipe, rows: list[dict] | None = None):
    report = run_checks(recipe, verifier_specs(recipe), CheckOptions(training=False), rows=rows)
    return [(f.level, f.message) for f in report.findings if f.check == "sandbox"], report


def test_a_module_the_backend_lacks_fails_the_preflight_naming_it_the_backend_and_the_remedy(backends):
    findings, report = _check(_recipe("bwrap"))
    assert [m for level, m in findings if level == "error"] == [
        "sandbox.python_modules: 'numpy' cannot be imported in the bwrap sandbox that the code verifier uses; use the "
        "docker backend (`backend: docker`; its image has it), or install it for this machine's python3 (the bwrap "
        "sandbox runs this machine's /usr: apt-get install python3-numpy)"]
    with pytest.raises(PreflightError, match="sandbox: sandbox.python_modules: 'numpy' cannot be imported in the bwrap"):
        report.raise_for_errors()  # what `rlvr train` does with the same report, before loading the model


def test_every_available_backend_is_probed_once_and_reported(backends):
    findings, report = _check(_recipe("bwrap"))
    info = [m for level, m in findings if level == "info"]
    assert info == [
        "bwrap: Python 3.11.2; languages python, c, cpp, javascript (not java); Python modules none (not numpy, "
        "scipy, sympy, pandas, networkx, sortedcontainers)",
        "docker: Python 3.11.2; languages python, c, cpp, java, javascript; Python modules numpy (not scipy, sympy, "
        "pandas, networkx, sortedcontainers)"]
    assert len(backends["bwrap"].asked) == len(backends["docker"].asked) == 1
    _check(_recipe("bwrap"))  # cached for the process: no second probe
    assert len(backends["bwrap"].asked) == len(backends["docker"].asked) == 1


def test_the_same_needs_pass_on_a_backend_that_has_them(backends, tmp_path):
    path, rows = _rows(tmp_path, ["java", None])
    findings, report = _check(_recipe("docker", path=path), rows)
    assert report.errors == []
    assert findings[0] == ("ok", backends["docker"].description())


def test_a_language_the_backend_lacks_fails_naming_the_rows(backends, tmp_path):
    path, rows = _rows(tmp_path, [None, "Java", "java"])
    findings, _ = _check(_recipe("bwrap", modules=(), path=path), rows)
    assert [m for level, m in findings if level == "error"] == [
        f"2 row(s) (first: {path}:2) are java programs, which the bwrap sandbox cannot run: the bwrap sandbox has no "
        "javac, java for java programs; or use the docker backend (`backend: docker`: its image has every toolchain)"]


def test_an_unknown_language_in_a_row_is_an_error(backends, tmp_path):
    path, rows = _rows(tmp_path, [None, "rust", "cobol"])
    findings, _ = _check(_recipe("docker", modules=(), path=path), rows)
    errors = [m for level, m in findings if level == "error"]
    assert len(errors) == 2
    assert errors[0].startswith(f"{path}:2: unknown language 'rust'; supported: python, c, cpp, java, javascript")
    assert errors[1] == "1 more row(s) name an unknown language"


def test_the_python_tool_is_checked_on_the_backend_it_resolves_to(backends):
    recipe = _recipe(None, modules=("numpy", "sortedcontainers"), tool="auto", verifier="math")
    findings, _ = _check(recipe)
    assert [m for level, m in findings if level == "error"] == [
        "sandbox.python_modules: 'sortedcontainers' cannot be imported in the docker sandbox that the python tool "
        "uses; add its Debian package (python3-sortedcontainers) to RLVR_SANDBOX_PACKAGES in sandbox/image.env, bump "
        "RLVR_SANDBOX_IMAGE there and run `make sandbox`"]


def test_a_verifier_and_a_tool_on_one_backend_share_one_line(backends):
    findings, _ = _check(_recipe("auto", modules=("sympy",), tool="docker"))
    assert [m for level, m in findings if level == "error"] == [
        "sandbox.python_modules: 'sympy' cannot be imported in the docker sandbox that the code verifier and the "
        "python tool use; add its Debian package (python3-sympy) to RLVR_SANDBOX_PACKAGES in sandbox/image.env, bump "
        "RLVR_SANDBOX_IMAGE there and run `make sandbox`"]


def test_a_recipe_that_runs_no_programs_probes_nothing(backends):
    findings, _ = _check(_recipe(None, verifier="math"))
    assert findings == []
    assert backends["bwrap"].asked == backends["docker"].asked == []


def test_a_probe_that_fails_is_a_warning_not_an_error(backends, monkeypatch):
    broken = FakeBackend("bwrap", status=ExecStatus.SANDBOX_ERROR)
    monkeypatch.setattr("rlvr.sandbox.get_backend", lambda name="auto": broken)
    findings, report = _check(_recipe("bwrap"))
    assert report.errors == []
    assert ("warn", "could not probe what the bwrap sandbox offers: the bwrap sandbox's capability probe ended "
                    "sandbox_error: boom") in findings


def test_a_backend_that_cannot_run_here_is_a_warning_naming_it(backends, monkeypatch):
    from rlvr.sandbox import SandboxUnavailable

    def get_backend(name="auto"):
        if name == "bwrap":
            raise SandboxUnavailable("bubblewrap is not installed")
        return backends["docker" if name == "auto" else name]

    monkeypatch.setattr("rlvr.sandbox.get_backend", get_backend)
    findings, report = _check(_recipe("bwrap"))
    assert report.errors == []
    assert findings[0] == ("warn", "the code verifier asks for sandbox backend 'bwrap', which cannot run here, so "
                                   "every one of its calls fails: bubblewrap is not installed")
    assert ("info", "bwrap: not available here (bubblewrap is not installed)") in findings
