"""The learned-reward-model path: a reward model (RM) trained on preference pairs, scoring completions for PPO/GRPO.

- ``data``: preference rows (chosen/rejected pairs, or ranked responses) grouped by prompt and tokenized.
- ``model``: an HF causal-LM backbone with a scalar head, read at each sequence's last real token; save/load.
- ``loss``: the Bradley-Terry loss over every pair formed from one forward pass per response.
- ``metrics``: pairwise accuracy, expected calibration error, reward-length correlation.
- ``ensemble``: several reward models' scores combined (mean, min, mean - k std).
- ``train``: the training loop behind ``rlvr rm train`` (plain torch AdamW), eval and keep-best.
- ``pairs``: preference pairs from a verifiable task, made from the policy's own samples.
"""
