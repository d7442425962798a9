"""One timed GRPO run of TRL's ``GRPOTrainer`` for ``bench_vs_trl.py``: runs in TRL's own venv and imports nothing
from rlvr (its pins must not touch ours).

    .venv-trl/bin/python benchmarks/trl_step_worker.py SPEC.json OUT.json

The settings mirror ``rlvr_step_worker.recipe_dict`` (:func:`trl_common.grpo_config`): B prompts x G samples a step
in one micro-batch (``per_device_train_batch_size`` = B x G, one generation per optimizer step), HF ``generate``, the
same prompts (user turn = question + "\\n" + the boxed instruction, in the model's chat template) and math-verify as
the reward (TRL's own ``accuracy_reward``). Timers: TRL's own ``profiling_context`` blocks (collected by patching
``ProfilingContext._log_metrics``): generation = ``transformers.generate``, scoring = ``_calculate_rewards``, training
= step wall time minus ``_prepare_inputs`` (which holds generation, scoring and the rest of the batch preparation).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

from trl_common import grpo_config, run_footer

BOXED_INSTRUCTION = "Put your final answer within \\boxed{}."  # rlvr.data.templates.BOXED_INSTRUCTION


def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    import torch
    torch.set_num_threads(spec["threads"])
    from transformers import TrainerCallback
    from trl import GRPOTrainer
    from trl.extras.profiling import ProfilingContext
    from trl.rewards import accuracy_reward

    from datasets import Dataset

    timers: dict[str, float] = defaultdict(float)

    def record(self, duration: float) -> None:  # TRL only logs these to wandb/mlflow/trackio
        timers[self.name.split(".", 1)[1]] += duration

    ProfilingContext._log_metrics = record

    rows = [json.loads(line) for line in Path(spec["prompts"]).read_text().splitlines() if line.strip()]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{r['question']}\n{BOXED_INSTRUCTION}"}],
                                  "solution": str(r["answer"])} for r in rows])
    per_step = spec["prompts_per_step"] * spec["group_size"]
    args = grpo_config(spec, micro_batch_size=per_step, max_steps=spec["steps"])  # one micro-batch a step
    steps: list[dict] = []
    tokens: list[tuple[list[int], list[int]]] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            timers.clear()
            tokens.clear()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            wall = time.perf_counter() - self.t0
            prep = timers.get("_prepare_inputs", 0.0)
            steps.append({
                "wall_s": wall, "generation_s": timers.get("transformers.generate", 0.0),
                "scoring_s": timers.get("_calculate_rewards", 0.0), "training_s": wall - prep,
                "stages": dict(timers),
                "prompt_tokens": [n for p, _ in tokens for n in p],
                "completion_tokens": [n for _, c in tokens for n in c], "load_1m": os.getloadavg()[0],
            })
            s = steps[-1]
            print(f"trl step {len(steps)}: {wall:.1f} s (gen {s['generation_s']:.1f}, train {s['training_s']:.1f}), "
                  f"{sum(s['completion_tokens'])} completion tokens, load {s['load_1m']:.2f}", flush=True)

    start = time.perf_counter()
    trainer = GRPOTrainer(model=spec["model_dir"], reward_funcs=accuracy_reward, args=args, train_dataset=dataset,
                          callbacks=[StepTimer()])
    generate_and_score = trainer._generate_and_score_completions

    def recording(inputs):  # keep the token counts of the batch (prompt: one row per sample, left-padded)
        out = generate_and_score(inputs)
        prompt = out["prompt_mask"].sum(1).tolist()
        g = spec["group_size"]
        tokens.append((prompt[::g], out["completion_mask"].sum(1).tolist()))
        return out

    trainer._generate_and_score_completions = recording
    load_s = time.perf_counter() - start
    trainer.train()
    Path(out_path).write_text(json.dumps({
        "side": "trl", "load_s": load_s, "steps": steps, **run_footer()}, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: trl_step_worker.py SPEC.json OUT.json")
    main(sys.argv[1], sys.argv[2])
