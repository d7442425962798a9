"""The README's architecture table and recipes stay true: every module path it names exists, every recipe validates."""

import re
from pathlib import Path

import pytest

from rlvr.config import load_any_recipe

REPO = Path(__file__).resolve().parents[1]


def test_every_path_in_the_readme_exists():
    text = (REPO / "README.md").read_text()
    paths = set(re.findall(r"`((?:rlvr|verifiers|sandbox|tests|benchmarks|recipes|docs|scripts)/[\w./*-]+)`", text))
    assert len(paths) > 15
    missing = [p for p in sorted(paths) if not any(REPO.glob(p.rstrip("/")))]
    assert not missing, missing


@pytest.mark.parametrize("recipe", sorted(p.name for p in (REPO / "recipes").glob("*.yaml")))
def test_every_shipped_recipe_validates(recipe):
    load_any_recipe(REPO / "recipes" / recipe)


def first_recipe_files(folder: Path) -> Path:
    """Write the README's "Your first recipe" files into ``folder``, taken from the README itself (its first three
    fenced blocks: make_data.py, my_verifier.py, smaller.yaml), and run make_data.py as the README says. Returns the
    recipe's path."""
    import subprocess
    import sys

    text = (REPO / "README.md").read_text()
    section = text[text.index("## Your first recipe"):]
    section = section[:section.index("\n## ", 5)]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, re.S)
    assert [lang for lang, _ in blocks[:3]] == ["python", "python", "yaml"]
    for name, (_, body) in zip(("make_data.py", "my_verifier.py", "smaller.yaml"), blocks):
        (folder / name).write_text(body)
    subprocess.run([sys.executable, "make_data.py"], cwd=folder, check=True, timeout=60)
    return folder / "smaller.yaml"


def test_the_first_recipe_passes_its_check_when_followed_verbatim(tmp_path, monkeypatch):
    from rlvr.cli import main

    recipe = first_recipe_files(tmp_path)
    assert len((tmp_path / "smaller.jsonl").read_text().splitlines()) == 200
    monkeypatch.chdir(tmp_path)
    assert main(["check", str(recipe.name)]) == 0


@pytest.mark.slow
def test_the_first_recipe_trains_when_followed_verbatim(tmp_path, monkeypatch):
    from rlvr.cli import main

    recipe = first_recipe_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["train", recipe.name, "-o", "runs/smaller"]) == 0
    assert (tmp_path / "runs/smaller/checkpoints/step-3/model/config.json").is_file()
