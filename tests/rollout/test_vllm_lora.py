"""A LoRA policy in vLLM (rlvr.rollout.vllm_lora): the rank rounded up to one vLLM accepts, the choice between the
adapter alone and merged weights (and its fallback), the adapter folders; with vLLM, an adapter sync that moves vLLM's
log-probs onto the trainer's and away from the base model's, and a trainer whose first-step log-prob check holds.

The tests marked ``vllm`` use a tiny Qwen2 with head size 32 (vLLM's CPU attention has no kernel for head size 8).
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

from rlvr.config import LoraConfig, ModelConfig, RecipeError, resolve
from rlvr.models.loading import load_causal_lm
from rlvr.models.lora import apply_lora
from rlvr.rollout.vllm_lora import (
    VLLM_LORA_RANKS,
    AdapterFolders,
    LoraSyncError,
    adapter_tensors,
    choose_lora_sync,
    vllm_max_lora_rank,
)
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset
from tests.vllm_required import require_vllm

ALL = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]


# ------------------------------------------------------------------------------------------------ no vLLM needed
@pytest.mark.parametrize("rank, expected", [(1, 1), (2, 8), (8, 8), (9, 16), (16, 16), (33, 64), (257, 320),
                                            (321, 512), (512, 512), (513, None)])
def test_rank_rounds_up_to_a_max_lora_rank_vllm_accepts(rank, expected):
    assert vllm_max_lora_rank(rank) == expected
    assert vllm_max_lora_rank(rank, VLLM_LORA_RANKS) == expected


def test_rank_below_one_is_an_error():
    with pytest.raises(ValueError, match="model.lora.rank must be >= 1"):
        vllm_max_lora_rank(0)


@pytest.mark.vllm
def test_installed_vllm_accepts_the_ranks_rlvr_assumes():
    require_vllm()
    from rlvr.rollout.vllm_lora import vllm_lora_ranks

    assert vllm_lora_ranks() == VLLM_LORA_RANKS


def test_auto_uses_the_adapter_where_vllm_serves_it():
    choice = choose_lora_sync("auto", 12, targets=["q_proj", "v_proj"], servable=ALL)
    assert (choice.way, choice.max_lora_rank) == ("adapter", 16)
    assert "the adapter alone" in choice.line() and "max_lora_rank 16" in choice.line()
    assert choose_lora_sync("adapter", 64).max_lora_rank == 64  # before the engine is built: rank only


def test_auto_falls_back_to_merged_weights_saying_why():
    big = choose_lora_sync("auto", 1024)
    assert big.way == "merged" and "rank 1024 is above vLLM's largest max_lora_rank (512)" in big.reason
    assert "merged weights" in big.line() and "rank 1024" in big.line()
    unwrapped = choose_lora_sync("auto", 8, targets=["q_proj", "router"], servable=ALL)
    assert unwrapped.way == "merged" and "do not cover router" in unwrapped.reason
    refused = choose_lora_sync("auto", 8).fall_back("vLLM refused the adapter (ValueError: no kernel)")
    assert refused.way == "merged" and "no kernel" in refused.line()


def test_auto_merges_on_vllms_cpu_backend_unless_the_adapter_is_asked_for():
    cpu = choose_lora_sync("auto", 8, targets=["q_proj"], servable=ALL, cpu_backend=True)
    assert cpu.way == "merged" and "CPU backend" in cpu.reason and "vllm_adapter=adapter" in cpu.reason
    assert choose_lora_sync("adapter", 8, targets=["q_proj"], servable=ALL, cpu_backend=True).way == "adapter"


def test_merged_is_used_when_asked_for_whatever_vllm_could_do():
    choice = choose_lora_sync("merged", 8, targets=["q_proj"], servable=ALL)
    assert (choice.way, choice.max_lora_rank) == ("merged", None)


def test_adapter_where_vllm_cannot_serve_it_is_an_error_naming_the_field():
    with pytest.raises(LoraSyncError, match=r"model.lora.vllm_adapter=adapter.*above vLLM's largest.*auto"):
        choose_lora_sync("adapter", 1024)
    with pytest.raises(LoraSyncError, match=r"do not cover router"):
        choose_lora_sync("adapter", 8, targets=["router"], servable=ALL)
    with pytest.raises(LoraSyncError, match="no kernel"):
        choose_lora_sync("adapter", 8).fall_back("no kernel")
    with pytest.raises(ValueError, match="must be 'auto', 'adapter' or 'merged'"):
        choose_lora_sync("both", 8)


def test_recipe_names_the_field_and_its_values():
    with pytest.raises(RecipeError) as err:
        resolve({"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}],
                 "model": {"lora": {"vllm_adapter": "both"}}})
    assert "model.lora.vllm_adapter" in str(err.value) and "'adapter'" in str(err.value)
    assert LoraConfig().vllm_adapter == "auto"


def test_a_run_saved_with_merged_resumes_under_auto_but_not_under_adapter():
    from rlvr.config import check_resumed_recipe, dump_recipe

    def recipe(way):
        lora = {"rank": 8} if way is None else {"rank": 8, "vllm_adapter": way}
        return resolve({"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}],
                        "model": {"lora": lora}})

    saved = dump_recipe(recipe("merged"))  # a run resolved before auto existed wrote 'merged'
    check_resumed_recipe(saved, recipe(None))  # the default, auto, matches what the run used
    with pytest.raises(RecipeError, match=r"model.lora.vllm_adapter: 'merged' -> 'adapter'"):
        check_resumed_recipe(saved, recipe("adapter"))


@pytest.fixture(scope="module")
def tiny32(tmp_path_factory):
    """A tiny Qwen2 with head size 32 and its addition dataset."""
    d = tmp_path_factory.mktemp("tiny32")
    return build_tiny_model(d / "model", hidden=128, layers=2), write_addition_dataset(d / "data.jsonl")


def _lora_policy(path, rank=4, seed=0):
    """The tiny model with rank-``rank`` adapters whose A and B are drawn from N(0, 0.1) (B is 0 after init)."""
    cfg = ModelConfig(name=str(path), lora=LoraConfig(rank=rank, alpha=2.0 * rank))
    model = apply_lora(load_causal_lm(str(path), cfg), cfg.lora, base_name=str(path))
    _perturb(model, seed)
    return model


def _perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def test_adapter_folder_holds_the_adapters_and_goes_with_its_directory(tiny32):
    from safetensors.torch import load_file

    model = _lora_policy(tiny32[0])
    folders = AdapterFolders(prefix="rlvr-lora-test-")
    folder = folders.write(model, 3, dtype=torch.float32)
    assert folder.name == "update-3" and (folder / "adapter_config.json").is_file()
    saved = load_file(folder / "adapter_model.safetensors")
    live = adapter_tensors(model)
    assert len(saved) == len(live) == 2 * 7 * 2  # A and B of 7 linear layers x 2 blocks
    for name, value in live.items():  # peft drops the adapter's name from the saved keys
        torch.testing.assert_close(saved[name.replace(".default.", ".")], value, rtol=0, atol=0)
    folders.drop(folder)
    assert not folder.exists() and folders.path.is_dir()
    folders.close()
    assert not folders.path.exists()


# ------------------------------------------------------------------------------------------------ with vLLM
@pytest.fixture(scope="module")
def lora_engine(tiny32):
    """A LoRA policy (perturbed adapters) and the vLLM engine built for it, serving the base weights until a sync."""
    require_vllm()
    # engines of earlier test modules that are no longer referenced go first: a vllm.LLM's finalizer tears down
    # vLLM's process-wide parallel state, which would take this engine's with it if it ran later
    gc.collect()
    from rlvr.models.loading import load_tokenizer
    from rlvr.rollout.vllm_engine import VLLMRolloutEngine

    # adapter: auto would take merged weights on vLLM's CPU backend
    recipe = resolve(tiny_recipe(*tiny32, model={"lora": {"rank": 4, "alpha": 8.0, "vllm_adapter": "adapter"}},
                                 rollout={"engine": "vllm", "vllm_max_model_len": 128}))
    model = _lora_policy(tiny32[0])
    tok = load_tokenizer(str(tiny32[0]), recipe.model)
    engine = VLLMRolloutEngine.from_recipe(recipe, model, tok, [int(tok.eos_token_id)])
    yield engine, model, tok
    engine.close()


def _logprobs(model, prompt, completion, temperature):
    from rlvr.models.logprobs import response_logprobs

    ids = torch.tensor([prompt + completion.token_ids])
    with torch.no_grad():
        lp, _ = response_logprobs(model, ids, torch.ones_like(ids), len(completion.token_ids), temperature=temperature)
    return lp[0]


def _diffs(model, prompts, groups, temperature):
    """Largest |vLLM log-prob - trainer log-prob| over every sampled token, with the adapters on and off."""
    on = off = 0.0
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            vllm_lp = torch.tensor(c.logprobs)
            on = max(on, float((_logprobs(model, prompt, c, temperature) - vllm_lp).abs().max()))
            with model.disable_adapter():
                off = max(off, float((_logprobs(model, prompt, c, temperature) - vllm_lp).abs().max()))
    return on, off


@pytest.mark.vllm
def test_vllm_adapter_sync_changes_its_logprobs_to_the_trainers(lora_engine):
    from rlvr.rollout.base import SamplingParams

    engine, model, tok = lora_engine
    assert (engine.lora_sync.way, engine.lora_sync.max_lora_rank) == ("adapter", 8)  # rank 4 rounded up
    prompts = [tok.encode("1+2=?"), tok.encode("7+8=? think")]
    sampling = SamplingParams(temperature=0.7, max_new_tokens=12)
    torch.manual_seed(0)
    before = engine.generate(prompts, 3, sampling)
    on, off = _diffs(model, prompts, before, 0.7)
    assert off < 1e-4 < 0.05 < on  # no sync yet: vLLM serves the base model, not the policy

    engine.sync_weights(model)
    first = engine.lora_request
    assert first.lora_int_id == 1 and engine.llm.llm_engine.list_loras() == {1}
    after = engine.generate(prompts, 3, sampling)
    on, off = _diffs(model, prompts, after, 0.7)
    assert on < 1e-4 < 0.05 < off  # the trainer's log-probs (fp32 on both sides), and not the base model's

    _perturb(model, seed=1)  # another "optimizer step": a new adapter id, the previous adapter and folder gone
    engine.sync_weights(model)
    assert engine.lora_request.lora_int_id == 2 and engine.lora_request.lora_name != first.lora_name
    assert engine.llm.llm_engine.list_loras() == {2}
    assert not Path(first.lora_path).exists()
    on, _ = _diffs(model, prompts, engine.generate(prompts, 3, sampling), 0.7)
    assert on < 1e-4
    assert engine.syncs == 2


@pytest.mark.vllm
def test_a_refused_first_adapter_falls_back_to_merged_weights(lora_engine, tiny32, capsys):
    """vLLM refusing the first adapter under ``auto``: one line says why, and the sync reloads merged weights."""
    from rlvr.rollout.vllm_engine import VLLMRolloutEngine

    class Refusing:
        def __init__(self):
            self.reloaded = []
            self.llm_engine = self

        def add_lora(self, request):
            raise ValueError("LoRA is not supported for this module")

        def collective_rpc(self, method, kwargs=None):
            self.reloaded = [name for name, _ in kwargs["weights_iterator"]]

        def apply_model(self, fn):
            return [0]

        def reset_prefix_cache(self):
            return True

    llm = Refusing()
    engine = VLLMRolloutEngine(llm, [1], dtype=torch.float32, lora_sync=choose_lora_sync("auto", 4))
    engine.sync_weights(lora_engine[1])
    assert engine.lora_sync.way == "merged" and engine.lora_request is None and engine.syncs == 1
    assert "model.layers.0.self_attn.q_proj.weight" in llm.reloaded  # merged, under the base model's names
    assert "vLLM refused the adapter (ValueError: LoRA is not supported for this module)" in capsys.readouterr().out
    strict = VLLMRolloutEngine(Refusing(), [1], dtype=torch.float32, lora_sync=choose_lora_sync("adapter", 4))
    with pytest.raises(LoraSyncError, match="not supported for this module"):
        strict.sync_weights(lora_engine[1])
    engine.close()
    strict.close()


@pytest.mark.vllm
def test_lora_trainer_on_vllm_adapter_sync_keeps_the_logprob_check(tiny32, tmp_path, lora_engine, capsys,
                                                                    no_plots):
    """GRPO with a LoRA policy on the adapter-synced engine: the first step's rollout/trainer log-prob check and every
    later step's stay at fp32 rounding, and each update loads a new adapter."""
    from rlvr.runs.metrics import read_metrics
    from rlvr.trainer.trainer import RLTrainer

    raw = tiny_recipe(*tiny32, model={"lora": {"rank": 4, "alpha": 8.0, "vllm_adapter": "adapter"}},
                      rollout={"engine": "vllm", "vllm_max_model_len": 128},
                      algorithm={"loss_agg": "token-mean", "tis_cap": 2.0},
                      trainer={"steps": 2, "log_samples_every": 0}, optim={"lr": 3e-2})
    engine = lora_engine[0]  # the module's engine: its base is the checkpoint the trainer loads
    trainer = RLTrainer(resolve(raw), tmp_path / "run", rollout_engine=engine)
    engine.sync_weights(trainer.model)  # this trainer's adapters (B = 0), in place of the fixture's
    ids = engine.lora_request.lora_int_id
    trainer.train()
    metrics = [m for m in read_metrics(tmp_path / "run") if "train/loss" in m]
    assert len(metrics) == 2
    for m in metrics:
        assert m["train/rollout_logprob_diff_max"] < 1e-3, m
        assert m["time/sync_s"] > 0
    assert "rollout log-prob check (vllm vs trainer, step 1)" in capsys.readouterr().out
    assert engine.lora_request.lora_int_id == ids + 2 and engine.lora_sync.way == "adapter"
    trainer.engine.destroy()


@pytest.mark.vllm
def test_auto_on_the_cpu_backend_syncs_merged_weights_to_the_trainers_logprobs(tiny32, capsys):
    """Last in this module: a second ``vllm.LLM`` leaves vLLM's process-wide parallel state torn down when it is
    collected, so the module's engine cannot be used after it."""
    require_vllm()
    from rlvr.models.loading import load_tokenizer
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.vllm_engine import VLLMRolloutEngine

    recipe = resolve(tiny_recipe(*tiny32, model={"lora": {"rank": 4, "alpha": 8.0}},
                                 rollout={"engine": "vllm", "vllm_max_model_len": 128}))
    model = _lora_policy(tiny32[0], seed=2)
    tok = load_tokenizer(str(tiny32[0]), recipe.model)
    engine = VLLMRolloutEngine.from_recipe(recipe, model, tok, [int(tok.eos_token_id)])
    assert engine.lora_sync.way == "merged" and "CPU backend" in capsys.readouterr().out
    engine.sync_weights(model)
    prompts = [tok.encode("4+4=?")]
    torch.manual_seed(0)
    on, off = _diffs(model, prompts, engine.generate(prompts, 3, SamplingParams(temperature=0.7, max_new_tokens=12)),
                     0.7)
    assert on < 1e-4 < 0.05 < off and engine.lora_request is None
