"""The dependency rules of the layout, checked in a fresh interpreter each: the recipe schema imports no torch, the
verifiers and the sandbox neither torch nor the trainer, the RL math nothing of rlvr but itself, and the decode loop
and the hf engine load no CPU kernel code until an engine asks for it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _loaded_after(imports: str) -> set[str]:
    code = f"import sys; {imports}; import json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_config_imports_no_torch() -> None:
    loaded = _loaded_after("import rlvr.config, rlvr.config.loading, rlvr.config.resume, rlvr.config.presets")
    assert "torch" not in loaded


def test_verifiers_and_sandbox_import_neither_torch_nor_the_trainer() -> None:
    loaded = _loaded_after("import rlvr.verifiers, rlvr.sandbox")
    assert "torch" not in loaded
    assert not {m for m in loaded if m.startswith(("rlvr.trainer", "rlvr.rollout"))}


@pytest.mark.parametrize("module", ["advantages", "gae", "kl", "losses", "reward_shaping", "value_loss"])
def test_the_rl_math_imports_only_torch(module: str) -> None:
    loaded = _loaded_after(f"import rlvr.algo.{module}")
    assert {m for m in loaded if m.startswith("rlvr.")} <= {f"rlvr.algo.{module}", "rlvr.algo"}
    assert not {m for m in loaded if m.split(".")[0] in ("transformers", "deepspeed", "pydantic")}


def test_the_decode_loop_and_the_hf_engine_load_no_kernel_code() -> None:
    loaded = _loaded_after("import rlvr.rollout.decode, rlvr.rollout.hf")
    decode_kernels = {"rlvr.kernels.build", "rlvr.kernels.cpu_decode", "rlvr.kernels.fused_decode",
                      "rlvr.kernels.fp32_decode", "rlvr.kernels.packed_linear"}
    assert not loaded & decode_kernels


def _package_imports() -> dict[str, set[str]]:
    """Which of rlvr's packages (``rlvr/<name>/``, top-level modules by name, the mapped ``verifiers`` and
    ``sandbox``) import which, from every import statement of the source (in functions and ``TYPE_CHECKING`` too)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    units = {p.name for p in (root / "rlvr").iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    units |= {p.stem for p in (root / "rlvr").glob("*.py") if p.name != "__init__.py"}

    def unit(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if parts[0] == "rlvr" and len(parts) > 1 and parts[1] in units else None

    edges: dict[str, set[str]] = {}
    for folder in ("rlvr", "verifiers", "sandbox"):
        for path in (root / folder).rglob("*.py"):
            rel = path.relative_to(root)
            if rel.parts[1:2] in (("verifiers",), ("sandbox",)):  # the links to the mapped folders
                continue
            src = folder if folder != "rlvr" else (rel.parts[1] if len(rel.parts) > 2 else rel.stem)
            pkg = ["rlvr", *rel.with_suffix("").parts[1:]] if folder == "rlvr" else ["rlvr", *rel.with_suffix("").parts]
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level:  # relative: from the file's own package
                    base = pkg[:-1] if path.name != "__init__.py" else pkg
                    names = [".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                else:
                    continue
                for target in filter(None, map(unit, names)):
                    if target != src:
                        edges.setdefault(src, set()).add(target)
    return edges


def test_no_package_imports_one_above_it() -> None:
    """The packages form layers: no two import each other, directly or through others (an import cycle would name
    the packages that import one above them). Only the CLI imports the trainer."""
    edges = _package_imports()
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError(f"packages import each other: {' -> '.join(path[path.index(node):] + [node])}")
        if node in done:
            return
        for nxt in sorted(edges.get(node, ())):
            visit(nxt, path + [node])
        done.add(node)

    for node in sorted(edges):
        visit(node, [])
    assert {src for src, targets in edges.items() if "trainer" in targets} == {"cli"}
