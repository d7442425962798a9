"""LoRA reward models and critics on a tiny model: adapters on the trunk with the scalar head trained whole
(``RewardModel.add_lora``), saved as an adapter folder that loads merged into its base; ``rlvr rm train`` with
``model.lora``; ``reward_model.path`` naming such a run; the PPO critic's ``algorithm.critic.lora``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr.config import LoraConfig, resolve
from rlvr.reward_model.model import RewardModel, pad_sequences
from rlvr.trainer.critic import build_value_model, critic_lora
from tests.tiny import build_tiny_model, build_tokenizer, tiny_recipe

LORA = {"rank": 4, "alpha": 8}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("lora_rm") / "model")


def _batch():
    return pad_sequences([[5, 6, 7, 1], [8, 9, 1], [10, 11, 12, 13, 1]], pad_id=0, side="left")


def test_lora_reward_model_trains_adapters_and_head_and_saves_them_alone(tiny_dir, tmp_path):
    rm = RewardModel.from_backbone(str(tiny_dir), seed=1).add_lora(LoraConfig(**LORA), base_name=str(tiny_dir))
    trainable = [n for n, p in rm.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n in trainable) and any("lora_B" in n for n in trainable)
    assert [n for n in trainable if "lora_" not in n] == ["hf.score.modules_to_save.default.weight"]
    assert rm.head is rm.hf.score.modules_to_save["default"]  # forward reads the trainable copy
    frozen = {n: p.detach().clone() for n, p in rm.named_parameters() if not p.requires_grad}

    opt = torch.optim.AdamW([p for p in rm.parameters() if p.requires_grad], lr=5e-2)
    ids, mask = _batch()
    for _ in range(3):  # push the three scores apart
        scores = rm(ids, mask)
        (-(scores[0] - scores[1]) - (scores[2] - scores[1])).backward()
        opt.step()
        opt.zero_grad()
    for n, p in rm.named_parameters():
        if not p.requires_grad:
            assert torch.equal(p.detach(), frozen[n]), n  # trunk and the original head untouched

    tok = build_tokenizer()
    rm.save(tmp_path / "rm", tok, {"step": 3})
    files = {p.name for p in (tmp_path / "rm").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "config.json", "rlvr_reward_model.json"} <= files
    assert "model.safetensors" not in files
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "rm/adapter_model.safetensors"))
    assert all("lora_" in k or "score" in k for k in saved) and any("score" in k for k in saved)

    loaded = RewardModel.load(tmp_path / "rm")  # base + adapters + trained head, merged: a plain HF model
    assert not loaded.is_lora and not any("lora_" in n for n, _ in loaded.named_parameters())
    with torch.no_grad():
        want = rm(ids, mask)
        torch.testing.assert_close(loaded(ids, mask), want, rtol=1e-5, atol=1e-5)
        base = RewardModel.from_backbone(str(tiny_dir), seed=1)
        assert not torch.allclose(base(ids, mask), want, atol=1e-3)  # training did change the scores


def test_rm_train_with_lora_and_a_policy_recipe_reading_it(tiny_dir, tmp_path, capsys):
    from rlvr.cli import main
    from tests.reward_model.test_reward_model import _pairs_file

    sums = [(a, b) for a in range(10) for b in range(10)]
    train_file = _pairs_file(tmp_path / "train.jsonl", sums[:40], seed=0)
    recipe = tmp_path / "rm.yaml"
    recipe.write_text(json.dumps({
        "kind": "reward_model", "model": {"name": str(tiny_dir), "lora": {**LORA, "target_modules": ["q_proj",
                                                                                                   "v_proj"]}},
        "data": {"source": {"type": "jsonl", "path": str(train_file)}, "eval_fraction": 0.25, "max_length": 32},
        "train": {"epochs": 3, "prompts_per_step": 4, "lr": 3e-2, "bf16": False, "num_threads": 1}}))
    assert main(["config", "check", str(recipe)]) == 0  # model.lora is accepted now
    run = tmp_path / "run"
    assert main(["rm", "train", str(recipe), "-o", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert (run / "model/adapter_config.json").is_file() and not (run / "model/model.safetensors").exists()
    adapter_cfg = json.loads((run / "model/adapter_config.json").read_text())
    assert sorted(adapter_cfg["target_modules"]) == ["q_proj", "v_proj"] and "score" in adapter_cfg["modules_to_save"]
    assert summary["eval"]["pairwise_accuracy"] > summary["eval_before"]["pairwise_accuracy"]
    assert summary["eval"]["pairwise_accuracy"] >= 0.8  # digits vs letters: learnable through rank-4 adapters
    # the saved adapter folder, merged into its base, re-scores the held-out pairs as the trained model did
    capsys.readouterr()
    assert main(["rm", "eval", str(run), "--file", str(run / "eval_pairs.jsonl")]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["pairwise_accuracy"] == pytest.approx(summary["eval"]["pairwise_accuracy"])
    assert again["ece"] == pytest.approx(summary["eval"]["ece"], abs=1e-5)

    # a policy recipe's reward_model.path naming the LoRA run: rlvr check finds its config.json, the ensemble loads
    from rlvr.reward_model.ensemble import RewardModelEnsemble

    ensemble = RewardModelEnsemble.load([str(run)], "mean", None)
    seqs = [[5, 6, 7, 1], [8, 9, 1]]
    merged = RewardModel.load(run)
    torch.testing.assert_close(ensemble.members[0].score(seqs, 0), merged.score(seqs, 0))
    from rlvr.preflight.memory import reward_model_paths

    policy = resolve(tiny_recipe(tiny_dir, train_file, reward={"source": "reward_model"},
                                 reward_model={"path": str(run)}))
    assert all((Path(f) / "config.json").is_file() for f in reward_model_paths(policy))


def _ppo_recipe(tiny_dir, data, rm_dir, model=None, **critic):
    return resolve(tiny_recipe(tiny_dir, data, model=model or {}, reward={"source": "reward_model"},
                               reward_model={"path": str(rm_dir)}, algorithm={"name": "ppo", "critic": critic}))


def test_critic_lora_follows_the_policy_or_its_own_key(tiny_dir, tmp_path):
    RewardModel.from_backbone(str(tiny_dir), seed=5).save(tmp_path / "rm", build_tokenizer())
    data = tmp_path / "d.jsonl"
    full = _ppo_recipe(tiny_dir, data, tmp_path / "rm")
    assert full.algorithm.critic.lora == "policy" and critic_lora(full) is None
    assert not build_value_model(full, str(tiny_dir)).rm.is_lora

    lora_policy = _ppo_recipe(tiny_dir, data, tmp_path / "rm", model={"lora": LORA})
    assert critic_lora(lora_policy) == lora_policy.model.lora
    critic = build_value_model(lora_policy, str(tiny_dir))
    assert critic.rm.is_lora
    trainable = {n for n, p in critic.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or "modules_to_save" in n for n in trainable)
    rm = RewardModel.load(tmp_path / "rm")
    ids, mask = _batch()
    with torch.no_grad():  # fresh adapters (B = 0): the critic starts as the reward model
        torch.testing.assert_close(critic(ids, mask)[:, -1], rm(ids, mask), rtol=1e-6, atol=1e-6)

    off = _ppo_recipe(tiny_dir, data, tmp_path / "rm", model={"lora": LORA}, lora=None)
    assert critic_lora(off) is None and not build_value_model(off, str(tiny_dir)).rm.is_lora
    own = _ppo_recipe(tiny_dir, data, tmp_path / "rm", lora={"rank": 2, "target_modules": ["q_proj"]})
    assert critic_lora(own).rank == 2 and own.model.lora is None
    assert build_value_model(own, str(tiny_dir)).rm.is_lora


def test_ppo_with_a_lora_policy_and_critic_trains_and_resumes(tiny_dir, tmp_path):
    """PPO, LoRA policy and (following it) LoRA critic on a LoRA reward model: both train their adapters only (the
    critic its head too), the critic's checkpoint holds no frozen trunk weight, and a resume from step 1 repeats
    step 2 exactly."""
    from rlvr.runs.metrics import read_metrics
    from rlvr.trainer.trainer import RLTrainer
    from tests.tiny import write_addition_dataset

    rm = RewardModel.from_backbone(str(build_tiny_model(tmp_path / "rm_backbone", seed=3, init_std=0.2)), seed=1)
    rm.add_lora(LoraConfig(**LORA), base_name=str(tmp_path / "rm_backbone")).save(tmp_path / "rm", build_tokenizer())
    data = write_addition_dataset(tmp_path / "data.jsonl")
    raw = tiny_recipe(tiny_dir, data, model={"lora": LORA}, reward={"source": "reward_model", "num_workers": 1},
                      reward_model={"path": str(tmp_path / "rm")},
                      algorithm={"name": "ppo", "critic": {"lr": 1e-2}, "kl": {"beta": 0.05}},
                      trainer={"steps": 2, "save_every": 1, "keep_checkpoints": 2}, optim={"lr": 3e-2})
    trainer = RLTrainer(resolve(raw), tmp_path / "run")
    critic = trainer.critic.model
    before = {n: p.detach().clone() for n, p in critic.named_parameters()}
    trainer.train()
    for n, p in critic.named_parameters():  # the frozen trunk (and original head) as loaded
        assert p.requires_grad or torch.equal(p.detach(), before[n]), n
    assert any(not torch.equal(p.detach(), before[n]) for n, p in critic.named_parameters() if "lora_B" in n)
    states = torch.load(next((tmp_path / "run/checkpoints/step-2/critic").rglob("*model_states.pt")),
                        weights_only=False)
    assert states["module"] and all("lora_" in k or "modules_to_save" in k for k in states["module"])
    trainer.close()
    straight = [m for m in read_metrics(tmp_path / "run") if "critic/value_loss" in m]

    import shutil

    shutil.copytree(tmp_path / "run", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed/checkpoints/step-2")
    again = RLTrainer(resolve(raw), tmp_path / "resumed", resume=True)
    assert again.step_done == 1
    again.train()
    again.close()
    resumed = [m for m in read_metrics(tmp_path / "resumed") if "critic/value_loss" in m]
    assert [m["step"] for m in resumed] == [1, 2]
    for key in ("critic/value_loss", "train/loss", "reward/rm_mean"):
        assert resumed[1][key] == pytest.approx(straight[1][key], rel=1e-5, abs=1e-7), key
