"""``rlvr filter``: solve rates from a fake engine whose rates are known, the kept file, resume after an interruption
(and a line cut short), errors, the output as a data source and a curriculum prior, and the CLI on the tiny model."""

import json
import re

import pytest
import yaml

from rlvr.config import resolve
from rlvr.curriculum.offline import FilterError, default_kept_path, filter_prompts
from rlvr.data.prompts import split_rows
from rlvr.data.sources import load_rows
from rlvr.rollout.base import Completion
from tests.tiny import build_tiny_model, build_tokenizer, tiny_recipe, write_addition_dataset

K = 8


def known_solved(question: str) -> int:
    """How many of K samples the fake policy solves for ``a+b=?``: (a + b) mod 9, so rates 0, 1/8, ..., 1 all occur."""
    a, b = question.removesuffix("=?").split("+")
    return (int(a) + int(b)) % (K + 1)


class FakeEngine:
    """Finds the question in each prompt and returns ``known_solved`` completions starting with a digit (solved by
    ``tests.tiny:starts_with_digit``), the rest starting with a letter. Can fail after a number of calls."""

    def __init__(self, fail_after_calls: int | None = None) -> None:
        self.tok = build_tokenizer()
        self.fail_after_calls = fail_after_calls
        self.prompts_seen: list[str] = []

    def generate(self, prompt_token_ids, n, sampling):
        if self.fail_after_calls is not None and len(self.prompts_seen) // 4 >= self.fail_after_calls:
            raise KeyboardInterrupt("simulated interruption")
        eos = self.tok.eos_token_id
        groups = []
        for ids in prompt_token_ids:
            question = re.search(r"\d\+\d=\?", self.tok.decode(ids)).group()
            self.prompts_seen.append(question)
            m = known_solved(question)
            digit, letter = self.tok.convert_tokens_to_ids(["7", "x"])
            groups.append([Completion(token_ids=[digit if j < m else letter, eos], logprobs=[0.0, 0.0],
                                      finish_reason="stop") for j in range(n)])
        return groups


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def _recipe(tiny):
    return resolve(tiny_recipe(*tiny))


def _train_questions(recipe) -> list[str]:
    train, _, _ = split_rows(load_rows(recipe.data), recipe.data, recipe.seed)
    return [r["question"] for r in train]


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_filter_writes_known_solve_rates_and_the_kept_prompts(tiny, tmp_path):
    recipe = _recipe(tiny)
    out = tmp_path / "filtered.jsonl"
    result = filter_prompts(recipe, out, k=K, min_rate=0.1, max_rate=0.9, engine=FakeEngine(), chunk_size=4,
                            progress=False)
    rows = _rows(out)
    assert [r["question"] for r in rows] == _train_questions(recipe)  # every training row, in order
    for r in rows:
        assert r["solve_rate"] == known_solved(r["question"]) / K and r["n_samples"] == K
        assert set(r) == {"question", "answer", "solve_rate", "n_samples"}  # the original row plus two columns
    kept = _rows(default_kept_path(out))
    assert kept == [r for r in rows if 0.1 <= r["solve_rate"] <= 0.9]
    assert 0 < len(kept) < len(rows) and result.kept == len(kept) and result.total == len(rows)
    assert result.resumed == 0 and result.tokens_generated == 2 * K * len(rows)
    report = result.report()
    assert f"kept {len(kept)} of {len(rows)} prompts" in report
    never = sum(r["solve_rate"] == 0 for r in rows)
    assert f"{'0':>12}  {never:>7}" in report  # the histogram's first bin: prompts never solved


def test_filter_resumes_without_redoing_finished_prompts(tiny, tmp_path):
    recipe = _recipe(tiny)
    straight = tmp_path / "straight.jsonl"
    filter_prompts(recipe, straight, k=K, engine=FakeEngine(), chunk_size=4, progress=False)
    out = tmp_path / "out.jsonl"
    with pytest.raises(KeyboardInterrupt):
        filter_prompts(recipe, out, k=K, engine=FakeEngine(fail_after_calls=2), chunk_size=4, progress=False)
    assert len(_rows(out)) == 8  # two chunks of 4 flushed before the interruption
    with out.open("a") as fh:
        fh.write('{"question": "9+9=?", "answ')  # a line cut short by kill -9
    engine = FakeEngine()
    result = filter_prompts(recipe, out, k=K, engine=engine, chunk_size=4, progress=False)
    questions = _train_questions(recipe)
    assert engine.prompts_seen == questions[8:]  # only the unfinished prompts were generated again
    assert result.resumed == 8 and result.total == len(questions)
    assert out.read_text() == straight.read_text()


def test_filter_errors_name_the_problem(tiny, tmp_path):
    recipe = _recipe(tiny)
    out = tmp_path / "out.jsonl"
    with pytest.raises(FilterError, match=r"need 0 <= --min <= --max <= 1, got --min 0.9 --max 0.1"):
        filter_prompts(recipe, out, min_rate=0.9, max_rate=0.1, engine=FakeEngine(), progress=False)
    filter_prompts(recipe, out, k=K, engine=FakeEngine(), progress=False)
    with pytest.raises(FilterError, match=r"measured with k=8, this run has --k 4"):
        filter_prompts(recipe, out, k=4, engine=FakeEngine(), progress=False)
    stranger = tmp_path / "stranger.jsonl"
    stranger.write_text(json.dumps({"question": "not a prompt", "solve_rate": 0.5, "n_samples": K}) + "\n")
    with pytest.raises(FilterError, match="1 rows whose 'question' is not among this recipe's training prompts"):
        filter_prompts(recipe, stranger, k=K, engine=FakeEngine(), progress=False)


def test_filtered_file_is_a_data_source_and_a_curriculum_prior(tiny, tmp_path):
    from rlvr.curriculum import Curriculum

    out = tmp_path / "filtered.jsonl"
    filter_prompts(_recipe(tiny), out, k=K, engine=FakeEngine(), progress=False)
    raw = tiny_recipe(tiny[0], out, curriculum={"sampler": "pools", "solve_rate": {"prior_field": "solve_rate"}})
    recipe = resolve(raw)
    rows = load_rows(recipe.data)
    assert len(rows) == len(_rows(out))
    c = Curriculum(recipe.curriculum, rows, seed=0, max_new_tokens=8)
    expected = [0 if r["solve_rate"] >= 0.9 else 2 if r["solve_rate"] <= 0.1 else 1 for r in rows]
    assert c.pools().tolist() == expected


def test_cli_filter_on_the_tiny_model(tiny, tmp_path, capsys):
    from rlvr.cli import main

    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe(*tiny)))
    out = tmp_path / "f.jsonl"
    assert main(["filter", str(recipe), "--k", "2", "--min", "0", "--max", "0.5", "--out", str(out),
                 "--model", str(tiny[0])]) == 0
    printed = capsys.readouterr().out
    rows = _rows(out)
    assert rows and all(r["n_samples"] == 2 and r["solve_rate"] in (0.0, 0.5, 1.0) for r in rows)
    kept = _rows(tmp_path / "f.kept.jsonl")
    assert len(kept) == sum(r["solve_rate"] <= 0.5 for r in rows)
    assert f"kept {len(kept)} of {len(rows)} prompts" in printed and "solve rate %" in printed
    assert main(["filter", str(recipe), "--k", "2", "--out", str(out), "--min", "2"]) == 2  # a clear error, exit 2
