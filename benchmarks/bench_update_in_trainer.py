"""The update inside the trainer against ``bench_update_ab.run_update`` on the same batch, model and process, and
against ``run_update`` on ``bench_update_ab``'s synthetic batch of the same shape.

    python benchmarks/bench_update_in_trainer.py --threads 2 --warmup-steps 3 --reps 4
    python benchmarks/bench_update_in_trainer.py --shape vs_trl --threads 2 --warmup-steps 2 --reps 4

Builds ``RLTrainer`` (no evals, no checkpoints) for ``--shape``: ``demo`` = ``recipes/demo.yaml``, ``vs_trl`` =
``bench_vs_trl.py``'s run (``rlvr_step_worker.recipe_dict``: 2 x 8 samples of up to 128 tokens, one micro-batch of
16), trains ``--warmup-steps`` real steps (so the process is in the state of a run: rollout buffers freed, kernels
loaded), then collects one more batch and times, alternated ``--reps`` times in this process:

- ``trainer``: ``RLTrainer.update`` (the policy objective through ``run_update`` and the DeepSpeed engine: its
  backward and step with gradient clipping; the learning rate of the recipe);
- ``bench``: :func:`bench_update_ab.run_update` on the engine's own module: the shared-prefix forward per micro-batch
  of the same rows, a token-weighted backward (advantage x mask), one fused ``torch.optim.AdamW`` step at learning
  rate 0;
- ``synthetic``: the same ``run_update`` on :func:`bench_update_ab.make_batch` of the shape (random ids, response
  lengths spread evenly over the shape's range): the batch ``bench_update_ab.py`` times in a process of its own.

``trainer`` and ``bench`` run the same micro-batches of the same ids; what differs is the code around the ops.
``bench`` against ``synthetic`` is the batch (per token). Per variant: wall, CPU (user + system of the process) and
minor page faults of each repetition, the medians with ms a token (each prompt once), and the ratios per pair.
Prints the CPU and the load.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_update_ab import SHAPES, UpdateBatch, make_batch, run_update  # noqa: E402
from machine import stamp  # noqa: E402


def update_batch(batch) -> UpdateBatch:  # noqa: ANN001 (rlvr.trainer.batch.RolloutBatch, tensorized)
    """The rollout batch as ``bench_update_ab``'s :class:`UpdateBatch`: left-padded prompts, right-padded responses,
    weights = advantage x response mask (the token-weighted loss of a GRPO step)."""
    prompts = [p.token_ids for p in batch.prompts]
    width = max(len(x) for x in prompts)
    p_ids = torch.zeros((len(prompts), width), dtype=torch.long)
    p_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for k, x in enumerate(prompts):
        p_ids[k, width - len(x):] = torch.tensor(x)
        p_mask[k, width - len(x):] = 1
    p = batch.input_ids.shape[1] - batch.response_mask.shape[1]
    mask = batch.response_mask.long()
    return UpdateBatch(p_ids, p_mask, batch.input_ids[:, p:] * mask, mask, batch.advantages * mask, batch.group_size)


def build_recipe(args: argparse.Namespace, folder: Path):  # noqa: ANN201 (rlvr.config.Recipe)
    """The trainer's recipe for ``args.shape`` with ``args.set`` applied: no evals, checkpoints or sample logs."""
    from rlvr.config import load_recipe, resolve
    from rlvr.config.loading import apply_overrides

    overrides = [f"seed={args.seed}", f"trainer.num_threads={args.threads}", "eval.enabled=false",
                 "trainer.save_every=0", "trainer.log_samples_every=0", *args.set]
    if args.shape == "demo":
        return load_recipe(ROOT / "recipes" / "demo.yaml", overrides)
    from bench_vs_trl import auto_precision, cpu_info, write_prompts
    from rlvr_step_worker import recipe_dict

    from rlvr.models.embedded import embedded_model_dir

    spec = {"model_dir": str(embedded_model_dir()), "prompts": str(write_prompts(folder / "prompts.jsonl", 500, 0)),
            "steps": 1_000, "seed": args.seed, "threads": args.threads, "precision": auto_precision(cpu_info()),
            "prompts_per_step": 2, "group_size": 8, "max_new_tokens": 128, "lr": 1e-6}
    return resolve(apply_overrides(recipe_dict(spec), overrides))


def measure(fn: Callable[[], object]) -> dict[str, float]:
    before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    fn()
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    return {"wall_s": wall, "user_s": after.ru_utime - before.ru_utime, "sys_s": after.ru_stime - before.ru_stime,
            "minor_faults": after.ru_minflt - before.ru_minflt}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="demo")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a recipe override")
    args = ap.parse_args()

    from rlvr.models import logprobs
    from rlvr.trainer.trainer import RLTrainer

    print(stamp(), flush=True)
    with tempfile.TemporaryDirectory(prefix="rlvr-update-in-trainer-") as run_dir:
        recipe = build_recipe(args, Path(run_dir))
        trainer = RLTrainer(recipe, run_dir=Path(run_dir) / "run")
        for _ in range(args.warmup_steps):
            trainer.step()
        batch, _, timer = trainer.collect()
        trainer.prepare(batch, timer)
        trainer.compute_advantages(batch)
        bench_batch = update_batch(batch)
        model = trainer.policy.model
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.0, fused=True)
        micro = recipe.optim.micro_batch_size
        plan = trainer.policy.micro_batches(batch, list(range(batch.num_samples)), backward=True)
        synthetic = make_batch(args.shape)
        variants = {
            "trainer": lambda: trainer.update(batch),
            "bench": lambda: run_update(model, logprobs, bench_batch, micro, trainer.autocast_dtype, optimizer),
            "synthetic": lambda: run_update(model, logprobs, synthetic, micro, trainer.autocast_dtype, optimizer),
        }
        tokens = {"trainer": bench_batch.tokens, "bench": bench_batch.tokens, "synthetic": synthetic.tokens}
        print(f"batch: {batch.num_samples} samples, {int(batch.response_mask.sum())} response tokens, "
              f"{bench_batch.tokens} tokens with each prompt once; synthetic: {synthetic.response_ids.shape[0]} "
              f"samples, {int(synthetic.response_mask.sum())} response tokens, {synthetic.tokens} tokens; "
              f"micro-batch {micro}; autocast {trainer.autocast_dtype}; the trainer's micro-batches "
              f"{[len(m) for m in plan]}", flush=True)
        results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        for rep in range(args.reps):
            for name, fn in (variants.items() if rep % 2 == 0 else reversed(variants.items())):
                r = measure(fn)
                results[name].append(r)
                print(f"rep {rep} {name:8s} wall {r['wall_s']:.2f} s  user {r['user_s']:.2f}  sys {r['sys_s']:.2f}  "
                      f"minor faults {r['minor_faults']:,}", flush=True)
        for name, rs in results.items():
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"{name:9s} median wall {med['wall_s']:.2f} s ({1000 * med['wall_s'] / tokens[name]:.2f} ms "
                  f"a token), user {med['user_s']:.2f}, sys {med['sys_s']:.2f}, minor faults {med['minor_faults']:,.0f}")
        for a, b in (("trainer", "bench"), ("bench", "synthetic")):
            ratios = [(x["wall_s"] / tokens[a]) / (y["wall_s"] / tokens[b])
                      for x, y in zip(results[a], results[b], strict=True)]
            print(f"{a} / {b}, per token, per repetition: {', '.join(f'{x:.2f}' for x in ratios)} (median "
                  f"{statistics.median(ratios):.2f})")
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
