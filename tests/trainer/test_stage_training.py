"""SFT and DPO in the trainer's loop on a tiny chat model: learning, packed rows without cross-contamination, pairs
kept whole in micro-batches, the stored reference log-probs, exact resume after kill -9, and an RL run started from an
SFT run by naming its folder (full fine-tuning and LoRA)."""

import json
from pathlib import Path

import pytest
import torch
import yaml

from rlvr.config import load_stage_recipe, resolve
from rlvr.runs.metrics import read_metrics
from rlvr.trainer.micro_batches import plan_micro_batches
from tests import limits
from tests.kill_resume import assert_resume_equals_straight, kill_once_logged
from tests.tiny import build_tiny_chat_model
from tests.trainer.test_trainer import _cli, _comparable


def _addition_rows(n: int = 80) -> list[tuple[int, int]]:
    return [(i % 10, (i // 10) % 10) for i in range(n)]


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    d = tmp_path_factory.mktemp("chat")
    model = build_tiny_chat_model(d / "model", hidden=64)
    sft = d / "sft.jsonl"
    sft.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"{a}+{b}=?"},
                                                    {"role": "assistant", "content": f"{a}+{b}={a + b}"}],
                                       "answer": str(a + b)}) + "\n" for a, b in _addition_rows()))
    pairs = d / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": f"{a}+{b}=?", "chosen": f"{a + b}", "rejected": f"{a + b + 1}x",
                                         "answer": str(a + b)}) + "\n" for a, b in _addition_rows()))
    return model, sft, pairs


def _recipe(chat, tmp_path: Path, kind: str, **sections) -> Path:
    model, sft, pairs = chat
    raw = {"kind": kind, "seed": 0, "model": {"name": str(model)},
           "data": {"source": {"type": "jsonl", "path": str(sft if kind == "sft" else pairs)}, "eval_size": 8},
           "optim": {"lr": 3e-3, "micro_batch_size": 8},
           "trainer": {"steps": 6, "precision": "fp32", "num_threads": 1}}
    if kind == "dpo":
        raw["algorithm"] = {"name": "dpo", "beta": 0.5}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _train(path: Path, kind: str, run_dir: Path):
    from rlvr.trainer.stage_trainer import StageTrainer

    trainer = StageTrainer(load_stage_recipe(path, kind), run_dir)
    summary = trainer.train()
    trainer.engine.destroy()
    return trainer, summary


def test_micro_batches_keep_pairs_whole_and_packed_rows_cost_their_own_tokens():
    # pairs (0, 1), (2, 3), (4, 5) of lengths 10 + 30, 10 + 10, 50 + 10: a budget of 60 packed tokens
    lengths = [10, 30, 10, 10, 50, 10]
    assert plan_micro_batches(list(range(6)), lengths, 8, 60, unit=2, packed=True) == [[0, 1, 2, 3], [4, 5]]
    # padded, the same budget holds 2 rows of the longest (30): each pair alone
    assert plan_micro_batches(list(range(6)), lengths, 8, 60, unit=2) == [[0, 1], [2, 3], [4, 5]]
    assert plan_micro_batches(list(range(6)), lengths, 3, None, unit=2) == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="units of 2"):
        plan_micro_batches(list(range(3)), [1, 1, 1], 8, unit=2)


def test_packed_examples_attend_only_to_themselves(chat, tmp_path):
    """The log-probs of an example packed with others in one row equal those of the example alone."""
    from rlvr.data.sft_examples import build_sft_examples
    from rlvr.models.loading import load_causal_lm, load_tokenizer, use_fast_layers
    from rlvr.models.logprobs import packed_layers
    from rlvr.runtime.distributed import DistInfo
    from rlvr.trainer.stage_batches import sft_batch
    from rlvr.trainer.workers import MicroBatchPlan, ModelWorker

    recipe = load_stage_recipe(_recipe(chat, tmp_path, "sft"), "sft")
    tok = load_tokenizer(str(chat[0]), recipe.model)
    examples = build_sft_examples(recipe.data, tok, [tok.eos_token_id], seed=0).train[:6]
    model = load_causal_lm(str(chat[0]), recipe.model)
    use_fast_layers(model, torch.device("cpu"))
    assert packed_layers(model) == 2
    worker = ModelWorker(model, None, dist=DistInfo(0, 1, 0, torch.device("cpu")),
                         plan=MicroBatchPlan(8, None, 0, packed_cost=True), pad_id=tok.pad_token_id, temperature=1.0,
                         autocast_dtype=None, gradient_checkpointing=False)
    together = sft_batch(examples, tok.pad_token_id)
    with torch.no_grad():
        packed = worker.logprobs(together)
        for i, e in enumerate(examples):
            alone = worker.logprobs(sft_batch([e], tok.pad_token_id))[0]
            n = len(e.ids) - e.context_len
            assert torch.allclose(packed[i, :n], alone[:n], atol=1e-5), i


def test_sft_learns_and_an_rl_run_starts_from_it_by_naming_the_run(chat, tmp_path, no_plots):
    path = _recipe(chat, tmp_path, "sft", trainer={"steps": 30}, optim={"lr": 1e-2})
    _, summary = _train(path, "sft", tmp_path / "sft")
    losses = [m["train/loss"] for m in read_metrics(tmp_path / "sft") if "train/loss" in m]
    assert len(losses) == 30 and sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    assert summary["eval_after"]["loss"] < 0.5 * summary["eval_before"]["loss"]
    # only the assistant's text and its end of turn are learned: "a+b=c" and <|im_end|>, 6-7 ids an example
    first = next(m for m in read_metrics(tmp_path / "sft") if "train/tokens" in m)
    assert first["train/examples"] == 16 and 6 * 16 <= first["train/tokens"] <= 7 * 16

    from transformers import AutoModelForCausalLM

    from rlvr.trainer.trainer import RLTrainer
    from tests.tiny import write_addition_dataset

    data = write_addition_dataset(tmp_path / "rl.jsonl")
    raw = {"model": {"name": str(tmp_path / "sft")}, "data": {"source": {"type": "jsonl", "path": str(data)},
                                                               "template": "chat", "eval_size": 8},
           "rollout": {"engine": "hf", "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4},
           "verifiers": [{"name": "tests.tiny:digit_fraction"}], "reward": {"num_workers": 1},
           "trainer": {"steps": 1, "precision": "fp32", "num_threads": 1}, "eval": {"enabled": False}}
    rl = RLTrainer(resolve(raw), tmp_path / "rl")
    sft_model = AutoModelForCausalLM.from_pretrained(tmp_path / "sft/checkpoints/step-30/model")
    base = AutoModelForCausalLM.from_pretrained(chat[0])
    name = "model.embed_tokens.weight"
    assert torch.equal(rl.model.state_dict()[name], sft_model.state_dict()[name])
    assert not torch.equal(base.state_dict()[name], sft_model.state_dict()[name])
    rl.train()
    rl.engine.destroy()


def test_a_lora_sft_run_is_merged_into_the_rl_policy_that_names_it(chat, tmp_path, no_plots):
    path = _recipe(chat, tmp_path, "sft", trainer={"steps": 2}, optim={"lr": 1e-2},
                   model={"lora": {"rank": 4, "alpha": 8}}, eval={"enabled": False})
    _train(path, "sft", tmp_path / "sft")
    adapter = tmp_path / "sft/checkpoints/step-2/model"
    assert (adapter / "adapter_config.json").is_file()
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlvr.config import ModelConfig
    from rlvr.models.loading import load_causal_lm, resolve_model_path

    loaded = load_causal_lm(resolve_model_path(str(tmp_path / "sft")), ModelConfig(name=str(tmp_path / "sft")))
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(chat[0]), adapter).merge_and_unload()
    name = "model.layers.0.self_attn.q_proj.weight"
    assert torch.allclose(loaded.state_dict()[name], merged.state_dict()[name])
    assert not torch.allclose(loaded.state_dict()[name],
                              AutoModelForCausalLM.from_pretrained(chat[0]).state_dict()[name])


def test_dpo_stores_the_reference_once_and_raises_the_preference_accuracy(chat, tmp_path, no_plots):
    path = _recipe(chat, tmp_path, "dpo", trainer={"steps": 20}, optim={"lr": 1e-2})
    trainer, summary = _train(path, "dpo", tmp_path / "dpo")
    metrics = read_metrics(tmp_path / "dpo")
    first = next(m for m in metrics if "train/loss" in m)
    # step 1: the policy is the reference, every implicit reward 0 and the loss log 2
    assert first["train/loss"] == pytest.approx(0.6931472, abs=1e-5)
    assert first["train/margin"] == pytest.approx(0.0, abs=1e-5)
    assert first["train/logps_chosen"] == pytest.approx(first["train/ref_logps_chosen"], abs=1e-4)
    assert summary["eval_before"]["loss"] == pytest.approx(0.6931472, abs=1e-5)
    assert summary["eval_after"]["accuracy"] > 0.8 and summary["eval_after"]["margin"] > 0
    stored = torch.load(tmp_path / "dpo/reference_logprobs.pt", weights_only=True)
    assert stored["train"].shape == (2 * 72,) and stored["eval"].shape == (2 * 8,)
    assert (stored["train"] < 0).all()
    # a second trainer on the same run reads the stored values instead of computing them
    from rlvr.trainer.stage_trainer import StageTrainer

    again = StageTrainer(load_stage_recipe(path, "dpo"), tmp_path / "dpo", resume=True)
    assert torch.equal(again.reference["train"], stored["train"])
    again.close()
    again.engine.destroy()


@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_resume_after_kill_9_gives_the_same_metrics(chat, tmp_path, kind):
    path = _recipe(chat, tmp_path, kind, trainer={"steps": 6, "save_every": 2},
                   data={"examples_per_step": 64} if kind == "sft" else {"pairs_per_step": 64})
    straight = _cli([kind, str(path), "-o", str(tmp_path / "straight")])
    out, _ = limits.communicate(straight, 300)
    assert straight.returncode == 0, out

    victim = _cli([kind, str(path), "-o", str(tmp_path / "killed")])
    kill_once_logged(victim, tmp_path / "killed", 5)  # checkpoint step-4 exists, step 5 is lost
    assert (tmp_path / "killed/checkpoints/step-4").is_dir()
    assert not (tmp_path / "killed/summary.json").exists()

    resumed = _cli([kind, str(path), "-o", str(tmp_path / "killed"), "--resume"])
    assert_resume_equals_straight(resumed, tmp_path / "straight", tmp_path / "killed", _comparable,
                                  [0, 1, 2, 3, 4, 5, 6, 6])
