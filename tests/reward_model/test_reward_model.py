"""The reward model: Bradley-Terry loss and accuracy by hand, all pairs from one forward pass == the pairwise loop, the
last-real-token index under left padding, right padding and pad == eos, data errors, eval metrics, ensembles, save and
load, and ``rlvr rm train`` / ``rlvr rm eval`` end to end on a tiny model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from rlvr.data.sources import DataError
from rlvr.reward_model.data import load_preference_groups, parse_rows, split_groups, tokenize_groups
from rlvr.reward_model.ensemble import RewardModelEnsemble, aggregate_scores
from rlvr.reward_model.loss import bradley_terry_loss, ranked_pairs
from rlvr.reward_model.metrics import expected_calibration_error, pairwise_accuracy, pearson
from rlvr.reward_model.model import RewardModel, last_token_index, pad_sequences
from tests.tiny import build_tiny_model, build_tokenizer


def softplus(x: float) -> float:  # -log sigmoid(-x)
    return math.log1p(math.exp(x))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    return build_tiny_model(tmp_path_factory.mktemp("rm") / "model")


@pytest.fixture(scope="module")
def rm(tiny_dir) -> RewardModel:
    return RewardModel.from_backbone(str(tiny_dir), seed=0)


def ids(text: str, eos: bool = True) -> list[int]:
    tok = build_tokenizer()
    return list(tok(text, add_special_tokens=False)["input_ids"]) + ([tok.eos_token_id] if eos else [])


# ----------------------------------------------------------------------------------------------------------- loss
def test_bradley_terry_loss_and_accuracy_by_hand():
    scores = torch.tensor([2.0, 0.0, 1.0, 1.5])
    chosen, rejected = torch.tensor([0, 2]), torch.tensor([1, 3])  # diffs 2 and -0.5
    out = bradley_terry_loss(scores, chosen, rejected)
    assert float(out.loss) == pytest.approx((softplus(-2.0) + softplus(0.5)) / 2)  # 0.55050
    assert float(out.accuracy) == 0.5
    with_margin = bradley_terry_loss(scores, chosen, rejected, margin=1.0)  # d - m = 1 and -1.5
    assert float(with_margin.loss) == pytest.approx((softplus(-1.0) + softplus(1.5)) / 2)
    smoothed = bradley_terry_loss(scores, chosen[:1], rejected[:1], label_smoothing=0.1)
    assert float(smoothed.loss) == pytest.approx(0.9 * softplus(-2.0) + 0.1 * softplus(2.0))
    global_denominator = bradley_terry_loss(scores, chosen, rejected, num_pairs=4)
    assert float(global_denominator.loss) == pytest.approx(float(out.loss) / 2)
    tie = bradley_terry_loss(torch.tensor([1.0, 1.0]), torch.tensor([0]), torch.tensor([1]))
    assert float(tie.accuracy) == 0.5 and float(tie.loss) == pytest.approx(math.log(2))


def test_bradley_terry_rejects_bad_pairs():
    with pytest.raises(ValueError, match="no pairs"):
        bradley_terry_loss(torch.zeros(2), torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        bradley_terry_loss(torch.zeros(2), torch.tensor([0]), torch.tensor([2]))


def test_ranked_pairs():
    assert ranked_pairs(3) == [(0, 1), (0, 2), (1, 2)]
    assert len(ranked_pairs(5)) == 10
    with pytest.raises(ValueError):
        ranked_pairs(1)


def test_all_pairs_from_one_forward_equal_the_pairwise_loop(rm):
    prompt = ids("3+4=?\n", eos=False)
    ranked = [prompt + ids(r) for r in ("7", "seven", "8", "abc 12")]  # best first
    # one forward per response, K(K-1)/2 = 6 pairs gathered from the 4 scores
    rm.zero_grad()
    ids_, mask = pad_sequences(ranked, pad_id=0)
    pairs = ranked_pairs(4)
    out = bradley_terry_loss(rm(ids_, mask), torch.tensor([c for c, _ in pairs]), torch.tensor([r for _, r in pairs]))
    out.loss.backward()
    grads = [p.grad.clone() for p in rm.parameters()]
    # the loop: each pair as its own 2-sequence forward
    rm.zero_grad()
    total = 0.0
    for c, r in pairs:
        i, m = pad_sequences([ranked[c], ranked[r]], pad_id=0)
        loss = bradley_terry_loss(rm(i, m), torch.tensor([0]), torch.tensor([1]), num_pairs=len(pairs)).loss
        loss.backward()
        total += float(loss.detach())
    assert float(out.loss.detach()) == pytest.approx(total, rel=1e-5)
    for a, b in zip(grads, (p.grad for p in rm.parameters()), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------------- last real token
def test_last_token_index_left_right_and_pad_equals_eos():
    left = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    assert last_token_index(left).tolist() == [3, 3]
    assert last_token_index(right).tolist() == [1, 2]
    # pad == eos: ids cannot tell the final eos from padding, the mask can
    eos = 1
    input_ids = torch.tensor([[5, 6, eos, eos, eos]])
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    assert last_token_index(mask).tolist() == [2]  # the first eos (the real one), not a pad, not the prompt
    assert ((input_ids != eos).sum(-1) - 1).tolist() == [1]  # counting non-pad ids (the bug) lands on the prompt
    with pytest.raises(ValueError, match="no real token"):
        last_token_index(torch.tensor([[0, 0]]))


def test_score_is_the_same_under_left_and_right_padding_and_pad_equals_eos(rm):
    tok = build_tokenizer()
    long, short = ids("12+30=?\n42"), ids("1+1=?\n2")
    alone = torch.stack([rm(torch.tensor([s]), torch.ones(1, len(s), dtype=torch.long)) for s in (long, short)])
    for side in ("left", "right"):
        for pad_id in (tok.pad_token_id, tok.eos_token_id):  # the second: pad == eos
            i, m = pad_sequences([long, short], pad_id, side)
            torch.testing.assert_close(rm(i, m), alone.squeeze(-1), rtol=1e-4, atol=1e-5)
    # the score is the head applied to the hidden state at the eos of `short`, read directly
    hidden = rm.backbone(input_ids=torch.tensor([short])).last_hidden_state[0, -1]
    assert float(rm.head(hidden).detach()) == pytest.approx(float(alone[1]), rel=1e-4, abs=1e-5)


def test_hf_forward_reads_the_wrong_token_when_pad_equals_eos(rm):
    """Why the index comes from the mask: HF's own sequence-classification forward, told pad == eos, takes the final
    eos for padding and reads the token before it; ours reads the eos."""
    tok = build_tokenizer()
    seq = ids("1+1=?\n2")
    i, m = pad_sequences([seq], tok.eos_token_id, "right")
    rm.hf.config.pad_token_id = tok.eos_token_id
    try:
        hf_score = float(rm.hf(input_ids=i, attention_mask=m).logits.squeeze())
    finally:
        rm.hf.config.pad_token_id = tok.pad_token_id
    before_eos = float(rm(i[:, :-1], m[:, :-1]))
    assert hf_score == pytest.approx(before_eos, rel=1e-4, abs=1e-5)
    assert float(rm(i, m)) != pytest.approx(hf_score, rel=1e-3, abs=1e-4)


def test_head_init_scale(tiny_dir):
    model = RewardModel.from_backbone(str(tiny_dir), seed=3)
    d = model.head.in_features
    w = model.head.weight
    assert w.shape == (1, d)
    assert float(w.std()) == pytest.approx(1 / math.sqrt(d + 1), rel=0.35)  # 32 draws: loose bound on the std


def test_save_and_load_round_trip(rm, tmp_path):
    tok = build_tokenizer()
    seqs = [ids("2+2=?\n4"), ids("9")]
    i, m = pad_sequences(seqs, tok.pad_token_id)
    rm.save(tmp_path / "model", tok, {"append_eos": True})
    assert (tmp_path / "model" / "model.safetensors").is_file()
    loaded = RewardModel.load(tmp_path)  # a run directory resolves to its model/
    torch.testing.assert_close(loaded(i, m), rm(i, m))
    from transformers import AutoModelForSequenceClassification
    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path / "model")  # plain HF loads the head too
    torch.testing.assert_close(plain.score.weight, rm.head.weight)
    with pytest.raises(FileNotFoundError, match="no reward model"):
        RewardModel.load(tmp_path / "nowhere")


# ----------------------------------------------------------------------------------------------------------- data
def test_rows_group_by_prompt_and_rankings_give_all_pairs():
    groups = parse_rows([
        {"prompt": "p", "chosen": "a", "rejected": "b"},
        {"prompt": "p", "chosen": "a", "rejected": "c"},
        {"prompt": "q", "responses": ["x", "y", "z"]},
    ], "rows")
    assert [g.prompt for g in groups] == ["p", "q"]
    assert groups[0].responses == ["a", "b", "c"] and groups[0].pairs == [(0, 1), (0, 2)]
    assert groups[1].pairs == [(0, 1), (0, 2), (1, 2)]


@pytest.mark.parametrize("rows, message", [
    ([], "holds no rows"),
    ([{"prompt": "p", "chosen": "a"}], "expected the fields 'prompt' \\+ 'chosen' \\+ 'rejected'"),
    ([{"chosen": "a", "rejected": "b"}], "its fields are \\['chosen', 'rejected'\\]"),
    ([{"prompt": "p", "chosen": "same", "rejected": "same"}], "identical"),
    ([{"prompt": "p", "responses": ["only one"]}], "at least 2"),
    ([{"prompt": "p", "responses": ["a", "a"]}], "same response twice"),
    ([{"prompt": "p", "chosen": "", "rejected": "b"}], "non-empty string"),
])
def test_bad_rows_are_clear_errors(rows, message):
    with pytest.raises(DataError, match=message):
        parse_rows(rows, "pairs.jsonl")


def test_empty_file_and_missing_file(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="empty.jsonl holds no rows"):
        load_preference_groups(empty)
    with pytest.raises(DataError, match="not found"):
        load_preference_groups(tmp_path / "missing.jsonl")


def test_split_by_prompt_and_tokenize():
    groups = parse_rows([{"prompt": f"{i}+1=?", "chosen": str(i + 1), "rejected": "0"} for i in range(10)], "rows")
    train, held = split_groups(groups, 0.2, seed=0)
    assert len(held) == 2 and len(train) == 8
    assert not {g.prompt for g in held} & {g.prompt for g in train}
    tok = build_tokenizer()
    (t,) = tokenize_groups(groups[:1], tok, max_length=5, append_eos=True)
    assert t.response_ids == [ids("1"), ids("0")]
    assert t.prompt_ids == ids("0+1=?", eos=False)[-3:]  # the prompt lost its first tokens to fit 5
    with pytest.raises(DataError, match="max_length"):
        tokenize_groups(groups[:1], tok, max_length=2)


# -------------------------------------------------------------------------------------------------------- metrics
def test_eval_metrics_by_hand():
    diff = torch.tensor([2.0, 0.5, -1.0, 0.0])
    assert pairwise_accuracy(diff) == pytest.approx(0.625)
    # two bins over confidence [0.5, 1]: sigmoid(2)=0.8808 (right), sigmoid(0.5)=0.6225 (right),
    # sigmoid(-1) -> confidence 0.7311 (wrong), tie 0.5 (half right)
    p = [1 / (1 + math.exp(-x)) for x in (2.0, 0.5, 1.0)]
    high = abs(1.0 - p[0])                                   # bin (0.75, 1]: one pair
    low = abs((1 + 0 + 0.5) / 3 - (p[1] + p[2] + 0.5) / 3)    # bin [0.5, 0.75]: three pairs
    assert expected_calibration_error(diff, bins=2) == pytest.approx(0.25 * high + 0.75 * low)
    assert pearson(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 7.0])) == pytest.approx(0.9933, abs=1e-4)
    assert pearson(torch.tensor([1.0, 1.0]), torch.tensor([2.0, 3.0])) is None


def test_ensemble_aggregates():
    scores = torch.tensor([[1.0, 0.0, 3.0], [3.0, 0.0, -1.0]])  # 2 members x 3 samples
    assert aggregate_scores(scores, "mean").tolist() == [2.0, 0.0, 1.0]
    assert aggregate_scores(scores, "min").tolist() == [1.0, 0.0, -1.0]
    # population std: half the gap between two members: 1, 0, 2
    assert aggregate_scores(scores, "mean_minus_std", k=0.5).tolist() == [1.5, 0.0, 0.0]
    with pytest.raises(ValueError, match="unknown ensemble aggregate"):
        aggregate_scores(scores, "max")
    with pytest.raises(ValueError, match="E members"):
        aggregate_scores(torch.zeros(3), "mean")


def test_ensemble_scores_token_sequences(rm, tiny_dir):
    other = RewardModel.from_backbone(str(tiny_dir), seed=1)
    seqs = [ids("1+1=?\n2"), ids("3")]
    agg, each = RewardModelEnsemble([rm, other], "min").score(seqs, pad_id=0)
    assert each.shape == (2, 2)
    torch.testing.assert_close(agg, each.min(dim=0).values)
    torch.testing.assert_close(each[0], rm.score(seqs, pad_id=0))


# ------------------------------------------------------------------------------------------------------- the CLI
def _pairs_file(path: Path, sums: list[tuple[int, int]], seed: int) -> Path:
    """Prompts 'a+b=?\\n' (distinct); responses ranked: the digit sum, then letters: learnable by a tiny RM."""
    import random
    rng = random.Random(seed)
    with path.open("w") as fh:
        for a, b in sums:
            fh.write(json.dumps({"prompt": f"{a}+{b}=?\n", "responses": [str(a + b), "x" * rng.randrange(1, 4),
                                                                          "zz q"]}) + "\n")
    return path


def test_rm_train_and_eval_cli(tiny_dir, tmp_path, capsys):
    from rlvr.cli import main

    sums = [(a, b) for a in range(10) for b in range(10)]
    train_file = _pairs_file(tmp_path / "train.jsonl", sums[:40], seed=0)
    eval_file = _pairs_file(tmp_path / "eval.jsonl", sums[40:52], seed=1)
    recipe = tmp_path / "rm.yaml"
    recipe.write_text(json.dumps({
        "kind": "reward_model", "model": {"name": str(tiny_dir)},
        "data": {"source": {"type": "jsonl", "path": str(train_file)}, "eval_fraction": 0.25, "max_length": 32},
        "train": {"epochs": 3, "prompts_per_step": 4, "lr": 3e-3, "eval_every": 5, "bf16": False,
                  "num_threads": 1}}))
    run = tmp_path / "run"
    assert main(["rm", "train", str(recipe), "-o", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    ev = summary["eval"]
    assert set(ev) >= {"pairwise_accuracy", "ece", "length_correlation", "n_pairs"}
    assert ev["pairwise_accuracy"] >= 0.9  # digits vs letters: easy
    assert summary["train_prompts"] == 30 and summary["steps"] == 3 * 8 and (run / "plots" / "reward_vs_length.png").is_file()
    best = summary["best_step"]
    history = {h.pop("step"): h for h in summary["eval_history"]}
    assert len(history) == 5 and history[best] == ev  # evals at steps 5, 10, 15, 20 and 24; the best is kept
    assert ev["pairwise_accuracy"] == max(h["pairwise_accuracy"] for h in history.values())
    assert summary["eval_before"]["n_pairs"] == ev["n_pairs"]  # the untrained baseline on the same pairs
    assert json.loads((run / "model" / "rlvr_reward_model.json").read_text())["step"] == best
    capsys.readouterr()
    assert main(["rm", "eval", str(run), "--file", str(eval_file)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["n_pairs"] == 36 and printed["pairwise_accuracy"] >= 0.9 and 0 <= printed["ece"] <= 1
    # the run's own held-out pairs, re-scored by the saved model, give the kept model's eval (fp32 both times)
    assert main(["rm", "eval", str(run / "model"), "--file", str(run / "eval_pairs.jsonl")]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["n_pairs"] == ev["n_pairs"] == 30
    assert again["pairwise_accuracy"] == pytest.approx(ev["pairwise_accuracy"])
    assert again["ece"] == pytest.approx(ev["ece"], abs=1e-5)
    assert main(["config", "check", str(recipe)]) == 0
    # a second run into the same folder is refused (as `rlvr train` refuses), the first model left as it was
    saved = (run / "model" / "rlvr_reward_model.json").read_text()
    capsys.readouterr()
    assert main(["rm", "train", str(recipe), "-o", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"error: {run} is not empty" in err and "--overwrite" in err and "--resume" not in err
    assert (run / "model" / "rlvr_reward_model.json").read_text() == saved


def test_rm_recipe_errors_name_the_key(tmp_path, capsys):
    from rlvr.cli import main

    recipe = tmp_path / "rm.yaml"
    recipe.write_text(json.dumps({"kind": "reward_model", "data": {"source": {"path": "x.jsonl"}},
                                  "train": {"label_smothing": 0.1}}))
    assert main(["rm", "train", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'train.label_smothing'" in err and "label_smoothing" in err


# --------------------------------------------------------------------------------------------------------- pairs
def test_pairs_from_group_pairs_correct_with_incorrect_distinct_texts():
    import random

    from rlvr.reward_model.pairs import pairs_from_group

    texts = ["a", "b", "a", "c", "d", "e"]
    correct = [True, False, True, False, None, False]
    pairs = pairs_from_group(texts, correct, max_pairs=10, rng=random.Random(0))
    assert sorted(pairs) == [("a", "b"), ("a", "c"), ("a", "e")]  # "a" twice counts once; "d" was not judged
    assert len(pairs_from_group(texts, correct, max_pairs=2, rng=random.Random(0))) == 2
    assert pairs_from_group(["a", "b"], [True, True], 4, random.Random(0)) == []  # all solved: no pair


def test_rm_pairs_cli_on_the_tiny_model(tiny_dir, tmp_path, capsys):
    import yaml

    from rlvr.cli import main
    from tests.tiny import tiny_recipe, write_addition_dataset

    data = write_addition_dataset(tmp_path / "data.jsonl")
    recipe = tmp_path / "policy.yaml"
    recipe.write_text(yaml.safe_dump(tiny_recipe(tiny_dir, data, rollout={"temperature": 1.5})))
    out = tmp_path / "pairs.jsonl"
    assert main(["rm", "pairs", str(recipe), "--out", str(out), "--prompts", "8", "--max-pairs", "2"]) == 0
    printed = capsys.readouterr().out
    stats = json.loads(printed[printed.index("{"):])  # after the progress lines
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows, "the tiny model's random completions should give some mixed groups"
    assert stats["prompts"] == 8 and stats["samples"] == 32 and stats["pairs"] == len(rows)
    from tests.tiny import starts_with_digit
    for row in rows:
        assert starts_with_digit(row["chosen"], {}) == 1.0 == row["chosen_score"]
        assert starts_with_digit(row["rejected"], {}) == 0.0 == row["rejected_score"]
        assert row["question"] in row["prompt"]
    assert max(sum(r["prompt"] == p for r in rows) for p in {r["prompt"] for r in rows}) <= 2
    load_preference_groups(out)  # a valid preference file


# -------------------------------------------------------------------------------------------------------- config
def test_reward_model_recipe_section():
    from rlvr.config import RecipeError, resolve

    base = {"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}]}
    assert resolve(base).reward_model is None
    one = resolve({**base, "reward_model": {"path": "runs/rm_demo"}}).reward_model
    assert one.path == "runs/rm_demo" and one.aggregate == "mean"
    ens = resolve({**base, "reward_model": {"paths": ["a", "b"], "aggregate": "mean_minus_std", "k": 0.5}})
    assert ens.reward_model.paths == ["a", "b"] and ens.reward_model.k == 0.5
    with pytest.raises(RecipeError, match="exactly one of reward_model.path"):
        resolve({**base, "reward_model": {"path": "a", "paths": ["b", "c"]}})
    with pytest.raises(RecipeError, match="reward_model.aggregate"):
        resolve({**base, "reward_model": {"paths": ["a", "b"], "aggregate": "max"}})
