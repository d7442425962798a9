"""Two ranks train exactly like one: the same global batch split over 2 CPU processes (gloo, ``torchrun``) gives the
same losses, metrics and updated weights as 1 process, for ZeRO stages 0 and 3; a 2-rank ZeRO-3 checkpoint resumes on
1 rank.

Both runs use :class:`FakeRolloutEngine`, whose samples depend only on the prompt, so they train on identical data
however the prompts are split over ranks. The file is also the worker script: ``torchrun ... tests/trainer/test_multirank.py
OUT SCENARIOS.json`` trains each scenario in turn and rank 0 writes the metrics; the HF model comes from the
trainer's checkpoint (rank 0 saves it, from gathered parameters under ZeRO-3).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests import limits

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.multiprocess


class FakeRolloutEngine:
    """Deterministic samples: completion j of a prompt is a function of (prompt ids, j) only, never of the rank.

    Completions mix digits and letters (the tiny digit reward varies within a group), have 1..max_new_tokens tokens
    and end with eos unless cut at max_new_tokens. Log-probs are a fixed -2.0 (the trainer's are compared to them in
    ``train/rollout_logprob_diff_*``).
    """

    def __init__(self, eos_id: int, token_ids: list[int]) -> None:
        self.eos_id = eos_id
        self.token_ids = token_ids
        self.syncs = 0

    def generate(self, prompt_token_ids: list[list[int]], n: int, sampling) -> list:
        from rlvr.rollout.base import Completion

        groups = []
        for prompt in prompt_token_ids:
            group = []
            for j in range(n):
                digest = hashlib.sha256(json.dumps([prompt, j]).encode()).digest()
                length = 1 + digest[0] % sampling.max_new_tokens
                ids = [self.token_ids[b % len(self.token_ids)] for b in digest[1:1 + length]]
                stop = length < sampling.max_new_tokens
                if stop:
                    ids[-1] = self.eos_id
                group.append(Completion(ids, [-2.0] * len(ids), "stop" if stop else "length"))
            groups.append(group)
        return groups

    def sync_weights(self, model) -> None:
        self.syncs += 1


# ------------------------------------------------------------------------------------------------ worker side
def _run_scenario(sc: dict) -> None:
    """Train one scenario on every rank; rank 0 writes ``metrics.jsonl`` and the final checkpoint into ``run_dir``."""
    from rlvr.config import resolve
    from rlvr.models.loading import load_tokenizer
    from rlvr.trainer.trainer import RLTrainer
    from tests.tiny import skip_plots

    recipe = resolve(sc["recipe"])
    tok = load_tokenizer(recipe.model.name, recipe.model)
    if sc.get("tools"):  # fenced calls of the add tool, each sample a function of its prompt ids only
        from tests.tools.scripted import PromptSeededAddToolEngine

        engine = PromptSeededAddToolEngine(tok)
    elif sc.get("slow"):  # each sample a function of its prompt ids only, 20 ms a group (K >= 1 runs)
        from tests.trainer.slow_engine import SlowScriptedEngine

        engine = SlowScriptedEngine(tok, delay_s=0.02)
    else:
        vocab = [tok.convert_tokens_to_ids(c) for c in "0123456789abc"]
        engine = FakeRolloutEngine(int(tok.eos_token_id), vocab)
    run_dir = Path(sc["run_dir"])
    trainer = RLTrainer(recipe, run_dir, resume=sc.get("resume", False), rollout_engine=engine,
                          allow_changed=sc.get("allow_changed", ()))
    skip_plots()  # PNG plots cost ~5 s per save here and are not what this test checks
    idle = []  # zero-loss passes this rank ran to match another rank's extra ZeRO-3 micro-batches
    real_idle_pass = trainer.policy.idle_pass
    trainer.policy.idle_pass = lambda backward: (idle.append(backward), real_idle_pass(backward))
    start = trainer.step_done
    trainer.train()
    (run_dir / f"idle-passes-rank{trainer.dist.rank}.json").write_text(json.dumps(len(idle)))
    if sc.get("merged"):  # a LoRA policy's merged weights as vLLM's sync builds them (ZeRO-3: from gathered partitions)
        from safetensors.torch import save_file

        from rlvr.models.lora import merged_weights
        from rlvr.rollout.weight_sync import iter_full_weights

        merged = {n: t.detach().clone().contiguous() for n, t in merged_weights(trainer.model,
                                                                                iter_full_weights(trainer.model))}
        if trainer.dist.is_main:
            save_file(merged, str(run_dir / "merged.safetensors"))
    # one sync after each update, plus one after loading a checkpoint
    assert engine.syncs == recipe.trainer.steps - start + (1 if sc.get("resume") else 0)
    trainer.engine.destroy()


def worker_main(scenarios_file: str) -> None:
    import torch.distributed as dist

    for sc in json.loads(Path(scenarios_file).read_text()):
        _run_scenario(sc)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------------------ test side
def _recipe(model_dir: Path, data: Path, zero_stage: int, steps: int, **extra) -> dict:
    from tests.tiny import tiny_recipe

    # persistence threshold 0: ZeRO-3 partitions every parameter (by default it keeps those under 1e5 elements whole,
    # which is all of the tiny model's)
    ds = {"zero_optimization": {"stage3_param_persistence_threshold": 0}} if zero_stage == 3 else {}
    # ZeRO-3 runs also split micro-batches by a token budget: ranks then run different numbers of micro-batches,
    # which only works if the shorter rank joins the others' parameter gathers with idle passes
    budget = {"micro_batch_tokens": 40} if zero_stage == 3 else {}
    return tiny_recipe(model_dir, data, trainer={"steps": steps, "zero_stage": zero_stage, "save_every": 0,
                                                 "keep_checkpoints": 3, "log_samples_every": 0,
                                                 "deepspeed_config": ds, **extra},
                       # 2 epochs: the second one sees a moved policy, so ratios, clipping and old log-probs are live
                       algorithm={"loss_agg": "token-mean", "ppo_epochs": 2, "kl": {"beta": 0.05}},
                       optim={"lr": 1e-2, "micro_batch_size": 4, **budget},
                       rollout={"prompts_per_step": 4, "group_size": 4})


def _torchrun(nproc: int, scenarios: list[dict], tmp: Path, name: str) -> None:
    spec = tmp / f"{name}.json"
    spec.write_text(json.dumps(scenarios))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):  # set by in-process trainer tests
        env.pop(key, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(Path(__file__).resolve()), str(spec)]
    proc = limits.run(cmd, 300, cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"


def _metrics(run_dir: Path) -> list[dict]:
    from rlvr.runs.metrics import read_metrics

    return [m for m in read_metrics(run_dir) if "train/loss" in m]


def _weights(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


COMPARED = ("train/loss", "train/entropy", "train/grad_norm", "train/kl", "train/clip_fraction", "train/ratio_mean",
            "train/rollout_logprob_diff_mean", "reward/mean", "reward/std", "rollout/response_length",
            "train/optimizer_steps")


def _assert_same_metrics(a: list[dict], b: list[dict], label: str) -> None:
    assert [m["step"] for m in a] == [m["step"] for m in b], label
    for ma, mb in zip(a, b, strict=True):
        for key in COMPARED:
            assert (key in ma) == (key in mb), (label, ma["step"], key)
            if key not in mb:  # train/kl without a reference policy
                continue
            assert ma[key] == pytest.approx(mb[key], rel=2e-4, abs=1e-6, nan_ok=True), \
                (label, ma["step"], key, ma[key], mb[key])


def _assert_same_weights(a: dict, b: dict, label: str, moved_from: dict | None = None, atol: float = 2e-5) -> None:
    import torch

    assert a.keys() == b.keys(), label
    # Adam divides by sqrt(v): for a weight with a tiny gradient, fp32 summation-order noise (2 ranks reduce in another
    # order than 1) moves the update by up to ~1e-5 after 3 steps of lr 1e-2, against moves of ~1e-2 per step (the
    # fused log-prob backward sums in another order again: one weight of 2048 at 1.07e-5 in the ZeRO-2 run)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=atol, msg=lambda m: f"{label} {name}: {m}")
    if moved_from is not None:  # and training did change them: equality is not two untouched copies
        assert max(float((a[n] - moved_from[n]).abs().max()) for n in a) > 1e-3, label


def test_two_ranks_match_one_rank_and_resume_on_one(tmp_path):
    from tests.tiny import build_tiny_model, write_addition_dataset

    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    runs = tmp_path / "runs"

    two = [{"recipe": _recipe(model_dir, data, 0, 2), "run_dir": str(runs / "z0-2ranks")},
           {"recipe": _recipe(model_dir, data, 3, 2), "run_dir": str(runs / "z3-2ranks")}]
    _torchrun(2, two, tmp_path, "two_ranks")

    # the 2-rank ZeRO-3 checkpoint, resumed by 1 rank for a third step (through DeepSpeed's universal checkpoint)
    shutil.copytree(runs / "z3-2ranks", runs / "z3-2to1")
    one = [{"recipe": _recipe(model_dir, data, 0, 2), "run_dir": str(runs / "z0-1rank")},
           {"recipe": _recipe(model_dir, data, 3, 3, save_every=2), "run_dir": str(runs / "z3-1rank")},
           {"recipe": _recipe(model_dir, data, 3, 3), "run_dir": str(runs / "z3-2to1"), "resume": True,
            "allow_changed": ["trainer.steps"]}]  # the 2-step run is extended to 3 steps
    _torchrun(1, one, tmp_path, "one_rank")

    initial = _weights(model_dir)
    ref = _metrics(runs / "z0-1rank")
    assert len(ref) == 2 and ref[0]["train/optimizer_steps"] == 2
    assert ref[1]["train/loss"] != pytest.approx(ref[0]["train/loss"], abs=1e-6)  # the policy moved

    # same global batch of 16 samples: 2 x 8 on two ranks == 16 on one
    _assert_same_metrics(_metrics(runs / "z0-2ranks"), ref[:2], "zero-0, 2 ranks vs 1")
    _assert_same_weights(_weights(runs / "z0-2ranks/checkpoints/step-2/model"),
                         _weights(runs / "z0-1rank/checkpoints/step-2/model"), "zero-0 weights", moved_from=initial)
    z3_ref = _metrics(runs / "z3-1rank")
    assert len(z3_ref) == 3
    _assert_same_metrics(_metrics(runs / "z3-2ranks"), z3_ref[:2], "zero-3, 2 ranks vs 1")
    _assert_same_metrics(z3_ref[:2], ref, "zero-3 vs zero-0, 1 rank")
    idle = [json.loads((runs / f"z3-2ranks/idle-passes-rank{r}.json").read_text()) for r in (0, 1)]
    assert sum(idle) > 0, idle  # the ranks did run different numbers of micro-batches
    # the HF model of a ZeRO-3 run is saved from gathered parameters (not the empty local partitions)
    _assert_same_weights(_weights(runs / "z3-2ranks/checkpoints/step-2/model"),
                         _weights(runs / "z0-1rank/checkpoints/step-2/model"), "zero-3 weights", moved_from=initial)

    # resuming the 2-rank checkpoint on 1 rank continues exactly where the 1-rank run went (Adam moments included)
    resumed = _metrics(runs / "z3-2to1")
    assert [m["step"] for m in resumed] == [1, 2, 3]
    assert (runs / "z3-2to1/checkpoints/step-2/deepspeed/state_universal").is_dir()
    _assert_same_metrics(resumed[2:], z3_ref[2:], "zero-3, 2 ranks -> resumed on 1 rank, step 3")
    _assert_same_weights(_weights(runs / "z3-2to1/checkpoints/step-3/model"),
                         _weights(runs / "z3-1rank/checkpoints/step-3/model"), "resumed weights")


def test_zero2_with_unequal_micro_batch_counts_and_global_statistics(tmp_path):
    """ZeRO-2 reduces gradients in every backward: with a token budget the two ranks split their samples into different
    numbers of micro-batches, and the shorter rank must join the other's reductions with idle passes (issue 11, fix 9;
    before, only ZeRO-3 was padded and the ranks' collectives mismatched). The run also uses REINFORCE++ with KL in
    the reward, whose batch normalisation must be over both ranks (fix 1), and compares the largest rollout log-prob
    difference, which must be the max over ranks, not rank 0's (fix 7)."""
    from tests.tiny import build_tiny_model, write_addition_dataset

    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    runs = tmp_path / "runs"

    def recipe() -> dict:
        raw = _recipe(model_dir, data, 2, 2)
        raw["optim"]["micro_batch_tokens"] = 40
        raw["algorithm"] = {"loss_agg": "token-mean", "ppo_epochs": 2, "name": "reinforce_pp",
                            "kl": {"beta": 0.05, "estimator": "k1", "placement": "reward"}}
        return raw

    _torchrun(2, [{"recipe": recipe(), "run_dir": str(runs / "z2-2ranks")}], tmp_path, "zero2_two_ranks")
    _torchrun(1, [{"recipe": recipe(), "run_dir": str(runs / "z2-1rank")}], tmp_path, "zero2_one_rank")
    idle = [json.loads((runs / f"z2-2ranks/idle-passes-rank{r}.json").read_text()) for r in (0, 1)]
    assert sum(idle) > 0, idle  # the ranks did run different numbers of micro-batches
    ref = _metrics(runs / "z2-1rank")
    _assert_same_metrics(_metrics(runs / "z2-2ranks"), ref, "zero-2, 2 ranks vs 1")
    for a, b in zip(_metrics(runs / "z2-2ranks"), ref, strict=True):
        assert a["train/rollout_logprob_diff_max"] == pytest.approx(b["train/rollout_logprob_diff_max"], rel=1e-5)
    _assert_same_weights(_weights(runs / "z2-2ranks/checkpoints/step-2/model"),
                         _weights(runs / "z2-1rank/checkpoints/step-2/model"), "zero-2 weights",
                         moved_from=_weights(model_dir))


def test_ppo_at_zero3_on_two_ranks_matches_one_rank(tmp_path):
    """PPO against a reward model under ZeRO-3: the policy, the critic, the reference and the reward model are all
    partitioned (the last two as ZeRO-3 inference engines, rlvr/trainer/sharded_inference.py), and a token budget
    gives the ranks different micro-batch counts, so each model's idle passes must line up. 2 ranks train as 1."""
    from rlvr.reward_model.model import RewardModel
    from tests.tiny import build_tiny_model, build_tokenizer, write_addition_dataset

    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    RewardModel.from_backbone(str(build_tiny_model(tmp_path / "rm_backbone", seed=3, init_std=0.2)), seed=1) \
        .save(tmp_path / "rm", build_tokenizer())
    runs = tmp_path / "runs"

    def recipe() -> dict:
        raw = _recipe(model_dir, data, 3, 2)
        raw["algorithm"] = {"name": "ppo", "loss_agg": "token-mean", "ppo_epochs": 2, "kl": {"beta": 0.05},
                            "critic": {"lr": 1e-2, "reward_normalize": True}}
        raw["reward"] = {"num_workers": 1, "source": "reward_model"}
        raw["reward_model"] = {"path": str(tmp_path / "rm"), "micro_batch_size": 3}
        return raw

    _torchrun(2, [{"recipe": recipe(), "run_dir": str(runs / "ppo-2ranks")}], tmp_path, "ppo_two_ranks")
    _torchrun(1, [{"recipe": recipe(), "run_dir": str(runs / "ppo-1rank")}], tmp_path, "ppo_one_rank")
    idle = [json.loads((runs / f"ppo-2ranks/idle-passes-rank{r}.json").read_text()) for r in (0, 1)]
    assert sum(idle) > 0, idle  # the ranks did run different numbers of micro-batches
    two, one = _metrics(runs / "ppo-2ranks"), _metrics(runs / "ppo-1rank")
    _assert_same_metrics(two, one, "ppo zero-3, 2 ranks vs 1")
    for a, b in zip(two, one, strict=True):
        for key in ("reward/rm_mean", "critic/value_loss", "critic/explained_variance", "train/sqrt_kl_from_init"):
            assert a[key] == pytest.approx(b[key], rel=2e-4, abs=1e-6), (a["step"], key, a[key], b[key])
    _assert_same_weights(_weights(runs / "ppo-2ranks/checkpoints/step-2/model"),
                         _weights(runs / "ppo-1rank/checkpoints/step-2/model"), "ppo zero-3 weights",
                         moved_from=_weights(model_dir))


LORA = {"rank": 4, "alpha": 8, "target_modules": "all-linear"}


def test_lora_two_ranks_match_one_rank_at_zero2_and_zero3(tmp_path):
    """A LoRA policy (adapters only train, the reference is the policy with its adapters off) on 2 ranks trains like
    1 rank under ZeRO-2 and ZeRO-3 (token budget: unequal micro-batch counts, idle passes), and the two stages agree.
    The saved adapters match, and so do the merged weights (base + (alpha / r) B A) built from ZeRO-3's gathered
    partitions the way the vLLM sync builds them, which equal the saved adapter folder merged with peft."""
    import torch

    from rlvr.config import ModelConfig
    from rlvr.models.lora import load_merged_adapter
    from tests.tiny import build_tiny_model, write_addition_dataset

    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    runs = tmp_path / "runs"

    def recipe(stage: int) -> dict:
        raw = _recipe(model_dir, data, stage, 2)
        raw["model"]["lora"] = LORA
        raw["optim"]["micro_batch_tokens"] = 40
        return raw

    def scenarios(ranks: int) -> list[dict]:
        return [{"recipe": recipe(stage), "run_dir": str(runs / f"lora-z{stage}-{ranks}"), "merged": True}
                for stage in (2, 3)]

    _torchrun(2, scenarios(2), tmp_path, "lora_two_ranks")
    _torchrun(1, scenarios(1), tmp_path, "lora_one_rank")
    ref = _metrics(runs / "lora-z2-1")
    assert len(ref) == 2 and ref[1]["train/kl"] > 1e-7  # the adapters moved the policy away from the base
    for stage in (2, 3):
        idle = [json.loads((runs / f"lora-z{stage}-2/idle-passes-rank{r}.json").read_text()) for r in (0, 1)]
        assert sum(idle) > 0, (stage, idle)  # the ranks did run different numbers of micro-batches
        _assert_same_metrics(_metrics(runs / f"lora-z{stage}-2"), ref, f"lora zero-{stage}, 2 ranks vs 1")
        _assert_same_metrics(_metrics(runs / f"lora-z{stage}-1"), ref, f"lora zero-{stage} vs zero-2, 1 rank")

    def adapters(run: str) -> dict:
        return _weights_file(runs / run / "checkpoints/step-2/model/adapter_model.safetensors")

    initial_b = {n: torch.zeros_like(t) for n, t in adapters("lora-z2-1").items()}
    for run in ("lora-z2-2", "lora-z3-2", "lora-z3-1"):
        assert not (runs / run / "checkpoints/step-2/model/model.safetensors").exists()
        _assert_same_weights(adapters(run), adapters("lora-z2-1"), f"{run} adapters")
    assert max(float(t.abs().max()) for n, t in adapters("lora-z3-2").items() if "lora_B" in n) > 1e-3
    assert set(initial_b) == set(adapters("lora-z3-2"))

    want = _weights_file(runs / "lora-z2-1/merged.safetensors")
    base = _weights(model_dir)
    assert set(want) == set(base)  # the base model's own names, nothing of peft's
    for run in ("lora-z2-2", "lora-z3-2", "lora-z3-1"):
        _assert_same_weights(_weights_file(runs / run / "merged.safetensors"), want, f"{run} merged",
                             moved_from=base)
    peft_merged = load_merged_adapter(runs / "lora-z3-2/checkpoints/step-2/model", ModelConfig(name=str(model_dir)))
    _assert_same_weights({n: p.detach() for n, p in peft_merged.named_parameters()},
                         {n: want[n] for n, _ in peft_merged.named_parameters()}, "merged vs peft merge_and_unload")


def _weights_file(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


TOOL_METRICS = ("tools/calls_per_sample", "tools/error_rate", "tools/timeouts", "tools/truncated_outputs",
                "tools/turns_per_sample", "tools/fraction_of_samples_calling")


def test_tool_rollouts_on_two_ranks_match_one_rank(tmp_path):
    """With ``rollout.tools`` (the ``add`` function tool in the fenced format; equal operands fail) 2 ranks train as
    1 under ZeRO-3 with a token budget: each rank runs its own prompts' tool calls, the ``tools/*`` metrics count
    both ranks' samples (rates and per-sample means, not a sum of the ranks' rates), the tool answers stay out of the
    loss on every rank, and the updated weights match."""
    from tests.tiny import write_addition_dataset
    from tests.tools.scripted import build_tiny_chat_model

    model_dir = build_tiny_chat_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    runs = tmp_path / "runs"

    def recipe() -> dict:
        raw = _recipe(model_dir, data, 3, 2)
        raw["rollout"].update({"max_new_tokens": 64, "tools": [{"name": "tests.tools.scripted:add"}],
                               "max_turns": 3, "max_tool_output_tokens": 16})
        raw["verifiers"] = [{"name": "tests.tiny:digit_fraction"}, {"name": "tests.tools.scripted:used_a_tool"}]
        raw["reward"] = {"num_workers": 1, "solved_verifier": "tests.tools.scripted:used_a_tool"}
        # rows of ~470 tokens, ~500 where the call failed: 2 rows per micro-batch, 1 where a failed call is the
        # longer; the ranks, whose failed calls differ, then run different numbers of micro-batches
        raw["optim"]["micro_batch_tokens"] = 960
        # no KL term: every group of step 1 has equal rewards (zero advantages), so the step's only gradient would be
        # the KL's float noise (policy and reference log-probs of the same weights, ~1e-7 apart where a CPU's kernels
        # depend on the row grouping), which Adam scales up to a full step of lr in a direction that differs by rank
        raw["algorithm"]["kl"] = {"beta": 0.0}
        return raw

    _torchrun(2, [{"recipe": recipe(), "run_dir": str(runs / "tools-2ranks"), "tools": True}], tmp_path,
              "tools_two_ranks")
    _torchrun(1, [{"recipe": recipe(), "run_dir": str(runs / "tools-1rank"), "tools": True}], tmp_path,
              "tools_one_rank")
    two, one = _metrics(runs / "tools-2ranks"), _metrics(runs / "tools-1rank")
    assert len(one) == 2
    for m in one:
        assert m["tools/calls_per_sample"] == 1.0 and m["tools/turns_per_sample"] == 2.0
        assert m["tools/fraction_of_samples_calling"] == 1.0 and m["tools/timeouts"] == 0.0
        assert m["rollout/response_length"] < 40  # sampled tokens only, not the tool output
    assert 0.0 < sum(m["tools/error_rate"] for m in one) < len(one)  # some calls failed, not all
    _assert_same_metrics(two, one, "tools zero-3, 2 ranks vs 1")
    for a, b in zip(two, one, strict=True):
        for key in (*TOOL_METRICS, "reward/solve_rate", "reward/samples"):
            assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), (a["step"], key, a[key], b[key])
    idle = [json.loads((runs / f"tools-2ranks/idle-passes-rank{r}.json").read_text()) for r in (0, 1)]
    assert sum(idle) > 0, idle  # the ranks did run different numbers of micro-batches
    _assert_same_weights(_weights(runs / "tools-2ranks/checkpoints/step-2/model"),
                         _weights(runs / "tools-1rank/checkpoints/step-2/model"), "tools zero-3 weights",
                         moved_from=_weights(model_dir))


def test_asynchronous_rollouts_on_two_ranks_match_one_rank(tmp_path):
    """``rollout.max_off_policy_steps: 1`` on 2 ranks under ZeRO-3: each rank's producer thread makes its share of the
    next step's batch while the update runs, its collectives (dynamic sampling's counts, the curriculum's tables) on a
    process group of its own, and the run equals one rank's, metric for metric and weight for weight (the scripted
    engine's samples depend on the prompt alone)."""
    from tests.tiny import build_tiny_model, write_addition_dataset

    model_dir = build_tiny_model(tmp_path / "model")
    data = write_addition_dataset(tmp_path / "data.jsonl")
    runs = tmp_path / "runs"

    def recipe() -> dict:
        raw = _recipe(model_dir, data, 3, 3)
        raw["rollout"].update({"engine": "server", "servers": {"urls": ["http://127.0.0.1:9"]},  # never contacted
                               "max_off_policy_steps": 1})
        raw["algorithm"]["dynamic_sampling"] = {"enabled": True, "filter_on": "reward"}
        return raw

    _torchrun(2, [{"recipe": recipe(), "run_dir": str(runs / "k1-2ranks"), "slow": True}], tmp_path, "k1_two_ranks")
    _torchrun(1, [{"recipe": recipe(), "run_dir": str(runs / "k1-1rank"), "slow": True}], tmp_path, "k1_one_rank")
    two, one = _metrics(runs / "k1-2ranks"), _metrics(runs / "k1-1rank")
    assert [m["step"] for m in one] == [1, 2, 3]
    _assert_same_metrics(two, one, "K = 1, 2 ranks vs 1")
    for a, b in zip(two, one, strict=True):
        for key in ("rollout/staleness_mean", "rollout/staleness_max", "rollout/stale_samples_dropped",
                    "rollout/groups_kept", "reward/samples"):
            assert a[key] == b[key], (a["step"], key, a[key], b[key])
    assert [m["rollout/staleness_max"] for m in one] == [0.0, 1.0, 1.0]  # step 1's batch came before any update
    _assert_same_weights(_weights(runs / "k1-2ranks/checkpoints/step-3/model"),
                         _weights(runs / "k1-1rank/checkpoints/step-3/model"), "K = 1 weights",
                         moved_from=_weights(model_dir), atol=1e-4)  # 2 of 2048 weights 4e-5 apart: see the helper


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    worker_main(sys.argv[1])
