"""The reference and the reward model sharded by ZeRO-3 inference (``trainer.zero_stage: 3``) give the same log-probs
and scores as whole frozen copies, on 2 gloo ranks that hold different numbers of samples (the shorter rank joins the
other's parameter gathers with idle passes; one rank scores nothing at all).

The file is also the worker script: ``torchrun --nproc_per_node 2 tests/trainer/test_sharded_inference.py MODEL RM OUT``; each
rank computes both ways and saves them in ``OUT/rank{r}.pt``, and the test compares them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import limits

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.multiprocess

ZERO3 = {"zero_stage": 3, "deepspeed_config": {"zero_optimization": {"stage3_param_persistence_threshold": 0}}}
"""Persistence threshold 0: every parameter is partitioned (the default keeps small ones whole: all of the tiny
model's)."""


def _batch(rank: int, n_prompts: int):
    """``n_prompts`` prompts x 2 samples of 1-3 tokens, prompts of 2-3 tokens that differ by rank."""
    from rlvr.data.prompts import Prompt
    from rlvr.rollout.base import Completion
    from rlvr.trainer.batch import RolloutBatch

    prompts = [Prompt(index=i, row={}, text="", token_ids=[5 + i + rank, 6, 7 + i][: 2 + (i % 2)])
               for i in range(n_prompts)]
    comps = [Completion(token_ids=[8 + j + i, 9, 1][: 1 + (j + i) % 3], logprobs=[0.0] * (1 + (j + i) % 3),
                        finish_reason="stop") for i in range(n_prompts) for j in range(2)]
    return RolloutBatch(prompts=prompts, completions=comps, group_size=2, texts=["1"] * len(comps))


def worker_main(model_dir: str, rm_dir: str, out_dir: str) -> None:
    import torch

    from rlvr.config import ModelConfig, TrainerConfig
    from rlvr.models.loading import load_causal_lm
    from rlvr.reward_model.ensemble import RewardModelEnsemble
    from rlvr.runtime.distributed import init_distributed
    from rlvr.trainer.batch import RolloutBatch, tensorize
    from rlvr.trainer.reward_sources import RewardModelRewards, VerifierRewards
    from rlvr.trainer.sharded_inference import build_inference_engine, shard_ensemble
    from rlvr.trainer.workers import MicroBatchPlan, ModelWorker
    from tests.trainer.test_reward_sources import FakeVerifierPool

    torch.set_num_threads(1)
    dist = init_distributed()
    trainer_cfg = TrainerConfig(**ZERO3)
    out: dict[str, object] = {}

    # the reference: log-probs of every sampled token, 1 row per micro-batch; rank 0 has 4 samples, rank 1 has 2
    # (so 2 idle passes)
    batch = _batch(dist.rank, 2 if dist.rank == 0 else 1)
    tensorize(batch, 0, mask_truncated=False)

    def worker(model, engine):
        return ModelWorker(model, engine, dist=dist, plan=MicroBatchPlan(1, None, 3 if engine is not None else 0),
                           pad_id=0, temperature=0.7, autocast_dtype=None, gradient_checkpointing=False)

    whole = load_causal_lm(model_dir, ModelConfig(name=model_dir)).eval().requires_grad_(False)
    out["ref_whole"] = worker(whole, None).logprobs(batch)
    sharded = load_causal_lm(model_dir, ModelConfig(name=model_dir)).eval()
    engine = build_inference_engine(sharded, trainer_cfg)
    local = sum(p.ds_tensor.numel() for p in sharded.parameters())
    out["ref_partitioned"] = local < sum(p.ds_numel for p in sharded.parameters())  # this rank holds a shard
    out["ref_sharded"] = worker(sharded, engine).logprobs(batch)

    # the reward model (an ensemble of 2): rank 0 scores 6 sequences in micro-batches of 2 (3 forwards per member),
    # rank 1 none (3 idle forwards per member)
    rm_batch = _batch(0, 3) if dist.rank == 0 else RolloutBatch(prompts=[], completions=[], group_size=2, texts=[])
    verifiers = VerifierRewards(FakeVerifierPool(), ["v"], "v", drop_failed=False)
    samples = [{} for _ in rm_batch.completions]

    def rm_source(ensemble, collective):
        return RewardModelRewards(ensemble, verifiers, pad_id=0, micro_batch_size=2, autocast_dtype=None,
                                  add_verifiers=False, rm_weight=1.0, collective=collective)

    out["rm_whole"] = rm_source(RewardModelEnsemble.load([rm_dir, rm_dir], "mean"), False).score(rm_batch, samples) \
        .rm_scores
    ensemble = shard_ensemble(RewardModelEnsemble.load([rm_dir, rm_dir], "mean"), trainer_cfg)
    out["rm_sharded"] = rm_source(ensemble, True).score(rm_batch, samples).rm_scores
    torch.save(out, Path(out_dir) / f"rank{dist.rank}.pt")
    for member in ensemble.members:
        member.destroy()
    engine.destroy()
    import torch.distributed as tdist
    tdist.barrier()
    tdist.destroy_process_group()


def test_sharded_reference_and_reward_model_match_whole_copies(tmp_path):
    import torch

    from rlvr.reward_model.model import RewardModel
    from tests.tiny import build_tiny_model, build_tokenizer

    model_dir = build_tiny_model(tmp_path / "model", init_std=0.2)
    RewardModel.from_backbone(str(build_tiny_model(tmp_path / "rm_backbone", seed=3, init_std=0.2)), seed=1) \
        .save(tmp_path / "rm", build_tokenizer())
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(Path(__file__).resolve()), str(model_dir), str(tmp_path / "rm"), str(tmp_path)]
    proc = limits.run(cmd, 300, cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    for rank in (0, 1):
        out = torch.load(tmp_path / f"rank{rank}.pt")
        assert out["ref_partitioned"], rank
        assert out["ref_whole"].abs().sum() > 0
        torch.testing.assert_close(out["ref_sharded"], out["ref_whole"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out["rm_sharded"], out["rm_whole"], rtol=1e-5, atol=1e-6)
    assert len(torch.load(tmp_path / "rank0.pt")["rm_whole"]) == 6
    assert len(torch.load(tmp_path / "rank1.pt")["rm_whole"]) == 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    worker_main(*sys.argv[1:4])
