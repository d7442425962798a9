"""A recipe's relative data files are looked up in the recipe's folder, then in the working directory; a file found
in neither names both folders."""

import json

import yaml

from rlvr.cli import main
from rlvr.config import load_recipe, load_reward_model_recipe
from rlvr.data.sources import DataError, load_rows


def _recipe(folder, data_path):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mult.yaml"
    path.write_text(yaml.safe_dump({"model": {"name": "embedded:smollm2-135m-instruct"},
                                    "data": {"source": {"type": "jsonl", "path": data_path}},
                                    "verifiers": [{"name": "math"}]}))
    return path


def test_a_data_file_next_to_the_recipe_is_found_from_another_folder(tmp_path, monkeypatch):
    path = _recipe(tmp_path / "mult", "mult.jsonl")
    (tmp_path / "mult" / "mult.jsonl").write_text(json.dumps({"question": "2*3?", "answer": "6"}) + "\n")
    monkeypatch.chdir(tmp_path)  # the parent folder, as in `rlvr check mult/mult.yaml`
    recipe = load_recipe("mult/mult.yaml")
    assert recipe.data.source.path == str(tmp_path / "mult" / "mult.jsonl")
    assert load_rows(recipe.data)[0]["answer"] == "6"
    assert load_recipe(path).data.source.path == str(tmp_path / "mult" / "mult.jsonl")


def test_the_working_directory_is_the_fallback_and_a_missing_file_names_both_folders(tmp_path, monkeypatch):
    _recipe(tmp_path / "mult", "data/rows.jsonl")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.jsonl").write_text(json.dumps({"question": "q", "answer": "1"}) + "\n")
    monkeypatch.chdir(tmp_path)
    assert load_recipe("mult/mult.yaml").data.source.path == str(tmp_path / "data" / "rows.jsonl")
    recipe = load_recipe("mult/mult.yaml", ["data.source.path=missing.jsonl"])
    try:
        load_rows(recipe.data)
    except DataError as exc:
        message = str(exc)
    assert message == (f"data.source.path: file not found: missing.jsonl (looked in {tmp_path / 'mult'} and "
                       f"{tmp_path})")


def test_rlvr_check_names_the_folders_it_looked_in(tmp_path, monkeypatch, capsys):
    _recipe(tmp_path / "mult", "mult.jsonl")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "mult/mult.yaml"]) == 1
    out = capsys.readouterr().out
    assert f"file not found: mult.jsonl (looked in {tmp_path / 'mult'} and {tmp_path})" in out, out


def test_reward_model_recipe_paths_resolve_from_its_folder(tmp_path, monkeypatch):
    folder = tmp_path / "rm"
    folder.mkdir()
    (folder / "pairs.jsonl").write_text("")
    (folder / "rm.yaml").write_text(yaml.safe_dump({
        "kind": "reward_model", "data": {"source": {"type": "jsonl", "path": "pairs.jsonl"},
                                         "eval_source": {"type": "jsonl", "path": "held_out.jsonl"}}}))
    monkeypatch.chdir(tmp_path)
    recipe = load_reward_model_recipe("rm/rm.yaml")
    assert recipe.data.source.path == str(folder / "pairs.jsonl")
    assert recipe.data.eval_source.path == "held_out.jsonl"
    assert recipe.data.eval_source._searched == (str(folder), str(tmp_path))
