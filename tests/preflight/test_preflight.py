"""Pre-flight checks (``rlvr check``, and the same checks at the start of ``rlvr train``): each check on a recipe built
to fail it, the memory arithmetic by hand, and every shipped recipe passing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main
from rlvr.config import resolve
from rlvr.preflight.devices import GIB, DeviceMemory, parse_device_memory
from rlvr.preflight.memory import block_activation_bytes_per_token, estimate_memory
from rlvr.preflight.model_shape import ModelShape
from rlvr.verifiers import verifier
from tests.tiny import build_tiny_model, tiny_recipe, write_addition_dataset

REPO = Path(__file__).resolve().parents[2]
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(autouse=True)
def roomy_disk(monkeypatch):
    """The recipes' checks see 1 TiB free wherever their run folder would be: what they assert is the recipe, not
    the free space of the machine running the tests (the disk check has its own tests, with set sizes:
    tests/runs/test_checkpoint_space.py)."""
    from rlvr.preflight import disk

    monkeypatch.setattr(disk, "free_bytes", lambda path: (2**40, Path(path)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(d / "model"), write_addition_dataset(d / "data.jsonl")


def _write(path: Path, raw: dict) -> str:
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _check(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(["check", *argv])
    return code, capsys.readouterr().out


def _chat_model(tmp_path: Path, generation_eos: list[str] | None = None, template: str = CHATML) -> Path:
    """The tiny model with a ChatML-style template whose turns end in <|im_end|> (a special token)."""
    from transformers import AutoTokenizer, GenerationConfig

    d = build_tiny_model(tmp_path / "chat_model")
    tok = AutoTokenizer.from_pretrained(d)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = template
    tok.save_pretrained(d)
    if generation_eos is not None:
        gen = GenerationConfig.from_pretrained(d)
        gen.eos_token_id = [tok.convert_tokens_to_ids(t) for t in generation_eos]
        gen.save_pretrained(d)
    return d


# ------------------------------------------------------------------------------------------------ verifiers
def test_a_kwarg_typo_is_an_error_naming_the_right_kwarg(tiny, tmp_path, capsys):
    raw = tiny_recipe(*tiny, verifiers=[{"name": "math", "kwargs": {"answer_feild": "answer"}}],
                      reward={"solved_verifier": None})
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert code == 1
    assert "error   verifiers: verifier 'math': kwargs has 'answer_feild', which the function does not take. Did " \
           "you mean 'answer_field'?" in out
    # rlvr train stops on it before the model is loaded (before: every reward call failed, the run went on)
    assert main(["train", _write(tmp_path / "r.yaml", raw), "-o", str(tmp_path / "run")]) == 2
    assert "answer_feild" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_missing_required_kwarg_and_an_unknown_verifier_are_errors(tiny, tmp_path, capsys):
    (tmp_path / "needs_kwarg_rewards.py").write_text(
        "def scored(completion, sample, *, unit):\n    return float(unit in completion)\n")
    raw = tiny_recipe(*tiny, verifiers=[{"name": "needs_kwarg_rewards:scored"}, {"name": "maht"}],
                      reward={"solved_verifier": None})
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert code == 1
    assert "verifier 'needs_kwarg_rewards:scored': kwargs lacks the required argument(s) unit" in out
    assert "unknown verifier 'maht'. Did you mean 'math'?" in out


def test_a_verifier_module_next_to_the_recipe_imports_without_pythonpath(tiny, tmp_path, capsys, monkeypatch):
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "next_to_recipe_rewards.py").write_text(
        "def has_digit(completion: str, sample: dict, *, bonus: float = 0.0) -> float:\n"
        "    return 1.0 if any(c.isdigit() for c in completion) else 0.0\n")
    raw = tiny_recipe(*tiny, verifiers=[{"name": "next_to_recipe_rewards:has_digit", "kwargs": {"bonus": 0.5}}],
                      reward={"solved_verifier": None})
    monkeypatch.chdir(tmp_path)  # neither the repo root nor the recipe's folder
    code, out = _check(capsys, [_write(recipes / "r.yaml", raw)])
    assert code == 0, out
    assert f"ok      verifiers: next_to_recipe_rewards:has_digit resolves (from {recipes}/next_to_recipe_rewards.py)" \
        in out
    assert "ok      gold: next_to_recipe_rewards:has_digit: the gold of all 16 sampled rows scores 1" in out


# ------------------------------------------------------------------------------------------------ data and model
def test_a_missing_data_file_and_model_folder_are_errors_and_config_check_says_schema_only(tiny, tmp_path, capsys):
    raw = tiny_recipe(tmp_path / "no_model", tmp_path / "no_data.jsonl")
    path = _write(tmp_path / "r.yaml", raw)
    code, out = _check(capsys, [path])
    assert code == 1
    assert f"error   data: data.source.path: file not found: {tmp_path / 'no_data.jsonl'}" in out
    assert f"error   model: model.name='{tmp_path / 'no_model'}': no model folder there" in out
    assert main(["config", "check", path]) == 0
    assert "schema ok" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ template
def test_a_prefilled_think_tag_the_format_verifier_expects_warns(tiny, tmp_path, capsys):
    raw = tiny_recipe(*tiny, data={"template": "r1"},
                      verifiers=[{"name": "format", "kwargs": {"prefilled_think": False}}, {"name": "math"}],
                      reward={"solved_verifier": "math"})
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw), "--show-prompt"])
    assert code == 0, out  # a warning: the run would go on
    assert "warn    prefill: format reward will always be 0: the prompt ends in <think> but the format verifier has " \
           "prefilled_think: false" in out
    assert "warn    gold: format: the gold answer scores below 1 on every one of 16 sampled rows" in out
    assert "ok      gold: math: the gold of all 16 sampled rows scores 1" in out
    assert "Assistant: <think>" in out  # --show-prompt
    # left unset, the format verifier detects the prefill: no warning
    raw["verifiers"][0]["kwargs"] = {}
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert code == 0 and "warn" not in out.replace("0 warning", ""), out


def test_a_chat_template_that_closes_the_think_block_warns(tiny, tmp_path, capsys):
    model = _chat_model(tmp_path, template=CHATML.replace("assistant\n{% endif %}",
                                                          "assistant\n<think>\n\n</think>\n\n{% endif %}"))
    raw = tiny_recipe(model, tiny[1], verifiers=[{"name": "format"}, {"name": "math"}],
                      reward={"solved_verifier": "math"})
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert "warn    prefill: format reward will always be 0: the prompt closes a <think> block" in out


# ------------------------------------------------------------------------------------------------ EOS
def test_an_end_of_turn_token_that_does_not_stop_generation_is_an_error(tiny, tmp_path, capsys):
    from transformers import AutoTokenizer

    model = _chat_model(tmp_path)
    end = AutoTokenizer.from_pretrained(model).convert_tokens_to_ids("<|im_end|>")
    raw = tiny_recipe(model, tiny[1])
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert code == 1
    assert f"error   eos: the chat template ends an assistant turn with '<|im_end|>' (id {end}), which is not among " \
           f"the stop ids [1]: every completion would run to rollout.max_new_tokens. Add {end} to eos_token_id in " \
           f"{model}/generation_config.json" in out
    # the fix it names: the generation config's eos lists the end-of-turn token
    _chat_model(tmp_path, generation_eos=["<eos>", "<|im_end|>"])
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert f"ok      eos: the template's end of turn '<|im_end|>' (id {end}) stops generation (stop ids [1, {end}])" \
        in out
    assert f"info    eos: EOS ids differ: tokenizer [1], config.json [1], generation_config [1, {end}]" in out
    assert code == 0, out
    # lists that do not contain one another: two files disagree on what ends a response
    _chat_model(tmp_path, generation_eos=["<|im_end|>"])
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert f"warn    eos: EOS ids differ: tokenizer [1], config.json [1], generation_config [{end}]" in out


# ------------------------------------------------------------------------------------------------ gold
def test_golds_that_do_not_verify_against_themselves_are_reported_by_row(tiny, tmp_path, capsys):
    rows = [{"question": f"{i}+1=?", "answer": "}{" if i % 2 else str(i + 1)} for i in range(40)]
    data = tmp_path / "half_empty.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    raw = tiny_recipe(tiny[0], data, verifiers=[{"name": "math"}], reward={"solved_verifier": None})
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert code == 0, out  # some golds fail: a warning with the rows
    assert "warn    gold: math: the gold answer scores below 1 on" in out
    bad = [line for line in out.splitlines() if line.strip().startswith("row ")]
    assert bad and all("gold '}{' -> 0 (no final-answer marker)" in line for line in bad), bad
    assert all(int(line.split()[1].rstrip(":")) % 2 == 1 for line in bad)  # the odd rows are the empty ones
    # no gold verifies: the math reward would be constant, an error
    data.write_text("".join(json.dumps({**r, "answer": "}{"}) + "\n" for r in rows))
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert code == 1 and "error   gold: math: the gold answer scores below 1 on every one of 16 sampled rows" in out


# ------------------------------------------------------------------------------------------------ batch
def test_batch_arithmetic(tiny, tmp_path, capsys):
    raw = tiny_recipe(*tiny, rollout={"prompts_per_step": 6})
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw), "--ranks", "4"])
    assert code == 1
    assert "error   batch: rollout.prompts_per_step=6 is not divisible by 4 ranks" in out
    raw = tiny_recipe(*tiny, rollout={"prompts_per_step": 8}, algorithm={"mini_batches": 4})
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw), "--ranks", "2"])
    assert code == 0, out
    assert "global batch 8 prompts x 4 samples = 32 samples over 2 rank(s): 4 prompts, 16 samples per rank" in out
    assert "4 mini-batch(es) x 1 epoch(s) = 4 optimizer step(s) per training step; 4 samples per rank per " \
           "mini-batch in >= 1 micro-batch(es) of <= 8 rows" in out
    assert "tokens one step generates at the cap: 32 x 8 = 256" in out


# ------------------------------------------------------------------------------------------------ memory
SHAPE = ModelShape(params=1_000_000_000, layers=2, hidden=8, intermediate=16, heads=2, kv_heads=1, head_dim=4,
                   vocab=100, max_positions=None, source="test")


def _recipe(**sections) -> object:
    raw = {"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}],
           "rollout": {"prompts_per_step": 8, "group_size": 8, "max_new_tokens": 96},
           "optim": {"micro_batch_size": 4}}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return resolve(raw)


def _parts(est) -> dict[str, float]:
    return {p.name.split(" (")[0]: p.bytes for p in est.parts}


def test_memory_by_zero_stage_offload_and_reference_by_hand():
    gpu = DeviceMemory("test GPU", 80 * GIB, "gpu")
    n = SHAPE.params
    est = estimate_memory(_recipe(), {"policy": SHAPE}, gpu, ranks=4, max_prompt_tokens=32)
    parts = _parts(est)
    assert (parts["policy weights"], parts["policy gradients"], parts["policy Adam moments"]) == (4 * n, 4 * n, 8 * n)
    # activations: 4 rows x (32 + 96) tokens x 2 layers x per-token block bytes; per token and block (bf16): two norms'
    # fp32 input and output 4*8*4 = 128, plus 2 bytes x (2 norm outs 16 + q, k before/after rotary 2*8 + 2*4
    # + SDPA q, k, v repeated, out 4*8 + o_proj input 8 + gate/up/act/prod 4*16)
    assert block_activation_bytes_per_token(SHAPE, 2) == 128 + 2 * (16 + 16 + 8 + 32 + 8 + 64) == 416
    assert parts["activations"] == 4 * 128 * 2 * 416
    assert parts["logits + their gradient"] == 2 * 4 * 96 * 100 * 2
    z2 = _parts(estimate_memory(_recipe(trainer={"zero_stage": 2}), {"policy": SHAPE}, gpu, ranks=4,
                                max_prompt_tokens=32))
    assert (z2["policy weights"], z2["policy gradients"], z2["policy Adam moments"]) == (4 * n, n, 2 * n)
    z3 = _parts(estimate_memory(_recipe(trainer={"zero_stage": 3}), {"policy": SHAPE}, gpu, ranks=4,
                                max_prompt_tokens=32))
    assert (z3["policy weights"], z3["policy gradients"], z3["policy Adam moments"]) == (n, n, 2 * n)
    off = estimate_memory(_recipe(trainer={"zero_stage": 1, "offload_optimizer": True}), {"policy": SHAPE}, gpu,
                          ranks=4, max_prompt_tokens=32)
    assert _parts(off)["policy Adam moments"] == 0 and off.host_bytes == 2 * n + n  # moments + fp32 master copy
    ref = _parts(estimate_memory(_recipe(algorithm={"kl": {"beta": 0.01}}), {"policy": SHAPE}, gpu, ranks=4,
                                 max_prompt_tokens=32))
    assert ref["reference weights"] == 4 * n


@pytest.mark.parametrize("training,generation", [("fp32", "bf16"), ("bf16", "fp32"), ("fp32", "fp32")])
def test_memory_on_a_cpu_follows_the_measured_choice_per_stage(monkeypatch, training, generation):
    """``auto`` on a CPU with native bf16: the activations in the training choice's dtype, the ``hf`` engine's bf16
    weight copy only where generation is bf16, and the choice's line under the table."""
    from rlvr.models.precision import PrecisionChoice
    from rlvr.preflight import memory

    monkeypatch.setattr(memory, "_cpu_native_bf16", lambda: True)
    line = f"precision auto: training {training}, generation {generation} (test figures)"
    monkeypatch.setattr(memory, "_measured_cpu_choice", lambda recipe, shape: PrecisionChoice(training, line,
                                                                                                generation))
    cpu = DeviceMemory("test host", 64 * GIB, "cpu")
    est = estimate_memory(_recipe(), {"policy": SHAPE}, cpu, ranks=1, max_prompt_tokens=32)
    parts = _parts(est)
    act = 2 if training == "bf16" else 4
    assert parts["activations"] == 4 * 128 * 2 * block_activation_bytes_per_token(SHAPE, act)
    assert ("bf16 weight casts cached by autocast" in parts) == (training == "bf16")
    hf = next(p for p in est.parts if p.name.startswith("hf generation KV cache"))
    copy = 2 * SHAPE.params if generation == "bf16" else 0
    assert hf.bytes == 8 * 8 * 128 * SHAPE.kv_bytes_per_token * (2 if generation == "bf16" else 4) / 2 + 2 * copy
    assert ("bf16 weight copy + its packed weights" in hf.name) == (generation == "bf16")
    assert f"({line})" in est.table()


def test_adding_a_model_to_the_estimate_is_one_line(monkeypatch):
    from rlvr.preflight import memory

    gpu = DeviceMemory("test GPU", 80 * GIB, "gpu")
    before = estimate_memory(_recipe(), {"policy": SHAPE}, gpu, ranks=1, max_prompt_tokens=32)
    monkeypatch.setattr(memory, "EXTRA_MODELS", memory.EXTRA_MODELS + (("judge", lambda r: ["judge"], False),))
    after = estimate_memory(_recipe(), {"policy": SHAPE, "judge": SHAPE}, gpu, ranks=1, max_prompt_tokens=32)
    assert after.peak_bytes - before.peak_bytes == 4 * SHAPE.params


def test_memory_holds_the_models_ppo_loads_from_the_recipe():
    """PPO against a 2-member ensemble: the reference (always, even at beta 0), both reward models whole, and the critic
    (a copy of the first reward model) with gradients and Adam moments like a trained model."""
    from rlvr.preflight.memory import held_models

    gpu = DeviceMemory("test GPU", 80 * GIB, "gpu")
    rm_shape = ModelShape(params=250_000_000, layers=2, hidden=8, intermediate=16, heads=2, kv_heads=1, head_dim=4,
                          vocab=100, max_positions=None, source="test rm")
    recipe = _recipe(reward={"source": "reward_model"}, reward_model={"paths": ["rm_a", "rm_b"]},
                     algorithm={"name": "ppo"})
    assert held_models(recipe) == [("policy", recipe.model.name, True), ("reference", recipe.model.name, False),
                                   ("reward model 1", "rm_a", False), ("reward model 2", "rm_b", False),
                                   ("critic", "rm_a", True)]
    shapes = {"policy": SHAPE, "reward model 1": rm_shape, "reward model 2": rm_shape, "critic": rm_shape}
    parts = _parts(estimate_memory(recipe, shapes, gpu, ranks=1, max_prompt_tokens=32))
    m = rm_shape.params
    assert (parts["reference weights"], parts["reward model 1 weights"], parts["reward model 2 weights"]) == \
        (4 * SHAPE.params, 4 * m, 4 * m)
    assert (parts["critic weights"], parts["critic gradients"], parts["critic Adam moments"]) == (4 * m, 4 * m, 8 * m)
    # the critic on the policy's trunk is sized as the policy; GRPO with verifiers holds none of these
    policy_critic = _recipe(reward={"source": "reward_model"}, reward_model={"path": "rm_a"},
                            algorithm={"name": "ppo", "critic": {"init": "policy"}})
    assert held_models(policy_critic)[-1] == ("critic", policy_critic.model.name, True)
    assert [role for role, _, _ in held_models(_recipe())] == ["policy"]


def test_a_recipe_that_cannot_fit_is_an_error_naming_the_knob(tmp_path, capsys):
    raw = yaml.safe_load((REPO / "recipes/r1_zero_qwen2.5_math_7b.yaml").read_text())
    raw["trainer"]["zero_stage"] = 2  # the weights whole on every rank
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw), "--ranks", "8", "--gpu-memory", "A100-40GB"])
    assert code == 1
    assert "error   memory: 98.7 GiB per rank at the peak of training does not fit in 39.4 GiB (A100-40GB); the " \
           "largest part is policy weights (fp32) (28.4 GiB): turn trainer.zero_stage: 3 (shards weights)" in out
    assert re.search(r"reference weights \(fp32, whole\) +28.37 GiB", out)
    assert "vLLM's share of the GPU cannot hold its bf16 weights and one whole sequence" in out


def test_under_zero3_the_reference_is_sharded_like_the_policy(tmp_path, capsys):
    raw = yaml.safe_load((REPO / "recipes/r1_zero_qwen2.5_math_7b.yaml").read_text())
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw), "--ranks", "8", "--gpu-memory", "H100-80GB"])
    # offline the hub model is an error (and the run folder's disk may be too small); the estimate runs all the same
    assert "error   model: model.name='Qwen/Qwen2.5-Math-7B': not a local folder" in out, out
    assert re.search(r"reference weights \(fp32, ZeRO-3 / 8 ranks\) +3.55 GiB", out)  # 4 x 7.62e9 / 8
    assert re.search(r"peak \(generation\) +42.99 GiB", out)  # as the recipe's header says


def test_device_memory_names_and_sizes():
    assert parse_device_memory("h100-80gb").bytes == int(79.2 * GIB)
    assert parse_device_memory("80GB").bytes == 80 * 10**9
    assert parse_device_memory("24GiB").bytes == 24 * GIB
    with pytest.raises(ValueError, match="expected a GPU name .* or a size such as 80GB"):
        parse_device_memory("big")


# ------------------------------------------------------------------------------------------------ shipped recipes
GPU_RECIPES = {  # recipe -> (ranks, GPU) as its header states
    "r1_zero_qwen2.5_math_7b.yaml": (8, "H100-80GB"),
    "r1_zero_qwen2.5_math_7b_lora.yaml": (1, "H100-80GB"),
    "dapo_qwen2.5_math_7b.yaml": (8, "H100-80GB"),
    "r1_zero_qwen2.5_math_1.5b.yaml": (8, "A100-40GB"),
    "dr_grpo_qwen2.5_math_1.5b.yaml": (8, "A100-40GB"),
    "code_rl.yaml": (1, "L4-24GB"),
}


def test_every_shipped_recipe_is_covered():
    shipped = {p.name for p in (REPO / "recipes").glob("*.yaml")}
    cpu_demos = {"demo.yaml", "tool_demo.yaml", "rm_demo.yaml", "ppo_rm_demo.yaml", "sft_tool_demo.yaml", "dpo_demo.yaml",
                 "guessing_demo.yaml"}
    assert shipped == set(GPU_RECIPES) | cpu_demos


def _rm_run_dir(tmp_path: Path) -> Path:
    """A stand-in for an ``rlvr rm train`` run directory: RUN_DIR/model/config.json (the embedded SmolLM2's)."""
    from rlvr.models.embedded import embedded_model_dir

    (tmp_path / "rm_run" / "model").mkdir(parents=True)
    config = (embedded_model_dir() / "config.json").read_text()
    (tmp_path / "rm_run" / "model" / "config.json").write_text(config)
    return tmp_path / "rm_run"


def test_the_ppo_demo_recipe_passes(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    rm = _rm_run_dir(tmp_path)
    code, out = _check(capsys, ["recipes/ppo_rm_demo.yaml", "--set", f"reward_model.path={rm}"])
    assert code == 0, out
    assert "24 samples over 1 rank(s)" in out and "recipes/ppo_rm_demo.yaml: ok: 0 error(s)" in out, out
    assert f"ok      reward model: 1 reward model folder(s) found: {rm / 'model'}" in out, out


def test_a_missing_reward_model_folder_is_an_error_naming_the_key(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    code, out = _check(capsys, ["recipes/ppo_rm_demo.yaml", "--set", f"reward_model.path={tmp_path / 'no_rm'}"])
    assert code == 1
    assert f"error   reward model: reward_model.path: '{tmp_path / 'no_rm'}': no such folder; expected a folder " \
           "written by `rlvr rm train`" in out, out
    (tmp_path / "empty_rm").mkdir()
    code, out = _check(capsys, ["recipes/ppo_rm_demo.yaml", "--set", f"reward_model.path={tmp_path / 'empty_rm'}"])
    assert code == 1
    assert f"reward_model.path: '{tmp_path / 'empty_rm'}': no config.json in it (nor in its model/)" in out, out
    # verifier rewards, but PPO's critic still starts as a copy of the reward model: its folder is checked too
    raw = yaml.safe_load((REPO / "recipes/ppo_rm_demo.yaml").read_text())
    raw["reward"]["source"], raw["verifiers"][0]["optimise"] = "verifiers", True
    raw["reward_model"]["path"] = str(tmp_path / "no_rm")
    code, out = _check(capsys, [_write(tmp_path / "ppo_verifiers.yaml", raw)])
    assert code == 1
    assert f"error   reward model: reward_model.path: '{tmp_path / 'no_rm'}': no such folder" in out, out


def test_the_reward_model_demo_recipe_passes(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out = _check(capsys, ["recipes/rm_demo.yaml"])
    assert code == 0, out
    assert "ok      data: datasets/larger_2d_pairs.jsonl: 223 prompts, 443 preference pairs" in out, out
    assert "recipes/rm_demo.yaml: ok: 0 error(s)" in out


def test_a_reward_model_recipe_with_a_missing_pairs_file_fails(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out = _check(capsys, ["recipes/rm_demo.yaml", "--set", "data.source.path=nowhere.jsonl"])
    assert code == 1 and "error   data: preference file not found: nowhere.jsonl" in out, out


@pytest.mark.parametrize("name", sorted(GPU_RECIPES))
def test_shipped_gpu_recipes_offline_have_their_memory_estimated_for_their_gpu(name, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    ranks, gpu = GPU_RECIPES[name]
    code, out = _check(capsys, [f"recipes/{name}", "--ranks", str(ranks), "--gpu-memory", gpu])
    # offline, a hub model that is not in the local hub cache is an error (`rlvr train` would fail there) ...
    model = yaml.safe_load((REPO / "recipes" / name).read_text())["model"]["name"]
    assert code == 1 and f"error   model: model.name='{model}': not a local folder, not in the local hub cache" in out
    # ... and the memory estimate still runs, from the known model shapes
    assert "info    memory: per rank" in out or "warn    memory:" in out, out
    assert f"({gpu})" in out


def test_the_demo_recipe_passes_every_check(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out = _check(capsys, ["recipes/demo.yaml", "--resolved"])
    assert code == 0, out
    for check in ("schema", "verifiers", "data", "model", "eos", "gold"):
        assert f"ok      {check}:" in out, (check, out)
    assert "recipes/demo.yaml: ok: 0 error(s), 0 warning(s), 0 check(s) skipped" in out
    assert "preset: grpo" in out and "clip_high: 0.2" in out  # --resolved


@pytest.mark.parametrize("overrides", [[], ["--set", "rollout.tools=[]", "--set", "data.shot_field=null"]],
                         ids=["python tool", "without tools"])
def test_the_tool_demo_recipe_passes_with_and_without_its_tool(overrides, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out = _check(capsys, ["recipes/tool_demo.yaml", *overrides])
    assert code == 0, out
    for check in ("schema", "verifiers", "data", "model", "eos", "gold"):
        assert f"ok      {check}:" in out, (check, out)
    assert "recipes/tool_demo.yaml: ok: 0 error(s)" in out, out


def test_the_guessing_demo_recipe_passes_with_its_environment_as_the_only_reward(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out = _check(capsys, ["recipes/guessing_demo.yaml"])
    assert code == 0, out
    assert "ok      data: 270 rows from jsonl datasets/guessing.jsonl, each with 'question', 'answer'" in out, out
    assert "skip    gold: no verifiers (a reward model or the environment scores the completions)" in out, out
    assert "ok      environment: rlvr.tools.envs.number_guessing:NumberGuessing resolves (from " \
           f"{REPO}/rlvr/tools/envs/number_guessing.py); environment_kwargs {{'max_guesses': 4}} fit its constructor; " \
           "it sees the whole row" in out, out
    assert "recipes/guessing_demo.yaml: ok: 0 error(s)" in out, out


def test_a_mistyped_environment_is_a_check_error_naming_the_key(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out = _check(capsys, ["recipes/guessing_demo.yaml", "--set", "rollout.environment_kwargs={max_guess: 4}"])
    assert code == 1
    assert "error   environment: rollout.environment 'rlvr.tools.envs.number_guessing:NumberGuessing': " \
           "environment_kwargs has 'max_guess', which its constructor does not take. Did you mean 'max_guesses'?" in out


# ------------------------------------------------------------------------------------------------ at the start of runs
def test_train_eval_and_filter_stop_on_a_failed_check_before_loading_the_model(tiny, tmp_path, capsys):
    model = _chat_model(tmp_path)  # its end-of-turn token does not stop generation
    path = _write(tmp_path / "r.yaml", tiny_recipe(model, tiny[1]))
    for argv in (["train", path, "-o", str(tmp_path / "run")], ["eval", str(model), "--recipe", path],
                 ["filter", path, "--out", str(tmp_path / "f.jsonl")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "error: the recipe's pre-flight checks failed:\n  eos: the chat template ends an assistant turn with " \
               "'<|im_end|>'" in err, (argv, err)
        assert "Traceback" not in err
    assert not (tmp_path / "run").exists() and not (tmp_path / "f.jsonl").exists()


@verifier("test_accepts_anything", score_range=(0.0, 1.0))
def accepts_anything(completion: str, sample: dict) -> float:
    return 1.0


def test_a_verifier_that_scores_a_wrong_answer_as_the_gold_is_reported(tiny, tmp_path, capsys, monkeypatch):
    from rlvr.preflight import gold

    monkeypatch.setattr(gold, "BUILT_IN_ANSWER_CHECKS", {"math", "test_accepts_anything"})
    raw = tiny_recipe(*tiny, verifiers=[{"name": "test_accepts_anything"}, {"name": "math"}],
                      reward={"solved_verifier": None})
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert code == 1
    assert f"error   gold: test_accepts_anything: a wrong answer ({gold.WRONG_ANSWER}) scores 1 against the gold on " \
           f"every one of 16 sampled rows: the verifier accepts anything there" in out
    assert "math: a wrong answer" not in out and "ok      gold: math: the gold of all 16 sampled rows scores 1" in out


def returns_text(completion: str, sample: dict) -> str:
    return "1.0"


def test_a_verifier_that_returns_a_string_is_an_error(tiny, tmp_path, capsys):
    raw = tiny_recipe(*tiny, verifiers=[{"name": "tests.preflight.test_preflight:returns_text"}],
                      reward={"solved_verifier": None})
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert code == 1, out
    assert "error   gold: tests.preflight.test_preflight:returns_text: returned str, expected float, None or dict on " \
           "32 of 32 sampled completions (e.g. row " in out


def test_flash_attention_on_a_cpu_is_an_error_before_the_model_loads(tiny, tmp_path, capsys):
    raw = tiny_recipe(*tiny, model={"attn_implementation": "flash_attention_2"})
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert code == 1
    assert ("error   attention: model.attn_implementation: flash_attention_2 runs on CUDA GPUs only, and this machine "
            "has none: use sdpa (or leave it unset) on a CPU") in out


def test_verifier_workers_and_threads_against_the_cores(tiny, tmp_path, capsys, monkeypatch):
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    raw = tiny_recipe(*tiny, reward={"num_workers": 1000}, trainer={"num_threads": 8})
    code, out = _check(capsys, [_write(tmp_path / "r.yaml", raw)])
    assert code == 1
    assert ("error   cores: reward.num_workers=1000 verifier processes on 2 core(s): more than 16 a core only waits for "
            "the cores (and may hit the process limit); use at most 8") in out
    assert "warn    cores: trainer.num_threads=8 on 2 core(s)" in out
