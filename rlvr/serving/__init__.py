"""Serving a model over an OpenAI-compatible chat API (``rlvr judge serve``): a local judge for the ``judge`` verifier
on machines without vLLM, and in tests."""
