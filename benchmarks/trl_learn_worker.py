"""One run of TRL's ``GRPOTrainer`` to a CPU-seconds budget for ``bench_learning_vs_trl.py``; saves the trained model
for the common evaluator (``rlvr eval``). Runs in TRL's own venv and imports nothing from rlvr but ``rlvr/runtime/cpu_time.py``,
loaded by path (it needs only ``psutil``), so both sides count CPU seconds with the same function.

    .venv-trl/bin/python benchmarks/trl_learn_worker.py SPEC.json OUT.json

``SPEC.json`` (written by ``bench_learning_vs_trl.py``): ``model_dir``, ``prompts`` (JSONL rows ``messages`` = the
chat turns rlvr renders for the demo, few-shot turn included; ``answer``; ``prompt_ids`` = rlvr's token ids of the
rendered prompt), ``seed``, ``threads``, ``precision``, ``prompts_per_step`` (B), ``group_size`` (G),
``max_new_tokens``, ``lr``, ``micro_batch_size``, ``max_cpu_seconds``, ``max_steps``, ``model_out``, ``cpu_time_py``.

Settings mirror the demo recipe under rlvr's ``grpo`` preset with the demo's overrides: B x G samples a step and one
optimizer step on them, in micro-batches of ``micro_batch_size`` sequences like rlvr's ``optim.micro_batch_size``
(``per_device_train_batch_size`` = micro-batch, ``gradient_accumulation_steps`` = B x G / micro-batch, so TRL's
generation batch is B x G; a single 64-sequence forward was OOM-killed here beside other jobs); the other settings
are :func:`trl_common.grpo_config`'s. Reward: TRL's own ``accuracy_reward`` (math-verify on the ``\\boxed{}``
answer), where rlvr uses its ``math`` verifier; both score a boxed integer against the gold integer. The budget: CPU
seconds (user + system) of this process and its live children, counted from ``on_train_begin`` (after the model is
loaded); the run stops after the step that reaches it, as rlvr's ``trainer.max_cpu_seconds`` does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

from trl_common import grpo_config, run_footer


def load_cpu_time(path: str):
    """``rlvr/runtime/cpu_time.py`` as a module without importing the ``rlvr`` package (TRL's venv lacks its deps)."""
    spec = importlib.util.spec_from_file_location("rlvr_cpu_time", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    cpu_seconds = load_cpu_time(spec["cpu_time_py"]).process_tree_cpu_seconds
    import torch
    torch.set_num_threads(spec["threads"])
    from transformers import TrainerCallback
    from trl import GRPOTrainer
    from trl.rewards import accuracy_reward

    from datasets import Dataset

    rows = [json.loads(line) for line in Path(spec["prompts"]).read_text().splitlines() if line.strip()]
    dataset = Dataset.from_list([{"prompt": r["messages"], "solution": str(r["answer"])} for r in rows])
    args = grpo_config(spec, micro_batch_size=spec["micro_batch_size"], max_steps=spec["max_steps"])
    steps: list[dict] = []
    budget = spec["max_cpu_seconds"]

    class CpuBudget(TrainerCallback):
        """Stops training after the step at which the process tree's CPU seconds since the start reach the budget."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.cpu0, self.wall0 = cpu_seconds(), time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            spent = cpu_seconds() - self.cpu0
            steps.append({"step": state.global_step, "cpu_s": spent, "wall_s": time.perf_counter() - self.wall0,
                          "load_1m": os.getloadavg()[0]})
            if spent >= budget:
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kwargs):
            if steps and logs and "reward" in logs:
                steps[-1]["reward_mean"] = logs["reward"]
                s = steps[-1]
                print(f"trl step {s['step']}: reward {s['reward_mean']:.3f}, cpu {s['cpu_s']:.0f}/{budget:.0f} s, "
                      f"wall {s['wall_s']:.0f} s, load {s['load_1m']:.2f}", flush=True)

    start = time.perf_counter()
    trainer = GRPOTrainer(model=spec["model_dir"], reward_funcs=accuracy_reward, args=args, train_dataset=dataset,
                          callbacks=[CpuBudget()])
    # The prompts must be token for token what rlvr trains on: TRL renders the same turns with the same template.
    tok = trainer.processing_class
    mismatched = sum(tok.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=True,
                                             return_dict=True)["input_ids"] != r["prompt_ids"] for r in rows)
    if mismatched:
        raise RuntimeError(f"{mismatched} of {len(rows)} prompts tokenize differently in TRL than in rlvr")
    load_s = time.perf_counter() - start
    trainer.train()
    trainer.save_model(spec["model_out"])
    tok.save_pretrained(spec["model_out"])
    Path(out_path).write_text(json.dumps({
        "side": "trl", "load_s": load_s, "steps": steps, "train_cpu_s": steps[-1]["cpu_s"] if steps else 0.0,
        "train_wall_s": steps[-1]["wall_s"] if steps else 0.0, "model": spec["model_out"],
        "prompts_checked": len(rows), **run_footer()}, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: trl_learn_worker.py SPEC.json OUT.json")
    main(sys.argv[1], sys.argv[2])
