"""What a run reads and writes: its recipe's inputs (model, tokenizer, prompts, verifiers), its folder, checkpoints,
metrics, plots, and the held-out evaluation."""
