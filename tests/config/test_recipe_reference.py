"""docs/recipe-reference.md is what the schema renders (rlvr.config.reference), and every key has its help."""

from __future__ import annotations

from pathlib import Path

from rlvr.config.reference import field_rows, render
from rlvr.config.schema import Recipe, RewardModelRecipe

DOC = Path(__file__).resolve().parents[2] / "docs" / "recipe-reference.md"


def test_the_reference_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/recipe-reference.md is stale: run `make docs` (python -m rlvr.config.reference > docs/recipe-reference.md)")


def test_every_key_is_listed_with_its_type_and_default() -> None:
    rows = {key: (kind, default) for key, kind, default, _ in field_rows(Recipe)}
    assert rows["rollout.group_size"] == ("int", "`8`")
    assert rows["data"][1] == "required"
    assert rows["algorithm.kl.beta"][0] == "float"
    assert "verifiers[].name" in rows and "data.source (type: jsonl).path" in rows
    assert "kind" in {key for key, *_ in field_rows(RewardModelRecipe)}


def test_every_key_has_its_help() -> None:
    missing = [key for model in (Recipe, RewardModelRecipe) for key, _, _, help_text in field_rows(model)
               if not help_text]
    assert missing == [], f"give these fields a docstring in rlvr/config/schema.py: {missing}"
