"""The folders verifiers/ and sandbox/ are the packages rlvr.verifiers and rlvr.sandbox, in an editable install and in
a wheel; no top-level `verifiers` or `sandbox` (prime-rl's environments library is called `verifiers` on the package
index) comes from this project."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"rlvr.verifiers": "verifiers", "rlvr.sandbox": "sandbox"}


def _python(code: str, cwd: Path, pythonpath: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RLVR_SANDBOX_IMAGE")}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _inside(path: str | None, root: Path) -> bool:
    return path is not None and Path(path).resolve().is_relative_to(root)


def test_pyproject_lists_every_package_under_rlvr() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"] == {"rlvr": "rlvr", **MAPPED}
    # every folder with an __init__.py, named as it installs: a missing one would be left out of the wheel
    expected = set()
    for top, folder in {"rlvr": "rlvr", **MAPPED}.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            expected.add(".".join((top, *rel)))
    assert sorted(tool["packages"]) == sorted(expected)
    assert {p.split(".")[0] for p in tool["packages"]} == {"rlvr"}
    assert tool["package-data"] == {"rlvr.sandbox": ["image.env", "setup.sh"],
                                    "rlvr.kernels": ["decode_kernels.cpp", "fp32_decode_kernels.cpp", "cpu_logprobs.cpp",
                                                     "cpu_fused_layers.cpp", "avx512.h", "avx2.h", "decode_common.h"]}
    # every kernel source compiled on first use ships with its package
    sources = {(".".join(path.parent.relative_to(ROOT).parts), path.name)
               for path in (ROOT / "rlvr").rglob("*") if path.suffix in (".cpp", ".h")}
    assert sources == {(package, name) for package, names in tool["package-data"].items() for name in names
                       if name.endswith((".cpp", ".h"))}


@pytest.mark.parametrize("name", ["verifiers", "sandbox"])
def test_a_top_level_name_is_not_provided_by_this_project(name: str, tmp_path: Path) -> None:
    # from a neutral cwd with no PYTHONPATH: only what is installed in this interpreter counts
    out = _python(f"import importlib.util; s = importlib.util.find_spec({name!r}); print(s and s.origin)", tmp_path,
                  None)
    assert out.returncode == 0, out.stderr
    origin = out.stdout.strip()
    assert origin == "None" or not _inside(origin, ROOT), f"`import {name}` resolves to this project's {origin}"


def test_the_mapped_packages_import_from_the_installed_rlvr(tmp_path: Path) -> None:
    out = _python("import rlvr; print(rlvr.__file__)", tmp_path, None)
    if out.returncode != 0 or not _inside(out.stdout.strip(), ROOT):
        pytest.skip(f"this checkout is not the rlvr installed in {sys.executable} ({out.stdout.strip() or 'none'})")
    out = _python("import rlvr.verifiers, rlvr.sandbox; print(rlvr.verifiers.__file__, rlvr.sandbox.__file__)",
                  tmp_path, None)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(ROOT / "verifiers" / "__init__.py"), str(ROOT / "sandbox" / "__init__.py")]


@pytest.mark.skipif(importlib.util.find_spec("setuptools") is None, reason="building a wheel needs setuptools")
def test_the_wheel_holds_rlvr_only_with_the_sandbox_data_files(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy, so the build leaves no build/ or egg-info in the checkout
    for folder in ("rlvr", "verifiers", "sandbox"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for file in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / file, src / file)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "-w", str(tmp_path / "whl"), "--no-deps",
                            "--no-build-isolation", "-q"], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "whl").glob("rlvr-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"rlvr", wheel.name.split("-py")[0] + ".dist-info"}
    for needed in ("rlvr/verifiers/registry.py", "rlvr/sandbox/image.env", "rlvr/sandbox/setup.sh",
                   "rlvr/kernels/decode_kernels.cpp", "rlvr/kernels/fp32_decode_kernels.cpp", "rlvr/kernels/avx512.h",
                   "rlvr/kernels/avx2.h", "rlvr/kernels/decode_common.h", "rlvr/kernels/cpu_logprobs.cpp",
                   "rlvr/kernels/cpu_fused_layers.cpp",
                   "rlvr/sandbox/harness/driver.py",
                   "rlvr/sandbox/backends/docker_backend.py"):
        assert needed in names
    # installed from it, the sandbox finds its data beside its code
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import rlvr.sandbox, rlvr.verifiers; from rlvr.sandbox.backends.docker_backend import image_name; "
            "from rlvr.sandbox.harness import driver_source; print(rlvr.sandbox.__file__, image_name(), "
            "len(driver_source()) > 0, rlvr.verifiers.get_verifier('countdown').__module__)")
    out = _python(code, tmp_path, str(site))
    assert out.returncode == 0, out.stderr
    image = next(line.split("=", 1)[1] for line in (ROOT / "sandbox" / "image.env").read_text().splitlines()
                 if line.startswith("RLVR_SANDBOX_IMAGE="))
    assert out.stdout.split() == [str(site / "rlvr" / "sandbox" / "__init__.py"), image, "True",
                                  "rlvr.verifiers.countdown"]
