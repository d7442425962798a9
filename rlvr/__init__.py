"""rlvr: reinforcement learning from verifiable rewards.

``rlvr.verifiers`` and ``rlvr.sandbox`` live in the repository's top-level folders ``verifiers/`` and ``sandbox/``;
pyproject's ``package-dir`` installs them under ``rlvr`` (a checkout is used through ``pip install -e .``, which
``make install`` runs).

Kept import-light: the sandbox and the verifiers import this module first, and must not pull in torch.
"""
