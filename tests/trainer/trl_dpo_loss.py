"""TRL's DPOTrainer on a model, a reference model and preference pairs: its loss (and logged statistics) on one batch
holding every pair, before any update. Run as ``python -m tests.trainer.trl_dpo_loss SPEC.json`` (it prints one JSON
line); a subprocess, so that TRL's accelerator never meets the distributed set-up of rlvr's trainers in the test
process. SPEC: ``model``, ``reference``, ``pairs`` (JSONL), ``loss_type``, ``beta``, ``output_dir``."""

from __future__ import annotations

import json
import sys


def main(spec_path: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    import datasets

    spec = json.loads(open(spec_path).read())
    rows = [json.loads(line) for line in open(spec["pairs"]) if line.strip()]
    dataset = datasets.Dataset.from_list([{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(spec["reference"], dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    args = DPOConfig(output_dir=spec["output_dir"], use_cpu=True, bf16=False, fp16=False, beta=spec["beta"],
                     loss_type=[spec["loss_type"]], per_device_train_batch_size=len(rows), max_length=None,
                     report_to="none", disable_tqdm=True, dataloader_num_workers=0, seed=0)
    trainer = DPOTrainer(model=model, ref_model=ref, args=args, train_dataset=dataset, processing_class=tokenizer)
    batch = next(iter(trainer.get_train_dataloader()))
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, batch)
    logged = {k: sum(v) / len(v) for mode in trainer._metrics.values() for k, v in mode.items() if v}
    print(json.dumps({"loss": float(loss), **logged}))


if __name__ == "__main__":
    main(sys.argv[1])
