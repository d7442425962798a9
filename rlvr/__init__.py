"""rlvr: reinforcement learning from verifiable rewards. ``rlvr.verifiers`` and ``rlvr.sandbox`` live in the
repository's top-level folders ``verifiers/`` and ``sandbox/`` (pyproject's ``package-dir`` maps them there).

Kept import-light: the sandbox and the verifiers import this module first, and must not pull in torch.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_MAPPED = {"rlvr.verifiers": "verifiers", "rlvr.sandbox": "sandbox"}
"""Subpackage -> folder at the repository root (the same mapping as pyproject's ``[tool.setuptools] package-dir``)."""


class _SourceTreeFinder(importlib.abc.MetaPathFinder):
    """Finds ``rlvr.verifiers`` and ``rlvr.sandbox`` in the source tree this ``rlvr/`` folder belongs to.

    Why: run from a checkout (cwd or ``PYTHONPATH`` = the repository root), ``import rlvr`` finds the folder
    ``rlvr/``, whose ``__path__`` holds no ``verifiers``. setuptools' editable finder would then still resolve
    ``rlvr.verifiers``, but to the tree that was ``pip install -e``'d, which may be another checkout (a git
    worktree), and without an editable install nothing resolves it at all. This finder answers for exactly the
    two mapped names, from the folders next to this ``rlvr/``; their submodules follow through their ``__path__``.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        folder = _MAPPED.get(fullname)
        if folder is None:
            return None
        package = self.root / folder
        return importlib.util.spec_from_file_location(fullname, package / "__init__.py",
                                                      submodule_search_locations=[str(package)])


def _install_source_tree_finder() -> None:
    here = Path(__file__).resolve().parent
    root = here.parent
    # Installed from a wheel, rlvr/verifiers/ sits inside this folder and the normal finders see it; a
    # site-packages/verifiers/ next to it is someone else's package (prime-rl's), so never look beside rlvr/ then.
    in_source_tree = (root / "pyproject.toml").is_file() and all(
        (root / folder / "__init__.py").is_file() and not (here / name.rpartition(".")[2]).exists()
        for name, folder in _MAPPED.items())
    if in_source_tree and not any(isinstance(f, _SourceTreeFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceTreeFinder(root))


_install_source_tree_finder()
