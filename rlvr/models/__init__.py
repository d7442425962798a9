"""The policy as a model: loading it and its tokenizer (:mod:`.loading`, the embedded default in :mod:`.embedded`,
rlvr's faster layers put in by :func:`.loading.use_fast_layers`), the compute precision (:mod:`.precision`),
grouped-query attention (:mod:`.attention`), LoRA (:mod:`.lora`) and log-probs of response tokens (:mod:`.logprobs`).
The CPU kernels some of these use are :mod:`rlvr.kernels`."""
