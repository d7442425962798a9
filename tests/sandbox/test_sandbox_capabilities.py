"""What each backend's sandbox offers (languages, Python modules), found by one probe per backend: the probe's
parsing and cache on a stand-in backend, and the real answers of bubblewrap and Docker where they run."""
import json
import subprocess

import pytest

from rlvr.sandbox import ExecStatus, SandboxError
from rlvr.sandbox.backends.bwrap_backend import bwrap_problem
from rlvr.sandbox.backends.docker_backend import docker_problem
from rlvr.sandbox.capabilities import (
    COMMON_PYTHON_MODULES,
    image_python_modules,
    module_remedy,
    probe_capabilities,
    probe_modules,
)
from rlvr.sandbox.languages import LANGUAGES, missing_tools
from tests.sandbox.fake_backend import FakeBackend


@pytest.fixture(autouse=True)
def _default_probe_list(monkeypatch):
    monkeypatch.delenv("RLVR_SANDBOX_PROBE_MODULES", raising=False)


def test_the_probe_reports_modules_languages_and_the_python_version():
    backend = FakeBackend(modules={"numpy"}, tools={"python3", "gcc", "g++", "node"})
    caps = probe_capabilities(backend, ["numpy", "scipy.sparse"])
    assert backend.asked == [[*COMMON_PYTHON_MODULES, "scipy.sparse"]]
    assert caps.python == "3.11.2"
    assert caps.modules == {"numpy": True, "scipy": False, "sympy": False, "pandas": False, "networkx": False,
                            "sortedcontainers": False, "scipy.sparse": False}
    assert caps.missing_modules(["numpy", "scipy.sparse"]) == ["scipy.sparse"]
    assert caps.languages == {"python": None, "c": None, "cpp": None,
                              "java": "the bwrap sandbox has no javac, java for java programs", "javascript": None}
    assert caps.summary() == ("bwrap: Python 3.11.2; languages python, c, cpp, javascript (not java); Python modules "
                              "numpy (not scipy, sympy, pandas, networkx, sortedcontainers, scipy.sparse)")


def test_the_probe_runs_once_per_backend_and_then_only_for_modules_not_asked_yet():
    backend = FakeBackend(modules={"numpy", "torch"})
    first = probe_capabilities(backend, ["numpy"])
    assert probe_capabilities(backend, ["numpy"]) is first
    assert probe_capabilities(backend) is first
    assert len(backend.asked) == 1
    more = probe_capabilities(backend, ["torch", "numpy"])
    assert backend.asked[1:] == [["torch"]]
    assert more.modules["torch"] is True and more.modules["numpy"] is True and more.python == "3.11.2"
    other = FakeBackend(modules=set())  # another backend instance gets its own probe
    assert probe_capabilities(other, ["numpy"]).modules["numpy"] is False
    assert len(other.asked) == 1


def test_the_list_of_common_modules_is_configurable(monkeypatch):
    monkeypatch.setenv("RLVR_SANDBOX_PROBE_MODULES", "numpy, sklearn")
    assert probe_modules() == ("numpy", "sklearn")
    backend = FakeBackend(modules={"sklearn"})
    assert probe_capabilities(backend).modules == {"numpy": False, "sklearn": True}
    monkeypatch.setenv("RLVR_SANDBOX_PROBE_MODULES", "numpy,os.path;rm")
    with pytest.raises(ValueError, match="RLVR_SANDBOX_PROBE_MODULES: 'os.path;rm' is not a Python module name"):
        probe_modules()


@pytest.mark.parametrize("name", ["", "1x", "numpy; import os", "a..b", 3])
def test_a_bad_module_name_is_refused_before_any_probe(name):
    backend = FakeBackend()
    with pytest.raises(ValueError, match="is not a Python module name"):
        probe_capabilities(backend, [name])
    assert backend.asked == []


def test_a_probe_that_fails_or_answers_nonsense_is_a_sandbox_error():
    with pytest.raises(SandboxError, match="the bwrap sandbox.s capability probe ended error: boom"):
        probe_capabilities(FakeBackend(status=ExecStatus.ERROR))
    with pytest.raises(SandboxError, match="capability probe wrote 'not json'"):
        probe_capabilities(FakeBackend(stdout="not json"))
    with pytest.raises(SandboxError, match="capability probe wrote"):
        probe_capabilities(FakeBackend(stdout=json.dumps({"python": "3.11.2", "modules": {}, "tools": {}})))


def test_the_remedy_names_what_to_do_on_each_backend():
    assert image_python_modules() == ("numpy",)  # sandbox/image.env installs python3-numpy
    assert module_remedy("bwrap", "numpy") == (
        "use the docker backend (`backend: docker`; its image has it), or install it for this machine's python3 (the "
        "bwrap sandbox runs this machine's /usr: apt-get install python3-numpy)")
    assert module_remedy("docker", "scipy.sparse") == (
        "add its Debian package (python3-scipy) to RLVR_SANDBOX_PACKAGES in sandbox/image.env, bump "
        "RLVR_SANDBOX_IMAGE there and run `make sandbox`")
    assert "use the docker backend (`backend: docker`) after you add its Debian package (python3-sympy)" in \
        module_remedy("bwrap", "sympy")


def _real_backend(name):
    from rlvr.sandbox import get_backend

    problem = docker_problem() if name == "docker" else bwrap_problem()
    if problem:
        pytest.skip(f"{name}: {problem}")
    return get_backend(name)


def test_bubblewrap_offers_what_this_machines_python3_and_toolchains_offer():
    caps = probe_capabilities(_real_backend("bwrap"), ["numpy", "json"])
    host = subprocess.run(["/usr/bin/python3", "-I", "-c", "import importlib.util, json, sys\n"
                           "print(json.dumps(['%d.%d.%d' % sys.version_info[:3], "
                           "importlib.util.find_spec('numpy') is not None]))"],
                          capture_output=True, text=True, check=True)
    version, has_numpy = json.loads(host.stdout)
    assert caps.backend == "bwrap" and caps.python == version
    assert caps.modules["numpy"] is has_numpy and caps.modules["json"] is True
    for name, language in LANGUAGES.items():
        assert (caps.languages[name] is None) is (not missing_tools(language)), (name, caps.languages[name])


@pytest.mark.docker
def test_the_docker_image_offers_every_language_and_numpy():
    caps = probe_capabilities(_real_backend("docker"), ["numpy", "sortedcontainers"])
    assert caps.backend == "docker" and caps.python.startswith("3.11.")  # Debian bookworm's
    assert caps.languages == dict.fromkeys(LANGUAGES)
    assert caps.modules["numpy"] is True and caps.modules["sortedcontainers"] is False
