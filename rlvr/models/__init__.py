"""The policy as a model: loading it and its tokenizer (:mod:`.loading`, the embedded default in :mod:`.embedded`), the
compute precision (:mod:`.precision`), grouped-query attention (:mod:`.attention`) and log-probs of response tokens
(:mod:`.logprobs`)."""
