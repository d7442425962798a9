"""Prompt data: sources (JSONL/Parquet, HF datasets, reasoning-gym, HumanEval), templates, the held-out split and
the training-order sampler."""
